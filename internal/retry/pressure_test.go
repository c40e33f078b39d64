package retry

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

type newPressureFunc func(t *testing.T, c PressureConfig, clk *fakeClock) Pressure

func TestMemoryPressure(t *testing.T) {
	testPressure(t, func(t *testing.T, c PressureConfig, clk *fakeClock) Pressure {
		return NewMemoryPressure(c, clk.Now)
	})
}

func TestRedisPressure(t *testing.T) {
	testPressure(t, func(t *testing.T, c PressureConfig, clk *fakeClock) Pressure {
		rdb, prefix := redistest.Client(t)
		p := NewRedisPressure(rdb, prefix, "", c, clk.Now)
		p.clock = clk.Now
		return p
	})
}

// pstep moves the clock, records outcomes for a model, then checks its level.
type pstep struct {
	advance               time.Duration
	model                 string // "" means sonnet
	fails, throttles, oks int
	want                  Level
}

// testPressure is the conformance suite every Pressure passes.
func testPressure(t *testing.T, newPressure newPressureFunc) {
	tests := []struct {
		name  string
		steps []pstep
	}{
		{"one error is slight pressure, three successes clear it", []pstep{
			{fails: 1, want: LevelSlight},
			{oks: 2, want: LevelSlight},
			{oks: 1, want: LevelNormal},
		}},
		{"sporadic errors under 5% stay normal", []pstep{
			{oks: 100, want: LevelNormal},
			{fails: 1, want: LevelNormal},  // 1/101
			{fails: 4, want: LevelNormal},  // 5/105
			{fails: 1, want: LevelSlight},  // 6/106
			{fails: 19, want: LevelSlight}, // 25/125 is not above 20%
			{fails: 1, want: LevelHigh},    // 26/126
		}},
		{"outage opens the circuit, cooldown, recovery", []pstep{
			{fails: 1, want: LevelSlight},
			{fails: 1, want: LevelHigh},
			{fails: 7, want: LevelHigh}, // 9 samples: under minSamples
			{fails: 1, want: LevelCircuitOpen},
			{advance: 29 * time.Second, want: LevelCircuitOpen},
			{advance: time.Second, want: LevelRecovery},
			{oks: 1, want: LevelRecovery},
			{oks: 1, want: LevelNormal},
		}},
		{"a failed probe reopens the circuit", []pstep{
			{fails: 10, want: LevelCircuitOpen},
			{advance: 30 * time.Second, want: LevelRecovery},
			{fails: 1, want: LevelCircuitOpen},
			{advance: 29 * time.Second, want: LevelCircuitOpen},
			{advance: time.Second, want: LevelRecovery},
		}},
		{"outcomes while open do not close it early", []pstep{
			{fails: 10, want: LevelCircuitOpen},
			{oks: 5, want: LevelCircuitOpen},
		}},
		{"high falls back to slight when the rate drops below 20%", []pstep{
			{fails: 2, want: LevelHigh},
			{oks: 8, want: LevelHigh},   // 2/10 is not below 20%
			{oks: 1, want: LevelSlight}, // 2/11
			{oks: 1, want: LevelNormal},
		}},
		{"errors slide out of the 60 s window", []pstep{
			{fails: 2, want: LevelHigh},
			{advance: 61 * time.Second, oks: 1, want: LevelSlight},
			{oks: 2, want: LevelNormal},
		}},
		{"throttles raise the pressure but never open the circuit", []pstep{
			{throttles: 1, want: LevelSlight},
			{throttles: 1, want: LevelHigh},
			{throttles: 40, oks: 10, want: LevelHigh}, // 42/52 throttled
			{fails: 10, want: LevelHigh},              // 10/62 failed
			{fails: 42, want: LevelHigh},              // 52/104 failed is not above 50%
			{fails: 1, want: LevelCircuitOpen},        // 53/105 failed
		}},
		{"a throttled probe does not reopen the circuit", []pstep{
			{fails: 10, want: LevelCircuitOpen},
			{advance: 30 * time.Second, want: LevelRecovery},
			{throttles: 1, want: LevelRecovery},
			{oks: 2, want: LevelNormal},
		}},
		{"models are independent", []pstep{
			{fails: 10, want: LevelCircuitOpen},
			{model: "haiku", want: LevelNormal},
			{model: "haiku", fails: 1, want: LevelSlight},
			{want: LevelCircuitOpen},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newFakeClock()
			p := newPressure(t, DefaultConfig().Pressure, clk)
			for i, s := range tt.steps {
				model := s.model
				if model == "" {
					model = "sonnet"
				}
				clk.Advance(s.advance)
				for range s.fails {
					p.Record(ctx, model, OutcomeFailed)
				}
				for range s.throttles {
					p.Record(ctx, model, OutcomeThrottled)
				}
				for range s.oks {
					p.Record(ctx, model, OutcomeOK)
				}
				if got := p.Level(ctx, model); got != s.want {
					t.Fatalf("step %d (%+v): level %s, want %s", i, s, got, s.want)
				}
			}
		})
	}
	t.Run("a tier's deployments are keyed apart from it and from each other", func(t *testing.T) {
		ctx := context.Background()
		clk := newFakeClock()
		p := newPressure(t, DefaultConfig().Pressure, clk)
		keys := []string{"sonnet", "sonnet@east", "sonnet@west", "haiku@east"}
		if got := p.Levels(ctx, keys); !slices.Equal(got, []Level{LevelNormal, LevelNormal, LevelNormal, LevelNormal}) {
			t.Fatalf("nothing recorded: levels %v", got)
		}
		// East throttles every call while west answers every one: east's
		// level rises, and neither west's nor the tier's moves.
		for range 5 {
			p.Record(ctx, "sonnet@east", OutcomeThrottled)
			p.Record(ctx, "sonnet@west", OutcomeOK)
			p.Record(ctx, "sonnet", OutcomeOK)
		}
		want := []Level{LevelNormal, LevelHigh, LevelNormal, LevelNormal}
		if got := p.Levels(ctx, keys); !slices.Equal(got, want) {
			t.Fatalf("east throttled: levels %v of %v, want %v", got, keys, want)
		}
		for i, k := range keys {
			if got := p.Level(ctx, k); got != want[i] {
				t.Fatalf("Level(%s) = %s; Levels said %s", k, got, want[i])
			}
		}
		// A deployment's failures open its own circuit only.
		for range 10 {
			p.Record(ctx, "sonnet@west", OutcomeFailed)
		}
		want = []Level{LevelNormal, LevelHigh, LevelCircuitOpen, LevelNormal}
		if got := p.Levels(ctx, keys); !slices.Equal(got, want) {
			t.Fatalf("west failing: levels %v of %v, want %v", got, keys, want)
		}
		if got := p.Levels(ctx, nil); len(got) != 0 {
			t.Fatalf("Levels of no model: %v", got)
		}
	})
}

