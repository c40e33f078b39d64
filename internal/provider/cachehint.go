package provider

import (
	"hash/maphash"
	"sync"
	"time"
)

// cacheHintEntries bounds the system prompts CacheHints remembers: clients
// may send their own, so the set is not fixed by the config.
const cacheHintEntries = 4096

// CacheHints remembers, per model and system prompt, how many input tokens
// the vendor last read from its prompt cache, so that the next turn with
// the same system prompt is estimated at the cached price and, where the
// vendor does not count cache reads, reserves less quota. A vendor keeps a
// prefix for CacheTTL after its last use; a hint lasts as long. It is an
// estimate: the turn is settled at what the vendor reports.
//
// The zero value is not usable; use NewCacheHints. Safe for concurrent use.
type CacheHints struct {
	now  func() time.Time
	seed maphash.Seed

	mu sync.Mutex
	m  map[cacheHintKey]cacheHint
}

type cacheHintKey struct {
	model  string
	system uint64 // maphash of the system prompt
}

type cacheHint struct {
	tokens int
	until  time.Time
}

// NewCacheHints returns empty hints on the clock now (time.Now when nil).
func NewCacheHints(now func() time.Time) *CacheHints {
	if now == nil {
		now = time.Now
	}
	return &CacheHints{now: now, seed: maphash.MakeSeed(), m: make(map[cacheHintKey]cacheHint)}
}

func (h *CacheHints) key(model, system string) cacheHintKey {
	return cacheHintKey{model: model, system: maphash.String(h.seed, system)}
}

// Observe records what a call to model with system prompt system read from
// the vendor's prompt cache. A call that read nothing forgets the hint: the
// prefix is no longer held (or was never cached).
func (h *CacheHints) Observe(model, system string, u Usage) {
	if h == nil || system == "" || u.Estimated {
		return
	}
	k := h.key(model, system)
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if u.CachedInputTokens <= 0 {
		delete(h.m, k)
		return
	}
	if _, ok := h.m[k]; !ok && len(h.m) >= cacheHintEntries {
		h.evictLocked(now)
	}
	h.m[k] = cacheHint{tokens: u.CachedInputTokens, until: now.Add(CacheTTL)}
}

// evictLocked drops the expired hints, or, when none has expired, the one
// that expires first.
func (h *CacheHints) evictLocked(now time.Time) {
	var first cacheHintKey
	var firstUntil time.Time
	for k, v := range h.m {
		if !now.Before(v.until) {
			delete(h.m, k)
			continue
		}
		if firstUntil.IsZero() || v.until.Before(firstUntil) {
			first, firstUntil = k, v.until
		}
	}
	if len(h.m) >= cacheHintEntries {
		delete(h.m, first)
	}
}

// Expect returns the input tokens a call to model with system prompt
// system is expected to read from the vendor's prompt cache: what the last
// such call read, while the vendor still holds it; else 0.
func (h *CacheHints) Expect(model, system string) int {
	if h == nil || system == "" {
		return 0
	}
	k := h.key(model, system)
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[k]
	if !ok || !h.now().Before(v.until) {
		return 0
	}
	return v.tokens
}

// hintKey is the part of req's system prompt a provider keeps its hint
// for: up to the first cache mark (the prompt every turn starts with,
// before the retrieved context), else the whole.
func hintKey(req *Request) string {
	if len(req.SystemCache) > 0 {
		return req.System[:min(max(req.SystemCache[0].At, 0), len(req.System))]
	}
	return req.System
}

// Learn records the usage the vendor reported for req.
func (h *CacheHints) Learn(req *Request, u Usage) { h.Observe(req.Model, hintKey(req), u) }

// Split is an estimated usage u of req (a stream cut before the vendor
// reported its usage) with the input the vendor is expected to have read
// from its prompt cache moved from InputTokens to CachedInputTokens: what
// the last reported call with the same system prompt read. Without it a
// cut stream's input would be priced as if nothing had been cached.
func (h *CacheHints) Split(req *Request, u Usage) Usage {
	if !u.Estimated || u.CachedInputTokens > 0 {
		return u
	}
	read := min(h.Expect(req.Model, hintKey(req)), u.InputTokens)
	u.CachedInputTokens += read
	u.InputTokens -= read
	return u
}
