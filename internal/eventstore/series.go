package eventstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
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
	rep, err := NewSeries(q, step)
	if err != nil {
		return rep, err
	}
	stepMS, n := rep.StepSeconds*1000, int64(len(rep.Points))
	origin := rep.Points[0].T.UnixMilli()
	if err := s.sync(ctx); err != nil {
		return rep, err
	}
	s.clamp(&q)
	sums := make([]agg, n)
	if err := s.seriesSums(ctx, q, origin, stepMS, sums); err != nil {
		return rep, fmt.Errorf("eventstore: series: %w", err)
	}
	for i := range sums {
		r := sums[i].row("")
		p := &rep.Points[i]
		p.Turns, p.Spans, p.Errors, p.Fallbacks = r.Turns, r.Spans, r.Errors, r.Fallbacks
		p.TokensIn, p.TokensOut, p.CostUSD, p.AvgLatencyMS = r.TokensIn, r.TokensOut, r.CostUSD, r.AvgLatencyMS
	}
	return rep, nil
}

// NewSeries checks a normalized q and step (0: chosen, as Series
// documents) and returns the report with every point's time set and its
// figures zero.
func NewSeries(q Query, step time.Duration) (SeriesReport, error) {
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
	return rep, nil
}

// seriesSums adds the spans of [q.From, q.To) matching q's filters to
// sums, one per step of stepMS from origin. The middle comes from the
// coarsest roll-up level whose buckets divide the step, so that each
// bucket falls in one step; the partial buckets at the edges are planned
// like any range (they lie within one step each).
func (s *Store) seriesSums(ctx context.Context, q Query, origin, stepMS int64, sums []agg) error {
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	if from >= to {
		return nil
	}
	var l level
	for _, l = range coarseLevels {
		if stepMS%l.width == 0 {
			break
		}
	}
	edge := func(lo, hi int64) error {
		if lo >= hi {
			return nil
		}
		i := (lo - origin) / stepMS
		groups, err := s.rollupGroups(ctx, Query{By: ByTotal, From: time.UnixMilli(lo), To: time.UnixMilli(hi),
			GraphVersion: q.GraphVersion, PromptVersion: q.PromptVersion, ModelID: q.ModelID, ToolID: q.ToolID,
			Feature: q.Feature}, func(*dimTuple) string { return "" })
		if err != nil {
			return err
		}
		if g := groups[""]; g != nil && i >= 0 && i < int64(len(sums)) {
			sums[i].merge(g)
		}
		return nil
	}
	a, b := ceilTo(from, l.width), floorTo(to, l.width)
	if a > b {
		// Inside one bucket, so inside one step.
		return edge(from, to)
	}
	if err := edge(from, a); err != nil {
		return err
	}
	if a < b {
		group := fmt.Sprintf("(bucket - %d) / %d", origin, stepMS)
		err := s.bucketSums(ctx, q, false, planPart{lvl: &l, from: a, to: b}, group, func(i int64, g *agg) {
			if i >= 0 && i < int64(len(sums)) {
				sums[i].merge(g)
			}
		})
		if err != nil {
			return err
		}
	}
	return edge(b, to)
}

// seriesPoints is the number of steps of stepMS from the boundary at or
// before from up to to.
func seriesPoints(from, to, stepMS int64) int64 {
	origin := floorTo(from, stepMS)
	return (to - origin + stepMS - 1) / stepMS
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
	if err := s.sync(ctx); err != nil {
		return VersionsReport{}, err
	}
	s.clamp(&q)
	rep := VersionsReport{Graph: []VersionSeen{}, Prompt: []VersionSeen{}, Model: []VersionSeen{}, Tool: []VersionSeen{}}
	if !q.From.Before(q.To) {
		return rep, nil
	}
	// Group by the whole coarse tuple, then fold per dimension.
	groups, err := s.rollupGroups(ctx, q, func(t *dimTuple) string {
		return strings.Join([]string{t.graph, t.prompt, t.model, t.tool}, "\x00")
	})
	if err != nil {
		return rep, fmt.Errorf("eventstore: versions: %w", err)
	}
	seen := [4]map[string]*agg{{}, {}, {}, {}}
	for k, a := range groups {
		for i, v := range strings.Split(k, "\x00") {
			if v == "" {
				continue
			}
			g := seen[i][v]
			if g == nil {
				g = &agg{}
				seen[i][v] = g
			}
			g.merge(a)
		}
	}
	for i, out := range []*[]VersionSeen{&rep.Graph, &rep.Prompt, &rep.Model, &rep.Tool} {
		for v, a := range seen[i] {
			*out = append(*out, VersionSeen{Version: v, Spans: a.spans,
				FirstSeen: time.UnixMilli(a.first).UTC(), LastSeen: time.UnixMilli(a.last).UTC()})
		}
		slices.SortFunc(*out, func(a, b VersionSeen) int {
			return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Version, b.Version))
		})
	}
	return rep, nil
}
