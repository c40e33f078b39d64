// Package redishealth keeps one health state for the Redis a fleet shares,
// so that an outage costs a turn microseconds instead of one timeout per
// policy.
//
// Health is a circuit breaker (the configured "redis" breaker: by default 15
// failures or 40% of calls over 30s open it for 15s, then it probes with 1,
// 3 and 10 calls) installed as a go-redis hook on the client every
// Redis-backed policy uses. While it is closed, each command's outcome is
// recorded: a reply from Redis, errors included, is a success; a dial error
// or a closed connection is a failure. A command that ran out of time (a
// read timeout, the caller's deadline, no free connection in the pool) is
// neither: Redis may only be busy, so a PING on a connection of its own
// checks, and a Redis that does not answer it is declared down at once.
// While it is open, every command fails at once with ErrDown, without
// touching the network, and each policy applies its outage rule to that
// error as it would to any other Redis failure. While it is open, a PING
// every second (Health.WatchEvery) checks whether Redis is back; the first that
// answers ends the open period early. Then, as after a whole open period,
// recovery probes are sent: PINGs in the background (stages of 1, 3 and
// 10), while callers stay on their outage rules; when they succeed the
// breaker closes and shared state is used again, with no operator action,
// about a second after Redis returns.
package redishealth

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/breaker"
)

// ErrDown is the error of every Redis command refused while Redis is known
// to be unreachable. It matches breaker.ErrUnavailable too.
var ErrDown = errors.New("redis: unavailable, shared state off until a probe succeeds")

// BreakerName is the name of the breaker that holds Redis's health, in the
// breakers configuration and in GET /admin/breakers.
const BreakerName = "redis"

// Health is the health of one Redis server as this process sees it. It is
// safe for concurrent use; the zero value is not usable, call New.
type Health struct {
	br        *breaker.Memory
	closed    atomic.Bool
	ping      func(context.Context) error // set by Watch; nil: callers' commands probe
	closePing func() error                // closes the PING's own client
	verifying atomic.Bool                 // a PING is checking whether Redis is alive after a failed command
	watching  atomic.Bool                 // a PING a second is checking whether Redis is back
	done      chan struct{}               // closed by Close
	closeOnce sync.Once

	// WatchEvery is how often, while Redis is declared down, a PING checks
	// whether it is back. New sets DefaultWatchEvery; set it before use.
	WatchEvery time.Duration
}

// DefaultWatchEvery is Health.WatchEvery's default.
const DefaultWatchEvery = time.Second

// ProbeTimeout bounds each PING of a recovery probe: generous, because a
// probe on a fresh connection dials and shakes hands first, and a probe
// that fails re-opens the breaker for a whole open period.
const ProbeTimeout = time.Second

// New returns a healthy Health tuned by cfg (zero fields take
// breaker.DefaultConfig's values). now is the clock (time.Now when nil);
// onChange, when set, is told of each change: false when Redis is declared
// down, true when it is back. It is called synchronously, on the goroutine
// that made the change (a caller's, or a background probe's), and must be
// fast.
func New(cfg breaker.Config, now func() time.Time, onChange func(healthy bool)) *Health {
	if now == nil {
		now = time.Now
	}
	h := &Health{br: breaker.NewMemory(BreakerName, cfg, now), done: make(chan struct{}), WatchEvery: DefaultWatchEvery}
	h.closed.Store(true)
	h.br.OnTransition = func(_ string, from, to breaker.State) {
		if to == breaker.Open {
			h.watch()
		}
		switch {
		case to == breaker.Closed:
			h.closed.Store(true)
			if onChange != nil {
				onChange(true)
			}
		case from == breaker.Closed:
			h.closed.Store(false)
			if onChange != nil {
				onChange(false)
			}
		}
	}
	return h
}

// Watch puts every command of c under the health state (c.AddHook) and
// makes recovery probes PINGs on c, sent in the background with
// ProbeTimeout, so that no caller's command is spent, or delayed, as a
// probe. Call it once, before c is used.
//
// When c is a *redis.Client, the PINGs go on a client of their own (Close
// closes it), so that a pool every caller has taken does not make a busy
// Redis look dead.
func (h *Health) Watch(c redis.UniversalClient) {
	c.AddHook(h.Hook())
	pc := c
	if rc, ok := c.(*redis.Client); ok {
		o := *rc.Options()
		// One PING at a time needs one connection; the pool keeps c's size
		// all the same, since go-redis stops dialing, for a second at a
		// time, after as many failed dials as its size, and a probe must
		// dial the moment Redis is back. One retry: for a connection Redis
		// closed while it was away.
		o.MinIdleConns, o.MaxIdleConns, o.MaxRetries = 0, 2, 1
		own := redis.NewClient(&o)
		pc, h.closePing = own, own.Close
	}
	h.ping = func(ctx context.Context) error { return pc.Ping(ctx).Err() }
}

// Close stops the PINGs and releases the client Watch made for them.
func (h *Health) Close() {
	h.closeOnce.Do(func() {
		close(h.done)
		if h.closePing != nil {
			_ = h.closePing()
		}
	})
}

// watch PINGs Redis every WatchEvery while the breaker is open, and ends
// the open period at the first answer, with the recovery probes sent at
// once; it stops when the breaker closes. One watch runs at a time.
func (h *Health) watch() {
	if h.ping == nil || !h.watching.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer func() {
			h.watching.Store(false)
			// Opened again between the last look and the flag's reset:
			// nobody else would start the watch.
			if h.Snapshot(context.Background()).State == breaker.Open {
				h.watch()
			}
		}()
		t := time.NewTicker(h.WatchEvery)
		defer t.Stop()
		bg := context.Background()
		for {
			select {
			case <-h.done:
				return
			case <-t.C:
			}
			switch h.Snapshot(bg).State {
			case breaker.Closed:
				return
			case breaker.HalfOpen:
				continue // probes are out; they decide
			}
			ctx, cancel := context.WithTimeout(context.WithValue(bg, insideKey{}, h), ProbeTimeout)
			ok, _ := outcome(ctx, h.ping(ctx))
			cancel()
			if !ok {
				continue
			}
			h.br.EndOpen()
			if permit, err := h.br.Allow(bg); err == nil {
				h.probe(permit)
			}
		}
	}()
}

