package metrics

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestStateGauges(t *testing.T) {
	tests := []struct {
		name   string
		give   State
		want   []want
		absent []string // families with no series at all
	}{
		{
			name: "breakers one-hot",
			give: State{Breakers: []BreakerState{{"sonnet", "open"}, {"haiku", "half_open"}, {"claude-sonnet-4-6", "closed"}}},
			want: []want{
				{"fmgate_breaker_state", []string{"breaker", "sonnet", "state", "open"}, 1},
				{"fmgate_breaker_state", []string{"breaker", "sonnet", "state", "closed"}, 0},
				{"fmgate_breaker_state", []string{"breaker", "sonnet", "state", "half_open"}, 0},
				{"fmgate_breaker_state", []string{"breaker", "haiku", "state", "half_open"}, 1},
				{"fmgate_breaker_state", []string{"breaker", "haiku", "state", "open"}, 0},
				{"fmgate_breaker_state", []string{"breaker", "claude-sonnet-4-6", "state", "closed"}, 1},
			},
			absent: []string{"fmgate_queue_depth", "fmgate_quota_saturation_ratio"},
		},
		{
			name: "unknown breakers share other with the worst state; unknown states are all zero",
			give: State{Breakers: []BreakerState{{"redis", "closed"}, {"nats", "open"}, {"haiku", "broken"}}},
			want: []want{
				{"fmgate_breaker_state", []string{"breaker", "other", "state", "open"}, 1},
				{"fmgate_breaker_state", []string{"breaker", "other", "state", "closed"}, 0},
				{"fmgate_breaker_state", []string{"breaker", "haiku", "state", "closed"}, 0},
				{"fmgate_breaker_state", []string{"breaker", "haiku", "state", "half_open"}, 0},
				{"fmgate_breaker_state", []string{"breaker", "haiku", "state", "open"}, 0},
			},
		},
		{
			name: "quota used, ceiling and saturation",
			give: State{Quota: []QuotaState{
				{Model: "sonnet", TPMUsed: 85000, TPMCeiling: 100000, RPMUsed: 30, RPMCeiling: 120},
				{Model: "haiku", TPMUsed: 500, TPMCeiling: 0, RPMUsed: 2, RPMCeiling: 0},
			}},
			want: []want{
				{"fmgate_quota_saturation_ratio", []string{"model", "sonnet", "kind", "tpm"}, 0.85},
				{"fmgate_quota_saturation_ratio", []string{"model", "sonnet", "kind", "rpm"}, 0.25},
				{"fmgate_quota_used_per_minute", []string{"model", "sonnet", "kind", "tpm"}, 85000},
				{"fmgate_quota_ceiling_per_minute", []string{"model", "sonnet", "kind", "tpm"}, 100000},
				{"fmgate_quota_used_per_minute", []string{"model", "sonnet", "kind", "rpm"}, 30},
				{"fmgate_quota_ceiling_per_minute", []string{"model", "sonnet", "kind", "rpm"}, 120},
				// No ceiling, no ratio.
				{"fmgate_quota_saturation_ratio", []string{"model", "haiku", "kind", "tpm"}, -1},
				{"fmgate_quota_used_per_minute", []string{"model", "haiku", "kind", "tpm"}, 500},
			},
		},
		{
			name: "unknown models' quota is summed under other",
			give: State{Quota: []QuotaState{
				{Model: "a", TPMUsed: 10, TPMCeiling: 100, RPMUsed: 1, RPMCeiling: 10},
				{Model: "b", TPMUsed: 30, TPMCeiling: 100, RPMUsed: 1, RPMCeiling: 10},
			}},
			want: []want{
				{"fmgate_quota_saturation_ratio", []string{"model", "other", "kind", "tpm"}, 0.2},
				{"fmgate_quota_used_per_minute", []string{"model", "other", "kind", "tpm"}, 40},
				{"fmgate_quota_ceiling_per_minute", []string{"model", "other", "kind", "rpm"}, 20},
			},
		},
		{
			name: "queue depth by priority",
			give: State{Queue: []QueueDepth{{"P0", 0}, {"P1", 3}, {"P3", 40}, {"P9", 2}, {"bulk", 1}}},
			want: []want{
				{"fmgate_queue_depth", []string{"priority", "P0"}, 0},
				{"fmgate_queue_depth", []string{"priority", "P1"}, 3},
				{"fmgate_queue_depth", []string{"priority", "P2"}, -1},
				{"fmgate_queue_depth", []string{"priority", "P3"}, 40},
				{"fmgate_queue_depth", []string{"priority", "other"}, 3},
			},
		},
		{
			name: "deployment pressure one-hot, any case; a deployment twice shows the worse level",
			give: State{Deployments: []DeploymentPressure{
				{"sonnet", "east", "HIGH"}, {"sonnet", "west", "normal"}, {"sonnet", "west", "SLIGHT"}, {"haiku", "a", "broken"},
			}},
			want: []want{
				{"fmgate_deployment_pressure", []string{"tier", "sonnet", "deployment", "east", "level", "high"}, 1},
				{"fmgate_deployment_pressure", []string{"tier", "sonnet", "deployment", "east", "level", "normal"}, 0},
				{"fmgate_deployment_pressure", []string{"tier", "sonnet", "deployment", "east", "level", "circuit_open"}, 0},
				{"fmgate_deployment_pressure", []string{"tier", "sonnet", "deployment", "west", "level", "slight"}, 1},
				{"fmgate_deployment_pressure", []string{"tier", "sonnet", "deployment", "west", "level", "normal"}, 0},
				{"fmgate_deployment_pressure", []string{"tier", "haiku", "deployment", "a", "level", "normal"}, 0},
				{"fmgate_deployment_pressure", []string{"tier", "haiku", "deployment", "a", "level", "recovery"}, 0},
			},
		},
		{
			name:   "empty state exports nothing",
			give:   State{},
			absent: []string{"fmgate_breaker_state", "fmgate_queue_depth", "fmgate_quota_used_per_minute", "fmgate_deployment_pressure"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{})
			var gotCtx context.Context
			m.SetState(func(ctx context.Context) (State, error) {
				gotCtx = ctx
				return tt.give, nil
			})
			fams := gather(t, m)
			check(t, fams, tt.want)
			for _, name := range tt.absent {
				if f := fams[name]; f != nil {
					t.Errorf("%s has %d series, want none", name, len(f.GetMetric()))
				}
			}
			if _, ok := gotCtx.Deadline(); !ok {
				t.Errorf("state callback got a context without deadline")
			}
			check(t, fams, []want{
				{"fmgate_state_errors_total", []string{"reason", "error"}, 0},
				{"fmgate_state_errors_total", []string{"reason", "timeout"}, 0},
			})
		})
	}
}

