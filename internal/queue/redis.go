package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisTimeout bounds every Redis call of the queue.
const DefaultRedisTimeout = 50 * time.Millisecond

// Scores are priority·1e13 + arrival in Redis TIME milliseconds; members
// are a zero-padded sequence number and the ticket ID, so equal scores
// (same millisecond) still sort by arrival. A second sorted set holds each
// member's last poll: a ticket whose instance stopped polling (crashed) is
// reaped after the lease instead of blocking the head for a whole TTL.
const luaCommon = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(x) return string.format('%.0f', x) end
local function reap(q, seen, now, ttl, lease)
  for p = 0, 3 do
    local base = p * 1e13
    local old = redis.call('ZRANGEBYSCORE', q, fmt(base), fmt(base + now - ttl))
    for _, m in ipairs(old) do
      redis.call('ZREM', q, m)
      redis.call('ZREM', seen, m)
    end
  end
  local stale = redis.call('ZRANGEBYSCORE', seen, '-inf', fmt(now - lease))
  for _, m in ipairs(stale) do
    redis.call('ZREM', q, m)
    redis.call('ZREM', seen, m)
  end
end
local function fronts(q, now)
  local counts, oldest = {}, -1
  for p = 0, 3 do
    local base = p * 1e13
    counts[p + 1] = redis.call('ZCOUNT', q, fmt(base), '(' .. fmt(base + 1e13))
    local f = redis.call('ZRANGEBYSCORE', q, fmt(base), '(' .. fmt(base + 1e13), 'WITHSCORES', 'LIMIT', 0, 1)
    if f[2] then
      local at = tonumber(f[2]) - base
      if oldest < 0 or at < oldest then oldest = at end
    end
  end
  return counts, oldest
end
`

// KEYS: queue, seen, seq. ARGV: id, priority, ttl_ms, lease_ms, capacity.
// Returns {1, member} or {0, retry_ms}.
var addScript = redis.NewScript(luaCommon + `
local now = nowms()
local ttl, lease, cap = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
reap(KEYS[1], KEYS[2], now, ttl, lease)
if redis.call('ZCARD', KEYS[1]) >= cap then
  local _, oldest = fronts(KEYS[1], now)
  return {0, oldest + ttl - now}
end
local seq = redis.call('INCR', KEYS[3])
local m = string.format('%015.0f', seq) .. ':' .. ARGV[1]
redis.call('ZADD', KEYS[1], fmt(tonumber(ARGV[2]) * 1e13 + now), m)
redis.call('ZADD', KEYS[2], fmt(now), m)
for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], 2 * ttl + lease) end
return {1, m}
`)

// KEYS: queue, seen. ARGV: member, ttl_ms, lease_ms.
// Returns 1 at the head, 0 waiting, -1 gone.
var placeScript = redis.NewScript(luaCommon + `
local now = nowms()
reap(KEYS[1], KEYS[2], now, tonumber(ARGV[2]), tonumber(ARGV[3]))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -1 end
redis.call('ZADD', KEYS[2], fmt(now), ARGV[1])
local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if first[1] == ARGV[1] then return 1 end
return 0
`)

// KEYS: queue, seen. ARGV: member.
var removeScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`)

// KEYS: queue, seen. ARGV: ttl_ms, lease_ms. Returns {n0, n1, n2, n3, oldest_wait_ms}.
var statsScript = redis.NewScript(luaCommon + `
local now = nowms()
reap(KEYS[1], KEYS[2], now, tonumber(ARGV[1]), tonumber(ARGV[2]))
local counts, oldest = fronts(KEYS[1], now)
local wait = 0
if oldest >= 0 then wait = now - oldest end
return {counts[1], counts[2], counts[3], counts[4], wait}
`)

// RedisOptions are the fleet-mode settings beyond Config.
type RedisOptions struct {
	// Prefix is prepended to the queue's three keys (e.g. "fmgate:queue:").
	Prefix string
	// Timeout bounds every Redis call (default 50ms).
	Timeout time.Duration
	// Lease is how long a ticket survives without its instance polling
	// (default max(1s, 20·PollInterval)); it must exceed the longest try.
	Lease time.Duration
}

// NewRedis returns a queue shared by every instance using the same Redis
// and prefix. Expiry and order use Redis TIME; capacity is checked in the
// same script that adds. When Redis fails, Wait returns the error (the
// gateway answers 429/503) rather than waiting on it.
func NewRedis(client redis.Scripter, cfg Config, opt RedisOptions) *Queue {
	cfg = withDefaults(cfg)
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultRedisTimeout
	}
	if opt.Lease <= 0 {
		opt.Lease = max(time.Second, 20*cfg.PollInterval)
	}
	r := &redisBackend{
		c:       client,
		cfg:     cfg,
		opt:     opt,
		keys:    []string{opt.Prefix + "q", opt.Prefix + "seen", opt.Prefix + "seq"},
		ttlMs:   cfg.TTL.Milliseconds(),
		leaseMs: opt.Lease.Milliseconds(),
	}
	return newQueue(r, cfg)
}

type redisBackend struct {
	c       redis.Scripter
	cfg     Config
	opt     RedisOptions
	keys    []string
	ttlMs   int64
	leaseMs int64
}

// run calls a script within the timeout even when the client ignores
// context deadlines (ContextTimeoutEnabled false): the call is abandoned at
// the deadline and ends on its own at the client's read timeout.
func (r *redisBackend) run(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opt.Timeout)
	defer cancel()
	type reply struct {
		v   any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := s.Run(ctx, r.c, keys, args...).Result()
		ch <- reply{v, err}
	}()
	select {
	case rep := <-ch:
		if rep.err != nil {
			return nil, fmt.Errorf("queue: redis: %w", rep.err)
		}
		return rep.v, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("queue: redis: %w", ctx.Err())
	}
}

var errReply = errors.New("queue: redis: malformed script reply")

func (r *redisBackend) add(ctx context.Context, t Ticket) (string, error) {
	v, err := r.run(ctx, addScript, r.keys, t.ID, int(t.Priority), r.ttlMs, r.leaseMs, r.cfg.Capacity)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", errReply
	}
	if n, _ := a[0].(int64); n == 1 {
		m, ok := a[1].(string)
		if !ok {
			return "", errReply
		}
		return m, nil
	}
	retry, _ := a[1].(int64)
	return "", &FullError{RetryAfter: max(time.Duration(retry)*time.Millisecond, r.cfg.PollInterval)}
}

func (r *redisBackend) place(ctx context.Context, h string) (place, error) {
	v, err := r.run(ctx, placeScript, r.keys[:2], h, r.ttlMs, r.leaseMs)
	if err != nil {
		return placeWaiting, err
	}
	switch n, _ := v.(int64); n {
	case 1:
		return placeHead, nil
	case 0:
		return placeWaiting, nil
	default:
		return placeGone, nil
	}
}

func (r *redisBackend) remove(ctx context.Context, h string) error {
	_, err := r.run(ctx, removeScript, r.keys[:2], h)
	return err
}

func (r *redisBackend) stats(ctx context.Context) (Stats, error) {
	v, err := r.run(ctx, statsScript, r.keys[:2], r.ttlMs, r.leaseMs)
	if err != nil {
		return Stats{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return Stats{}, errReply
	}
	var s Stats
	for i := range numPriorities {
		n, _ := a[i].(int64)
		s.ByPriority[i] = int(n)
		s.Depth += int(n)
	}
	w, _ := a[4].(int64)
	s.OldestWait = time.Duration(w) * time.Millisecond
	return s, nil
}
