package cache

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

// harness is one store under test plus the clock it obeys.
type harness struct {
	c       Cache
	now     func() time.Time
	advance func(time.Duration)
}

// conformanceConfig is short enough for the Redis run to wait it out in real
// time, long enough to be far above Redis round trips.
func conformanceConfig() Config {
	cfg := DefaultConfig()
	cfg.TTL = 200 * time.Millisecond
	cfg.StaleFor = 200 * time.Millisecond
	cfg.Timeout = time.Second
	return cfg
}

func testConformance(t *testing.T, newHarness func(t *testing.T, cfg Config) harness) {
	ctx := context.Background()
	// Redis measures age on its own clock and converts, so allow for the
	// round trip.
	const slack = 50 * time.Millisecond

	t.Run("missing key is a miss", func(t *testing.T) {
		h := newHarness(t, conformanceConfig())
		if _, ok, err := h.c.Get(ctx, "absent"); ok || err != nil {
			t.Fatalf("Get(absent) = ok %v, err %v; want miss", ok, err)
		}
	})

	t.Run("set then get returns the text and when it was stored", func(t *testing.T) {
		tests := []struct{ name, text string }{
			{"ascii", "Standard shipping takes 3-5 business days."},
			{"japanese", "国内の通常配送は3〜5営業日でお届けします。"},
			{"colons and newlines", "a:b:c\n10:00 - 21:00\n"},
			{"empty", ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t, conformanceConfig())
				before := h.now()
				if err := h.c.Set(ctx, "k", tt.text); err != nil {
					t.Fatal(err)
				}
				e, ok, err := h.c.Get(ctx, "k")
				if err != nil || !ok {
					t.Fatalf("Get = ok %v, err %v; want hit", ok, err)
				}
				if e.Text != tt.text {
					t.Errorf("Text = %q, want %q", e.Text, tt.text)
				}
				if age := h.now().Sub(e.StoredAt); age < -slack || age > slack {
					t.Errorf("StoredAt %v is %v away from now (set at %v)", e.StoredAt, age, before)
				}
			})
		}
	})

	t.Run("overwrite replaces text and stamp", func(t *testing.T) {
		h := newHarness(t, conformanceConfig())
		if err := h.c.Set(ctx, "k", "old"); err != nil {
			t.Fatal(err)
		}
		h.advance(150 * time.Millisecond)
		if err := h.c.Set(ctx, "k", "new"); err != nil {
			t.Fatal(err)
		}
		h.advance(150 * time.Millisecond) // past the first write's TTL, not the second's
		e, ok, err := h.c.Get(ctx, "k")
		if err != nil || !ok || e.Text != "new" {
			t.Fatalf("Get = %+v, ok %v, err %v; want \"new\"", e, ok, err)
		}
		if age := h.now().Sub(e.StoredAt); age > 150*time.Millisecond+slack {
			t.Errorf("age %v: stamp not refreshed by overwrite", age)
		}
	})

	t.Run("kept past TTL for staleFor, then gone", func(t *testing.T) {
		cfg := conformanceConfig()
		h := newHarness(t, cfg)
		if err := h.c.Set(ctx, "k", "answer"); err != nil {
			t.Fatal(err)
		}
		h.advance(cfg.TTL + 50*time.Millisecond)
		e, ok, err := h.c.Get(ctx, "k")
		if err != nil || !ok {
			t.Fatalf("within staleFor: ok %v, err %v; want the stale entry", ok, err)
		}
		if age := h.now().Sub(e.StoredAt); age < cfg.TTL {
			t.Errorf("age %v < TTL %v: caller could not tell the entry is stale", age, cfg.TTL)
		}
		h.advance(cfg.StaleFor)
		if _, ok, err := h.c.Get(ctx, "k"); ok || err != nil {
			t.Fatalf("past TTL+staleFor: ok %v, err %v; want miss", ok, err)
		}
	})

	t.Run("keys are independent", func(t *testing.T) {
		h := newHarness(t, conformanceConfig())
		for i := range 5 {
			if err := h.c.Set(ctx, fmt.Sprint("k", i), strings.Repeat("x", i)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			e, ok, err := h.c.Get(ctx, fmt.Sprint("k", i))
			if err != nil || !ok || e.Text != strings.Repeat("x", i) {
				t.Fatalf("k%d = %q, ok %v, err %v", i, e.Text, ok, err)
			}
		}
	})

	t.Run("concurrent use", func(t *testing.T) {
		h := newHarness(t, conformanceConfig())
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 20 {
					k := fmt.Sprint("k", (g+i)%5)
					if err := h.c.Set(ctx, k, k); err != nil {
						t.Error(err)
						return
					}
					if e, ok, err := h.c.Get(ctx, k); err != nil || (ok && e.Text != k) {
						t.Errorf("Get(%s) = %q, %v", k, e.Text, err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 19, 0, 0, 0, time.UTC)} }

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

func TestConformanceMemory(t *testing.T) {
	testConformance(t, func(t *testing.T, cfg Config) harness {
		clk := newFakeClock()
		return harness{c: NewMemory(cfg, clk.Now), now: clk.Now, advance: clk.Advance}
	})
}

func TestConformanceRedis(t *testing.T) {
	testConformance(t, func(t *testing.T, cfg Config) harness {
		client, prefix := redistest.Client(t)
		return harness{c: NewRedis(client, prefix, cfg), now: time.Now, advance: time.Sleep}
	})
}
