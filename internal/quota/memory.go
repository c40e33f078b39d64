package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Memory is the in-process Ledger: per model, a ring of one-second buckets
// over the rolling minute plus the set of outstanding reservations.
type Memory struct {
	pol     policy
	maxHold time.Duration
	now     func() time.Time

	mu     sync.Mutex
	models map[string]*modelState
	nextID uint64
}

type bucket struct {
	sec int64
	u   usage
}

type hold struct {
	p       Priority
	tokens  int64
	sec     int64
	expires time.Time
}

type modelState struct {
	configured Ceiling
	override   Ceiling // zero when none
	ring       [windowSec]bucket
	held       map[uint64]hold
	heldSum    usage
	// queue holds reservation ids in expiry order (MaxHold is fixed, so
	// creation order); settled ids are skipped lazily.
	queue []uint64
}

func (m *modelState) ceiling() Ceiling {
	if m.override != (Ceiling{}) {
		return m.override
	}
	return m.configured
}

// busy is the refusal of a call over the model's concurrency cap: it may
// try again once a call in flight ends, which it is woken for; the hint is
// the time the oldest hold has left, at most ConcurrencyRetry.
func (m *modelState) busy(model string, p Priority, now time.Time) *SaturatedError {
	retry := ConcurrencyRetry
	for _, id := range m.queue {
		if h, ok := m.held[id]; ok {
			retry = min(max(h.expires.Sub(now), time.Millisecond), retry)
			break
		}
	}
	return &SaturatedError{Model: model, Priority: p, Saturation: 1, RetryAfter: retry, Concurrent: true}
}

// NewMemory returns an in-memory ledger. now is the clock (time.Now when nil).
func NewMemory(cfg Config, now func() time.Time) (*Memory, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	l := &Memory{pol: newPolicy(cfg), maxHold: cfg.MaxHold, now: now, models: map[string]*modelState{}}
	for name, c := range cfg.Models {
		l.models[name] = &modelState{configured: c, held: map[uint64]hold{}}
	}
	return l, nil
}

// Configure applies cfg's ceilings, safety margin and priority shares from
// the next reservation on. The window, the reservations outstanding and any
// ceiling set at run time (SetCeiling) are kept; MaxHold and StoreTimeout
// stay as the ledger was built.
func (l *Memory) Configure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pol = newPolicy(cfg)
	for name, m := range l.models {
		m.configured = cfg.Models[name]
	}
	for name, c := range cfg.Models {
		if _, ok := l.models[name]; !ok {
			l.models[name] = &modelState{configured: c, held: map[uint64]hold{}}
		}
	}
	return nil
}

// expire returns outstanding reservations older than MaxHold to the pool.
func (m *modelState) expire(now time.Time) {
	for len(m.queue) > 0 {
		id := m.queue[0]
		h, ok := m.held[id]
		if ok && now.Before(h.expires) {
			return
		}
		if ok {
			m.unhold(id, h)
		}
		m.queue[0] = 0
		m.queue = m.queue[1:]
	}
	if cap(m.queue) > 1024 && len(m.queue) < cap(m.queue)/4 {
		m.queue = append([]uint64(nil), m.queue...)
	}
}

func (m *modelState) unhold(id uint64, h hold) {
	delete(m.held, id)
	m.heldSum.tok[h.p] -= h.tokens
	m.heldSum.req[h.p]--
}

func inWindow(sec, nowSec int64) bool { return sec > nowSec-windowSec && sec <= nowSec }

// window sums the live buckets and returns them oldest first.
func (m *modelState) window(nowSec int64, buf []bucket) (usage, []bucket) {
	var u usage
	for i := range m.ring {
		b := m.ring[i]
		if inWindow(b.sec, nowSec) {
			u.add(b.u)
			buf = append(buf, b)
		}
	}
	return u, buf
}

// used sums the live buckets, for when they are not needed one by one.
func (m *modelState) used(nowSec int64) usage {
	var u usage
	for i := range m.ring {
		if inWindow(m.ring[i].sec, nowSec) {
			u.add(m.ring[i].u)
		}
	}
	return u
}

// retryAfter estimates when the refused reservation would fit, by letting
// buckets roll off oldest first and then outstanding holds expire.
func (l *Memory) retryAfter(m *modelState, live []bucket, u usage, p Priority, tokens, lt, lr int64, now time.Time) time.Duration {
	// live is short (≤ 60); insertion sort by second.
	for i := 1; i < len(live); i++ {
		for j := i; j > 0 && live[j].sec < live[j-1].sec; j-- {
			live[j], live[j-1] = live[j-1], live[j]
		}
	}
	for _, b := range live {
		u.sub(b.u)
		if l.pol.fits(u, p, tokens, lt, lr) {
			return time.Unix(b.sec+windowSec, 0).Sub(now)
		}
	}
	for _, id := range m.queue {
		if h, ok := m.held[id]; ok {
			return max(h.expires.Sub(now), time.Millisecond)
		}
	}
	return time.Second
}

