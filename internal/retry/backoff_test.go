package retry

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffJitterBoundsAndSpread(t *testing.T) {
	const draws = 10_000
	base, cap := 100*time.Millisecond, 10*time.Second
	tests := []struct {
		name     string
		strategy Strategy
		n        int
		prev     time.Duration
		lo, hi   time.Duration
		wantMean time.Duration // 0: all draws equal hi
	}{
		{name: "none", strategy: StrategyNone, n: 3, lo: 800 * time.Millisecond, hi: 800 * time.Millisecond},
		{name: "full", strategy: StrategyFull, n: 3, lo: 0, hi: 800 * time.Millisecond, wantMean: 400 * time.Millisecond},
		{name: "equal", strategy: StrategyEqual, n: 3, lo: 400 * time.Millisecond, hi: 800 * time.Millisecond, wantMean: 600 * time.Millisecond},
		{name: "decorrelated first", strategy: StrategyDecorrelated, n: 0, prev: 0, lo: base, hi: 300 * time.Millisecond, wantMean: 200 * time.Millisecond},
		{name: "decorrelated grown", strategy: StrategyDecorrelated, n: 2, prev: time.Second, lo: base, hi: 3 * time.Second, wantMean: 1550 * time.Millisecond},
		{name: "full capped", strategy: StrategyFull, n: 10, lo: 0, hi: cap, wantMean: cap / 2},
		{name: "decorrelated capped", strategy: StrategyDecorrelated, n: 9, prev: 8 * time.Second, lo: base, hi: cap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Backoff{Strategy: tt.strategy, Base: base, Cap: cap}
			r := rand.New(rand.NewPCG(1, 2))
			var sum float64
			distinct := map[time.Duration]bool{}
			for range draws {
				d := b.Delay(r, tt.n, tt.prev)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("delay %v outside [%v, %v]", d, tt.lo, tt.hi)
				}
				sum += float64(d)
				distinct[d] = true
			}
			mean := time.Duration(sum / draws)
			if tt.lo == tt.hi {
				if len(distinct) != 1 {
					t.Fatalf("no-jitter strategy drew %d distinct values", len(distinct))
				}
				return
			}
			if len(distinct) < draws/2 {
				t.Errorf("only %d distinct delays in %d draws: jitter does not spread", len(distinct), draws)
			}
			if tt.wantMean != 0 {
				if diff := (mean - tt.wantMean).Abs(); float64(diff) > 0.05*float64(tt.wantMean) {
					t.Errorf("mean %v, want %v within 5%%", mean, tt.wantMean)
				}
			}
		})
	}
}

func TestBackoffDecorrelatedChainStaysInEnvelope(t *testing.T) {
	b := Backoff{Strategy: StrategyDecorrelated, Base: 100 * time.Millisecond, Cap: 2 * time.Second}
	r := rand.New(rand.NewPCG(3, 4))
	for chain := range 1000 {
		var prev time.Duration
		for n := range 8 {
			d := b.Delay(r, n, prev)
			hi := min(b.Cap, 3*max(prev, b.Base))
			if d < b.Base || d > hi {
				t.Fatalf("chain %d retry %d: %v outside [%v, %v]", chain, n, d, b.Base, hi)
			}
			prev = d
		}
	}
}

func TestBackoffCeilingAndMultiplier(t *testing.T) {
	tests := []struct {
		name string
		give Backoff
		n    int
		want time.Duration
	}{
		{"first", Backoff{Strategy: StrategyNone, Base: 100 * time.Millisecond, Cap: time.Second}, 0, 100 * time.Millisecond},
		{"doubles", Backoff{Strategy: StrategyNone, Base: 100 * time.Millisecond, Cap: time.Second}, 2, 400 * time.Millisecond},
		{"capped", Backoff{Strategy: StrategyNone, Base: 100 * time.Millisecond, Cap: time.Second}, 4, time.Second},
		{"no overflow", Backoff{Strategy: StrategyNone, Base: 100 * time.Millisecond, Cap: time.Second}, 5000, time.Second},
		{"triples", Backoff{Strategy: StrategyNone, Base: 200 * time.Millisecond, Cap: 10 * time.Second, Multiplier: 3}, 2, 1800 * time.Millisecond},
		{"flat", Backoff{Strategy: StrategyNone, Base: 100 * time.Millisecond, Cap: 10 * time.Second, Multiplier: 1}, 3, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.Delay(nil, tt.n, 0); got != tt.want {
				t.Errorf("Delay(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

func FuzzBackoffDelay(f *testing.F) {
	f.Add(uint8(3), int64(100e6), int64(10e9), 0.0, 3, int64(0), uint64(1))
	f.Add(uint8(1), int64(1), int64(1), 2.5, 60, int64(1e9), uint64(7))
	f.Fuzz(func(t *testing.T, s uint8, base, cap int64, mult float64, n int, prev int64, seed uint64) {
		strategies := []Strategy{StrategyNone, StrategyFull, StrategyEqual, StrategyDecorrelated}
		b := Backoff{Strategy: strategies[int(s)%len(strategies)], Base: time.Duration(base), Cap: time.Duration(cap), Multiplier: mult}
		if base <= 0 || cap < base || n < 0 || n > 1000 || prev < 0 || !(mult == 0 || mult >= 1 && mult < 1e6) {
			return
		}
		d := b.Delay(rand.New(rand.NewPCG(seed, 0)), n, time.Duration(prev))
		if d < 0 || d > b.Cap {
			t.Fatalf("%+v n=%d prev=%d: delay %v outside [0, cap]", b, n, prev, d)
		}
		if b.Strategy == StrategyDecorrelated && d < b.Base {
			t.Fatalf("decorrelated delay %v below base %v", d, b.Base)
		}
	})
}
