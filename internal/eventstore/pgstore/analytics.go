package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// Series returns cost over time, as the SQLite store's Series.
func (s *Store) Series(ctx context.Context, q eventstore.Query, step time.Duration) (eventstore.SeriesReport, error) {
	if q.By != "" || q.User != "" || q.Trace != "" || q.Limit != 0 {
		return eventstore.SeriesReport{}, eventstore.Invalidf("series takes no grouping, user, trace or limit")
	}
	q.By = eventstore.ByTotal
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return eventstore.SeriesReport{}, err
	}
	rep, err := eventstore.NewSeries(q, step)
	if err != nil {
		return rep, err
	}
	stepMS := rep.StepSeconds * 1000
	origin := rep.Points[0].T.UnixMilli()
	key := func(ts string) string { return fmt.Sprintf("((%s - %d) / %d)::text", ts, origin, stepMS) }
	groups, err := s.rangeSums(ctx, q, key, stepMS%hourMS == 0)
	if err != nil {
		return rep, fmt.Errorf("pgstore: series: %w", err)
	}
	for _, g := range groups {
		i, err := strconv.Atoi(g.row.Key)
		if err != nil || i < 0 || i >= len(rep.Points) {
			continue
		}
		p, r := &rep.Points[i], g.row
		p.Turns, p.Spans, p.Errors, p.Fallbacks = r.Turns, r.Spans, r.Errors, r.Fallbacks
		p.TokensIn, p.TokensOut, p.CostUSD, p.AvgLatencyMS = r.TokensIn, r.TokensOut, r.CostUSD, r.AvgLatencyMS
	}
	return rep, nil
}

// Versions lists the versions spans carried in [from, to), as the SQLite
// store's Versions.
func (s *Store) Versions(ctx context.Context, from, to time.Time) (eventstore.VersionsReport, error) {
	q := eventstore.Query{From: from, To: to}
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return eventstore.VersionsReport{}, err
	}
	rep := eventstore.VersionsReport{Graph: []eventstore.VersionSeen{}, Prompt: []eventstore.VersionSeen{},
		Model: []eventstore.VersionSeen{}, Tool: []eventstore.VersionSeen{}}
	groups, err := s.rangeSums(ctx, q, func(string) string {
		return `graph_version || chr(1) || prompt_version || chr(1) || model_id || chr(1) || tool_id`
	}, true)
	if err != nil {
		return rep, fmt.Errorf("pgstore: versions: %w", err)
	}
	seen := [4]map[string]*eventstore.VersionSeen{{}, {}, {}, {}}
	for _, g := range groups {
		for i, v := range strings.Split(g.row.Key, "\x01") {
			if v == "" {
				continue
			}
			vs := seen[i][v]
			first, last := time.UnixMilli(g.first).UTC(), time.UnixMilli(g.last).UTC()
			if vs == nil {
				vs = &eventstore.VersionSeen{Version: v, FirstSeen: first, LastSeen: last}
				seen[i][v] = vs
			}
			vs.Spans += g.row.Spans
			if first.Before(vs.FirstSeen) {
				vs.FirstSeen = first
			}
			if last.After(vs.LastSeen) {
				vs.LastSeen = last
			}
		}
	}
	for i, out := range []*[]eventstore.VersionSeen{&rep.Graph, &rep.Prompt, &rep.Model, &rep.Tool} {
		for _, v := range seen[i] {
			*out = append(*out, *v)
		}
		slices.SortFunc(*out, func(a, b eventstore.VersionSeen) int {
			return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Version, b.Version))
		})
	}
	return rep, nil
}

