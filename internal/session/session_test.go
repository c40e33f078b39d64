package session

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestMemoryEvictsLeastRecent(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(2, 2, time.Minute, nil)
	m.Append(ctx, "alice", "a", "q", "a")
	m.Append(ctx, "alice", "b", "q", "a")
	m.Append(ctx, "alice", "a", "q2", "a2") // a is most recent
	m.Append(ctx, "alice", "c", "q", "a")   // evicts b
	if h, _ := m.History(ctx, "alice", "b"); h != nil {
		t.Fatalf("session b kept after eviction: %v", h)
	}
	if m.Len() != 2 {
		t.Fatalf("len %d, want 2", m.Len())
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

// harness is one Store implementation under the conformance suite.
type harness struct {
	// open returns a fresh, empty store keeping maxExchanges exchanges per
	// session for ttl.
	open func(maxExchanges int, ttl time.Duration) Store
	// advance lets d pass for the stores opened.
	advance func(d time.Duration)
}

func TestMemoryConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) harness {
		now := time.Unix(1_700_000_000, 0)
		return harness{
			open: func(n int, ttl time.Duration) Store {
				return NewMemory(n, 1000, ttl, func() time.Time { return now })
			},
			advance: func(d time.Duration) { now = now.Add(d) },
		}
	})
}

func runConformance(t *testing.T, newHarness func(t *testing.T) harness) {
	ctx := context.Background()
	t.Run("KeepsLastExchanges", func(t *testing.T) {
		h := newHarness(t)
		s := h.open(10, time.Hour)
		for i := range 12 {
			if err := s.Append(ctx, "alice", "s1", fmt.Sprintf("q%d", i), fmt.Sprintf("a%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.History(ctx, "alice", "s1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 20 {
			t.Fatalf("history has %d messages, want 20 (10 exchanges)", len(got))
		}
		if got[0].Content != "q2" || got[0].Role != "user" || got[19].Content != "a11" || got[19].Role != "assistant" {
			t.Fatalf("history spans %+v..%+v, want user q2..assistant a11", got[0], got[19])
		}
	})
	t.Run("UnknownSessionIsEmpty", func(t *testing.T) {
		s := newHarness(t).open(10, time.Hour)
		got, err := s.History(ctx, "alice", "never")
		if err != nil || len(got) != 0 {
			t.Fatalf("History = %v, %v; want empty, nil", got, err)
		}
	})
	t.Run("ZeroExchangesKeepsNothing", func(t *testing.T) {
		s := newHarness(t).open(0, time.Hour)
		if err := s.Append(ctx, "alice", "s1", "q", "a"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.History(ctx, "alice", "s1"); len(got) != 0 {
			t.Fatalf("history kept with historyExchanges 0: %v", got)
		}
	})
	t.Run("ExpiresAfterIdleTTL", func(t *testing.T) {
		h := newHarness(t)
		s := h.open(10, time.Minute)
		s.Append(ctx, "alice", "s1", "q1", "a1")
		h.advance(40 * time.Second)
		s.Append(ctx, "alice", "s1", "q2", "a2") // renews the TTL
		h.advance(40 * time.Second)
		if got, _ := s.History(ctx, "alice", "s1"); len(got) != 4 {
			t.Fatalf("active session lost history within its TTL: %v", got)
		}
		h.advance(30 * time.Second)
		if got, _ := s.History(ctx, "alice", "s1"); len(got) != 0 {
			t.Fatalf("idle session kept past its TTL: %v", got)
		}
	})
	t.Run("SessionBelongsToItsOwner", func(t *testing.T) {
		s := newHarness(t).open(10, time.Hour)
		if err := s.Append(ctx, "alice", "s1", "my card is 4111 1111 1111 1111", "noted"); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.History(ctx, "bob", "s1"); len(got) != 0 {
			t.Fatalf("bob read alice's session s1: %v", got)
		}
		if err := s.Append(ctx, "bob", "s1", "hello", "hi"); err != nil {
			t.Fatal(err)
		}
		got, _ := s.History(ctx, "alice", "s1")
		if len(got) != 2 || got[0].Content != "my card is 4111 1111 1111 1111" {
			t.Fatalf("alice's history was changed by bob: %v", got)
		}
	})
	t.Run("IDsDoNotCollide", func(t *testing.T) {
		s := newHarness(t).open(10, time.Hour)
		s.Append(ctx, "a:b", "c", "first", "1")
		s.Append(ctx, "a", "b:c", "second", "2")
		got, _ := s.History(ctx, "a:b", "c")
		if len(got) != 2 || got[0].Content != "first" {
			t.Fatalf("owner a:b session c = %v, want only its own exchange", got)
		}
	})
	t.Run("ConcurrentAppendsStayBoundedAndPaired", func(t *testing.T) {
		s := newHarness(t).open(5, time.Hour)
		done := make(chan error)
		for i := range 40 {
			go func() {
				done <- s.Append(ctx, "alice", "busy", fmt.Sprintf("q%d", i), fmt.Sprintf("a%d", i))
			}()
		}
		for range 40 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		got, _ := s.History(ctx, "alice", "busy")
		if len(got) != 10 {
			t.Fatalf("history has %d messages, want 10", len(got))
		}
		for i := 0; i < len(got); i += 2 {
			q, a := got[i].Content, got[i+1].Content
			if got[i].Role != "user" || got[i+1].Role != "assistant" || "a"+strings.TrimPrefix(q, "q") != a {
				t.Fatalf("exchange %d is %q/%q: not one user message and its answer", i/2, q, a)
			}
		}
	})
	t.Run("KeepsTextExactly", func(t *testing.T) {
		s := newHarness(t).open(10, time.Hour)
		msg := "ワンピースの最新刊は？ \"quoted\" \n\x00 end"
		s.Append(ctx, "alice", "s1", msg, "第110巻です")
		got, _ := s.History(ctx, "alice", "s1")
		if len(got) != 2 || got[0].Content != msg || got[1].Content != "第110巻です" {
			t.Fatalf("history = %+v, want the exchange unchanged", got)
		}
	})
}