// Reserve implements Ledger.
func (l *Memory) Reserve(ctx context.Context, model string, p Priority, tokens int) (Reservation, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("quota: reserve: invalid priority %d", int(p))
	}
	tokens = max(tokens, 0)
	now := l.now()
	nowSec := now.Unix()

	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.models[model]
	if !ok || m.ceiling() == (Ceiling{}) {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, model)
	}
	m.expire(now)
	if c := m.configured.Concurrent; c > 0 && m.heldSum.inFlight() >= int64(c) {
		return nil, m.busy(model, p, now)
	}
	lt, lr := l.pol.limits(m.ceiling())
	var buf [windowSec]bucket
	u, live := m.window(nowSec, buf[:0])
	u.add(m.heldSum)
	t := int64(tokens)
	if !l.pol.fits(u, p, t, lt, lr) {
		ut, ur := u.totals()
		return nil, &SaturatedError{
			Model:      model,
			Priority:   p,
			Saturation: saturation(ut, ur, lt, lr),
			RetryAfter: l.retryAfter(m, live, u, p, t, lt, lr, now),
		}
	}
	l.nextID++
	id := l.nextID
	m.held[id] = hold{p: p, tokens: t, sec: nowSec, expires: now.Add(l.maxHold)}
	m.heldSum.tok[p] += t
	m.heldSum.req[p]++
	m.queue = append(m.queue, id)
	return &memReservation{l: l, model: model, id: id, tokens: tokens}, nil
}

func (l *Memory) finish(model string, id uint64, actual int64, settle bool) {
	now := l.now()
	nowSec := now.Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.models[model]
	m.expire(now)
	h, ok := m.held[id]
	if !ok {
		return // expired back already
	}
	m.unhold(id, h)
	if !settle || !inWindow(h.sec, nowSec) {
		return
	}
	b := &m.ring[h.sec%windowSec]
	if b.sec != h.sec {
		*b = bucket{sec: h.sec}
	}
	b.u.tok[h.p] += actual
	b.u.req[h.p]++
}

// Saturation implements Ledger.
func (l *Memory) Saturation(ctx context.Context, model string) (Snapshot, error) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.models[model]
	if !ok || m.ceiling() == (Ceiling{}) {
		return Snapshot{}, fmt.Errorf("%w %q", ErrUnknownModel, model)
	}
	m.expire(now)
	lt, lr := l.pol.limits(m.ceiling())
	u := m.used(now.Unix())
	u.add(m.heldSum)
	ut, ur := u.totals()
	return Snapshot{
		TokensUsed: int(ut), RequestsUsed: int(ur),
		TPMLimit: int(lt), RPMLimit: int(lr),
		Saturation: saturation(ut, ur, lt, lr),
	}, nil
}

// SetCeiling implements Ledger. An unknown model is added.
func (l *Memory) SetCeiling(ctx context.Context, model string, c Ceiling) error {
	if c.TPM < 0 || c.RPM < 0 || (c != Ceiling{} && (c.TPM == 0 || c.RPM == 0)) {
		return fmt.Errorf("quota: set ceiling %s: tpm and rpm must both be > 0 (or both 0 to restore)", model)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.models[model]
	if !ok {
		if c == (Ceiling{}) {
			return nil
		}
		m = &modelState{held: map[uint64]hold{}}
		l.models[model] = m
	}
	m.override = c
	return nil
}

// Ceilings implements Ledger.
func (l *Memory) Ceilings(ctx context.Context) (map[string]Ceiling, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]Ceiling, len(l.models))
	for name, m := range l.models {
		if c := m.ceiling(); c != (Ceiling{}) {
			out[name] = c
		}
	}
	return out, nil
}

type memReservation struct {
	l      *Memory
	model  string
	id     uint64
	tokens int
	done   atomic.Bool
}

func (r *memReservation) Tokens() int { return r.tokens }

func (r *memReservation) Settle(ctx context.Context, actualTokens int) error {
	if r.done.Swap(true) {
		return nil
	}
	r.l.finish(r.model, r.id, int64(max(actualTokens, 0)), true)
	return nil
}

func (r *memReservation) Release(ctx context.Context) error {
	if r.done.Swap(true) {
		return nil
	}
	r.l.finish(r.model, r.id, 0, false)
	return nil
}
