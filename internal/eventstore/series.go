package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// Limits of a Series.
const (
	// MaxSeriesPoints bounds the points of one Series, whatever its step.
	MaxSeriesPoints = 10000
	// DefaultSeriesPoints is the most points a Series without a step has.
	DefaultSeriesPoints = 240
)

// seriesSteps are the steps a Series without one chooses from, smallest
// first: the first giving at most DefaultSeriesPoints points wins.
var seriesSteps = []time.Duration{
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour,
}

// SeriesPoint is one step of a SeriesReport: the CostRow figures of the
// spans that started in [T, T+step) ∩ [from, to).
type SeriesPoint struct {
	T            time.Time `json:"t"`
	Turns        int64     `json:"turns"`
	Spans        int64     `json:"spans"`
	Errors       int64     `json:"errors"`
	Fallbacks    int64     `json:"fallbacks"`
	TokensIn     int64     `json:"tokensIn"`
	TokensOut    int64     `json:"tokensOut"`
	CostUSD      float64   `json:"costUsd"`
	AvgLatencyMS float64   `json:"avgLatencyMs"` // mean span duration, as in CostRow
}

// SeriesReport answers Series.
type SeriesReport struct {
	From        time.Time     `json:"from"`
	To          time.Time     `json:"to"`
	StepSeconds int64         `json:"stepSeconds"`
	Points      []SeriesPoint `json:"points"`
}

// Series returns cost over time: one point per step from the step boundary
// at or before q.From to q.To, every step present (zero when nothing
// happened). Steps are aligned to multiples of step since the Unix epoch
// (UTC), so the same step always cuts time at the same instants; the first
// and last points only count spans inside [q.From, q.To). step 0 picks the
// smallest of 1m, 2m, 5m, 10m, 15m, 30m, 1h, 2h, 3h, 6h, 12h, 24h, 168h
// giving at most DefaultSeriesPoints points; otherwise it must be a whole
// number of minutes giving at most MaxSeriesPoints points. q's version and
// feature filters select spans, as in Cost; By, User, Trace and Limit must
// be unset.
func (s *Store) Series(ctx context.Context, q Query, step time.Duration) (SeriesReport, error) {
	if q.By != "" || q.User != "" || q.Trace != "" || q.Limit != 0 {
		return SeriesReport{}, invalidf("series takes no grouping, user, trace or limit")
	}
	q.By = ByTotal
	if err := q.normalize(s.now()); err != nil {
		return SeriesReport{}, err
	}
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	if step == 0 {
		step = seriesSteps[len(seriesSteps)-1]
		for _, st := range seriesSteps {
			if seriesPoints(from, to, st.Milliseconds()) <= DefaultSeriesPoints {
				step = st
				break
			}
		}
	}
	if step < time.Minute || step%time.Minute != 0 {
		return SeriesReport{}, invalidf("step must be a whole number of minutes, at least 1m")
	}
	stepMS := step.Milliseconds()
	n := seriesPoints(from, to, stepMS)
	if n > MaxSeriesPoints {
		return SeriesReport{}, invalidf("step %v gives %d points over this range; at most %d", step, n, MaxSeriesPoints)
	}
	origin := floorTo(from, stepMS)
	rep := SeriesReport{From: q.From.UTC(), To: q.To.UTC(), StepSeconds: stepMS / 1000, Points: make([]SeriesPoint, n)}
	for i := range rep.Points {
		rep.Points[i].T = time.UnixMilli(origin + int64(i)*stepMS).UTC()
	}
	bucket := fmt.Sprintf("((%%s - %d) / %d)", origin, stepMS)
	rows, err := s.minuteGroups(ctx, q, fmt.Sprintf(bucket, "minute"), fmt.Sprintf(bucket, "ts_start"))
	if err != nil {
		return rep, fmt.Errorf("eventstore: series: %w", err)
	}
	for _, r := range rows {
		i := r.key
		if i < 0 || i >= int64(n) {
			continue
		}
		p := &rep.Points[i]
		p.Turns, p.Spans, p.Errors, p.Fallbacks = r.Turns, r.Spans, r.Errors, r.Fallbacks
		p.TokensIn, p.TokensOut, p.CostUSD, p.AvgLatencyMS = r.TokensIn, r.TokensOut, r.CostUSD, r.AvgLatencyMS
	}
	return rep, nil
}

// seriesPoints is the number of steps of stepMS from the boundary at or
// before from up to to.
func seriesPoints(from, to, stepMS int64) int64 {
	origin := floorTo(from, stepMS)
	return (to - origin + stepMS - 1) / stepMS
}

func floorTo(ms, step int64) int64 {
	m := ms / step * step
	if m > ms {
		m -= step
	}
	return m
}

// intRow is a CostRow keyed by an integer expression.
type intRow struct {
	key int64
	CostRow
	first, last int64 // earliest and latest span start
}

