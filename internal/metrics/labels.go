package metrics

import "strings"

// Label values come only from the fixed lists below or from the configured
// model names and ids (Options.Models). Anything else is reported as
// LabelOther, so no user id, request id, trace id or free text can become a
// label value and every metric has a known, small number of series.
const (
	// LabelOther stands for any value outside the allowed set.
	LabelOther = "other"
	// LabelNone is the model label of a turn, tokens or cost that no model
	// answered or incurred (FAQ, graceful message, cache lookup, refusal).
	LabelNone = "none"
	// TierPrimary is the tier label of a turn that was not degraded.
	TierPrimary = "primary"
)

// Routes are the turn's entry points (attribution.surface).
var Routes = []string{"ws", "sse", "http", "batch"}

// Statuses are the span outcomes of schema v3.
var Statuses = []string{"ok", "fallback", "retry_succeeded", "failed"}

// FallbackTiers are the tiers below the models in the cascade; model names
// from Options.Models are tiers too.
var FallbackTiers = []string{"cache", "faq", "graceful"}

// ErrorCodes are the stable error codes of the gateway's edge.
var ErrorCodes = []string{
	"invalid_request", "too_large", "unauthorized", "forbidden", "not_found",
	"duplicate_request", "rate_limited", "quota_exhausted", "queue_full",
	"queue_timeout", "budget_exceeded", "overloaded", "unavailable",
	"shutting_down", "upstream_failed", "stream_timeout", "slow_client",
	"canceled", "internal",
}

// ProviderErrorKinds are the classes of a failed model call (provider.Kind)
// used as the outcome of a model attempt and the reason of a retry.
var ProviderErrorKinds = []string{
	"throttled", "unavailable", "server", "timeout", "not_ready", "validation",
	"access_denied", "not_found", "guardrail", "canceled", "unknown",
}

// OutcomeOK is the outcome label of a model attempt that succeeded.
const OutcomeOK = "ok"

// ThrottleScopes are the scopes a refusal by a limiter is charged to.
var ThrottleScopes = []string{"user", "session", "ip", "global", "tenant", "route", "provider", "quota"}

// SpanNames are the span names the gateway emits; cost is attributed to
// them as the component label.
var SpanNames = []string{
	"turn", "admit", "budget", "quota", "model_attempt", "retry", "fallback",
	"cache", "faq", "stream",
}

// SinkNames are the event sinks whose drops are exported by name.
var SinkNames = []string{"jsonl", "nats", "otlp", "eventstore", "live", "metrics"}

// Priorities are the queue's priority classes.
var Priorities = []string{"P0", "P1", "P2", "P3"}

// BreakerStates are the three states of a circuit breaker.
var BreakerStates = []string{"closed", "half_open", "open"}

// Directions of token flow.
const (
	DirectionIn  = "in"
	DirectionOut = "out"
)

// label is a bounded label: its allowed values, each with a small index,
// and the index that anything else maps to. Indexes let the span path find
// a metric's series in a flat slice instead of hashing label values.
type label struct {
	vals  []string
	idx   map[string]int
	other int
}

// newLabel returns a label allowing the values of lists, plus LabelOther.
func newLabel(lists ...[]string) *label {
	l := &label{idx: map[string]int{}}
	for _, list := range lists {
		for _, v := range list {
			l.add(v)
		}
	}
	l.other = l.add(LabelOther)
	return l
}

func (l *label) add(v string) int {
	if i, ok := l.idx[v]; ok {
		return i
	}
	l.idx[v] = len(l.vals)
	l.vals = append(l.vals, v)
	return len(l.vals) - 1
}

// index returns the index of v, or of LabelOther when v is not allowed.
func (l *label) index(v string) int {
	if i, ok := l.idx[v]; ok {
		return i
	}
	return l.other
}

// bound returns v when it is allowed and LabelOther otherwise.
func (l *label) bound(v string) string { return l.vals[l.index(v)] }

var (
	routeLabel     = newLabel(Routes)
	statusLabel    = newLabel(Statuses)
	codeLabel      = newLabel(ErrorCodes)
	outcomeLabel   = newLabel([]string{OutcomeOK}, ProviderErrorKinds)
	kindLabel      = newLabel(ProviderErrorKinds)
	scopeLabel     = newLabel(ThrottleScopes)
	spanLabel      = newLabel(SpanNames)
	directionLabel = newLabel([]string{DirectionIn, DirectionOut})
	priorityLabel  = newLabel(Priorities)
	sinkLabel      = newLabel(SinkNames)
)

// boundScope maps a limiter's scope name to its family: "user_per_minute"
// and "user:…" count as "user", "route_chat" as "route"; the part before the
// first '_' or ':' must be one of ThrottleScopes.
func boundScope(s string) string {
	if i := strings.IndexAny(s, "_:"); i >= 0 {
		s = s[:i]
	}
	return scopeLabel.bound(s)
}
