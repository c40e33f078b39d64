package session

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestMemoryKeepsLastExchanges(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(10, 100, time.Hour, nil)
	for i := range 12 {
		if err := m.Append(ctx, "alice", "s1", fmt.Sprintf("q%d", i), fmt.Sprintf("a%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	h, _ := m.History(ctx, "alice", "s1")
	if len(h) != 20 {
		t.Fatalf("history has %d messages, want 20 (10 exchanges)", len(h))
	}
	if h[0].Content != "q2" || h[19].Content != "a11" {
		t.Fatalf("history spans %q..%q, want q2..a11", h[0].Content, h[19].Content)
	}
}

func TestMemoryEvictsLeastRecentAndExpires(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(0, 0)
	m := NewMemory(2, 2, time.Minute, func() time.Time { return now })
	m.Append(ctx, "alice", "a", "q", "a")
	m.Append(ctx, "alice", "b", "q", "a")
	m.History(ctx, "alice", "a")
	m.Append(ctx, "alice", "a", "q2", "a2") // a is most recent
	m.Append(ctx, "alice", "c", "q", "a")   // evicts b
	if h, _ := m.History(ctx, "alice", "b"); h != nil {
		t.Fatalf("session b kept after eviction: %v", h)
	}
	if m.Len() != 2 {
		t.Fatalf("len %d, want 2", m.Len())
	}
	now = now.Add(2 * time.Minute)
	if h, _ := m.History(ctx, "alice", "a"); h != nil {
		t.Fatalf("idle session a kept past ttl: %v", h)
	}
}

func TestMemoryHistoryIsACopy(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(2, 2, time.Minute, nil)
	m.Append(ctx, "alice", "a", "q", "a")
	h, _ := m.History(ctx, "alice", "a")
	h[0].Content = "changed"
	h2, _ := m.History(ctx, "alice", "a")
	if h2[0].Content != "q" {
		t.Fatal("caller mutated stored history")
	}
}

func TestSessionBelongsToItsOwner(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(10, 100, time.Hour, nil)
	if err := m.Append(ctx, "alice", "s1", "my card is 4111 1111 1111 1111", "noted"); err != nil {
		t.Fatal(err)
	}
	if h, _ := m.History(ctx, "bob", "s1"); len(h) != 0 {
		t.Fatalf("bob read alice's session s1: %v", h)
	}
	if err := m.Append(ctx, "bob", "s1", "hello", "hi"); err != nil {
		t.Fatal(err)
	}
	h, _ := m.History(ctx, "alice", "s1")
	if len(h) != 2 || h[0].Content != "my card is 4111 1111 1111 1111" {
		t.Fatalf("alice's history was changed by bob: %v", h)
	}
}
