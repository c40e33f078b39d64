package server

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestALateTierGivenTheTurnsLeftoverTimeIsNotBlamed: Sonnet is slow to its
// first token and times out on its own attempt deadline (a verdict on
// Sonnet); Haiku is then given only what is left of the turn's first-byte
// budget, less than an attempt's deadline, and is late too. That says the
// turn ran out of time, not that Haiku is unhealthy: Haiku's breaker and
// pressure must not count it, or a slow primary would open its fallback's
// breaker too.
func TestALateTierGivenTheTurnsLeftoverTimeIsNotBlamed(t *testing.T) {
	cfg := quickConfig()
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt, cfg.Deadline.MinAttempt = time.Second, 700*time.Millisecond, 100*time.Millisecond
	// Haiku answers within an attempt's deadline (700 ms) when it gets one,
	// once Sonnet's breaker is open, but not within what a turn has left
	// after Sonnet's attempt (300 ms).
	for name, ttft := range map[string]int{"sonnet": 1500, "haiku": 500} {
		st := cfg.Sim.Models[name]
		st.TTFTMs = ttft
		cfg.Sim.Models[name] = st
	}
	sc := newScenario(t, cfg)
	ctx := context.Background()
	for i := range 6 {
		if a := sc.chat(fmt.Sprintf("late-%d", i), "Recommend a fantasy manga", "en"); a.Status != 200 || !a.Degraded {
			t.Fatalf("turn %d: %+v; want a degraded answer", i, a)
		}
	}
	son, _ := sc.s.Breakers.Get("sonnet").Snapshot(ctx)
	hai, _ := sc.s.Breakers.Get("haiku").Snapshot(ctx)
	t.Logf("sonnet breaker %s (%d failures of %d), haiku breaker %s (%d failures of %d); haiku calls %d",
		son.State, son.Failures, son.Calls, hai.State, hai.Failures, hai.Calls, sc.upstream["haiku"].calls.Load())
	if sc.upstream["haiku"].calls.Load() == 0 {
		t.Fatal("haiku was never called: the test proves nothing")
	}
	if son.Failures == 0 && son.State.String() == "closed" {
		t.Errorf("sonnet's own late first tokens were not counted: %+v", son)
	}
	if hai.Failures != 0 || hai.State.String() != "closed" {
		t.Errorf("haiku's breaker counted calls given only the turn's leftover time: %+v", hai)
	}
	if lvl := sc.s.Retrier.Pressure.Level(ctx, "haiku"); lvl.String() != "NORMAL" {
		t.Errorf("haiku's pressure is %s after calls given only the turn's leftover time, want NORMAL", lvl)
	}
}
