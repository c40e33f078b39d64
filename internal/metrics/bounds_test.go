package metrics

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fmgate/fmgate/internal/events"
)

// feedAll makes m export every metric it has: one span of each kind, each
// direct observation, a state callback and the drop counts.
func feedAll(t testing.TB, m *Metrics) {
	t.Helper()
	sonnet := "claude-sonnet-4-6"
	write(t, m,
		mk("admit", ids("t1", "ad", "turn1")),
		mk("budget", ids("t1", "bu", "turn1")),
		mk("quota", ids("t1", "qu", "turn1")),
		mk("model_attempt", ids("t1", "a1", "turn1"), model(sonnet), code("throttled")),
		mk("model_attempt", ids("t1", "a2", "turn1"), model(sonnet), tokens(900, 200), cost(0.0057)),
		mk("cache", ids("t1", "ca", "turn1"), cost(0.00001)),
		mk("faq", ids("t1", "fq", "turn1")),
		mk("stream", ids("t1", "st", "turn1"), at(t0.Add(400*time.Millisecond), time.Second)),
		mk("turn", ids("t1", "turn1", ""), surface("ws"), model(sonnet), at(t0, 1500*time.Millisecond)),
		mk("turn", ids("t2", "turn2", ""), surface("http"), status(events.StatusFallback), fb("faq"), at(t0, 900*time.Millisecond)),
		mk("turn", ids("t3", "turn3", ""), surface("sse"), status(events.StatusFailed), code("queue_full"), at(t0, 10*time.Millisecond)),
	)
	m.Throttle("user_per_minute")
	m.Retry("sonnet", "throttled")
	m.SetState(func(context.Context) (State, error) {
		return State{
			Breakers: []BreakerState{{"sonnet", "closed"}, {"haiku", "open"}},
			Quota:    []QuotaState{{Model: "sonnet", TPMUsed: 1000, TPMCeiling: 85000, RPMUsed: 3, RPMCeiling: 100}},
			Queue:    []QueueDepth{{"P0", 0}, {"P3", 12}},
		}, nil
	})
	m.RegisterDropped(func() map[string]uint64 { return map[string]uint64{"jsonl": 0, "nats": 2} })
}

// set is a set of label values.
type set map[string]struct{}

func newSet(lists ...[]string) set {
	s := set{}
	for _, l := range lists {
		for _, v := range l {
			s[v] = struct{}{}
		}
	}
	return s
}

// allowed lists, per fmgate family and label, the values a label may take.
func allowed(models []string) map[string]map[string]set {
	route := newSet(routes, []string{LabelOther})
	model := newSet(models, []string{LabelOther, LabelNone})
	tier := newSet([]string{TierPrimary}, fallbackTiers, models, []string{LabelOther})
	kinds := newSet(providerErrorKinds, []string{LabelOther})
	spans := newSet(spanNames, []string{LabelOther})
	quota := map[string]set{"model": model, "kind": newSet([]string{"tpm", "rpm"})}
	return map[string]map[string]set{
		"fmgate_turn_duration_seconds":      {"route": route, "model": model, "tier": tier},
		"fmgate_turn_ttft_seconds":          {"route": route, "model": model, "tier": tier},
		"fmgate_turns_total":                {"route": route, "status": newSet(statuses, []string{LabelOther})},
		"fmgate_errors_total":               {"code": newSet(errorCodes, []string{LabelOther})},
		"fmgate_fallback_total":             {"tier": tier},
		"fmgate_model_attempts_total":       {"model": model, "outcome": newSet([]string{outcomeOK}, providerErrorKinds, answerRejections, []string{LabelOther})},
		"fmgate_tokens_total":               {"model": model, "direction": newSet([]string{directionIn, directionOut})},
		"fmgate_cost_usd_total":             {"model": model, "component": spans},
		"fmgate_spans_total":                {"span": spans},
		"fmgate_ttft_pending":               {},
		"fmgate_ttft_pending_dropped_total": {"reason": newSet([]string{dropEvicted, dropExpired})},
		"fmgate_throttles_total":            {"scope": newSet(throttleScopes, []string{LabelOther})},
		"fmgate_retries_total":              {"model": model, "reason": kinds},
		"fmgate_state_errors_total":         {"reason": newSet([]string{stateError, stateTimeout, stateBusy, statePanic})},
		"fmgate_breaker_state":              {"breaker": model, "state": newSet(breakerStates)},
		"fmgate_quota_saturation_ratio":     quota,
		"fmgate_quota_used_per_minute":      quota,
		"fmgate_quota_ceiling_per_minute":   quota,
		"fmgate_queue_depth":                {"priority": newSet(priorities, []string{LabelOther})},
		"fmgate_events_dropped_total":       {"sink": newSet(sinkNames, []string{LabelOther})},
	}
}

