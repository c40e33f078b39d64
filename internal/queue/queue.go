// Package queue holds turns that cannot get quota or concurrency right now,
// in priority order (P0 first), each for at most a TTL, in a bounded queue.
// Inside a priority class premium tickets go first; among the premium, and
// among the standard, the order is weighted fair queueing (start-time
// fair queueing) over flows, a flow being a tenant in a locale: a tenant
// flooding P1 gets its weight's share of the turns served while others wait,
// not the whole class; with one flow the order is arrival. It is built for the gateway's reserve step: Wait enqueues a
// ticket and calls the caller's try function whenever the ticket is at the
// head, so a P3 batch turn can never jump a waiting P0/P1 chat turn.
//
// Two implementations share one Wait: in memory (the embedded default) and
// in Redis (fleet mode: one sorted set for the whole fleet, each instance
// polling for its own tickets at the head).
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Priority of a turn: P0 sync chat, P1 async user-facing, P2 eval/judge,
// P3 batch. Lower is served first.
type Priority int

// Priorities.
const (
	P0 Priority = iota
	P1
	P2
	P3
	numPriorities = 4
	// numBands are the queue's classes: each priority split in two, its
	// premium tickets ahead of its standard ones.
	numBands = 2 * numPriorities
)

// Ticket identifies one waiting turn. ID is for logs and need not be unique.
type Ticket struct {
	ID       string
	Priority Priority
	// Tenant and Locale name the ticket's flow for fair queueing inside its
	// priority class; empty values form a flow of their own.
	Tenant string
	Locale string
	// Premium tickets are served before the standard tickets of their
	// priority class; fair queueing holds within each of the two.
	Premium bool
}

// band is the ticket's class in the queue: 2·priority, plus 1 when it is
// not premium. Lower is served first.
func (t Ticket) band() int {
	b := 2 * int(t.Priority)
	if !t.Premium {
		b++
	}
	return b
}

// flow is the fair-queueing flow of a ticket: a tenant in a locale.
func (t Ticket) flow() string { return t.Tenant + "\x00" + t.Locale }

// tagUnit is the virtual-time cost of one ticket of weight 1; a ticket of
// weight w advances its flow by tagUnit/w.
const tagUnit = 1000

// ErrExpired is returned by Wait when the ticket spent its TTL in the queue.
var ErrExpired = errors.New("queue: timed out in queue")

// ErrFull matches (errors.Is) every *FullError.
var ErrFull = errors.New("queue: full")

// FullError is returned by Wait when the queue is at capacity.
type FullError struct {
	// RetryAfter is when the oldest entry's TTL ends, the latest a slot
	// frees up without anyone being served.
	RetryAfter time.Duration
}

