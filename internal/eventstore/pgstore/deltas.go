package pgstore

import (
	"github.com/fmgate/fmgate/internal/events"
)

// A batch whose spans are all new adds them to the roll-ups and turns from
// sums made here, one row per roll-up key and per trace, so that PostgreSQL
// upserts those instead of grouping the batch's spans again. The sums are
// the ones mergeSQL makes from the staged spans (see mergeFrom).

// rollupKey is a row of rollup: a level's bucket and the dimensions.
type rollupKey struct {
	lvl                            int16
	bucket                         int64
	feature, surface, locale, tier string
	graph, model, prompt, tool     string
}

// rowSums are the sums both a roll-up row and a turn row keep, in their
// columns' order (userSums).
type rowSums struct {
	spans, turns, tokensIn, tokensOut int64
	cost                              float64
	errors, fallbacks, latency        int64
}

func (s *rowSums) add(o rowSums) {
	s.spans += o.spans
	s.turns += o.turns
	s.tokensIn += o.tokensIn
	s.tokensOut += o.tokensOut
	s.cost += o.cost
	s.errors += o.errors
	s.fallbacks += o.fallbacks
	s.latency += o.latency
}

// write writes the sums as a row's fields, in userSums' order.
func (s *rowSums) write(c *copyData) {
	c.int8(s.spans)
	c.int8(s.turns)
	c.int8(s.tokensIn)
	c.int8(s.tokensOut)
	c.float8(s.cost)
	c.int8(s.errors)
	c.int8(s.fallbacks)
	c.int8(s.latency)
}

// rollupSum is a roll-up row's sums: those turn rows keep too, and the
// prompt cache's, which only the roll-up keeps.
type rollupSum struct {
	rowSums
	first, last           int64
	cacheRead, cacheWrite int64
	cacheSaved            float64
}

// turnSum is what a batch says of one trace, as bt in mergeSQL.
type turnSum struct {
	trace, user, session, feature, surface, locale, tier, graph string
	first, last                                                 int64
	root, status                                                string
	duration                                                    int64
	eval                                                        *float64
	hasTurn                                                     bool
	rowSums
}

// deltas are a batch's rows for the staging tables stage_rollup and
// stage_turns.
type deltas struct {
	rollup, turns *copyData
}

// rollupLevels are the rollup levels and their bucket widths.
var rollupLevels = [...]struct {
	lvl int16
	w   int64
}{{1, minuteMS}, {2, hourMS}}

func batchDeltas(batch []events.Event, sampledOut map[string]bool) deltas {
	sums := make(map[rollupKey]*rollupSum, len(batch)/2)
	var keys []rollupKey
	traces := make(map[string]*turnSum, len(batch)/4)
	var order []*turnSum
	for i := range batch {
		e := &batch[i]
		ts := unixMilli(e.TSStart)
		isTurn := e.Name == "turn"
		status := string(e.Outcome.Status)
		one := rowSums{spans: 1, tokensIn: int64(e.Resource.TokensIn), tokensOut: int64(e.Resource.TokensOut),
			cost: finiteCost(e.Resource.CostUSD), latency: e.DurationMS}
		if isTurn {
			one.turns = 1
		}
		if status == string(events.StatusFailed) {
			one.errors = 1
		}
		if status == string(events.StatusFallback) || e.Outcome.FallbackUsed != "" {
			one.fallbacks = 1
		}
		a := &e.Attribution
		for _, l := range rollupLevels {
			k := rollupKey{lvl: l.lvl, bucket: floorDiv(ts, l.w) * l.w, feature: a.Feature, surface: a.Surface, locale: a.Locale,
				tier: a.UserTier, graph: e.Node.GraphVersion, model: e.Artifact.ModelID, prompt: e.Artifact.PromptVersion, tool: e.Artifact.ToolID}
			s := sums[k]
			if s == nil {
				s = &rollupSum{first: ts, last: ts}
				sums[k] = s
				keys = append(keys, k)
			}
			s.add(one)
			s.first, s.last = min(s.first, ts), max(s.last, ts)
			s.cacheRead += int64(e.Resource.TokensCacheRead)
			s.cacheWrite += int64(e.Resource.TokensCacheWrite)
			s.cacheSaved += finiteCost(e.Resource.CacheSavedUSD)
		}
		t := traces[e.TraceID]
		if t == nil {
			t = &turnSum{trace: e.TraceID, first: ts, last: ts, user: e.UserIDHash, session: e.SessionID, feature: a.Feature,
				surface: a.Surface, locale: a.Locale, tier: a.UserTier, graph: e.Node.GraphVersion}
			traces[e.TraceID] = t
			order = append(order, t)
		}
		t.first, t.last = min(t.first, ts), max(t.last, ts)
		t.user, t.session = max(t.user, e.UserIDHash), max(t.session, e.SessionID)
		t.feature, t.surface, t.locale = max(t.feature, a.Feature), max(t.surface, a.Surface), max(t.locale, a.Locale)
		t.tier, t.graph = max(t.tier, a.UserTier), max(t.graph, e.Node.GraphVersion)
		if isTurn {
			if !t.hasTurn {
				t.hasTurn, t.root, t.status, t.duration = true, e.SpanID, status, e.DurationMS
			} else {
				t.root, t.status, t.duration = max(t.root, e.SpanID), max(t.status, status), max(t.duration, e.DurationMS)
			}
			if v := e.Outcome.EvalScore; v != nil && (t.eval == nil || *v > *t.eval) {
				t.eval = v
			}
		}
		t.add(one)
	}
	d := deltas{rollup: newCopyData(len(keys) * 200), turns: newCopyData(len(order) * 300)}
	for _, k := range keys {
		s, c := sums[k], d.rollup
		c.row(len(rollupCols))
		c.int2(k.lvl)
		c.int8(k.bucket)
		for _, v := range [...]string{k.feature, k.surface, k.locale, k.tier, k.graph, k.model, k.prompt, k.tool} {
			c.text(v)
		}
		s.write(c)
		c.int8(s.first)
		c.int8(s.last)
		c.int8(s.cacheRead)
		c.int8(s.cacheWrite)
		c.float8(s.cacheSaved)
	}
	for _, t := range order {
		c := d.turns
		c.row(len(turnCols))
		c.text(t.trace)
		c.int8(t.first)
		c.int8(t.last)
		for _, v := range [...]string{t.user, t.session, t.feature, t.surface, t.locale, t.tier, t.graph, t.root} {
			c.text(v)
		}
		c.int8(t.duration)
		c.text(t.status)
		c.nullFloat8(t.eval)
		t.write(c)
		c.boolean(sampledOut[t.trace])
	}
	return d
}

// finiteCost is cost, or 0 when it is NaN or infinite (as the SQLite store).
func finiteCost(cost float64) float64 {
	if cost != cost || cost > 1e300 || cost < -1e300 {
		return 0
	}
	return cost
}