// bound is the most series a family may have: the product of its labels'
// allowed values.
func bound(labels map[string]set) int {
	n := 1
	for _, vs := range labels {
		n *= len(vs)
	}
	return n
}

// TestLabelsBounded feeds spans, observations and state carrying probe
// strings (a user id, an e-mail, a request id, a trace id, unknown models,
// codes, scopes, priorities, sinks) and checks that none of them reaches a
// label value, that every label value is in its allowed set, and that each
// family stays within its series bound.
func TestLabelsBounded(t *testing.T) {
	probes := []string{
		"u-48151623", "alice@example.com", "req-7c1e", "4bf92f3577b34da6a3ce929d0e0e4736",
		"gpt-unknown-9", "E_PROBE", "tier-probe", "scope-probe", "P7", "sink-probe",
		"090-1234-5678", "お問い合わせ",
	}
	m, _ := newTest(t, Options{TTFTPending: 16})
	feedAll(t, m)
	for i, p := range probes {
		trace, turnID := fmt.Sprintf("%032x", i), p
		write(t, m,
			mk("stream", ids(trace, "st", turnID), at(t0.Add(time.Millisecond), 0)),
			mk(p, ids(trace, "x", turnID), model(p), code(p), fb(p), cost(0.001), tokens(1, 1), surface(p)),
			mk("model_attempt", ids(trace, "a", turnID), model(p), code(p), tokens(5, 5), cost(0.01)),
			events.Event{
				TraceID: trace, SpanID: turnID, Name: "turn", UserIDHash: p, SessionID: p, WorkflowID: p,
				TSStart: t0, TSEnd: t0.Add(time.Second), PromptExcerpt: p,
				Node:        events.Node{NodeID: p, GraphVersion: p},
				Artifact:    events.Artifact{ModelID: p, PromptVersion: p, ToolID: p},
				Resource:    events.Resource{CapabilityFlagsActive: []string{p}},
				Outcome:     events.Outcome{Status: events.Status(p), ErrorCode: p, FallbackUsed: p},
				Attribution: events.Attribution{Feature: p, Surface: p, Locale: p, UserTier: p, Priority: p},
			},
		)
		m.Throttle(p)
		m.Throttle("user:" + p)
		m.Retry(p, p)
	}
	m.SetState(func(context.Context) (State, error) {
		var st State
		for _, p := range probes {
			st.Breakers = append(st.Breakers, BreakerState{p, "open"}, BreakerState{"sonnet", p})
			st.Quota = append(st.Quota, QuotaState{Model: p, TPMUsed: 1, TPMCeiling: 2})
			st.Queue = append(st.Queue, QueueDepth{p, 1})
		}
		return st, nil
	})
	m.RegisterDropped(func() map[string]uint64 {
		d := map[string]uint64{"jsonl": 1}
		for _, p := range probes {
			d[p] = 1
		}
		return d
	})

	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	rules := allowed(testModels)
	seen := map[string]bool{}
	for _, f := range fams {
		name := f.GetName()
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				for _, p := range probes {
					if strings.Contains(l.GetValue(), p) {
						t.Errorf("%s{%s=%q} carries probe %q", name, l.GetName(), l.GetValue(), p)
					}
				}
			}
		}
		if !strings.HasPrefix(name, "fmgate_") {
			continue
		}
		seen[name] = true
		labels, ok := rules[name]
		if !ok {
			t.Errorf("family %s has no bound in this test", name)
			continue
		}
		if n, max := len(f.GetMetric()), bound(labels); n > max {
			t.Errorf("%s has %d series, bound %d", name, n, max)
		}
		for _, mt := range f.GetMetric() {
			checkLabels(t, name, mt, labels)
		}
	}
	for name := range rules {
		if !seen[name] {
			t.Errorf("family %s not exported", name)
		}
	}
}

func checkLabels(t *testing.T, family string, mt *dto.Metric, labels map[string]set) {
	t.Helper()
	if len(mt.GetLabel()) != len(labels) {
		t.Errorf("%s: labels %v, want names %v", family, mt.GetLabel(), labels)
		return
	}
	for _, l := range mt.GetLabel() {
		vs, ok := labels[l.GetName()]
		switch {
		case !ok:
			t.Errorf("%s: unexpected label %s", family, l.GetName())
		default:
			if _, ok := vs[l.GetValue()]; !ok {
				t.Errorf("%s{%s=%q} outside its allowed set", family, l.GetName(), l.GetValue())
			}
		}
	}
}
