// Package redishealth keeps one health state for the Redis a fleet shares,
// so that an outage costs a turn microseconds instead of one timeout per
// policy.
//
// Health is a circuit breaker (the configured "redis" breaker: by default 15
// failures or 40% of calls over 30s open it for 15s, then it probes with 1,
// 3 and 10 calls) installed as a go-redis hook on the client every
// Redis-backed policy uses. While it is closed, each command's outcome is
// recorded: a reply from Redis, errors included, is a success; a dial error,
// timeout, closed connection or the caller's deadline passing is a failure.
// While it is open, every command fails at once with ErrDown, without
// touching the network, and each policy applies its outage rule to that
// error as it would to any other Redis failure. After the open period the
// next command triggers recovery probes: PINGs sent in the background
// (stages of 1, 3 and 10), while callers stay on their outage rules; when
// they succeed the breaker closes and shared state is used again, with no
// operator action.
package redishealth

import (
	"context"
	"errors"
	"net"
	"strings"
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
	br     *breaker.Memory
	closed atomic.Bool
	ping   func(context.Context) error // set by Watch; nil: callers' commands probe
}

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
	h := &Health{br: breaker.NewMemory(BreakerName, cfg, now)}
	h.closed.Store(true)
	h.br.OnTransition = func(_ string, from, to breaker.State) {
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
func (h *Health) Watch(c redis.UniversalClient) {
	c.AddHook(h.Hook())
	h.ping = func(ctx context.Context) error { return c.Ping(ctx).Err() }
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
	if ok, counts := outcome(ctx, err); counts {
		permit.Done(ctx, ok)
	} else {
		permit.Release(ctx) // the caller left; that says nothing about Redis
	}
	return err
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
