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

// routes are the turn's entry points (attribution.surface).
var routes = []string{"ws", "sse", "http", "batch"}

// statuses are the span outcomes of schema v3.
var statuses = []string{"ok", "fallback", "retry_succeeded", "failed"}

// fallbackTiers are the tiers below the models in the cascade; model names
// from Options.Models are tiers too.
var fallbackTiers = []string{"cache", "faq", "graceful"}

// errorCodes are the stable error codes of the gateway's edge.
var errorCodes = []string{
	"invalid_request", "too_large", "unauthorized", "forbidden", "not_found",
	"duplicate_request", "rate_limited", "quota_exhausted", "queue_full",
	"queue_timeout", "budget_exceeded", "overloaded", "unavailable",
	"shutting_down", "upstream_failed", "stream_timeout", "slow_client",
	"canceled", "internal", "request_timeout", "method_not_allowed",
	"unsupported_media_type", "forbidden_origin",
}

// providerErrorKinds are the classes of a failed model call (provider.Kind)
// used as the outcome of a model attempt and the reason of a retry.
var providerErrorKinds = []string{
	"throttled", "unavailable", "server", "timeout", "not_ready", "validation",
	"access_denied", "not_found", "guardrail", "canceled", "unknown",
}

// outcomeOK is the outcome label of a model attempt that succeeded.
const outcomeOK = "ok"

// answerRejections are the outcomes of a model attempt whose answer the
// gateway refused (the span's vendor_code): JSON that did not match the
// client's schema, or a tool call the client could not run.
var answerRejections = []string{"invalid_json_answer", "invalid_tool_call"}

// throttleScopes are the scopes a refusal by a limiter is charged to.
var throttleScopes = []string{"user", "session", "ip", "global", "tenant", "route", "provider", "quota", "connection", "pace"}

// spanNames are the span names the gateway emits; cost is attributed to
// them as the component label.
var spanNames = []string{
	"turn", "admit", "budget", "quota", "model_attempt", "retry", "fallback",
	"cache", "faq", "stream",
}

// sinkNames are the event sinks whose drops are exported by name.
var sinkNames = []string{"jsonl", "nats", "otlp", "eventstore", "live", "metrics"}

// priorities are the queue's priority classes.
var priorities = []string{"P0", "P1", "P2", "P3"}

// breakerStates are the three states of a circuit breaker.
var breakerStates = []string{"closed", "half_open", "open"}

// pressureLevels are the five adaptive pressure levels, least conservative
// first.
var pressureLevels = []string{"normal", "slight", "recovery", "high", "circuit_open"}

// Directions of token flow.
const (
	directionIn  = "in"
	directionOut = "out"
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
	routeLabel     = newLabel(routes)
	statusLabel    = newLabel(statuses)
	codeLabel      = newLabel(errorCodes)
	outcomeLabel   = newLabel([]string{outcomeOK}, providerErrorKinds, answerRejections)
	kindLabel      = newLabel(providerErrorKinds)
	scopeLabel     = newLabel(throttleScopes)
	spanLabel      = newLabel(spanNames)
	directionLabel = newLabel([]string{directionIn, directionOut})
	tokenTypeLabel = newLabel([]string{"input", "output"})
	priorityLabel  = newLabel(priorities)
	sinkLabel      = newLabel(sinkNames)
)

// boundScope maps a limiter's scope name to its family: "user_per_minute"
// and "user:…" count as "user", "route_chat" as "route"; the part before the
// first '_' or ':' must be one of throttleScopes.
func boundScope(s string) string {
	if i := strings.IndexAny(s, "_:"); i >= 0 {
		s = s[:i]
	}
	return scopeLabel.bound(s)
}
