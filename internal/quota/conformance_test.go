package quota

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	// A whole second, so window arithmetic in the tests is exact.
	return &fakeClock{t: time.Now().Truncate(time.Second)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// configurer is how a running gateway gives a ledger new ceilings.
type configurer interface{ Configure(Config) error }

// newLedgerFunc builds a ledger under test driven by clk.
type newLedgerFunc func(t *testing.T, cfg Config, clk *fakeClock) Ledger

// testConfig is one model "m" whose margined ceiling is 1,000 TPM / 100 RPM.
func testConfig() Config {
	c := DefaultConfig()
	c.SafetyMargin = 1
	c.Models = map[string]Ceiling{"m": {TPM: 1000, RPM: 100}}
	return c
}

func runConformance(t *testing.T, newLedger newLedgerFunc) {
	ctx := context.Background()

	t.Run("lower classes pause first as saturation rises", func(t *testing.T) {
		l := newLedger(t, testConfig(), newFakeClock())
		steps := []struct {
			name   string
			give   Priority
			tokens int
			want   bool
		}{
			{"P0 fills to 60%", P0, 600, true},
			{"P3 up to its 70% mark", P3, 100, true},
			{"P3 past 70% paused", P3, 10, false},
			{"P2 up to 80%", P2, 100, true},
			{"P2 past 80% paused", P2, 10, false},
			{"P3 still paused", P3, 1, false},
			{"P1 up to 90%", P1, 100, true},
			{"P1 past 90% paused", P1, 10, false},
			{"P0 still granted to 100%", P0, 100, true},
			{"P0 refused past the ceiling", P0, 1, false},
		}
		for _, st := range steps {
			_, err := l.Reserve(ctx, "m", st.give, st.tokens)
			if got := err == nil; got != st.want {
				t.Fatalf("%s: granted=%v, want %v (err %v)", st.name, got, st.want, err)
			}
			if err != nil {
				var se *SaturatedError
				if !errors.As(err, &se) || !errors.Is(err, ErrSaturated) {
					t.Fatalf("%s: err = %v, want *SaturatedError", st.name, err)
				}
				if se.Priority != st.give || se.Model != "m" || se.RetryAfter <= 0 {
					t.Fatalf("%s: bad error %+v", st.name, se)
				}
			}
		}
		s, err := l.Saturation(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		if s.TokensUsed != 1000 || s.RequestsUsed != 5 || s.Saturation != 1 {
			t.Fatalf("snapshot = %+v, want 1000 tokens, 5 requests, saturation 1", s)
		}
	})

	t.Run("settle refunds and charges the difference", func(t *testing.T) {
		tests := []struct {
			name     string
			reserve  int
			actual   int
			wantUsed int
		}{
			{"refund", 800, 150, 150},
			{"charge", 100, 300, 300},
			{"cut stream settles partial usage", 900, 42, 42},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				l := newLedger(t, testConfig(), newFakeClock())
				r, err := l.Reserve(ctx, "m", P1, tt.reserve)
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Settle(ctx, tt.actual); err != nil {
					t.Fatal(err)
				}
				// Idempotent: neither a second settle nor a release changes anything.
				if err := r.Settle(ctx, 999); err != nil {
					t.Fatal(err)
				}
				if err := r.Release(ctx); err != nil {
					t.Fatal(err)
				}
				s, _ := l.Saturation(ctx, "m")
				if s.TokensUsed != tt.wantUsed || s.RequestsUsed != 1 {
					t.Fatalf("used %d tokens / %d requests, want %d / 1", s.TokensUsed, s.RequestsUsed, tt.wantUsed)
				}
			})
		}
	})

	t.Run("release returns everything", func(t *testing.T) {
		l := newLedger(t, testConfig(), newFakeClock())
		r, err := l.Reserve(ctx, "m", P0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(ctx, "m", P0, 1); !errors.Is(err, ErrSaturated) {
			t.Fatalf("full ledger granted: %v", err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		_ = r.Release(ctx)
		_ = r.Settle(ctx, 500)
		s, _ := l.Saturation(ctx, "m")
		if s.TokensUsed != 0 || s.RequestsUsed != 0 {
			t.Fatalf("after release: %+v", s)
		}
		if _, err := l.Reserve(ctx, "m", P0, 1000); err != nil {
			t.Fatalf("capacity not returned: %v", err)
		}
	})

	t.Run("set ceiling applies to the next reservation", func(t *testing.T) {
		l := newLedger(t, testConfig(), newFakeClock())
		if _, err := l.Reserve(ctx, "m", P0, 400); err != nil {
			t.Fatal(err)
		}
		if err := l.SetCeiling(ctx, "m", Ceiling{TPM: 500, RPM: 100}); err != nil {
			t.Fatal(err)
		}
		_, err := l.Reserve(ctx, "m", P0, 200)
		var se *SaturatedError
		if !errors.As(err, &se) || se.Saturation != 0.8 {
			t.Fatalf("after the cut: err = %v, want saturated at 0.8", err)
		}
		cs, err := l.Ceilings(ctx)
		if err != nil || cs["m"] != (Ceiling{TPM: 500, RPM: 100}) {
			t.Fatalf("Ceilings = %v, %v", cs, err)
		}
		if err := l.SetCeiling(ctx, "m", Ceiling{}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(ctx, "m", P0, 200); err != nil {
			t.Fatalf("after restoring: %v", err)
		}
		if err := l.SetCeiling(ctx, "m", Ceiling{TPM: 10}); err == nil {
			t.Fatal("half a ceiling accepted")
		}
	})

	t.Run("configure applies new ceilings over the window", func(t *testing.T) {
		l := newLedger(t, testConfig(), newFakeClock())
		if _, err := l.Reserve(ctx, "m", P0, 400); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.Models["m"] = Ceiling{TPM: 500, RPM: 100}
		if err := l.(configurer).Configure(cfg); err != nil {
			t.Fatal(err)
		}
		_, err := l.Reserve(ctx, "m", P0, 200)
		var se *SaturatedError
		if !errors.As(err, &se) || se.Saturation != 0.8 {
			t.Fatalf("400 held under a new 500 TPM: err = %v, want saturated at 0.8", err)
		}
		// A ceiling set at run time still stands over the configured one.
		if err := l.SetCeiling(ctx, "m", Ceiling{TPM: 2000, RPM: 100}); err != nil {
			t.Fatal(err)
		}
		cfg.Models["m"] = Ceiling{TPM: 450, RPM: 100}
		if err := l.(configurer).Configure(cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(ctx, "m", P0, 200); err != nil {
			t.Fatalf("under the run-time ceiling of 2,000: %v", err)
		}
		cfg.SafetyMargin = 2
		if err := l.(configurer).Configure(cfg); err == nil {
			t.Fatal("a safety margin of 2 accepted")
		}
	})

	t.Run("the window rolls off after a minute", func(t *testing.T) {
		clk := newFakeClock()
		l := newLedger(t, testConfig(), clk)
		r, err := l.Reserve(ctx, "m", P0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(10 * time.Second)
		if err := r.Settle(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		_, err = l.Reserve(ctx, "m", P0, 100)
		var se *SaturatedError
		if !errors.As(err, &se) || se.RetryAfter != 50*time.Second {
			t.Fatalf("err = %v, want saturated with RetryAfter 50s", err)
		}
		clk.Advance(49 * time.Second)
		if _, err := l.Reserve(ctx, "m", P0, 100); !errors.Is(err, ErrSaturated) {
			t.Fatalf("granted before the minute passed: %v", err)
		}
		clk.Advance(time.Second)
		if _, err := l.Reserve(ctx, "m", P0, 100); err != nil {
			t.Fatalf("not granted after the minute: %v", err)
		}
		s, _ := l.Saturation(ctx, "m")
		if s.TokensUsed != 100 || s.RequestsUsed != 1 {
			t.Fatalf("after roll-off: %+v", s)
		}
	})

	t.Run("each second leaves the window on its own", func(t *testing.T) {
		clk := newFakeClock()
		l := newLedger(t, testConfig(), clk)
		settle := func(tokens int) {
			t.Helper()
			r, err := l.Reserve(ctx, "m", P1, tokens)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Settle(ctx, tokens); err != nil {
				t.Fatal(err)
			}
		}
		used := func(when string, tokens, requests int) {
			t.Helper()
			s, err := l.Saturation(ctx, "m")
			if err != nil {
				t.Fatal(err)
			}
			if s.TokensUsed != tokens || s.RequestsUsed != requests {
				t.Fatalf("%s: used %d tokens in %d requests, want %d in %d", when, s.TokensUsed, s.RequestsUsed, tokens, requests)
			}
		}
		settle(100) // second 0
		clk.Advance(20 * time.Second)
		settle(200) // second 20
		settle(50)
		clk.Advance(20 * time.Second)
		settle(300) // second 40
		used("at 40s", 650, 4)
		clk.Advance(20 * time.Second) // 60: second 0 is out
		used("at 60s", 550, 3)
		clk.Advance(19 * time.Second) // 79: second 20 is still in
		used("at 79s", 550, 3)
		clk.Advance(time.Second) // 80
		used("at 80s", 300, 1)
		// A refusal says when the oldest second that makes room leaves.
		settle(500) // second 80
		_, err := l.Reserve(ctx, "m", P1, 300)
		var se *SaturatedError
		if !errors.As(err, &se) || se.RetryAfter != 20*time.Second {
			t.Fatalf("err = %v, want saturated with RetryAfter 20s (second 40 leaving)", err)
		}
		// Idle for longer than a window: nothing is left, and the window
		// fills again from empty.
		clk.Advance(5 * time.Minute)
		used("after 5 idle minutes", 0, 0)
		settle(700)
		used("after a new call", 700, 1)
	})

	t.Run("unsettled reservations expire after max hold", func(t *testing.T) {
		clk := newFakeClock()
		l := newLedger(t, testConfig(), clk)
		if _, err := l.Reserve(ctx, "m", P0, 1000); err != nil {
			t.Fatal(err)
		}
		// Past the window the hold still counts: the call may still be running.
		clk.Advance(90 * time.Second)
		_, err := l.Reserve(ctx, "m", P0, 10)
		var se *SaturatedError
		if !errors.As(err, &se) || se.RetryAfter != 30*time.Second {
			t.Fatalf("err = %v, want saturated until the 2m hold expires", err)
		}
		clk.Advance(30 * time.Second)
		if _, err := l.Reserve(ctx, "m", P0, 1000); err != nil {
			t.Fatalf("hold did not expire: %v", err)
		}
	})

	t.Run("concurrency cap counts the calls in flight", func(t *testing.T) {
		clk := newFakeClock()
		cfg := testConfig()
		cfg.Models = map[string]Ceiling{"m": {TPM: 1000, RPM: 100, Concurrent: 2}}
		l := newLedger(t, cfg, clk)
		a, err := l.Reserve(ctx, "m", P0, 10)
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Reserve(ctx, "m", P1, 10)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Reserve(ctx, "m", P0, 10)
		var se *SaturatedError
		if !errors.As(err, &se) || !se.Concurrent || se.RetryAfter <= 0 || se.RetryAfter > ConcurrencyRetry {
			t.Fatalf("third call in flight: err = %v, want refused by the concurrency cap with a hint of at most %s", err, ConcurrencyRetry)
		}
		if err := a.Settle(ctx, 10); err != nil {
			t.Fatal(err)
		}
		c, err := l.Reserve(ctx, "m", P0, 10)
		if err != nil {
			t.Fatalf("a call ended, yet the next is refused: %v", err)
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(ctx, "m", P2, 10); err != nil {
			t.Fatalf("a call released, yet the next is refused: %v", err)
		}
		_ = c
		// A crashed caller's hold ends at max hold, and with it its place.
		clk.Advance(2*time.Minute + time.Second)
		if _, err := l.Reserve(ctx, "m", P0, 10); err != nil {
			t.Fatalf("holds past max hold still count as in flight: %v", err)
		}
	})

	t.Run("requests per minute", func(t *testing.T) {
		cfg := testConfig()
		cfg.Models["m"] = Ceiling{TPM: 1_000_000, RPM: 5}
		l := newLedger(t, cfg, newFakeClock())
		for i := range 5 {
			if _, err := l.Reserve(ctx, "m", P0, 1); err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
		}
		if _, err := l.Reserve(ctx, "m", P0, 1); !errors.Is(err, ErrSaturated) {
			t.Fatalf("6th request in a minute granted: %v", err)
		}
	})

	t.Run("oversized reservation only on an empty window", func(t *testing.T) {
		l := newLedger(t, testConfig(), newFakeClock())
		r, err := l.Reserve(ctx, "m", P0, 5000)
		if err != nil {
			t.Fatalf("oversized request starved on an empty window: %v", err)
		}
		if _, err := l.Reserve(ctx, "m", P0, 1); !errors.Is(err, ErrSaturated) {
			t.Fatalf("granted after oversize: %v", err)
		}
		_ = r.Release(ctx)
	})

	t.Run("guaranteed share", func(t *testing.T) {
		cfg := testConfig()
		cfg.Guaranteed = map[Priority]float64{P3: 0.1}
		l := newLedger(t, cfg, newFakeClock())
		if _, err := l.Reserve(ctx, "m", P0, 900); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(ctx, "m", P0, 1); !errors.Is(err, ErrSaturated) {
			t.Fatalf("P0 took the share guaranteed to P3: %v", err)
		}
		if _, err := l.Reserve(ctx, "m", P3, 99); err != nil {
			t.Fatalf("P3 refused its guaranteed share at 90%%: %v", err)
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		l := newLedger(t, testConfig(), newFakeClock())
		if _, err := l.Reserve(ctx, "nope", P0, 1); !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("err = %v", err)
		}
		if _, err := l.Saturation(ctx, "nope"); !errors.Is(err, ErrUnknownModel) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("ceiling holds under 200 concurrent reservers", func(t *testing.T) {
		cfg := DefaultConfig() // margin 0.85
		cfg.Models = map[string]Ceiling{"m": {TPM: 5000, RPM: 1000}}
		l := newLedger(t, cfg, newFakeClock())
		const each = 37
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				if _, err := l.Reserve(ctx, "m", P0, each); err == nil {
					granted.Add(each)
				} else if !errors.Is(err, ErrSaturated) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		limit := int64(5000 * 0.85)
		if g := granted.Load(); g > limit || g < limit-each {
			t.Fatalf("granted %d tokens, want within one reservation below %d", g, limit)
		}
		s, _ := l.Saturation(ctx, "m")
		if int64(s.TokensUsed) != granted.Load() {
			t.Fatalf("ledger says %d used, callers got %d", s.TokensUsed, granted.Load())
		}
	})
}

func TestMemoryConformance(t *testing.T) {
	runConformance(t, func(t *testing.T, cfg Config, clk *fakeClock) Ledger {
		l, err := NewMemory(cfg, clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
