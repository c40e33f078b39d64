package breaker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Memory is a Breaker whose state lives in this process: the embedded
// default, and the right choice whenever one gateway instance serves a model.
type Memory struct {
	// OnTransition, if set before first use, is told of every state change.
	OnTransition TransitionFunc

	name string
	now  func() time.Time

	mu sync.Mutex
	m  *machine
}

// NewMemory returns a closed breaker named name. Zero or invalid cfg fields
// take DefaultConfig's values. now is the clock (time.Now in production).
func NewMemory(name string, cfg Config, now func() time.Time) *Memory {
	return &Memory{name: name, now: now, m: newMachine(cfg.normalized())}
}

// Allow implements Breaker. It never fails other than with *OpenError.
func (b *Memory) Allow(context.Context) (Permit, error) {
	now := b.now().UnixMicro()
	var buf [2]transition
	b.mu.Lock()
	d, tr := b.m.allow(now, buf[:0])
	b.mu.Unlock()
	b.report(tr)
	if !d.allowed {
		return noopPermit{}, &OpenError{
			Name:       b.name,
			RetryAfter: time.Duration(d.retryAfter) * time.Microsecond,
			State:      d.state,
		}
	}
	return &memoryPermit{b: b, gen: d.gen, slot: d.slot}, nil
}

// Snapshot implements Breaker. It never fails.
func (b *Memory) Snapshot(context.Context) (Snapshot, error) {
	now := b.now().UnixMicro()
	b.mu.Lock()
	tr := b.m.advance(now, nil)
	s := b.m.snapshot(b.name, now)
	b.mu.Unlock()
	b.report(tr)
	return s, nil
}

// Trip opens the breaker now, whatever its counts, for a whole open
// period (an open breaker stays as it is): for an owner that learnt by
// other means that the guarded dependency is down.
func (b *Memory) Trip() { b.force((*machine).trip) }

// EndOpen ends an open period early (a breaker not open stays as it is):
// for an owner that learnt by other means that the guarded dependency is
// back. The half-open probes still decide whether it closes.
func (b *Memory) EndOpen() { b.force((*machine).endOpen) }

// force applies a move the owner decided on, and reports its transitions.
func (b *Memory) force(move func(m *machine, now int64, tr []transition) []transition) {
	now := b.now().UnixMicro()
	var buf [2]transition
	b.mu.Lock()
	tr := move(b.m, now, buf[:0])
	b.mu.Unlock()
	b.report(tr)
}

func (b *Memory) report(tr []transition) {
	if b.OnTransition == nil {
		return
	}
	for _, t := range tr {
		b.OnTransition(b.name, t.from, t.to)
	}
}

type memoryPermit struct {
	b    *Memory
	gen  int64
	slot int
	done atomic.Bool
}

func (p *memoryPermit) Done(_ context.Context, success bool) {
	if p.done.Swap(true) {
		return
	}
	now := p.b.now().UnixMicro()
	var buf [2]transition
	p.b.mu.Lock()
	tr := p.b.m.done(now, p.gen, p.slot, success, buf[:0])
	p.b.mu.Unlock()
	p.b.report(tr)
}

func (p *memoryPermit) Release(context.Context) {
	if p.done.Swap(true) {
		return
	}
	now := p.b.now().UnixMicro()
	var buf [2]transition
	p.b.mu.Lock()
	tr := p.b.m.release(now, p.gen, p.slot, buf[:0])
	p.b.mu.Unlock()
	p.b.report(tr)
}