func TestStateErrors(t *testing.T) {
	good := State{Queue: []QueueDepth{{"P1", 7}}, Breakers: []BreakerState{{"sonnet", "closed"}}}
	tests := []struct {
		name    string
		timeout time.Duration
		fn      StateFunc
		reason  string
	}{
		{"error", time.Minute, func(context.Context) (State, error) { return good, errors.New("redis: i/o timeout") }, "error"},
		{"panic", time.Minute, func(context.Context) (State, error) { panic("nil map") }, "panic"},
		{"deadline honoured", 5 * time.Millisecond, func(ctx context.Context) (State, error) {
			<-ctx.Done()
			return good, fmt.Errorf("queue stats: %w", ctx.Err())
		}, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{StateTimeout: tt.timeout})
			m.SetState(tt.fn)
			for i := 1; i <= 2; i++ {
				fams := gather(t, m)
				waitIdle(m)
				// Nothing from the failed read: no stale or partial gauges.
				for _, name := range []string{"fmgate_queue_depth", "fmgate_breaker_state"} {
					if fams[name] != nil {
						t.Errorf("%s exported after a failed read", name)
					}
				}
				// The scrape that failed already counts its failure.
				check(t, fams, []want{{"fmgate_state_errors_total", []string{"reason", tt.reason}, float64(i)}})
			}

			// A working callback brings the gauges back at the next scrape
			// (given ample time: the scheduler, not the callback, is slow
			// under the race detector).
			m.stateCollect.timeout = time.Minute
			m.SetState(func(context.Context) (State, error) { return good, nil })
			check(t, gather(t, m), []want{
				{"fmgate_queue_depth", []string{"priority", "P1"}, 7},
				{"fmgate_breaker_state", []string{"breaker", "sonnet", "state", "closed"}, 1},
				{"fmgate_state_errors_total", []string{"reason", tt.reason}, 2},
			})
		})
	}
}

