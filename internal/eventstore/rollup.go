package eventstore

import (
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// A level is one bucket width of the roll-up. Coarse levels key spans by
// the dimensions that cost views filter on (feature, graph, model, prompt,
// tool); fine levels add surface, locale and user tier, whose cross product
// is an order of magnitude larger, so they start at ten minutes: a range's
// partial ten minutes are read from the spans.
type level struct {
	id    int
	fine  bool
	width int64 // milliseconds
}

const (
	minuteMS = int64(time.Minute / time.Millisecond)
	hourMS   = 60 * minuteMS
	dayMS    = 24 * hourMS
)

var (
	coarseLevels = []level{{3, false, dayMS}, {2, false, hourMS}, {1, false, 10 * minuteMS}, {0, false, minuteMS}}
	fineLevels   = []level{{6, true, dayMS}, {5, true, hourMS}, {4, true, 10 * minuteMS}}
)

// levelsFor returns the levels, coarsest first, that hold a dimension tuple
// of the given kind.
func levelsFor(fine bool) []level {
	if fine {
		return fineLevels
	}
	return coarseLevels
}

// agg is the sums kept per roll-up bucket and reported per group.
type agg struct {
	spans, turns, tokensIn, tokensOut int64
	cost                              float64
	errors, fallbacks, latency        int64
	first, last                       int64 // earliest and latest span start; valid when spans > 0
	// The prompt cache's: input tokens read and written, money saved. The
	// roll-up keeps them; turn rows, their per-version sums and the user
	// roll-up do not (see CostRow).
	cacheRead, cacheWrite int64
	cacheSaved            float64
}

func (a *agg) addSpan(e *events.Event, ts int64) {
	if a.spans == 0 || ts < a.first {
		a.first = ts
	}
	if a.spans == 0 || ts > a.last {
		a.last = ts
	}
	a.spans++
	if e.Name == "turn" {
		a.turns++
	}
	a.tokensIn += int64(e.Resource.TokensIn)
	a.tokensOut += int64(e.Resource.TokensOut)
	a.cost += finite(e.Resource.CostUSD)
	a.cacheRead += int64(e.Resource.TokensCacheRead)
	a.cacheWrite += int64(e.Resource.TokensCacheWrite)
	a.cacheSaved += finite(e.Resource.CacheSavedUSD)
	if isErrorSpan(e) {
		a.errors++
	}
	// A turn served by a fallback tier counts once: its turn span says so,
	// and its fallback, cache and FAQ spans would count it again.
	if e.Name == "turn" && isFallbackSpan(e) {
		a.fallbacks++
	}
	a.latency += e.DurationMS
}

func (a *agg) merge(o *agg) {
	if o.spans == 0 {
		return
	}
	if a.spans == 0 || o.first < a.first {
		a.first = o.first
	}
	if a.spans == 0 || o.last > a.last {
		a.last = o.last
	}
	a.spans += o.spans
	a.turns += o.turns
	a.tokensIn += o.tokensIn
	a.tokensOut += o.tokensOut
	a.cost += o.cost
	a.errors += o.errors
	a.fallbacks += o.fallbacks
	a.latency += o.latency
	a.cacheRead += o.cacheRead
	a.cacheWrite += o.cacheWrite
	a.cacheSaved += o.cacheSaved
}

// addSums adds the sums of o, which has no first and last.
func (a *agg) addSums(o *agg) {
	a.spans += o.spans
	a.turns += o.turns
	a.tokensIn += o.tokensIn
	a.tokensOut += o.tokensOut
	a.cost += o.cost
	a.errors += o.errors
	a.fallbacks += o.fallbacks
	a.latency += o.latency
	a.cacheRead += o.cacheRead
	a.cacheWrite += o.cacheWrite
	a.cacheSaved += o.cacheSaved
}

// row reports the sums as a CostRow keyed key.
func (a *agg) row(key string) CostRow {
	r := CostRow{Key: key, CostUSD: a.cost, Turns: a.turns, Spans: a.spans, TokensIn: a.tokensIn,
		TokensOut: a.tokensOut, Errors: a.errors, Fallbacks: a.fallbacks,
		CacheReadTokens: a.cacheRead, CacheWriteTokens: a.cacheWrite, CacheSavedUSD: a.cacheSaved}
	r.finish()
	if a.spans > 0 {
		r.AvgLatencyMS = float64(a.latency) / float64(a.spans)
	}
	return r
}

func isErrorSpan(e *events.Event) bool { return e.Outcome.Status == events.StatusFailed }

func isFallbackSpan(e *events.Event) bool {
	return e.Outcome.Status == events.StatusFallback || e.Outcome.FallbackUsed != ""
}

// dimTuple is a span's roll-up key. Coarse tuples leave surface, locale
// and user tier empty.
type dimTuple struct {
	fine                           bool
	feature, surface, locale, tier string
	graph, model, prompt, tool     string
}

func tupleOf(e *events.Event, fine bool) dimTuple {
	t := dimTuple{fine: fine, feature: e.Attribution.Feature, graph: e.Node.GraphVersion,
		model: e.Artifact.ModelID, prompt: e.Artifact.PromptVersion, tool: e.Artifact.ToolID}
	if fine {
		t.surface, t.locale, t.tier = e.Attribution.Surface, e.Attribution.Locale, e.Attribution.UserTier
	}
	return t
}

// get returns the tuple's value for a grouping (a rollupGroupings key).
func (t *dimTuple) get(by string) string {
	switch by {
	case ByFeature:
		return t.feature
	case BySurface:
		return t.surface
	case ByLocale:
		return t.locale
	case ByTier:
		return t.tier
	case ByGraph:
		return t.graph
	case ByModel:
		return t.model
	case ByPrompt:
		return t.prompt
	case ByTool:
		return t.tool
	}
	return ""
}

// matches applies a Query's version and feature filters.
func (t *dimTuple) matches(q *Query) bool {
	return (q.GraphVersion == "" || q.GraphVersion == t.graph) &&
		(q.PromptVersion == "" || q.PromptVersion == t.prompt) &&
		(q.ModelID == "" || q.ModelID == t.model) &&
		(q.ToolID == "" || q.ToolID == t.tool) &&
		(q.Feature == "" || q.Feature == t.feature)
}

// spanMatches applies a Query's version and feature filters to a span.
func spanMatches(e *events.Event, q *Query) bool {
	return (q.GraphVersion == "" || q.GraphVersion == e.Node.GraphVersion) &&
		(q.PromptVersion == "" || q.PromptVersion == e.Artifact.PromptVersion) &&
		(q.ModelID == "" || q.ModelID == e.Artifact.ModelID) &&
		(q.ToolID == "" || q.ToolID == e.Artifact.ToolID) &&
		(q.Feature == "" || q.Feature == e.Attribution.Feature)
}

// spanKey returns the span's value for a grouping: a rollupGroupings key,
// ByUser or ByTurn.
func spanKey(e *events.Event, by string) string {
	switch by {
	case ByFeature:
		return e.Attribution.Feature
	case BySurface:
		return e.Attribution.Surface
	case ByLocale:
		return e.Attribution.Locale
	case ByTier:
		return e.Attribution.UserTier
	case ByGraph:
		return e.Node.GraphVersion
	case ByModel:
		return e.Artifact.ModelID
	case ByPrompt:
		return e.Artifact.PromptVersion
	case ByTool:
		return e.Artifact.ToolID
	case ByUser:
		return e.UserIDHash
	case ByTurn:
		return e.TraceID
	}
	return ""
}

// fineBy says a grouping needs the fine levels.
func fineBy(by string) bool { return by == ByLocale || by == BySurface || by == ByTier }

// span of a plan: either buckets [from, to) of one level, or raw spans
// (lvl nil) started in [from, to).
type planPart struct {
	lvl      *level
	from, to int64
}

// plan splits [from, to) into the fewest whole buckets of the given levels
// (coarsest first), and raw ranges for what no bucket covers.
func plan(from, to int64, levels []level, out []planPart) []planPart {
	if from >= to {
		return out
	}
	if len(levels) == 0 {
		return append(out, planPart{from: from, to: to})
	}
	l := &levels[0]
	a, b := ceilTo(from, l.width), floorTo(to, l.width)
	if a >= b {
		return plan(from, to, levels[1:], out)
	}
	out = append(out, planPart{lvl: l, from: a, to: b})
	out = plan(from, a, levels[1:], out)
	return plan(b, to, levels[1:], out)
}

func floorTo(ms, step int64) int64 {
	m := ms / step * step
	if m > ms {
		m -= step
	}
	return m
}

func ceilTo(ms, step int64) int64 {
	m := floorTo(ms, step)
	if m < ms {
		m += step
	}
	return m
}