// Healthy reports whether Redis is in use: false while the breaker is open
// or probing. A policy that would rather not even build a Redis call can
// check it first; every command through a hooked client checks it anyway.
func (h *Health) Healthy() bool {
	s, _ := h.br.Snapshot(context.Background())
	return s.State == breaker.Closed
}

// Snapshot is the health breaker's state, for GET /admin/breakers and metrics.
func (h *Health) Snapshot(ctx context.Context) breaker.Snapshot {
	s, _ := h.br.Snapshot(ctx)
	return s
}

// Do runs one call to Redis made without a hooked client (or several
// commands that form one decision) under the health state: at once ErrDown
// while Redis is down, otherwise fn's error, whose outcome is recorded.
func (h *Health) Do(ctx context.Context, fn func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err // the caller's deadline, not Redis's health
	}
	if ctx.Value(insideKey{}) == h {
		// A command the client issues while serving one already admitted
		// (the handshake of a new connection): part of that call.
		return fn(ctx)
	}
	permit, err := h.br.Allow(ctx)
	if err != nil {
		return downError{}
	}
	if !h.closed.Load() && h.ping != nil {
		// Admitted as a recovery probe: PING in the background instead,
		// and keep this caller on its outage rule until the probes pass.
		go h.probe(permit)
		return downError{}
	}
	err = fn(context.WithValue(ctx, insideKey{}, h))
	ok, counts := outcome(ctx, err)
	switch {
	case !counts:
		permit.Release(ctx) // the caller left; that says nothing about Redis
	case !ok && h.ping != nil && slow(err):
		// Out of time is not down: the pool, or Redis, may only be busy.
		// A PING on a connection of its own tells which.
		permit.Release(ctx)
		h.verify()
	default:
		permit.Done(ctx, ok)
		if !ok && h.ping != nil {
			h.verify() // refused or dropped: a PING tells at once whether Redis is gone
		}
	}
	return err
}

// verify PINGs Redis, one check at a time, after a command failed or ran
// out of time. A Redis that answers was only busy, or lost one connection,
// which is no outage; one that does not answer within ProbeTimeout is down,
// and the breaker opens at once rather than after its threshold of
// failures, so that turns stop paying for commands sent to a dead server.
func (h *Health) verify() {
	if !h.verifying.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer h.verifying.Store(false)
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), insideKey{}, h), ProbeTimeout)
		defer cancel()
		if ok, _ := outcome(ctx, h.ping(ctx)); !ok && h.closed.Load() {
			h.br.Trip()
		}
	}()
}

// slow reports an error that says a command ran out of time (its deadline,
// a read timeout, no free connection in the pool) rather than that Redis
// refused or dropped it.
func slow(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// probe PINGs Redis under permit, then under each further probe permit
// the breaker grants, until the breaker closes, a PING fails or the
// current stage has no permit left (other probes are out).
func (h *Health) probe(permit breaker.Permit) {
	bg := context.Background()
	for {
		ctx, cancel := context.WithTimeout(context.WithValue(bg, insideKey{}, h), ProbeTimeout)
		ok, _ := outcome(ctx, h.ping(ctx))
		cancel()
		permit.Done(bg, ok)
		if !ok || h.closed.Load() {
			return
		}
		var err error
		if permit, err = h.br.Allow(bg); err != nil {
			return
		}
	}
}

// insideKey marks the context of a call admitted by Do.
type insideKey struct{}

// Hook is the go-redis hook that puts every command and pipeline of a
// client under the health state. Prefer Watch, which also gives the probes
// a client of their own to PING.
func (h *Health) Hook() redis.Hook { return hook{h} }

type hook struct{ h *Health }

func (k hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (k hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := k.h.Do(ctx, func(ctx context.Context) error { return next(ctx, cmd) })
		if errors.Is(err, ErrDown) {
			cmd.SetErr(err)
		}
		return err
	}
}

func (k hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := k.h.Do(ctx, func(ctx context.Context) error { return next(ctx, cmds) })
		if errors.Is(err, ErrDown) {
			for _, c := range cmds {
				c.SetErr(err)
			}
		}
		return err
	}
}

// downError is ErrDown, matching breaker.ErrUnavailable as well so that
// callers written against either recognise it.
type downError struct{}

func (downError) Error() string { return ErrDown.Error() }
func (downError) Is(target error) bool {
	return target == ErrDown || target == breaker.ErrUnavailable
}

// IsOutage reports whether err says Redis could not be reached or answered
// too slowly (as opposed to a reply, such as a missing key or a script
// error, that proves Redis is up).
func IsOutage(err error) bool {
	ok, counts := outcome(context.Background(), err)
	return counts && !ok
}

// outcome classifies a command's error: ok is true when Redis answered;
// counts is false when the caller cancelled and the outcome says nothing.
func outcome(ctx context.Context, err error) (ok, counts bool) {
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return true, true
	case errors.Is(err, ErrDown):
		return false, true
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return false, false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) && !isNetErr(err) {
		// A reply: Redis is up, unless it says it cannot serve.
		msg := rerr.Error()
		for _, p := range []string{"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
			if strings.HasPrefix(msg, p) {
				return false, true
			}
		}
		return true, true
	}
	return false, true
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}
