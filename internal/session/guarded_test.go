package session

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/provider"
)

// failing is a Store whose calls fail while down, counting them.
type failing struct {
	down  bool
	calls int
}

func (f *failing) History(context.Context, string, string) ([]provider.Message, error) {
	f.calls++
	if f.down {
		return nil, ErrUnavailable
	}
	return []provider.Message{{Role: provider.RoleUser, Content: "q"}}, nil
}

func (f *failing) Append(context.Context, string, string, string, string) error {
	f.calls++
	if f.down {
		return ErrUnavailable
	}
	return nil
}

func TestGuardedOpensOnFailuresAndRecovers(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(0, 0)
	cfg := breaker.DefaultConfig()
	cfg.FailureThreshold, cfg.MinCalls, cfg.OpenTimeout = 3, 100, 30*time.Second
	store := &failing{down: true}
	g := Guarded{Store: store, Breaker: breaker.NewMemory("session_store", cfg, func() time.Time { return now })}

	for range 3 {
		if _, err := g.History(ctx, "alice", "s1"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("History of a failing store = %v, want ErrUnavailable", err)
		}
	}
	calls := store.calls
	_, err := g.History(ctx, "alice", "s1")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("History with the breaker open = %v, want ErrUnavailable and ErrOpen", err)
	}
	if err := g.Append(ctx, "alice", "s1", "q", "a"); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Append with the breaker open = %v, want ErrOpen", err)
	}
	if store.calls != calls {
		t.Fatalf("the store was called %d times while the breaker was open", store.calls-calls)
	}

	store.down = false
	now = now.Add(31 * time.Second)
	if h, err := g.History(ctx, "alice", "s1"); err != nil || len(h) != 1 {
		t.Fatalf("History after the open period = %v, %v; want the history back", h, err)
	}
}

func TestGuardedIgnoresCallerCancellation(t *testing.T) {
	cfg := breaker.DefaultConfig()
	cfg.FailureThreshold, cfg.MinCalls = 1, 100
	store := &failing{down: true}
	g := Guarded{Store: store, Breaker: breaker.NewMemory("session_store", cfg, time.Now)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g.History(ctx, "alice", "s1")
	store.down = false
	if _, err := g.History(context.Background(), "alice", "s1"); err != nil {
		t.Fatalf("a call cancelled by its caller opened the breaker: %v", err)
	}
}

// refusedElsewhere is a Store whose calls another breaker refuses at once
// (Redis's own health, while Redis is down).
type refusedElsewhere struct{ calls int }

func (r *refusedElsewhere) History(context.Context, string, string) ([]provider.Message, error) {
	r.calls++
	return nil, fmt.Errorf("%w: %w", ErrUnavailable, breaker.ErrUnavailable)
}

func (r *refusedElsewhere) Append(context.Context, string, string, string, string) error {
	r.calls++
	return fmt.Errorf("%w: %w", ErrUnavailable, breaker.ErrUnavailable)
}

func TestGuardedDoesNotCountAnotherBreakersRefusals(t *testing.T) {
	cfg := breaker.DefaultConfig()
	cfg.FailureThreshold, cfg.MinCalls = 3, 100
	b := breaker.NewMemory("session_store", cfg, time.Now)
	store := &refusedElsewhere{}
	g := Guarded{Store: store, Breaker: b}
	for range 10 {
		if err := g.Append(context.Background(), "alice", "s1", "q", "a"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Append = %v, want ErrUnavailable", err)
		}
	}
	if s, _ := b.Snapshot(context.Background()); s.State != breaker.Closed || store.calls != 10 {
		t.Errorf("after 10 calls Redis's health refused: %s, %d calls reached the store; want closed, 10", s.State, store.calls)
	}
}