// AnomalousTurns returns the turns started in [from, to) costing more than
// the median turn by AnomalySigmas standard deviations.
func (s *Store) AnomalousTurns(ctx context.Context, from, to time.Time) (eventstore.AnomalyReport, error) {
	q := eventstore.Query{By: eventstore.ByTurn, From: from, To: to}
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return eventstore.AnomalyReport{}, err
	}
	rep := eventstore.AnomalyReport{From: q.From.UTC(), To: q.To.UTC(), Rows: []eventstore.CostRow{}}
	lo, hi := q.From.UnixMilli(), q.To.UnixMilli()
	var median, stddev *float64
	err := s.pool.QueryRow(ctx, `SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY cost), stddev_pop(cost)
		FROM turns WHERE ts_start >= $1 AND ts_start < $2`, lo, hi).Scan(&rep.Turns, &median, &stddev)
	if err != nil {
		return rep, fmt.Errorf("pgstore: anomalies: %w", err)
	}
	if rep.Turns == 0 {
		return rep, nil
	}
	rep.MedianUSD, rep.StdDevUSD = *median, *stddev
	rep.ThresholdUSD = rep.MedianUSD + eventstore.AnomalySigmas*rep.StdDevUSD
	rows, err := s.scanRows(ctx, `SELECT t.trace_id, `+turnSums+` FROM turns t
		WHERE t.ts_start >= $1 AND t.ts_start < $2 AND t.cost > $3
		GROUP BY 1 ORDER BY sum(t.cost) DESC, 1 LIMIT `+strconv.Itoa(eventstore.MaxLimit), lo, hi, rep.ThresholdUSD)
	if err != nil {
		return rep, fmt.Errorf("pgstore: anomalies: %w", err)
	}
	if err := s.describeTurns(ctx, rows); err != nil {
		return rep, fmt.Errorf("pgstore: anomalies: %w", err)
	}
	slices.SortStableFunc(rows, byCost)
	if rows != nil {
		rep.Rows = rows
	}
	return rep, nil
}

// RisingFeatures returns the features whose cost per turn rose across
// every period of [from, to) while their use did not.
func (s *Store) RisingFeatures(ctx context.Context, from, to time.Time, periods int) ([]eventstore.RisingFeature, error) {
	q := eventstore.Query{By: eventstore.ByFeature, From: from, To: to}
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return nil, err
	}
	if periods == 0 {
		periods = eventstore.DefaultPeriods
	}
	if periods < 2 || periods > eventstore.MaxPeriods {
		return nil, eventstore.Invalidf("periods must be in 2..%d", eventstore.MaxPeriods)
	}
	step := q.To.Sub(q.From) / time.Duration(periods)
	if step < time.Minute {
		return nil, eventstore.Invalidf("each period must last at least a minute")
	}
	series := map[string][]eventstore.PeriodCost{}
	var order []string
	for i := range periods {
		p := q
		p.From = q.From.Add(time.Duration(i) * step)
		p.To = p.From.Add(step)
		rows, err := s.fromRollups(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("pgstore: rising: %w", err)
		}
		slices.SortFunc(rows, byCost)
		for _, r := range rows {
			if _, ok := series[r.Key]; !ok {
				series[r.Key] = make([]eventstore.PeriodCost, periods)
				order = append(order, r.Key)
			}
			series[r.Key][i] = eventstore.PeriodCost{Turns: r.Turns, CostUSD: r.CostUSD, CostPerTurn: r.CostPerTurn}
		}
	}
	out := []eventstore.RisingFeature{}
	for _, f := range order {
		ps := series[f]
		for i := range ps {
			ps[i].Start = q.From.Add(time.Duration(i) * step).UTC()
		}
		if rise, ok := eventstore.Rising(ps); ok {
			out = append(out, eventstore.RisingFeature{Feature: f, Rise: rise, Periods: ps})
		}
	}
	slices.SortStableFunc(out, func(a, b eventstore.RisingFeature) int { return cmp.Compare(b.Rise, a.Rise) })
	return out, nil
}

// versionCol is the spans column of a Compare or Eval version dimension.
var versionCol = map[string]string{
	eventstore.ByPrompt: "prompt_version", eventstore.ByModel: "model_id", eventstore.ByGraph: "graph_version",
	eventstore.ByTool: "tool_id",
}

// carries is the SQL condition that turn t had a span with col = the next
// argument.
func carries(col string) string {
	return `EXISTS (SELECT 1 FROM spans s WHERE s.trace_id = t.trace_id AND s.ts_start >= t.ts_start
		AND s.ts_start <= t.last_ts AND s.` + col + ` = ?)`
}

