package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

// fakeClock is a settable clock; times stay whole microseconds so the Redis
// store (microsecond resolution) sees exactly what the memory store sees.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type storeFactory func(t *testing.T, now func() time.Time) Store

func memoryFactory(t *testing.T, now func() time.Time) Store { return NewMemoryStore(now) }

func redisFactory(t *testing.T, now func() time.Time) Store {
	c, prefix := redistest.Client(t)
	s := NewRedisStore(c, prefix, time.Second)
	s.now = now
	return s
}

func TestStoreConformance(t *testing.T) {
	for _, f := range []struct {
		name string
		new  storeFactory
	}{{"memory", memoryFactory}, {"redis", redisFactory}} {
		t.Run(f.name, func(t *testing.T) { testStore(t, f.new) })
	}
}

func testStore(t *testing.T, newStore storeFactory) {
	ctx := context.Background()

	t.Run("reference sequence", func(t *testing.T) {
		clk := newFakeClock()
		s := newStore(t, clk.Now)
		l := PerSecond(10, 3)
		tests := []struct {
			name    string
			advance time.Duration
			n       int
			want    Decision
		}{
			{"2 of 3 admitted", 0, 2, Decision{Allowed: true, Remaining: 1, ResetAfter: 200 * time.Millisecond}},
			{"2 more refused", 0, 2, Decision{Remaining: 1, RetryAfter: 100 * time.Millisecond, ResetAfter: 200 * time.Millisecond}},
			{"1 admitted", 0, 1, Decision{Allowed: true, Remaining: 0, ResetAfter: 300 * time.Millisecond}},
			{"4 exceed burst", 100 * time.Millisecond, 4, Decision{Remaining: 1, RetryAfter: Never, ResetAfter: 200 * time.Millisecond}},
			{"just before refill refused", 0, 2, Decision{Remaining: 1, RetryAfter: 100 * time.Millisecond, ResetAfter: 200 * time.Millisecond}},
			{"at RetryAfter admitted", 100 * time.Millisecond, 2, Decision{Allowed: true, Remaining: 0, ResetAfter: 300 * time.Millisecond}},
		}
		for _, tt := range tests {
			clk.Advance(tt.advance)
			got, err := s.Allow(ctx, "ref", l, tt.n)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			if got != tt.want {
				t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
			}
		}
	})

	t.Run("RetryAfter is exact", func(t *testing.T) {
		clk := newFakeClock()
		s := newStore(t, clk.Now)
		l := Limit{Rate: 30, Per: time.Minute}
		for range 30 {
			if d, _ := s.Allow(ctx, "k", l, 1); !d.Allowed {
				t.Fatal("burst of 30 refused early")
			}
		}
		d, _ := s.Allow(ctx, "k", l, 3)
		if d.Allowed || d.RetryAfter != 6*time.Second {
			t.Fatalf("3 tokens from empty 30/min bucket: got %+v, want refused with RetryAfter 6s", d)
		}
		clk.Advance(d.RetryAfter - time.Microsecond)
		if d2, _ := s.Allow(ctx, "k", l, 3); d2.Allowed {
			t.Fatal("admitted 1µs before RetryAfter")
		}
		clk.Advance(time.Microsecond)
		if d2, _ := s.Allow(ctx, "k", l, 3); !d2.Allowed {
			t.Fatalf("refused at RetryAfter: %+v", d2)
		}
	})

	t.Run("15 racing goroutines on burst 5 admit exactly 5", func(t *testing.T) {
		clk := newFakeClock()
		s := newStore(t, clk.Now)
		var admitted atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 15 {
			wg.Go(func() {
				<-start
				d, err := s.Allow(ctx, "race", PerSecond(1, 5), 1)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := admitted.Load(); got != 5 {
			t.Fatalf("admitted %d, want 5", got)
		}
	})

	t.Run("60 s at high offered rate admits the ideal", func(t *testing.T) {
		clk := newFakeClock()
		s := newStore(t, clk.Now)
		l := PerSecond(20, 7)
		const step = 7 * time.Millisecond // ~143 offers/s against 20/s
		const T = 60 * time.Second
		admitted := 0
		for el := time.Duration(0); el <= T; el += step {
			if d, err := s.Allow(ctx, "sim", l, 1); err != nil {
				t.Fatal(err)
			} else if d.Allowed {
				admitted++
			}
			clk.Advance(step)
		}
		ideal := 7 + 20*T.Seconds()
		if float64(admitted) < 0.999*ideal || float64(admitted) > ideal+1 {
			t.Fatalf("admitted %d over %s, want within [%.1f, %.0f]", admitted, T, 0.999*ideal, ideal+1)
		}
	})

	t.Run("AllowAll refusal consumes nothing", func(t *testing.T) {
		clk := newFakeClock()
		s := newStore(t, clk.Now)
		roomy := Bucket{Key: "roomy", Limit: PerSecond(1, 10)}
		tight := Bucket{Key: "tight", Limit: PerSecond(1, 2)}
		out := make([]Decision, 2)
		for i, want := range []bool{true, false, false} {
			ok, err := s.AllowAll(ctx, []Bucket{roomy, tight}, 2, out)
			if err != nil {
				t.Fatal(err)
			}
			if ok != want {
				t.Fatalf("call %d: ok=%v, want %v", i, ok, want)
			}
		}
		if !out[0].Allowed || out[1].Allowed || out[0].Remaining != 8 {
			t.Fatalf("verdicts %+v: want roomy admitting with 8 left, tight refusing", out)
		}
		d, _ := s.Allow(ctx, "roomy", roomy.Limit, 8)
		if !d.Allowed {
			t.Fatalf("roomy lost tokens to refused multi-bucket requests: %+v", d)
		}
	})

	t.Run("disabled limit always admits", func(t *testing.T) {
		s := newStore(t, newFakeClock().Now)
		for range 3 {
			if d, _ := s.Allow(ctx, "off", Limit{}, 100); !d.Allowed {
				t.Fatal("disabled limit refused")
			}
		}
	})

	t.Run("negative cost is an error", func(t *testing.T) {
		s := newStore(t, newFakeClock().Now)
		if _, err := s.Allow(ctx, "neg", PerSecond(1, 1), -1); err == nil {
			t.Fatal("want error")
		}
	})
}

func TestMemoryStoreEvictsIdleKeys(t *testing.T) {
	clk := newFakeClock()
	s := NewMemoryStore(clk.Now)
	for i := range 1000 {
		s.Allow(context.Background(), fmt.Sprint("user", i), PerSecond(5, 10), 1)
	}
	if s.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000", s.Len())
	}
	clk.Advance(2 * sweepEvery)
	for i := range 1000 {
		s.Allow(context.Background(), fmt.Sprint("user", i), PerSecond(5, 10), 0)
	}
	s.Allow(context.Background(), "fresh", PerSecond(5, 10), 1)
	if got := s.Len(); got != 1 {
		t.Fatalf("after idle period Len = %d, want 1 (idle buckets evicted)", got)
	}
}

func TestRedisStoreRealClock(t *testing.T) {
	c, prefix := redistest.Client(t)
	s := NewRedisStore(c, prefix, time.Second)
	ctx := context.Background()

	t.Run("race on Redis TIME admits exactly burst", func(t *testing.T) {
		var admitted atomic.Int32
		var wg sync.WaitGroup
		for range 15 {
			wg.Go(func() {
				d, err := s.Allow(ctx, "race", Limit{Rate: 1, Per: time.Hour, Burst: 5}, 1)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != 5 {
			t.Fatalf("admitted %d, want 5", got)
		}
	})

	t.Run("key expires when the bucket is full again", func(t *testing.T) {
		d, err := s.Allow(ctx, "ttl", Limit{Rate: 30, Per: time.Minute}, 3)
		if err != nil || !d.Allowed {
			t.Fatalf("Allow: %+v %v", d, err)
		}
		ttl, err := c.PTTL(ctx, prefix+"ttl").Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > 6*time.Second+time.Millisecond {
			t.Fatalf("PTTL = %s, want (0, 6s]", ttl)
		}
	})
}
