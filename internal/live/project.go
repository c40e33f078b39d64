package live

import (
	"slices"
	"sort"
	"time"
)

// TrendSpan is how far back the projections look: the tokens-per-minute
// figures of the snapshots taken in the last TrendSpan. Snapshots taken
// before the window first filled (one Window after New) are left out,
// since a filling window rises by itself; so nothing is projected until
// then.
//
// tokensPerMinute counts this instance's spans only; in fleet mode, where
// the quota ceiling is shared, the projection is for this instance's own
// traffic against the whole ceiling.
const TrendSpan = 5 * time.Minute

// flatSlope is the smallest rise, in tokens per minute per second, that
// counts as rising: 1 token per minute per minute. Below it the trend is
// flat and nothing is projected.
const flatSlope = 1.0 / 60

// TrendPoint is a model's tokens per minute at one moment.
type TrendPoint struct {
	T               time.Time
	TokensPerMinute float64
}

// SecondsToExhaustion fits a straight line y = a + b·t to the points by
// ordinary least squares (t in seconds, y in tokens per minute) and returns
// how many seconds after the last point the line reaches ceiling (tokens
// per minute), rounded to 0.1 s; 0 when the fitted value at the last point
// is already at or above the ceiling.
//
// It returns nil, meaning "not heading for exhaustion", when ceiling <= 0
// (no ceiling), when there are fewer than two points or they all share one
// time, or when the slope is below 1 token per minute per minute (flat or
// falling). The points may come in any order.
func SecondsToExhaustion(points []TrendPoint, ceiling float64) *float64 {
	if ceiling <= 0 || len(points) < 2 {
		return nil
	}
	last := points[0].T
	for _, p := range points[1:] {
		if p.T.After(last) {
			last = p.T
		}
	}
	// Times relative to the last point keep the sums small and exact.
	n := float64(len(points))
	var mt, my float64
	for _, p := range points {
		mt += p.T.Sub(last).Seconds()
		my += p.TokensPerMinute
	}
	mt /= n
	my /= n
	var sxy, sxx float64
	for _, p := range points {
		dt := p.T.Sub(last).Seconds() - mt
		sxy += dt * (p.TokensPerMinute - my)
		sxx += dt * dt
	}
	if sxx == 0 {
		return nil
	}
	slope := sxy / sxx
	if slope < flatSlope {
		return nil
	}
	atLast := my + slope*(0-mt)
	secs := 0.0
	if atLast < ceiling {
		secs = round((ceiling-atLast)/slope, 1)
	}
	return &secs
}

// projections returns one Projection per model that has a quota entry or
// tokens in the window, sorted by model. The trend uses the history's
// snapshots of the last TrendSpan plus s, leaving out those taken before
// the window had first filled (a filling window rises by itself).
func (a *Aggregator) projections(now time.Time, s Snapshot) []Projection {
	ceilings := make(map[string]float64, len(s.Quota))
	// Spans name a model by its provider id, quota entries by the gateway's
	// name: tokens of the id count towards the entry's model.
	nameOf := make(map[string]string, len(s.Quota))
	for _, q := range s.Quota {
		ceilings[q.Model] = float64(q.TPMCeiling)
		if q.ModelID != "" {
			nameOf[q.ModelID] = q.Model
		}
	}
	key := func(m string) string {
		if n, ok := nameOf[m]; ok {
			return n
		}
		return m
	}
	models := make([]string, 0, len(ceilings)+len(s.TokensPerMinute))
	for m := range ceilings {
		models = append(models, m)
	}
	for m := range s.TokensPerMinute {
		if k := key(m); !slices.Contains(models, k) {
			models = append(models, k)
		}
	}
	sort.Strings(models)
	out := make([]Projection, 0, len(models))
	if len(models) == 0 {
		return out
	}

	from := now.Add(-TrendSpan)
	if filled := a.start.Add(a.cfg.Window); filled.After(from) {
		from = filled
	}
	series := make(map[string][]TrendPoint, len(models))
	addPoint := func(t time.Time, tpm map[string]float64) {
		if t.Before(from) || t.After(now) {
			return
		}
		sums := make(map[string]float64, len(tpm))
		for m, v := range tpm {
			sums[key(m)] += v
		}
		for _, m := range models {
			series[m] = append(series[m], TrendPoint{T: t, TokensPerMinute: sums[m]})
		}
	}
	a.hmu.Lock()
	a.history.each(func(e *historyEntry) { addPoint(e.snap.T, e.snap.TokensPerMinute) })
	a.hmu.Unlock()
	addPoint(s.T, s.TokensPerMinute)

	for _, m := range models {
		out = append(out, Projection{Model: m, SecondsToExhaustion: SecondsToExhaustion(series[m], ceilings[m])})
	}
	return out
}