func (e *FullError) Error() string {
	return fmt.Sprintf("queue: full, retry after %s", e.RetryAfter)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Stats is a snapshot for metrics and dashboards.
type Stats struct {
	Depth      int
	ByPriority [numPriorities]int
	// OldestWait is how long the longest-waiting entry has been queued.
	OldestWait time.Duration
}

// Config sizes the queue. DefaultConfig holds the MangaAssist values.
type Config struct {
	// Capacity is the most tickets waiting at once (default 1,000).
	Capacity int `yaml:"capacity"`
	// TTL is how long a ticket may wait before ErrExpired (default 30s).
	TTL time.Duration `yaml:"ttl"`
	// PollInterval is how often a waiter re-checks whether it is at the
	// head without a Notify (default 50ms). In fleet mode it is also how
	// quickly a waiter notices another instance's progress.
	PollInterval time.Duration `yaml:"pollInterval"`
	// TenantWeights and LocaleWeights weigh the fair share of a flow inside
	// its priority class: a flow's weight is its tenant's times its
	// locale's, each 1 when not listed. A tenant asking in two locales has
	// two flows.
	TenantWeights map[string]float64 `yaml:"tenantWeights"`
	LocaleWeights map[string]float64 `yaml:"localeWeights"`
}

// weight is the fair-queueing weight of t's flow.
func (c Config) weight(t Ticket) float64 {
	w := 1.0
	if v, ok := c.TenantWeights[t.Tenant]; ok {
		w *= v
	}
	if v, ok := c.LocaleWeights[t.Locale]; ok {
		w *= v
	}
	return w
}

// DefaultConfig returns capacity 1,000, TTL 30s, poll every 50ms.
func DefaultConfig() Config {
	return Config{Capacity: 1000, TTL: 30 * time.Second, PollInterval: 50 * time.Millisecond}
}

// Validate reports every problem, each as "fieldPath: problem".
func (c Config) Validate() error {
	var errs []error
	if c.Capacity < 1 {
		errs = append(errs, errors.New("capacity: must be >= 1"))
	}
	if c.TTL <= 0 {
		errs = append(errs, errors.New("ttl: must be > 0"))
	}
	if c.PollInterval <= 0 {
		errs = append(errs, errors.New("pollInterval: must be > 0"))
	}
	for name, ws := range map[string]map[string]float64{"tenantWeights": c.TenantWeights, "localeWeights": c.LocaleWeights} {
		for k, w := range ws {
			if !(w >= 0.001 && w <= 1000) {
				errs = append(errs, fmt.Errorf("%s.%s: must be in 0.001..1000", name, k))
			}
		}
	}
	return errors.Join(errs...)
}

type place int

const (
	placeWaiting place = iota
	placeHead
	placeGone // expired (or reaped) while waiting
)

// backend is where tickets are kept; Queue.Wait is the same for all.
type backend interface {
	add(ctx context.Context, t Ticket) (handle string, err error)
	place(ctx context.Context, handle string) (place, error)
	remove(ctx context.Context, handle string) error
	stats(ctx context.Context) (Stats, error)
}

// Queue is a bounded priority queue with TTL. Safe for concurrent use.
type Queue struct {
	b    backend
	poll time.Duration

	waiters atomic.Int64 // turns inside Wait: Notify has no one to wake without them

	mu   sync.Mutex
	wake chan struct{}
}

func newQueue(b backend, cfg Config) *Queue {
	return &Queue{b: b, poll: cfg.PollInterval, wake: make(chan struct{})}
}

// Notify wakes every local waiter to re-check the head now: call it when
// quota or concurrency is released.
func (q *Queue) Notify() {
	if q.waiters.Load() == 0 {
		return // a waiter arriving later checks the head before it waits
	}
	q.mu.Lock()
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

func (q *Queue) wakeChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

// Stats returns the queue's depth by priority and its oldest wait.
func (q *Queue) Stats(ctx context.Context) (Stats, error) { return q.b.stats(ctx) }

// Wait enqueues t and returns once try, called only while t is at the head
// of the queue (on entry, on Notify and every PollInterval), returns true.
// It returns try's error, ErrExpired after the TTL, a *FullError when the
// queue is at capacity, or ctx.Err(); in every case the ticket has left the
// queue when Wait returns.
func (q *Queue) Wait(ctx context.Context, t Ticket, try func(ctx context.Context) (bool, error)) error {
	if t.Priority < P0 || t.Priority > P3 {
		return fmt.Errorf("queue: priority %d out of range P0..P3", t.Priority)
	}
	// Counted before the first check of the head: a Notify that finds no
	// waiter happened before that check, which then sees what it released.
	q.waiters.Add(1)
	defer q.waiters.Add(-1)
	h, err := q.b.add(ctx, t)
	if err != nil {
		return err
	}
	leave := func() {
		// The ticket must go even when ctx is done.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = q.b.remove(rctx, h)
		q.Notify()
	}
	tick := time.NewTicker(q.poll)
	defer tick.Stop()
	for {
		wake := q.wakeChan()
		p, err := q.b.place(ctx, h)
		switch {
		case err != nil:
			leave()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case p == placeGone:
			q.Notify()
			return ErrExpired
		case p == placeHead:
			ok, err := try(ctx)
			if err != nil || ok {
				leave()
				return err
			}
		}
		select {
		case <-ctx.Done():
			leave()
			return ctx.Err()
		case <-wake:
		case <-tick.C:
		}
	}
}