// Compare puts two versions of one artifact dimension side by side over
// the turns that started in [from, to) and carried them.
func (s *Store) Compare(ctx context.Context, dim, a, b string, from, to time.Time) (eventstore.CompareReport, error) {
	col, ok := versionCol[dim]
	if !ok || dim == eventstore.ByTool {
		return eventstore.CompareReport{}, eventstore.Invalidf("dim must be prompt, graph or model")
	}
	if a == "" || b == "" {
		return eventstore.CompareReport{}, eventstore.Invalidf("a and b: both versions are required")
	}
	q := eventstore.Query{From: from, To: to}
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return eventstore.CompareReport{}, err
	}
	rep := eventstore.CompareReport{Dim: dim, From: q.From.UTC(), To: q.To.UTC()}
	for _, side := range []*eventstore.CompareSide{&rep.A, &rep.B} {
		side.Version = a
		if side == &rep.B {
			side.Version = b
		}
		w := where{}
		w.add("t.ts_start >= ? AND t.ts_start < ? AND t.turns > 0", q.From.UnixMilli(), q.To.UnixMilli())
		w.add(carries(col), side.Version)
		rs, err := s.pool.Query(ctx, `SELECT t.cost, t.duration_ms, t.status, t.eval_score FROM turns t WHERE `+w.String(), w.args...)
		if err != nil {
			return rep, fmt.Errorf("pgstore: compare: %w", err)
		}
		var (
			durations []int64
			evalSum   float64
		)
		for rs.Next() {
			var (
				cost   float64
				dur    int64
				status string
				eval   *float64
			)
			if err := rs.Scan(&cost, &dur, &status, &eval); err != nil {
				rs.Close()
				return rep, fmt.Errorf("pgstore: compare: %w", err)
			}
			side.Turns++
			side.CostUSD += cost
			durations = append(durations, dur)
			switch events.Status(status) {
			case events.StatusFailed:
				side.Errors++
			case events.StatusFallback:
				side.Fallbacks++
			}
			if eval != nil {
				side.EvalCount++
				evalSum += *eval
			}
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return rep, fmt.Errorf("pgstore: compare: %w", err)
		}
		side.Finish(durations, evalSum)
	}
	return rep, nil
}

// evalGroup is a turn attribute an Eval groups by.
var evalGroup = map[string]string{
	eventstore.ByTotal: "''", eventstore.ByFeature: "t.feature", eventstore.ByLocale: "t.locale",
	eventstore.BySurface: "t.surface", eventstore.ByTier: "t.user_tier", eventstore.ByGraph: "t.graph_version",
}

// Eval averages the eval scores of the turns started in range, as the
// SQLite store's Eval.
func (s *Store) Eval(ctx context.Context, q eventstore.Query) (eventstore.EvalReport, error) {
	if q.By == "" {
		q.By = eventstore.ByTotal
	}
	key, byTurn := evalGroup[q.By]
	verCol, byVersion := versionCol[q.By]
	if !byTurn && (!byVersion || q.By == eventstore.ByGraph) {
		return eventstore.EvalReport{}, eventstore.Invalidf("unknown eval grouping %q", q.By)
	}
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return eventstore.EvalReport{}, err
	}
	rep := eventstore.EvalReport{By: q.By, From: q.From.UTC(), To: q.To.UTC(), Rows: []eventstore.EvalRow{}}
	w := where{}
	w.add("t.eval_score IS NOT NULL AND t.ts_start >= ? AND t.ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
	w.eq("t.graph_version", q.GraphVersion)
	w.eq("t.feature", q.Feature)
	w.eq("t.user_id_hash", q.User)
	w.eq("t.trace_id", q.Trace)
	for _, f := range []struct{ col, v string }{{"prompt_version", q.PromptVersion}, {"model_id", q.ModelID}, {"tool_id", q.ToolID}} {
		if f.v != "" {
			w.add(carries(f.col), f.v)
		}
	}
	stats := `count(*), avg(t.eval_score), min(t.eval_score), max(t.eval_score)`
	scan := func(sql string) ([]eventstore.EvalRow, error) {
		rs, err := s.pool.Query(ctx, sql, w.args...)
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []eventstore.EvalRow
		for rs.Next() {
			var r eventstore.EvalRow
			var avg, lo, hi *float64
			if err := rs.Scan(&r.Key, &r.Turns, &avg, &lo, &hi); err != nil {
				return nil, err
			}
			if avg != nil {
				r.AvgScore, r.MinScore, r.MaxScore = *avg, *lo, *hi
			}
			out = append(out, r)
		}
		return out, rs.Err()
	}
	total, err := scan(`SELECT '', ` + stats + ` FROM turns t WHERE ` + w.String())
	if err != nil {
		return rep, fmt.Errorf("pgstore: eval: %w", err)
	}
	rep.Total = total[0]
	var rows []eventstore.EvalRow
	if byTurn {
		rows, err = scan(`SELECT ` + key + `, ` + stats + ` FROM turns t WHERE ` + w.String() + ` GROUP BY 1`)
	} else {
		// A turn counts once under each version its spans carried.
		rows, err = scan(`SELECT v.version, ` + stats + ` FROM turns t CROSS JOIN LATERAL (SELECT DISTINCT s.` + verCol + ` AS version
			FROM spans s WHERE s.trace_id = t.trace_id AND s.ts_start >= t.ts_start AND s.ts_start <= t.last_ts
			AND s.` + verCol + ` <> '') v WHERE ` + w.String() + ` GROUP BY 1`)
	}
	if err != nil {
		return rep, fmt.Errorf("pgstore: eval: %w", err)
	}
	slices.SortFunc(rows, func(a, b eventstore.EvalRow) int {
		return cmp.Or(cmp.Compare(b.Turns, a.Turns), cmp.Compare(a.Key, b.Key))
	})
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
	}
	if rows != nil {
		rep.Rows = rows
	}
	return rep, nil
}

