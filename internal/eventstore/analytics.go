package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// TopUsers returns the n users (by user_id_hash) who cost most over turns
// that started in [from, to), most expensive first. n 0 means 100; at most
// MaxLimit.
func (s *Store) TopUsers(ctx context.Context, from, to time.Time, n int) (CostReport, error) {
	return s.Cost(ctx, Query{By: ByUser, From: from, To: to, Limit: n})
}

// AnomalySigmas is how far above the median turn cost, in standard
// deviations of turn cost, a turn must be to count as anomalous (seed:
// "turns >5σ from median cost", often runaway tool loops).
const AnomalySigmas = 5

// AnomalyReport lists anomalous turns with the statistics that define them.
type AnomalyReport struct {
	From         time.Time `json:"from"`
	To           time.Time `json:"to"`
	Turns        int64     `json:"turns"` // turns in range
	MedianUSD    float64   `json:"medianUsd"`
	StdDevUSD    float64   `json:"stdDevUsd"`
	ThresholdUSD float64   `json:"thresholdUsd"` // median + AnomalySigmas·σ
	Rows         []CostRow `json:"rows"`         // ByTurn rows above the threshold, costliest first
}

// AnomalousTurns returns the turns started in [from, to) whose total cost
// exceeds the median turn cost by more than AnomalySigmas population
// standard deviations, at most MaxLimit of them. Zero from/to mean the
// DefaultRange before now.
func (s *Store) AnomalousTurns(ctx context.Context, from, to time.Time) (AnomalyReport, error) {
	q := Query{By: ByTurn, From: from, To: to}
	if err := q.normalize(s.now()); err != nil {
		return AnomalyReport{}, err
	}
	if err := s.sync(ctx); err != nil {
		return AnomalyReport{}, err
	}
	rep := AnomalyReport{From: q.From.UTC(), To: q.To.UTC(), Rows: []CostRow{}}
	s.clamp(&q)
	lo, hi := q.From.UnixMilli(), q.To.UnixMilli()
	// First the statistics, from the cost of every turn in range (one
	// column: reading a row costs mostly per column brought over)...
	costs, err := collectInParts(ctx, s, lo, hi, func(w *where) string {
		return `SELECT t.cost_usd FROM turns t WHERE ` + w.String()
	}, func(rs *sql.Rows, c *float64) error { return rs.Scan(c) })
	if err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	n := len(costs)
	rep.Turns = int64(n)
	if n == 0 {
		return rep, nil
	}
	var sum, sumSq float64
	for _, c := range costs {
		sum += c
		sumSq += c * c
	}
	mean := sum / float64(n)
	rep.StdDevUSD = math.Sqrt(max(0, sumSq/float64(n)-mean*mean))
	rep.MedianUSD = median(costs)
	rep.ThresholdUSD = rep.MedianUSD + AnomalySigmas*rep.StdDevUSD
	// ...then the few turns above the threshold, which SQLite picks out.
	type hit struct {
		key  turnKey
		cost float64
	}
	above, err := collectInParts(ctx, s, lo, hi, func(w *where) string {
		w.add("t.cost_usd > ?", rep.ThresholdUSD)
		w.args = append(w.args, MaxLimit)
		return `SELECT t.minute, t.th, t.cost_usd FROM turns t WHERE ` + w.String() + ` ORDER BY t.cost_usd DESC LIMIT ?`
	}, func(rs *sql.Rows, h *hit) error { return rs.Scan(&h.key.minute, &h.key.th, &h.cost) })
	if err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	slices.SortFunc(above, func(a, b hit) int { return cmp.Compare(b.cost, a.cost) })
	keys := make([]turnKey, 0, min(len(above), MaxLimit))
	for _, h := range above[:min(len(above), MaxLimit)] {
		keys = append(keys, h.key)
	}
	found, err := s.turnsByKey(ctx, keys)
	if err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	for _, t := range found {
		rep.Rows = append(rep.Rows, t.costRow(&t.sums))
	}
	slices.SortFunc(rep.Rows, byCost)
	return rep, nil
}

