package breaker

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redisbatch"
)

//go:embed redis.lua
var redisLua string

var redisScript = redis.NewScript(redisLua)

// DefaultRedisTimeout bounds each Redis call of a Redis breaker.
const DefaultRedisTimeout = 200 * time.Millisecond

// stateTTL keeps an idle breaker's keys for a day, then lets them go: a
// breaker nobody has called for a day restarts closed.
const stateTTL = 24 * time.Hour

// Redis is a Breaker whose state is shared by a fleet through Redis. Every
// Allow and every Done is one atomic Lua script (one round trip) that reads
// the clock with Redis TIME, so instances agree on time and state.
//
// When Redis cannot be reached or is slower than Timeout, the breaker fails
// open: Allow returns a Permit that records nothing and an error wrapping
// ErrUnavailable (never ErrOpen), which callers treat as "allowed, breaker
// unknown" and log; Done drops the outcome; Snapshot returns the error. A
// Redis outage therefore never blocks model calls, and a Redis dependency
// breaker should guard the Redis client itself.
//
// The config travels with every call rather than living in Redis, so
// instances sharing a name should share a config; during a rolling change
// each instance applies its own thresholds to the shared counts.
type Redis struct {
	// OnTransition, if set before first use, is told of every state change
	// this instance makes (another instance reports its own).
	OnTransition TransitionFunc
	// Timeout bounds each call; zero means DefaultRedisTimeout.
	Timeout time.Duration

	client redis.UniversalClient
	name   string
	keys   []string
	args   []any // ARGV from position 6 on: the config
}

// NewRedis returns a breaker named name whose keys live under keyPrefix
// (keyPrefix + "breaker:{name}" and two companions sharing its hash slot).
// Zero or invalid cfg fields take DefaultConfig's values.
func NewRedis(client redis.UniversalClient, keyPrefix, name string, cfg Config) *Redis {
	cfg = cfg.normalized()
	base := keyPrefix + "breaker:{" + name + "}"
	args := []any{
		cfg.FailureThreshold,
		strconv.FormatFloat(cfg.FailureRate, 'g', -1, 64),
		cfg.MinCalls,
		cfg.bucketMicros(),
		windowBuckets,
		max(cfg.OpenTimeout.Microseconds(), 1),
		max(cfg.HalfOpenWait.Microseconds(), 1),
		stateTTL.Milliseconds(),
		(cfg.Window + cfg.Window/windowBuckets + time.Second).Milliseconds(),
	}
	for _, n := range cfg.Stages {
		args = append(args, n)
	}
	return &Redis{
		client: client,
		name:   name,
		keys:   []string{base, base + ":probes", base + ":window"},
		args:   args,
	}
}

// reply is the script's answer; see redis.lua.
type reply struct {
	allowed                   bool
	state                     State
	gen                       int64
	slot                      int
	retry                     int64
	stage, stageProbes        int
	admitted, succeeded, inFl int
	calls, failures           int
	openedAt                  int64
}

func (b *Redis) argv(op string, gen int64, slot int, success bool, age time.Duration) []any {
	ok := "0"
	if success {
		ok = "1"
	}
	argv := make([]any, 0, 5+len(b.args))
	argv = append(argv, op, gen, slot, ok, max(age.Microseconds(), 0))
	return append(argv, b.args...)
}

func (b *Redis) run(ctx context.Context, op string, gen int64, slot int, success bool) (reply, error) {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return b.decode(redisScript.Run(ctx, b.client, b.keys, b.argv(op, gen, slot, success, 0)...))
}

