package queue

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

// TestFairShare floods one P1 tenant 10:1 against another (and, in the
// weighted case, gives the smaller one twice the weight). While both wait,
// each must be served its weight's share of the turns within ±10%, in
// memory and in Redis alike. With plain FIFO the small tenant would get
// nothing until the flood drained.
func TestFairShare(t *testing.T) {
	envs := []struct {
		name string
		new  func(t *testing.T, cfg Config) *Queue
	}{
		{"memory", func(t *testing.T, cfg Config) *Queue { return NewMemory(cfg, nil) }},
		{"redis", func(t *testing.T, cfg Config) *Queue {
			c, prefix := redistest.Client(t)
			return NewRedis(c, cfg, RedisOptions{Prefix: prefix, Timeout: 2 * time.Second, Lease: 30 * time.Second})
		}},
	}
	tests := []struct {
		name     string
		weights  map[string]float64
		flood    string
		wantSmol float64 // the small tenant's share while both wait
	}{
		{"equal weights", nil, "big", 0.5},
		{"small tenant weighs 2", map[string]float64{"small": 2}, "big", 2.0 / 3},
	}
	for _, e := range envs {
		for _, tt := range tests {
			t.Run(e.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				// Waiters are woken when a ticket leaves, so a slow poll
				// keeps Redis calm with 110 of them and costs no progress.
				cfg := Config{Capacity: 500, TTL: 2 * time.Minute, PollInterval: 50 * time.Millisecond, TenantWeights: tt.weights}
				q := e.new(t, cfg)
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				g := newGate()
				var done []<-chan error
				const big, small = 100, 10
				for i := range big {
					done = append(done, spawn(ctx, q, Ticket{ID: fmt.Sprintf("big-%d", i), Priority: P1, Tenant: "big", Locale: "ja"}, g.try("big")))
				}
				waitDepth(t, q, big)
				for i := range small {
					done = append(done, spawn(ctx, q, Ticket{ID: fmt.Sprintf("small-%d", i), Priority: P1, Tenant: "small", Locale: "ja"}, g.try("small")))
				}
				waitDepth(t, q, big+small)
				g.open.Store(true)
				q.Notify()
				for _, ch := range done {
					if err := <-ch; err != nil {
						t.Fatal(err) // ctx bounds every Wait
					}
				}
				// While the small tenant still waited: the turns served up
				// to its last one.
				g.mu.Lock()
				served := append([]string(nil), g.served...)
				g.mu.Unlock()
				last := 0
				for i, who := range served {
					if who == "small" {
						last = i
					}
				}
				got := float64(small) / float64(last+1)
				if math.Abs(got-tt.wantSmol) > 0.1*tt.wantSmol {
					t.Fatalf("small tenant got %.2f of the turns served while it waited, want %.2f ±10%% (order %v)", got, tt.wantSmol, served[:last+1])
				}
			})
		}
	}
}

// TestPremiumBeforeStandard: premium tickets of a priority class are
// served before the class's standard ones that waited longer, in memory
// and in Redis; a higher class still goes first, premium or not.
func TestPremiumBeforeStandard(t *testing.T) {
	for _, e := range []struct {
		name string
		new  func(t *testing.T, cfg Config) *Queue
	}{
		{"memory", func(t *testing.T, cfg Config) *Queue { return NewMemory(cfg, nil) }},
		{"redis", func(t *testing.T, cfg Config) *Queue {
			c, prefix := redistest.Client(t)
			return NewRedis(c, cfg, RedisOptions{Prefix: prefix, Timeout: 2 * time.Second, Lease: 30 * time.Second})
		}},
	} {
		t.Run(e.name, func(t *testing.T) {
			q := e.new(t, Config{Capacity: 100, TTL: time.Minute, PollInterval: 20 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g := newGate()
			var done []<-chan error
			add := func(who string, tk Ticket) {
				done = append(done, spawn(ctx, q, tk, g.try(who)))
				waitDepth(t, q, len(done))
			}
			for i := range 3 {
				add("standard", Ticket{ID: fmt.Sprint("s", i), Priority: P1, Tenant: "s"})
			}
			for i := range 2 {
				add("premium", Ticket{ID: fmt.Sprint("p", i), Priority: P1, Tenant: "p", Premium: true})
			}
			add("batch-premium", Ticket{ID: "b", Priority: P3, Tenant: "b", Premium: true})
			g.open.Store(true)
			q.Notify()
			for _, ch := range done {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			want := []string{"premium", "premium", "standard", "standard", "standard", "batch-premium"}
			if fmt.Sprint(g.served) != fmt.Sprint(want) {
				t.Fatalf("served %v, want %v", g.served, want)
			}
		})
	}
}