// median returns the median of xs (the mean of the two middle values when
// their number is even), reordering xs. It selects rather than sorts:
// linear on average, several times faster than sorting a million costs.
func median(xs []float64) float64 {
	n := len(xs)
	m := selectNth(xs, n/2)
	if n%2 == 1 {
		return m
	}
	// The lower middle is the largest of what selectNth left below n/2.
	return (slices.Max(xs[:n/2]) + m) / 2
}

// selectNth reorders xs so that xs[k] holds the value it would hold
// sorted, with no larger value before it and no smaller one after it, and
// returns xs[k] (Hoare's selection with a median-of-three pivot).
func selectNth(xs []float64, k int) float64 {
	lo, hi := 0, len(xs)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		// Median of three as the pivot, moved to hi.
		if xs[mid] < xs[lo] {
			xs[mid], xs[lo] = xs[lo], xs[mid]
		}
		if xs[hi] < xs[lo] {
			xs[hi], xs[lo] = xs[lo], xs[hi]
		}
		if xs[mid] < xs[hi] {
			xs[mid], xs[hi] = xs[hi], xs[mid]
		}
		pivot := xs[hi]
		// Three-way partition: < pivot, == pivot, > pivot (many equal costs
		// are common: every turn of a cached answer costs the same).
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch {
			case xs[i] < pivot:
				xs[lt], xs[i] = xs[i], xs[lt]
				lt++
				i++
			case xs[i] > pivot:
				xs[i], xs[gt] = xs[gt], xs[i]
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return pivot
		}
	}
	return xs[k]
}

// Rising-feature rules: the cost per turn must grow in every consecutive
// period and by at least MinRise overall, while no period's turns exceed
// the first period's by more than UsageSlack.
const (
	MinRise        = 0.10
	UsageSlack     = 0.10
	DefaultPeriods = 4
	MaxPeriods     = 48
)

// PeriodCost is one period of a feature's cost.
type PeriodCost struct {
	Start       time.Time `json:"start"`
	Turns       int64     `json:"turns"`
	CostUSD     float64   `json:"costUsd"`
	CostPerTurn float64   `json:"costPerTurn"`
}

// RisingFeature is a feature whose cost per use climbs without a usage
// increase (seed: "often a prompt regression that increased tokens").
type RisingFeature struct {
	Feature string       `json:"feature"`
	Rise    float64      `json:"rise"` // last/first cost per turn − 1
	Periods []PeriodCost `json:"periods"`
}

// RisingFeatures splits [from, to) into periods equal periods (0 means
// DefaultPeriods; 2..MaxPeriods) and returns the features whose cost per
// turn rose across every consecutive pair, by MinRise overall, while their
// turns did not rise (see UsageSlack). Largest rise first.
func (s *Store) RisingFeatures(ctx context.Context, from, to time.Time, periods int) ([]RisingFeature, error) {
	q := Query{By: ByFeature, From: from, To: to}
	if err := q.normalize(s.now()); err != nil {
		return nil, err
	}
	if periods == 0 {
		periods = DefaultPeriods
	}
	if periods < 2 || periods > MaxPeriods {
		return nil, invalidf("periods must be in 2..%d", MaxPeriods)
	}
	step := q.To.Sub(q.From) / time.Duration(periods)
	if step < time.Minute {
		return nil, invalidf("each period must last at least a minute")
	}
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	series := map[string][]PeriodCost{}
	var order []string
	for i := range periods {
		p := q
		p.From = q.From.Add(time.Duration(i) * step)
		p.To = p.From.Add(step)
		s.clamp(&p)
		var rows []CostRow
		if p.From.Before(p.To) {
			groups, err := s.rollupGroups(ctx, p, func(t *dimTuple) string { return t.feature })
			if err != nil {
				return nil, fmt.Errorf("eventstore: rising: %w", err)
			}
			rows, _ = sortGroups(groups)
		}
		for _, r := range rows {
			if _, ok := series[r.Key]; !ok {
				series[r.Key] = make([]PeriodCost, periods)
				order = append(order, r.Key)
			}
			series[r.Key][i] = PeriodCost{Turns: r.Turns, CostUSD: r.CostUSD, CostPerTurn: r.CostPerTurn}
		}
	}
	out := []RisingFeature{}
	for _, f := range order {
		ps := series[f]
		for i := range ps {
			ps[i].Start = q.From.Add(time.Duration(i) * step).UTC()
		}
		if rise, ok := rising(ps); ok {
			out = append(out, RisingFeature{Feature: f, Rise: rise, Periods: ps})
		}
	}
	slices.SortStableFunc(out, func(a, b RisingFeature) int { return cmp.Compare(b.Rise, a.Rise) })
	return out, nil
}