func TestRedisPressureFleet(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := redistest.Client(t)
	c := DefaultConfig().Pressure
	clk := newFakeClock()
	instance := func(name string) *RedisPressure {
		p := NewRedisPressure(rdb, prefix, name, c, clk.Now)
		p.clock = clk.Now
		return p
	}
	a, b := instance("a"), instance("b")

	for range 10 {
		a.Record(ctx, "sonnet", OutcomeFailed)
	}
	if got := b.Level(ctx, "sonnet"); got != LevelCircuitOpen {
		t.Fatalf("b sees %s while a has the circuit open", got)
	}
	if got := b.Level(ctx, "haiku"); got != LevelNormal {
		t.Fatalf("another model is %s", got)
	}
	// A deployment's level reaches the fleet under its own name.
	for range 2 {
		a.Record(ctx, "sonnet@east", OutcomeThrottled)
	}
	if got := b.Levels(ctx, []string{"sonnet@east", "sonnet@west", "sonnet"}); !slices.Equal(got, []Level{LevelHigh, LevelNormal, LevelCircuitOpen}) {
		t.Fatalf("b sees %v for east (throttled on a), west and the tier", got)
	}

	clk.Advance(c.Cooldown)
	if got := a.Level(ctx, "sonnet"); got != LevelRecovery {
		t.Fatalf("a after cooldown: %s", got)
	}
	if got := b.Level(ctx, "sonnet"); got != LevelRecovery {
		t.Fatalf("b sees %s while a recovers", got)
	}
	a.Record(ctx, "sonnet", OutcomeOK)
	a.Record(ctx, "sonnet", OutcomeOK)
	if got := b.Level(ctx, "sonnet"); got != LevelNormal {
		t.Fatalf("b sees %s after a recovered", got)
	}

	// The most conservative of local and fleet wins, both ways.
	b.Record(ctx, "sonnet", OutcomeFailed)
	b.Record(ctx, "sonnet", OutcomeFailed)
	if got := b.Level(ctx, "sonnet"); got != LevelHigh {
		t.Fatalf("b local high, fleet normal: %s", got)
	}
	if got := a.Level(ctx, "sonnet"); got != LevelHigh {
		t.Fatalf("a does not see b's high pressure: %s", got)
	}

	// A silent instance's level expires after ShareTTL.
	clk.Advance(c.ShareTTL + time.Second)
	if got := a.Level(ctx, "sonnet"); got != LevelNormal {
		t.Fatalf("b's level outlived its TTL: a sees %s", got)
	}
}

func TestRedisPressureFallsBackToLocal(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	clk := newFakeClock()
	p := NewRedisPressure(rdb, "fmgate-test-down:", "a", DefaultConfig().Pressure, clk.Now)
	ctx := context.Background()
	for range 2 {
		p.Record(ctx, "sonnet", OutcomeFailed)
	}
	if got := p.Level(ctx, "sonnet"); got != LevelHigh {
		t.Errorf("with Redis down level is %s, want the local HIGH", got)
	}
}

func TestLevelString(t *testing.T) {
	for l, want := range map[Level]string{LevelNormal: "NORMAL", LevelSlight: "SLIGHT", LevelHigh: "HIGH",
		LevelCircuitOpen: "CIRCUIT_OPEN", LevelRecovery: "RECOVERY", Level(9): "UNKNOWN"} {
		if got := l.String(); got != want {
			t.Errorf("Level(%d) = %q, want %q", int(l), got, want)
		}
	}
}
