package budget

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCounters keeps counters in Redis for a fleet: a hash per session
// (in, out; expires SessionTTL after the last update) and a hash per user and
// day (cost in nano-USD; expires after 48 hours). Load is one pipelined round
// trip, Add one Lua script of HINCRBY and PEXPIRE (atomic, as a MULTI/EXEC
// would be, but a command that a turn's batch can pipeline with others). The enforcer bounds every
// call with Config.StoreTimeout; on error Check admits the request and
// reports it, Record returns it.
type RedisCounters struct {
	c      redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRedisCounters returns counters under prefix in c.
func NewRedisCounters(c redis.UniversalClient, prefix string, sessionTTL time.Duration) *RedisCounters {
	return &RedisCounters{c: c, prefix: prefix, ttl: sessionTTL}
}

func (r *RedisCounters) keys(userID, sessionID, day string) (string, string) {
	// Lengths make the keys unambiguous whatever the ids contain.
	u := strconv.Itoa(len(userID)) + ":" + userID
	return r.prefix + "budget:sess:" + u + ":" + sessionID, r.prefix + "budget:day:" + day + ":" + u
}

// Load implements Counters.
func (r *RedisCounters) Load(ctx context.Context, userID, sessionID, day string) (Totals, error) {
	sk, dk := r.keys(userID, sessionID, day)
	pipe := r.c.Pipeline()
	s := pipe.HMGet(ctx, sk, "in", "out")
	d := pipe.HGet(ctx, dk, "nusd")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Totals{}, fmt.Errorf("redis load: %w", err)
	}
	num := func(v any) int64 {
		n, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		return n
	}
	var t Totals
	if v := s.Val(); len(v) == 2 {
		t.SessionInput, t.SessionOutput = int(num(v[0])), int(num(v[1]))
	}
	if v, err := d.Int64(); err == nil {
		t.DayCostUSD = float64(v) / nanoUSD
	}
	return t, nil
}

// addScript adds ARGV[1] input and ARGV[2] output tokens to the session
// hash KEYS[1] and ARGV[4] nano-USD to the day hash KEYS[2], renewing their
// expiries to ARGV[3] and ARGV[5] milliseconds, and ends the hold ARGV[6]
// (none when empty).
var addScript = redis.NewScript(`
redis.call('HINCRBY', KEYS[1], 'in', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'out', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('HINCRBY', KEYS[2], 'nusd', ARGV[4])
if ARGV[6] ~= '' then
  redis.call('HDEL', KEYS[2], 'h:' .. ARGV[6])
end
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
`)

// Add implements Counters.
func (r *RedisCounters) Add(ctx context.Context, userID, sessionID, day, hold string, in, out int, costUSD float64) error {
	sk, dk := r.keys(userID, sessionID, day)
	err := addScript.Run(ctx, r.c, []string{sk, dk}, in, out, max(r.ttl.Milliseconds(), 1), toNano(costUSD), dayTTL.Milliseconds(), hold).Err()
	if err != nil {
		return fmt.Errorf("redis add: %w", err)
	}
	return nil
}

// holdScript holds ARGV[2] nano-USD for turn ARGV[1] in the day hash
// KEYS[1] when its spend (nusd) and the unexpired holds (fields h:ID, value
// "nano:expiry-ms") leave room under ARGV[3]; a hold lapses ARGV[4]
// milliseconds from now, and lapsed ones are dropped here. The clock is
// Redis's own (TIME), so every instance agrees on it.
var holdScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local total = tonumber(redis.call('HGET', KEYS[1], 'nusd') or '0')
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local f = fields[i]
  if string.sub(f, 1, 2) == 'h:' then
    local v = fields[i + 1]
    local sep = string.find(v, ':', 1, true)
    if tonumber(string.sub(v, sep + 1)) <= now then
      redis.call('HDEL', KEYS[1], f)
    else
      total = total + tonumber(string.sub(v, 1, sep - 1))
    end
  end
end
if total + tonumber(ARGV[2]) > tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], 'h:' .. ARGV[1], ARGV[2] .. ':' .. (now + tonumber(ARGV[4])))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// Hold implements Counters.
func (r *RedisCounters) Hold(ctx context.Context, userID, day, id string, nanoUSD, limitNano int64, ttl time.Duration) (bool, error) {
	_, dk := r.keys(userID, "", day)
	n, err := holdScript.Run(ctx, r.c, []string{dk}, id, nanoUSD, limitNano, max(ttl.Milliseconds(), 1), dayTTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redis hold: %w", err)
	}
	return n == 1, nil
}

// Release implements Counters.
func (r *RedisCounters) Release(ctx context.Context, userID, day, id string) error {
	_, dk := r.keys(userID, "", day)
	if err := r.c.HDel(ctx, dk, "h:"+id).Err(); err != nil {
		return fmt.Errorf("redis release: %w", err)
	}
	return nil
}
