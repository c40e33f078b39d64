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
	rep := AnomalyReport{From: q.From.UTC(), To: q.To.UTC(), Rows: []CostRow{}}
	f, t := q.From.UnixMilli(), q.To.UnixMilli()
	var mean, meanSq sql.NullFloat64
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*), AVG(cost_usd), AVG(cost_usd * cost_usd)
		FROM turns WHERE ts_start >= ? AND ts_start < ?`, f, t).Scan(&rep.Turns, &mean, &meanSq)
	if err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	if rep.Turns == 0 {
		return rep, nil
	}
	rep.StdDevUSD = math.Sqrt(max(0, meanSq.Float64-mean.Float64*mean.Float64))
	rs, err := s.r.QueryContext(ctx, `SELECT cost_usd FROM turns WHERE ts_start >= ? AND ts_start < ?
		ORDER BY cost_usd LIMIT ? OFFSET ?`, f, t, 2-rep.Turns%2, (rep.Turns-1)/2)
	if err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	var sum float64
	var k int
	for rs.Next() {
		var c float64
		if err := rs.Scan(&c); err != nil {
			rs.Close()
			return rep, fmt.Errorf("eventstore: anomalies: %w", err)
		}
		sum += c
		k++
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	rep.MedianUSD = sum / float64(max(k, 1))
	rep.ThresholdUSD = rep.MedianUSD + AnomalySigmas*rep.StdDevUSD
	rows, err := s.turnRows(ctx, `SELECT `+turnCols+` FROM turns WHERE ts_start >= ? AND ts_start < ?
		AND cost_usd > ? ORDER BY cost_usd DESC, trace_id LIMIT ?`, f, t, rep.ThresholdUSD, MaxLimit)
	if err != nil {
		return rep, fmt.Errorf("eventstore: anomalies: %w", err)
	}
	if rows != nil {
		rep.Rows = rows
	}
	return rep, nil
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
	series := map[string][]PeriodCost{}
	var order []string
	for i := range periods {
		p := q
		p.From = q.From.Add(time.Duration(i) * step)
		p.To = p.From.Add(step)
		rows, err := s.fromMinutes(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("eventstore: rising: %w", err)
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

// evalDims maps Eval groupings to a column of the turn (t) or, for the
// versions a turn's spans touched, of its spans (e).
var evalDims = map[string]string{
	ByTotal:   "''",
	ByFeature: "t.feature",
	ByLocale:  "t.locale",
	BySurface: "t.surface",
	ByTier:    "t.user_tier",
	ByGraph:   "t.graph_version",
	ByPrompt:  "e.prompt_version",
	ByModel:   "e.model_id",
	ByTool:    "e.tool_id",
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
	dim, ok := evalDims[q.By]
	if !ok {
		return EvalReport{}, invalidf("unknown eval grouping %q", q.By)
	}
	if err := q.normalize(s.now()); err != nil {
		return EvalReport{}, err
	}
	w := where{}
	w.add("t.eval_score IS NOT NULL AND t.ts_start >= ? AND t.ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
	w.eq("t.graph_version", q.GraphVersion)
	w.eq("t.feature", q.Feature)
	w.eq("t.user_id_hash", q.User)
	w.eq("t.trace_id", q.Trace)
	for col, v := range map[string]string{"prompt_version": q.PromptVersion, "model_id": q.ModelID, "tool_id": q.ToolID} {
		if v != "" {
			w.add(`EXISTS (SELECT 1 FROM events x WHERE x.trace_id = t.trace_id AND x.`+col+` = ?)`, v)
		}
	}
	join := ""
	if dim[0] == 'e' {
		join = ` JOIN events e ON e.trace_id = t.trace_id AND ` + dim + ` <> ''`
	}
	src := `(SELECT DISTINCT t.trace_id, t.eval_score AS score, ` + dim + ` AS k FROM turns t` + join +
		` WHERE ` + w.String() + `)`
	rep := EvalReport{By: q.By, From: q.From.UTC(), To: q.To.UTC()}
	rows, err := s.evalRows(ctx, `SELECT k, COUNT(*), AVG(score), MIN(score), MAX(score) FROM `+src+
		` GROUP BY k ORDER BY COUNT(*) DESC, k LIMIT ?`, append(w.args, q.Limit)...)
	if err != nil {
		return rep, err
	}
	rep.Rows = rows
	// The total counts each turn once, whatever the grouping.
	tot, err := s.evalRows(ctx, `SELECT '', COUNT(*), AVG(eval_score), MIN(eval_score), MAX(eval_score)
		FROM turns t WHERE `+w.String(), w.args...)
	if err != nil {
		return rep, err
	}
	if len(tot) == 1 {
		rep.Total = tot[0]
	}
	return rep, nil
}

func (s *Store) evalRows(ctx context.Context, sqlText string, args ...any) ([]EvalRow, error) {
	rs, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, fmt.Errorf("eventstore: eval: %w", err)
	}
	defer rs.Close()
	out := []EvalRow{}
	for rs.Next() {
		var (
			r             EvalRow
			avg, min, max sql.NullFloat64
		)
		if err := rs.Scan(&r.Key, &r.Turns, &avg, &min, &max); err != nil {
			return nil, fmt.Errorf("eventstore: eval: %w", err)
		}
		r.AvgScore, r.MinScore, r.MaxScore = avg.Float64, min.Float64, max.Float64
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: eval: %w", err)
	}
	return out, nil
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
		err := s.w.QueryRowContext(ctx, `SELECT trace_id FROM turns WHERE root_span_id = ?`, id).Scan(&trace)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("eventstore: eval: span %s is not the root of a stored turn: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("eventstore: eval: %w", err)
		}
		span = id
	case 48:
		trace, span = id[:32], id[32:]
	default:
		return invalidf("id must be a trace id (32 hex), a root span id (16 hex) or trace+span (48 hex)")
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: eval: %w", err)
	}
	defer tx.Rollback()
	var root string
	err = tx.QueryRowContext(ctx, `SELECT root_span_id FROM turns WHERE trace_id = ?`, trace).Scan(&root)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("eventstore: eval: trace %s: %w", trace, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("eventstore: eval: %w", err)
	}
	if span == "" {
		span = root
	}
	res, err := tx.ExecContext(ctx, `UPDATE events SET eval_score = ? WHERE trace_id = ? AND span_id = ?`, score, trace, span)
	if err != nil {
		return fmt.Errorf("eventstore: eval: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 && span != root {
		return fmt.Errorf("eventstore: eval: span %s: %w", span, ErrNotFound)
	}
	if span == root {
		if _, err := tx.ExecContext(ctx, `UPDATE turns SET eval_score = ? WHERE trace_id = ?`, score, trace); err != nil {
			return fmt.Errorf("eventstore: eval: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("eventstore: eval: %w", err)
	}
	return nil
}