// minuteGroups sums the spans selected by q's filters in [q.From, q.To),
// grouped by an integer expression of the minute roll-up (minuteKey) and
// the same expression of raw spans (spanKey), for the partial minutes at
// the edges.
func (s *Store) minuteGroups(ctx context.Context, q Query, minuteKey, spanKey string) ([]intRow, error) {
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	m0, m1 := ceilMinute(from), floorMinute(to)
	var parts []string
	var args []any
	raw := func(a, b int64) {
		w := where{}
		w.add("ts_start >= ? AND ts_start < ?", a, b)
		versionFilters(&w, &q, "")
		parts = append(parts, `SELECT `+spanKey+` AS k, `+spanAgg+`, ts_start AS first_ts, ts_start AS last_ts FROM events WHERE `+w.String())
		args = append(args, w.args...)
	}
	if m0 >= m1 {
		raw(from, to)
	} else {
		w := where{}
		w.add("minute >= ? AND minute < ?", m0, m1)
		versionFilters(&w, &q, "")
		parts = append(parts, `SELECT `+minuteKey+` AS k, spans, turns, tokens_in, tokens_out, cost_usd, errors, fallbacks, latency_ms, first_ts, last_ts FROM cost_minute WHERE `+w.String())
		args = append(args, w.args...)
		if from < m0 {
			raw(from, m0)
		}
		if m1 < to {
			raw(m1, to)
		}
	}
	union := parts[0]
	for _, p := range parts[1:] {
		union += " UNION ALL " + p
	}
	rs, err := s.r.QueryContext(ctx, `SELECT k, `+aggCols+`, MIN(first_ts), MAX(last_ts) FROM (`+union+`) GROUP BY k`, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []intRow
	for rs.Next() {
		var (
			r   intRow
			lat int64
			c   sql.NullFloat64
		)
		if err := rs.Scan(&r.key, &r.Spans, &r.Turns, &r.TokensIn, &r.TokensOut, &c, &r.Errors, &r.Fallbacks, &lat, &r.first, &r.last); err != nil {
			return nil, err
		}
		r.CostUSD = c.Float64
		r.finish()
		if r.Spans > 0 {
			r.AvgLatencyMS = float64(lat) / float64(r.Spans)
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// VersionSeen is one version of an artifact seen in a range.
type VersionSeen struct {
	Version   string    `json:"version"`
	Spans     int64     `json:"spans"`     // spans that carried it
	FirstSeen time.Time `json:"firstSeen"` // earliest start of such a span in range
	LastSeen  time.Time `json:"lastSeen"`  // latest start of such a span in range
}

// VersionsReport lists, per artifact dimension, the versions spans carried
// in a range. Spans without a version of a dimension are not listed.
type VersionsReport struct {
	Graph  []VersionSeen `json:"graph"`
	Prompt []VersionSeen `json:"prompt"`
	Model  []VersionSeen `json:"model"`
	Tool   []VersionSeen `json:"tool"`
}

// Versions lists the graph, prompt, model and tool versions carried by
// spans that started in [from, to) (zero values: the DefaultRange before
// now), each with its span count and first and last sighting; most recently
// seen first.
func (s *Store) Versions(ctx context.Context, from, to time.Time) (VersionsReport, error) {
	q := Query{From: from, To: to}
	if err := q.normalize(s.now()); err != nil {
		return VersionsReport{}, err
	}
	rep := VersionsReport{}
	for _, d := range []struct {
		col string
		out *[]VersionSeen
	}{{"graph_version", &rep.Graph}, {"prompt_version", &rep.Prompt}, {"model_id", &rep.Model}, {"tool_id", &rep.Tool}} {
		list, err := s.versionsOf(ctx, q, d.col)
		if err != nil {
			return rep, fmt.Errorf("eventstore: versions: %w", err)
		}
		*d.out = list
	}
	return rep, nil
}

func (s *Store) versionsOf(ctx context.Context, q Query, col string) ([]VersionSeen, error) {
	rows, err := s.textGroups(ctx, q, col)
	if err != nil {
		return nil, err
	}
	out := []VersionSeen{}
	for _, r := range rows {
		if r.Key == "" {
			continue
		}
		out = append(out, VersionSeen{Version: r.Key, Spans: r.Spans,
			FirstSeen: time.UnixMilli(r.first).UTC(), LastSeen: time.UnixMilli(r.last).UTC()})
	}
	slices.SortFunc(out, func(a, b VersionSeen) int {
		return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Version, b.Version))
	})
	return out, nil
}

// textRow is a CostRow with the first and last span start of its group.
type textRow struct {
	CostRow
	first, last int64
}

// textGroups sums spans in [q.From, q.To) grouped by a column that both the
// minute roll-up and the spans have.
func (s *Store) textGroups(ctx context.Context, q Query, col string) ([]textRow, error) {
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	m0, m1 := ceilMinute(from), floorMinute(to)
	var parts []string
	var args []any
	raw := func(a, b int64) {
		parts = append(parts, `SELECT `+col+` AS k, 1 AS spans, ts_start AS first_ts, ts_start AS last_ts FROM events WHERE ts_start >= ? AND ts_start < ?`)
		args = append(args, a, b)
	}
	if m0 >= m1 {
		raw(from, to)
	} else {
		parts = append(parts, `SELECT `+col+` AS k, spans, first_ts, last_ts FROM cost_minute WHERE minute >= ? AND minute < ?`)
		args = append(args, m0, m1)
		if from < m0 {
			raw(from, m0)
		}
		if m1 < to {
			raw(m1, to)
		}
	}
	union := parts[0]
	for _, p := range parts[1:] {
		union += " UNION ALL " + p
	}
	rs, err := s.r.QueryContext(ctx, `SELECT k, SUM(spans), MIN(first_ts), MAX(last_ts) FROM (`+union+`) GROUP BY k`, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []textRow
	for rs.Next() {
		var r textRow
		if err := rs.Scan(&r.Key, &r.Spans, &r.first, &r.last); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}