// SetEvalScore records a judge's score after the fact; id is a trace id
// (the turn), a turn's root span id, or trace id + span id (any span).
func (s *Store) SetEvalScore(ctx context.Context, id string, score float64) error {
	if math.IsNaN(score) || math.IsInf(score, 0) {
		return eventstore.Invalidf("score must be a finite number")
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
		return eventstore.Invalidf("id must be a trace id (32 hex), a root span id (16 hex) or trace+span (48 hex)")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: eval: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var root string
	var lo, hi int64
	if trace == "" {
		err = tx.QueryRow(ctx, `SELECT trace_id, root_span_id, ts_start, last_ts FROM turns WHERE root_span_id = $1 LIMIT 1`, span).
			Scan(&trace, &root, &lo, &hi)
	} else {
		err = tx.QueryRow(ctx, `SELECT root_span_id, ts_start, last_ts FROM turns WHERE trace_id = $1 FOR UPDATE`, trace).
			Scan(&root, &lo, &hi)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: eval: %s: %w", id, eventstore.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("pgstore: eval: %w", err)
	}
	if span == "" {
		span = root
	}
	var ts int64
	var rec []byte
	err = tx.QueryRow(ctx, `SELECT ts_start, rec FROM spans WHERE trace_id = $1 AND span_id = $2 AND ts_start >= $3 AND ts_start <= $4 FOR UPDATE`,
		trace, span, lo, hi).Scan(&ts, &rec)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && span != root:
		return fmt.Errorf("pgstore: eval: span %s: %w", span, eventstore.ErrNotFound)
	case err != nil && !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: eval: %w", err)
	case err == nil && rec == nil && span != root:
		// Sampled out: the span's details, its id among them, are gone.
		return fmt.Errorf("pgstore: eval: span %s: %w", span, eventstore.ErrNotFound)
	case err == nil:
		var e events.Event
		if err := eventstore.DecodeRecord(rec, ts, &e); err != nil {
			return fmt.Errorf("pgstore: eval: %w", err)
		}
		e.Outcome.EvalScore = &score
		if _, err := tx.Exec(ctx, `UPDATE spans SET rec = $1, eval_score = $2 WHERE trace_id = $3 AND span_id = $4 AND ts_start = $5`,
			eventstore.AppendRecord(nil, &e), score, trace, span, ts); err != nil {
			return fmt.Errorf("pgstore: eval: %w", err)
		}
	}
	if span == root {
		if _, err := tx.Exec(ctx, `UPDATE turns SET eval_score = $1 WHERE trace_id = $2`, score, trace); err != nil {
			return fmt.Errorf("pgstore: eval: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: eval: %w", err)
	}
	return nil
}
