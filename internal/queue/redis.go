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

// Scores are band·1e13 + the ticket's virtual start tag in its band, a
// band being a priority's premium or its standard tickets (Ticket.band).
// Start-time fair queueing: a flow's next tag is max(the band's virtual
// time, the flow's last finish tag), its finish tag that plus 1000/weight.
// Members are a zero-padded sequence number and the ticket ID, so equal
// tags still sort by arrival. The hash fq holds each band's virtual time
// (v:B) and each flow's finish tag (f:B:flow). The sorted set at holds
// arrivals for the TTL, and seen each member's last poll: a ticket whose
// instance stopped polling (crashed) is reaped after the lease instead of
// blocking the head for a whole TTL.
const luaCommon = `
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(x) return string.format('%.0f', x) end
local function ftag(x) return string.format('%.6f', x) end
local function drop(q, seen, at, m)
  redis.call('ZREM', q, m)
  redis.call('ZREM', seen, m)
  redis.call('ZREM', at, m)
end
local function reap(q, seen, at, now, ttl, lease)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', at, '-inf', fmt(now - ttl))) do drop(q, seen, at, m) end
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', seen, '-inf', fmt(now - lease))) do drop(q, seen, at, m) end
end
local function fronts(q, at)
  local counts, oldest = {}, -1
  for p = 0, 3 do
    local base = 2 * p * 1e13 -- a priority's two bands: premium, standard
    counts[p + 1] = redis.call('ZCOUNT', q, fmt(base), '(' .. fmt(base + 2e13))
  end
  local f = redis.call('ZRANGE', at, 0, 0, 'WITHSCORES')
  if f[2] then oldest = tonumber(f[2]) end
  return counts, oldest
end
`

// KEYS: queue, seen, seq, at, fq. ARGV: id, band, ttl_ms, lease_ms,
// capacity, flow, weight. Returns {1, member} or {0, retry_ms}.
var addScript = redis.NewScript(luaCommon + `
local now = nowms()
local ttl, lease, cap = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
reap(KEYS[1], KEYS[2], KEYS[4], now, ttl, lease)
if redis.call('ZCARD', KEYS[1]) >= cap then
  local _, oldest = fronts(KEYS[1], KEYS[4])
  return {0, oldest + ttl - now}
end
local seq = redis.call('INCR', KEYS[3])
local m = string.format('%015.0f', seq) .. ':' .. ARGV[1]
local p = tonumber(ARGV[2])
local v = tonumber(redis.call('HGET', KEYS[5], 'v:' .. p) or '0')
local fkey = 'f:' .. p .. ':' .. ARGV[6]
local start = math.max(v, tonumber(redis.call('HGET', KEYS[5], fkey) or '0'))
redis.call('HSET', KEYS[5], fkey, ftag(start + 1000 / tonumber(ARGV[7])))
redis.call('ZADD', KEYS[1], ftag(p * 1e13 + start), m)
redis.call('ZADD', KEYS[2], fmt(now), m)
redis.call('ZADD', KEYS[4], fmt(now), m)
if redis.call('HLEN', KEYS[5]) > 4 * cap then
  local all = redis.call('HGETALL', KEYS[5])
  for i = 1, #all, 2 do
    local cls = string.match(all[i], '^f:(%d):')
    if cls and tonumber(all[i + 1]) <= tonumber(redis.call('HGET', KEYS[5], 'v:' .. cls) or '0') then
      redis.call('HDEL', KEYS[5], all[i])
    end
  end
end
for i = 1, 5 do redis.call('PEXPIRE', KEYS[i], 2 * ttl + lease) end
return {1, m}
`)

// KEYS: queue, seen, at. ARGV: member, ttl_ms, lease_ms.
// Returns 1 at the head, 0 waiting, -1 gone.
var placeScript = redis.NewScript(luaCommon + `
local now = nowms()
reap(KEYS[1], KEYS[2], KEYS[3], now, tonumber(ARGV[2]), tonumber(ARGV[3]))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -1 end
redis.call('ZADD', KEYS[2], fmt(now), ARGV[1])
local first = redis.call('ZRANGE', KEYS[1], 0, 0)
if first[1] == ARGV[1] then return 1 end
return 0
`)

// KEYS: queue, seen, at, fq. ARGV: member. A ticket leaving from the head
// moves its class's virtual time to its start tag.
var removeScript = redis.NewScript(luaCommon + `
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[1] == ARGV[1] then
  local score = tonumber(first[2])
  local p = math.floor(score / 1e13)
  local start = score - p * 1e13
  local v = tonumber(redis.call('HGET', KEYS[4], 'v:' .. p) or '0')
  if start > v then redis.call('HSET', KEYS[4], 'v:' .. p, ftag(start)) end
end
drop(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return 1
`)

// KEYS: queue, seen, at. ARGV: ttl_ms, lease_ms. Returns {n0, n1, n2, n3, oldest_wait_ms}.
var statsScript = redis.NewScript(luaCommon + `
local now = nowms()
reap(KEYS[1], KEYS[2], KEYS[3], now, tonumber(ARGV[1]), tonumber(ARGV[2]))
local counts, oldest = fronts(KEYS[1], KEYS[3])
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
		keys:    []string{opt.Prefix + "q", opt.Prefix + "seen", opt.Prefix + "seq", opt.Prefix + "at", opt.Prefix + "fq"},
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

// shortKeys are the queue, seen and arrival sets.
func (r *redisBackend) shortKeys() []string { return []string{r.keys[0], r.keys[1], r.keys[3]} }

func (r *redisBackend) add(ctx context.Context, t Ticket) (string, error) {
	v, err := r.run(ctx, addScript, r.keys, t.ID, t.band(), r.ttlMs, r.leaseMs, r.cfg.Capacity, t.flow(), r.cfg.weight(t))
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
	v, err := r.run(ctx, placeScript, r.shortKeys(), h, r.ttlMs, r.leaseMs)
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
	_, err := r.run(ctx, removeScript, []string{r.keys[0], r.keys[1], r.keys[3], r.keys[4]}, h)
	return err
}

func (r *redisBackend) stats(ctx context.Context) (Stats, error) {
	v, err := r.run(ctx, statsScript, r.shortKeys(), r.ttlMs, r.leaseMs)
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