// decode reads the script's reply and reports the transitions it made.
func (b *Redis) decode(cmd *redis.Cmd) (reply, error) {
	v, err := cmd.Int64Slice()
	if err != nil {
		return reply{}, fmt.Errorf("breaker %s: %w: %w", b.name, ErrUnavailable, err)
	}
	if len(v) < 13 || len(v)%2 != 1 {
		return reply{}, fmt.Errorf("breaker %s: %w: malformed script reply of %d values", b.name, ErrUnavailable, len(v))
	}
	for i := 13; i+1 < len(v); i += 2 {
		if b.OnTransition != nil {
			b.OnTransition(b.name, State(v[i]), State(v[i+1]))
		}
	}
	return reply{
		allowed: v[0] == 1, state: State(v[1]), gen: v[2], slot: int(v[3]), retry: v[4],
		stage: int(v[5]), stageProbes: int(v[6]), admitted: int(v[7]), succeeded: int(v[8]),
		inFl: int(v[9]), calls: int(v[10]), failures: int(v[11]), openedAt: v[12],
	}, nil
}

// Allow implements Breaker; see the type's comment for Redis errors.
func (b *Redis) Allow(ctx context.Context) (Permit, error) {
	r, err := b.run(ctx, "allow", 0, -1, false)
	if err != nil {
		return noopPermit{}, err
	}
	if !r.allowed {
		return noopPermit{}, &OpenError{
			Name:       b.name,
			RetryAfter: time.Duration(r.retry) * time.Microsecond,
			State:      r.state,
		}
	}
	return &redisPermit{b: b, gen: r.gen, slot: r.slot, state: r.state}, nil
}

// Snapshot implements Breaker.
func (b *Redis) Snapshot(ctx context.Context) (Snapshot, error) {
	return b.snapshot(ctx, "snap")
}

// State implements Stater: a snapshot without the rolling window's counts
// (Calls and Failures stay 0), which the script then does not read.
func (b *Redis) State(ctx context.Context) (Snapshot, error) {
	return b.snapshot(ctx, "state")
}

func (b *Redis) snapshot(ctx context.Context, op string) (Snapshot, error) {
	r, err := b.run(ctx, op, 0, -1, false)
	if err != nil {
		return Snapshot{Name: b.name}, err
	}
	s := Snapshot{
		Name: b.name, State: r.state, Generation: r.gen,
		RetryAfter: time.Duration(r.retry) * time.Microsecond,
	}
	if r.openedAt != 0 {
		s.OpenedAt = time.UnixMicro(r.openedAt)
	}
	switch r.state {
	case Closed:
		s.Calls, s.Failures = r.calls, r.failures
	case HalfOpen:
		s.Stage, s.StageProbes = r.stage, r.stageProbes
		s.Admitted, s.Succeeded, s.InFlight = r.admitted, r.succeeded, r.inFl
	}
	return s, nil
}

type redisPermit struct {
	b     *Redis
	gen   int64
	slot  int
	state State // when the permit was issued
	done  atomic.Bool
}

// State is the breaker's state when the permit was issued.
func (p *redisPermit) State() State { return p.state }

// Done records the outcome; if Redis fails the outcome is dropped (fail-open).
// Within a turn's batch (redisbatch) the outcome is sent with the turn's
// next Redis command, or at the turn's end; the transitions it makes are
// reported then.
func (p *redisPermit) Done(ctx context.Context, success bool) {
	if p.done.Swap(true) {
		return
	}
	argv := func(age time.Duration) []any { return p.b.argv("done", p.gen, p.slot, success, age) }
	if redisbatch.Later(ctx, redisScript, p.b.keys, argv, func(cmd *redis.Cmd) { _, _ = p.b.decode(cmd) }) {
		return
	}
	_, _ = p.b.run(context.WithoutCancel(ctx), "done", p.gen, p.slot, success)
}

// Release gives a probe's place back (see Permit); like Done, it rides the
// turn's batch when there is one. A closed-state permit holds no place.
func (p *redisPermit) Release(ctx context.Context) {
	if p.done.Swap(true) || p.slot < 0 {
		return
	}
	argv := func(age time.Duration) []any { return p.b.argv("release", p.gen, p.slot, false, age) }
	if redisbatch.Later(ctx, redisScript, p.b.keys, argv, func(cmd *redis.Cmd) { _, _ = p.b.decode(cmd) }) {
		return
	}
	_, _ = p.b.run(context.WithoutCancel(ctx), "release", p.gen, p.slot, false)
}
