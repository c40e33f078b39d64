package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisTimeout bounds every Redis call of the store.
const DefaultRedisTimeout = 50 * time.Millisecond

// gcraScript decides n tokens against every bucket in KEYS at once, in
// microseconds of Redis TIME (or of ARGV[2] when tests pin the clock), and
// stores the new TATs only when all of them admit. Each key expires when its
// bucket is full again, so idle buckets cost nothing.
//
// ARGV: n, now_us or "", then per key: interval_us, burst.
// Returns per key: allowed, remaining, retry_us (-1 = never), reset_us.
var gcraScript = redis.NewScript(`
local n = tonumber(ARGV[1])
local now
if ARGV[2] == "" then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[2])
end
local all = true
local out = {}
local tats = {}
for i, key in ipairs(KEYS) do
  local t = tonumber(ARGV[1 + 2 * i])
  local b = tonumber(ARGV[2 + 2 * i])
  local tau = b * t
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local have = math.floor((now - (tat - tau)) / t)
  local j = 4 * (i - 1)
  if n > b then
    all = false
    out[j+1] = 0; out[j+2] = have; out[j+3] = -1; out[j+4] = tat - now
  else
    local newtat = tat + n * t
    local allowat = newtat - tau
    if allowat > now then
      all = false
      out[j+1] = 0; out[j+2] = have; out[j+3] = allowat - now; out[j+4] = tat - now
    else
      tats[i] = newtat
      out[j+1] = 1; out[j+2] = have - n; out[j+3] = 0; out[j+4] = newtat - now
    end
  end
end
if all then
  for i, key in ipairs(KEYS) do
    local ttl = math.ceil((tats[i] - now) / 1000)
    if ttl > 0 then
      redis.call('SET', key, string.format('%.0f', tats[i]), 'PX', ttl)
    end
  end
  return {1, out}
end
for i, _ in ipairs(KEYS) do
  local j = 4 * (i - 1)
  if out[j+1] == 1 then out[j+2] = out[j+2] + n; out[j+4] = out[j+4] - n * tonumber(ARGV[1 + 2 * i]) end
end
return {0, out}
`)

// RedisStore keeps buckets in Redis for a fleet: one Lua script per
// decision (one round trip, however many buckets), Redis TIME as the clock,
// keys that expire when their bucket is full. Buckets of one AllowAll must
// live on one Redis node (no cluster slot spreading).
type RedisStore struct {
	client  redis.Scripter
	prefix  string
	timeout time.Duration
	// now, when set, replaces Redis TIME (tests pin the clock with it).
	now func() time.Time
}

// NewRedisStore returns a store keeping keys under prefix (e.g. "fmgate:rl:").
// Every call is bounded by timeout (DefaultRedisTimeout when <= 0).
func NewRedisStore(client redis.Scripter, prefix string, timeout time.Duration) *RedisStore {
	if timeout <= 0 {
		timeout = DefaultRedisTimeout
	}
	return &RedisStore{client: client, prefix: prefix, timeout: timeout}
}

// Allow implements Store.
func (s *RedisStore) Allow(ctx context.Context, key string, l Limit, n int) (Decision, error) {
	var out [1]Decision
	_, err := s.AllowAll(ctx, []Bucket{{Key: key, Limit: l}}, n, out[:])
	return out[0], err
}

// AllowAll implements Store in one round trip.
func (s *RedisStore) AllowAll(ctx context.Context, buckets []Bucket, n int, out []Decision) (bool, error) {
	if n < 0 {
		return false, ErrInvalidCost
	}
	keys := make([]string, 0, len(buckets))
	args := make([]any, 0, 2+2*len(buckets))
	args = append(args, n, "")
	if s.now != nil {
		args[1] = s.now().UnixMicro()
	}
	var pos []int // index in buckets of each key sent
	for i, b := range buckets {
		if !b.Limit.Enabled() {
			out[i] = Decision{Allowed: true}
			continue
		}
		keys = append(keys, s.prefix+b.Key)
		args = append(args, b.Limit.interval().Microseconds(), b.Limit.burst())
		pos = append(pos, i)
	}
	if len(keys) == 0 {
		return true, nil
	}
	res, err := s.run(ctx, keys, args)
	if err != nil {
		return false, fmt.Errorf("ratelimit: redis: %w", err)
	}
	if len(res) != 2 {
		return false, errors.New("ratelimit: redis: malformed script reply")
	}
	vals, ok := res[1].([]any)
	if !ok || len(vals) != 4*len(keys) {
		return false, errors.New("ratelimit: redis: malformed script reply")
	}
	num := func(v any) int64 {
		switch x := v.(type) {
		case int64:
			return x
		case string:
			i, _ := strconv.ParseInt(x, 10, 64)
			return i
		}
		return 0
	}
	for k, i := range pos {
		d := Decision{
			Allowed:    num(vals[4*k]) == 1,
			Remaining:  int(num(vals[4*k+1])),
			ResetAfter: time.Duration(num(vals[4*k+3])) * time.Microsecond,
		}
		if r := num(vals[4*k+2]); r < 0 {
			d.RetryAfter = Never
		} else {
			d.RetryAfter = time.Duration(r) * time.Microsecond
		}
		out[i] = d
	}
	return num(res[0]) == 1, nil
}

// run calls the script within s.timeout. go-redis honours context deadlines
// on the socket only when the client was built with ContextTimeoutEnabled;
// so that a silent server cannot hold a turn whatever the client options,
// the call runs aside and is abandoned at the deadline (it then ends at the
// client's own read timeout).
func (s *RedisStore) run(ctx context.Context, keys []string, args []any) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	type reply struct {
		v   []any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := gcraScript.Run(ctx, s.client, keys, args...).Slice()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
