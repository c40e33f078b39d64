package provider

import (
	"fmt"
	"testing"
	"time"
)

func TestCacheHints(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	h := NewCacheHints(func() time.Time { return now })
	const rules = "You are MangaAssist…"
	if got := h.Expect("sonnet", rules); got != 0 {
		t.Fatalf("before any call: Expect = %d, want 0", got)
	}
	h.Observe("sonnet", rules, Usage{InputTokens: 40, CacheWriteTokens: 1300})
	if got := h.Expect("sonnet", rules); got != 0 {
		t.Errorf("after a write only: Expect = %d, want 0 (which mark is read next is unknown)", got)
	}
	h.Observe("sonnet", rules, Usage{InputTokens: 40, CachedInputTokens: 1200, CacheWriteTokens: 100})
	if got := h.Expect("sonnet", rules); got != 1200 {
		t.Errorf("after a read: Expect = %d, want 1200", got)
	}
	if got := h.Expect("haiku", rules); got != 0 {
		t.Errorf("another model: Expect = %d, want 0", got)
	}
	if got := h.Expect("sonnet", rules+" "); got != 0 {
		t.Errorf("another system prompt: Expect = %d, want 0", got)
	}
	h.Observe("sonnet", rules, Usage{CachedInputTokens: 999, Estimated: true})
	if got := h.Expect("sonnet", rules); got != 1200 {
		t.Errorf("an estimated usage changed the hint: Expect = %d, want 1200", got)
	}
	now = now.Add(CacheTTL - time.Second)
	if got := h.Expect("sonnet", rules); got != 1200 {
		t.Errorf("within the TTL: Expect = %d, want 1200", got)
	}
	now = now.Add(time.Second)
	if got := h.Expect("sonnet", rules); got != 0 {
		t.Errorf("at the TTL: Expect = %d, want 0", got)
	}
	h.Observe("sonnet", rules, Usage{CachedInputTokens: 1200})
	h.Observe("sonnet", rules, Usage{InputTokens: 1300})
	if got := h.Expect("sonnet", rules); got != 0 {
		t.Errorf("after a call that read nothing: Expect = %d, want 0", got)
	}
}

func TestCacheHintsAreBounded(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	h := NewCacheHints(func() time.Time { return now })
	for i := range cacheHintEntries + 100 {
		now = now.Add(time.Millisecond)
		h.Observe("sonnet", fmt.Sprint("system ", i), Usage{CachedInputTokens: 1024 + i})
	}
	if n := len(h.m); n > cacheHintEntries {
		t.Fatalf("%d hints held, want at most %d", n, cacheHintEntries)
	}
	last := cacheHintEntries + 99
	if got := h.Expect("sonnet", fmt.Sprint("system ", last)); got != 1024+last {
		t.Errorf("the newest hint: Expect = %d, want %d", got, 1024+last)
	}
	if got := h.Expect("sonnet", "system 0"); got != 0 {
		t.Errorf("the oldest hint survived: Expect = %d", got)
	}
}