// Rising applies the rising-feature rules to one feature's periods and
// returns its rise.
func Rising(ps []PeriodCost) (float64, bool) { return rising(ps) }

func rising(ps []PeriodCost) (float64, bool) {
	first := ps[0]
	if first.Turns == 0 {
		return 0, false
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].Turns == 0 || ps[i].CostPerTurn <= ps[i-1].CostPerTurn {
			return 0, false
		}
		if float64(ps[i].Turns) > float64(first.Turns)*(1+UsageSlack) {
			return 0, false
		}
	}
	if first.CostPerTurn <= 0 {
		return 0, false
	}
	rise := ps[len(ps)-1].CostPerTurn/first.CostPerTurn - 1
	return rise, rise >= MinRise
}

// EvalRow is one group of an EvalReport.
type EvalRow struct {
	Key      string  `json:"key"`
	Turns    int64   `json:"turns"` // scored turns
	AvgScore float64 `json:"avgScore"`
	MinScore float64 `json:"minScore"`
	MaxScore float64 `json:"maxScore"`
}

// EvalReport answers Eval.
type EvalReport struct {
	By    string    `json:"by"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	Total EvalRow   `json:"total"`
	Rows  []EvalRow `json:"rows"`
}

// evalDims are the Eval groupings: a turn attribute, or (prompt, model,
// tool) the versions a turn's spans carried.
var evalDims = map[string]string{
	ByTotal: "", ByFeature: "", ByLocale: "", BySurface: "", ByTier: "", ByGraph: "",
	ByPrompt: dimPrompt, ByModel: dimModel, ByTool: dimTool,
}

// Eval averages turn eval scores (set on the root span, or later by
// SetEvalScore) over turns started in range. A turn matches a prompt,
// model or tool filter when any of its spans used that version, so "graph
// v17.4 + planner-prompt-v23 + sonnet" is one query; grouping by prompt,
// model or tool counts a turn once under each version its spans used.
func (s *Store) Eval(ctx context.Context, q Query) (EvalReport, error) {
	if q.By == "" {
		q.By = ByTotal
	}
	verDim, ok := evalDims[q.By]
	if !ok {
		return EvalReport{}, invalidf("unknown eval grouping %q", q.By)
	}
	if err := q.normalize(s.now()); err != nil {
		return EvalReport{}, err
	}
	if err := s.sync(ctx); err != nil {
		return EvalReport{}, err
	}
	rep := EvalReport{By: q.By, From: q.From.UTC(), To: q.To.UTC(), Rows: []EvalRow{}}
	s.clamp(&q)
	// Versions every matching turn must carry.
	var need []int64
	for _, v := range []verKey{{dimPrompt, q.PromptVersion}, {dimModel, q.ModelID}, {dimTool, q.ToolID}} {
		if v.version == "" {
			continue
		}
		vid, ok := s.dict.lookupVer(v)
		if !ok {
			return rep, nil
		}
		need = append(need, vid)
	}
	w := where{}
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	w.add("i.eval_score IS NOT NULL AND i.minute >= ? AND i.minute <= ? AND t.ts_start >= ? AND t.ts_start < ?",
		floorTo(from, minuteMS)/minuteMS, floorTo(to-1, minuteMS)/minuteMS, from, to)
	w.eq("t.graph_version", q.GraphVersion)
	w.eq("t.feature", q.Feature)
	w.eq("t.user_id_hash", q.User)
	w.eq("i.trace_id", q.Trace)
	rs, err := s.r.QueryContext(ctx, `SELECT `+turnCols+` FROM turn_info i INDEXED BY turn_info_eval
		JOIN turns t ON t.minute = i.minute AND t.th = i.th WHERE `+w.String(), w.args...)
	if err != nil {
		return rep, fmt.Errorf("eventstore: eval: %w", err)
	}
	defer rs.Close()
	type acc struct {
		n             int64
		sum, min, max float64
	}
	groups := map[string]*acc{}
	var total acc
	add := func(a *acc, v float64) {
		if a.n == 0 || v < a.min {
			a.min = v
		}
		if a.n == 0 || v > a.max {
			a.max = v
		}
		a.n++
		a.sum += v
	}
	for rs.Next() {
		t, err := scanTurnState(rs)
		if err != nil {
			return rep, fmt.Errorf("eventstore: eval: %w", err)
		}
		if !t.carries(need) {
			continue
		}
		v := *t.eval
		add(&total, v)
		var keys []string
		switch q.By {
		case ByTotal:
			keys = []string{""}
		case ByFeature:
			keys = []string{t.feature}
		case ByLocale:
			keys = []string{t.locale}
		case BySurface:
			keys = []string{t.surface}
		case ByTier:
			keys = []string{t.tier}
		case ByGraph:
			keys = []string{t.graph}
		default:
			for _, vs := range t.vers {
				if k := s.dict.ver(vs.vid); k.dim == verDim {
					keys = append(keys, k.version)
				}
			}
		}
		for _, k := range keys {
			g := groups[k]
			if g == nil {
				g = &acc{}
				groups[k] = g
			}
			add(g, v)
		}
	}
	if err := rs.Err(); err != nil {
		return rep, fmt.Errorf("eventstore: eval: %w", err)
	}
	row := func(k string, a *acc) EvalRow {
		r := EvalRow{Key: k, Turns: a.n, MinScore: a.min, MaxScore: a.max}
		if a.n > 0 {
			r.AvgScore = a.sum / float64(a.n)
		}
		return r
	}
	for k, a := range groups {
		rep.Rows = append(rep.Rows, row(k, a))
	}
	slices.SortFunc(rep.Rows, func(a, b EvalRow) int { return cmp.Or(cmp.Compare(b.Turns, a.Turns), cmp.Compare(a.Key, b.Key)) })
	if len(rep.Rows) > q.Limit {
		rep.Rows = rep.Rows[:q.Limit]
	}
	rep.Total = row("", &total)
	return rep, nil
}

// carries says the turn's spans carried every version in vids.
func (t *turnState) carries(vids []int64) bool {
	for _, vid := range vids {
		found := false
		for _, v := range t.vers {
			found = found || v.vid == vid
		}
		if !found {
			return false
		}
	}
	return true
}

// SetEvalScore records a judge's score after the fact. id is a trace id
// (32 hex: the turn), a turn's root span id (16 hex), or an Event.ID
// (trace id + span id, 48 hex: any span; the turn's score changes only if
// it is the root). It returns ErrNotFound for an unknown id and ErrInvalid
// for a malformed id or a non-finite score.
func (s *Store) SetEvalScore(ctx context.Context, id string, score float64) error {
	if math.IsNaN(score) || math.IsInf(score, 0) {
		return invalidf("score must be a finite number")
	}
	var trace, span string
	switch len(id) {
	case 32:
		trace = id
	case 16:
		span = id
	case 48:
		trace, span = id[:32], id[32:]
	default:
		return invalidf("id must be a trace id (32 hex), a root span id (16 hex) or trace+span (48 hex)")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.syncLocked(ctx); err != nil {
		return err
	}
	var turn *turnState
	if trace == "" {
		// A root span id alone: the turns are searched (no index by root).
		row := s.w.QueryRowContext(ctx, `SELECT `+turnCols+` FROM `+turnFrom+` WHERE i.root_span_id = ? LIMIT 1`, span)
		t, err := scanTurnState(row)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("eventstore: eval: span %s is not the root of a stored turn: %w", span, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("eventstore: eval: %w", err)
		}
		turn, trace = t, t.trace
	} else {
		turns, err := s.findTurns(ctx, trace)
		if err != nil {
			return fmt.Errorf("eventstore: eval: %w", err)
		}
		for _, t := range turns {
			if t.hasRoot() || turn == nil {
				turn = t
			}
		}
		if turn == nil {
			return fmt.Errorf("eventstore: eval: trace %s: %w", trace, ErrNotFound)
		}
	}
	if span == "" {
		span = turn.root
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: eval: %w", err)
	}
	defer tx.Rollback()
	found, err := s.setSpanEval(ctx, tx, turn, span, score)
	if err != nil {
		return err
	}
	if !found && span != turn.root {
		return fmt.Errorf("eventstore: eval: span %s: %w", span, ErrNotFound)
	}
	if span == turn.root {
		// The turn's score, and each of its version rows.
		turn.eval = &score
		if _, err := tx.ExecContext(ctx, `UPDATE turn_info SET eval_score = ? WHERE minute = ? AND th = ?`, score, turn.minute(), turn.th); err != nil {
			return fmt.Errorf("eventstore: eval: %w", err)
		}
		if err := rewriteVersions(ctx, tx, turn); err != nil {
			return fmt.Errorf("eventstore: eval: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("eventstore: eval: %w", err)
	}
	return nil
}

// setSpanEval rewrites the stored span's record with the score; it
// reports whether the span was found.
func (s *Store) setSpanEval(ctx context.Context, tx *sql.Tx, turn *turnState, span string, score float64) (bool, error) {
	rs, err := tx.QueryContext(ctx, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start <= ? AND th = ? AND sh = ?`,
		turn.ts, turn.last, turn.th, hashID(span))
	if err != nil {
		return false, fmt.Errorf("eventstore: eval: %w", err)
	}
	var (
		dec spanDecoder
		e   events.Event
		id  int64
		rec []byte
	)
	found := false
	for rs.Next() && !found {
		var (
			ts   int64
			data []byte
		)
		if err := rs.Scan(&id, &ts, &data); err != nil {
			rs.Close()
			return false, fmt.Errorf("eventstore: eval: %w", err)
		}
		// The span may be the turn span of a packed row.
		out, ok, err := rewriteRecords(data, ts, func(r []byte, ts int64) ([]byte, bool, error) {
			if found {
				return r, false, nil
			}
			if err := dec.decode(r, ts, &e); err != nil {
				return nil, false, err
			}
			if e.TraceID != turn.trace || e.SpanID != span {
				return r, false, nil
			}
			e.Outcome.EvalScore = &score
			found = true
			return encodeSpan(nil, &e), true, nil
		})
		if err != nil {
			rs.Close()
			return false, fmt.Errorf("eventstore: eval: %w", err)
		}
		if ok {
			rec = out
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return false, fmt.Errorf("eventstore: eval: %w", err)
	}
	if found {
		if _, err := tx.ExecContext(ctx, `UPDATE events SET data = ? WHERE id = ?`, rec, id); err != nil {
			return false, fmt.Errorf("eventstore: eval: %w", err)
		}
	}
	return found, nil
}