// TestStateSlowCallback: a callback that ignores its context times out the
// scrape, and while it still runs later scrapes report busy instead of
// starting another call.
func TestStateSlowCallback(t *testing.T) {
	m, _ := newTest(t, Options{StateTimeout: 5 * time.Millisecond})
	release := make(chan struct{})
	returned := make(chan struct{})
	calls := 0
	m.SetState(func(context.Context) (State, error) {
		calls++
		if calls == 1 {
			<-release
			defer close(returned)
		}
		return State{Queue: []QueueDepth{{"P0", 1}}}, nil
	})
	fams := gather(t, m) // times out
	if fams["fmgate_queue_depth"] != nil {
		t.Fatal("gauges exported from a timed-out read")
	}
	check(t, fams, []want{{"fmgate_state_errors_total", []string{"reason", "timeout"}, 1}})
	fams = gather(t, m) // still running: busy
	if fams["fmgate_queue_depth"] != nil {
		t.Fatal("gauges exported while busy")
	}
	check(t, fams, []want{{"fmgate_state_errors_total", []string{"reason", "busy"}, 1}})
	close(release)
	<-returned
	waitIdle(m)
	m.stateCollect.timeout = time.Minute
	fams = gather(t, m)
	check(t, fams, []want{
		{"fmgate_queue_depth", []string{"priority", "P0"}, 1},
		{"fmgate_state_errors_total", []string{"reason", "timeout"}, 1},
		{"fmgate_state_errors_total", []string{"reason", "busy"}, 1},
	})
	if calls != 2 {
		t.Fatalf("callback ran %d times, want 2 (no call while busy)", calls)
	}
}

func TestSetStateNil(t *testing.T) {
	m, _ := newTest(t, Options{})
	m.SetState(func(context.Context) (State, error) {
		return State{Queue: []QueueDepth{{"P0", 1}}}, nil
	})
	if fams := gather(t, m); fams["fmgate_queue_depth"] == nil {
		t.Fatal("queue depth missing")
	}
	m.SetState(nil)
	if fams := gather(t, m); fams["fmgate_queue_depth"] != nil {
		t.Fatal("queue depth exported after SetState(nil)")
	}
}

func TestRegisterDropped(t *testing.T) {
	tests := []struct {
		name string
		give map[string]uint64
		want []want
	}{
		{
			name: "known sinks",
			give: map[string]uint64{"jsonl": 0, "nats": 12, "eventstore": 3},
			want: []want{
				{"fmgate_events_dropped_total", []string{"sink", "jsonl"}, 0},
				{"fmgate_events_dropped_total", []string{"sink", "nats"}, 12},
				{"fmgate_events_dropped_total", []string{"sink", "eventstore"}, 3},
				{"fmgate_events_dropped_total", []string{"sink", "otlp"}, -1},
			},
		},
		{
			name: "unknown names are summed under other",
			give: map[string]uint64{"kafka": 1, "user@example.com": 2, "": 4, "other": 8, "live": 16},
			want: []want{
				{"fmgate_events_dropped_total", []string{"sink", "other"}, 15},
				{"fmgate_events_dropped_total", []string{"sink", "live"}, 16},
				{"fmgate_events_dropped_total", []string{"sink", "kafka"}, -1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{})
			m.RegisterDropped(func() map[string]uint64 { return tt.give })
			fams := gather(t, m)
			check(t, fams, tt.want)
			if got := fams["fmgate_events_dropped_total"].GetType().String(); got != "COUNTER" {
				t.Errorf("type %s, want COUNTER", got)
			}
			m.RegisterDropped(nil)
			if fams := gather(t, m); fams["fmgate_events_dropped_total"] != nil {
				t.Errorf("drops exported after RegisterDropped(nil)")
			}
		})
	}
}

// waitIdle waits, without sleeping on the clock, until a state callback
// left running by a timed-out scrape has returned and freed its slot (a
// callback that honours its deadline returns just after the scrape gives
// up on it).
func waitIdle(m *Metrics) {
	for m.stateCollect.busy.Load() {
		runtime.Gosched()
	}
}
