package breaker

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestMemoryConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) harness {
		c := newFakeClock()
		return harness{factory: MemoryFactory(c.Now), advance: c.Advance}
	})
}

func TestMemoryTripAndEndOpen(t *testing.T) {
	ctx := context.Background()
	c := newFakeClock()
	b := NewMemory("redis", DefaultConfig(), c.Now)
	var moves []string
	b.OnTransition = func(_ string, from, to State) { moves = append(moves, from.String()+"→"+to.String()) }
	b.EndOpen() // closed: nothing to end
	b.Trip()
	if _, err := b.Allow(ctx); !errors.Is(err, ErrOpen) {
		t.Fatalf("after Trip: %v, want ErrOpen", err)
	}
	c.Advance(time.Second) // well within the 60 s open period
	b.EndOpen()
	p, err := b.Allow(ctx)
	if err != nil {
		t.Fatalf("after EndOpen: %v, want a probe", err)
	}
	if s, _ := b.Snapshot(ctx); s.State != HalfOpen || s.InFlight != 1 {
		t.Fatalf("after EndOpen and one Allow: %+v, want half-open with one probe out", s)
	}
	p.Done(ctx, true)
	want := []string{"closed→open", "open→half_open"}
	if !slices.Equal(moves, want) {
		t.Errorf("transitions %v, want %v", moves, want)
	}
}
