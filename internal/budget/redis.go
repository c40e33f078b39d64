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
// (in, out; expires SessionTTL after the last update) and a hash per meter
// (spend in nano-USD and the holds in force; expires its TTL after the last
// change). Load is one pipelined round trip; Add, Hold and Release are one
// Lua script each over every meter of the turn (atomic, as a MULTI/EXEC
// would be, but a command a turn's batch can pipeline with others). The enforcer
// bounds every call with Config.StoreTimeout; on error Check admits the
// request and reports it, Record returns it.
type RedisCounters struct {
	c      redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRedisCounters returns counters under prefix in c.
func NewRedisCounters(c redis.UniversalClient, prefix string, sessionTTL time.Duration) *RedisCounters {
	return &RedisCounters{c: c, prefix: prefix, ttl: sessionTTL}
}

func (r *RedisCounters) sessionKey(userID, sessionID string) string {
	return r.prefix + "budget:sess:" + strconv.Itoa(len(userID)) + ":" + userID + ":" + sessionID
}

func (r *RedisCounters) meterKeys(meters []Meter) []string {
	keys := make([]string, len(meters))
	for i, m := range meters {
		keys[i] = r.prefix + "budget:" + m.Key
	}
	return keys
}

// Load implements Counters.
func (r *RedisCounters) Load(ctx context.Context, userID, sessionID, day string) (Totals, error) {
	pipe := r.c.Pipeline()
	var s *redis.SliceCmd
	if sessionID != "" {
		s = pipe.HMGet(ctx, r.sessionKey(userID, sessionID), "in", "out")
	}
	d := pipe.HGet(ctx, r.meterKeys([]Meter{UserDayMeter(userID, day, 0)})[0], "nusd")
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Totals{}, fmt.Errorf("redis load: %w", err)
	}
	num := func(v any) int64 {
		n, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
		return n
	}
	var t Totals
	if s != nil {
		if v := s.Val(); len(v) == 2 {
			t.SessionInput, t.SessionOutput = int(num(v[0])), int(num(v[1]))
		}
	}
	if v, err := d.Int64(); err == nil {
		t.DayCostUSD = float64(v) / nanoUSD
	}
	return t, nil
}

// A meter hash holds the spend (nusd), the holds in force (fields h:ID,
// value "nano:expiry-ms") and their sum (held), which a hold reads instead
// of every hold of the meter's turns in flight: a hold adds to it, its end
// (settlement or release) takes it off. It is summed again from the holds,
// dropping the lapsed ones, when the first of them lapses (lapse, ms) and at
// least once a second (sync, when it last was): so a hold that lapses is out
// of it at once, and one that an instance keeping no sum took or ended (a
// rolling upgrade) within the second.

// unholdLua defines unhold(K, id), which ends hold h:id in meter hash K.
const unholdLua = `
local function unhold(K, id)
  local v = redis.call('HGET', K, 'h:' .. id)
  if v then
    local sep = string.find(v, ':', 1, true)
    redis.call('HINCRBY', K, 'held', -tonumber(string.sub(v, 1, sep - 1)))
    redis.call('HDEL', K, 'h:' .. id)
  end
end
`

// addScript adds ARGV[4] nano-USD to each meter hash, ending the hold
// ARGV[5] (none when empty) and renewing the meter's expiry to its
// milliseconds in ARGV[7…]. With ARGV[6] "1" the first key is the session
// hash, which gets ARGV[1] input and ARGV[2] output tokens and an expiry
// ARGV[3] milliseconds away, and the meter hashes follow it; with "0" (a
// stateless turn) every key is a meter hash.
var addScript = redis.NewScript(unholdLua + `
local first = 1
if ARGV[6] == '1' then
  redis.call('HINCRBY', KEYS[1], 'in', ARGV[1])
  redis.call('HINCRBY', KEYS[1], 'out', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  first = 2
end
for i = first, #KEYS do
  redis.call('HINCRBY', KEYS[i], 'nusd', ARGV[4])
  if ARGV[5] ~= '' then unhold(KEYS[i], ARGV[5]) end
  redis.call('PEXPIRE', KEYS[i], ARGV[7 + i - first])
end
return 1
`)

// releaseScript ends hold ARGV[1] in each meter hash KEYS[…].
var releaseScript = redis.NewScript(unholdLua + `
for i = 1, #KEYS do unhold(KEYS[i], ARGV[1]) end
return 1
`)

// Add implements Counters.
func (r *RedisCounters) Add(ctx context.Context, userID, sessionID, hold string, meters []Meter, in, out int, costUSD float64) error {
	keys := r.meterKeys(meters)
	session := "0" // a stateless turn's: no session counted
	if sessionID != "" {
		keys, session = append([]string{r.sessionKey(userID, sessionID)}, keys...), "1"
	}
	args := []any{in, out, max(r.ttl.Milliseconds(), 1), toNano(costUSD), hold, session}
	for _, m := range meters {
		args = append(args, max(m.TTL.Milliseconds(), 1))
	}
	if err := addScript.Run(ctx, r.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("redis add: %w", err)
	}
	return nil
}

// holdScript holds ARGV[2] nano-USD for turn ARGV[1] in each meter hash
// KEYS[i] when, in every one of them, the spend (nusd) and the holds in
// force (held) leave room under its limit ARGV[2+2i] (0: no limit); else
// it holds nothing and returns {i, spend}. A hold lapses ARGV[3]
// milliseconds from now, and the meter expires ARGV[3+2i] milliseconds
// after the change. The clock is Redis's own (TIME), so every instance
// agrees on it.
var holdScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local want = tonumber(ARGV[2])
local expiry = now + tonumber(ARGV[3])
-- The holds' sum, from the holds themselves, and the first lapse among
-- them; the lapsed ones are dropped.
local function resum(K)
  local held, lapse = 0, 0
  local fields = redis.call('HGETALL', K)
  for j = 1, #fields, 2 do
    local f = fields[j]
    if string.sub(f, 1, 2) == 'h:' then
      local v = fields[j + 1]
      local sep = string.find(v, ':', 1, true)
      local exp = tonumber(string.sub(v, sep + 1))
      if exp <= now then
        redis.call('HDEL', K, f)
      else
        held = held + tonumber(string.sub(v, 1, sep - 1))
        if lapse == 0 or exp < lapse then lapse = exp end
      end
    end
  end
  if #fields > 0 then -- a meter not yet written stays so (no key without its expiry)
    redis.call('HSET', K, 'held', held, 'sync', now, 'lapse', lapse)
  end
  return held, lapse
end
local lapses = {}
for i = 1, #KEYS do
  local v = redis.call('HMGET', KEYS[i], 'nusd', 'held', 'sync', 'lapse')
  local spent, held, sync, lapse = tonumber(v[1]) or 0, tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
  if held == nil or sync == nil or lapse == nil or now - sync >= 1000 or now < sync or (lapse > 0 and now >= lapse) then
    held, lapse = resum(KEYS[i])
  end
  lapses[i] = lapse
  local limit = tonumber(ARGV[2 + 2 * i])
  if limit > 0 and spent + held + want > limit then
    return {i, spent}
  end
end
local value = ARGV[2] .. ':' .. expiry
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], 'h:' .. ARGV[1], value)
  redis.call('HINCRBY', KEYS[i], 'held', want)
  if lapses[i] == 0 or expiry < lapses[i] then redis.call('HSET', KEYS[i], 'lapse', expiry) end
  redis.call('PEXPIRE', KEYS[i], ARGV[3 + 2 * i])
end
return {0, 0}
`)

// Hold implements Counters.
func (r *RedisCounters) Hold(ctx context.Context, id string, nanoUSD int64, meters []Meter, ttl time.Duration) (int, int64, error) {
	if len(meters) == 0 {
		return -1, 0, nil
	}
	args := []any{id, nanoUSD, max(ttl.Milliseconds(), 1)}
	for _, m := range meters {
		args = append(args, m.Limit, max(m.TTL.Milliseconds(), 1))
	}
	res, err := holdScript.Run(ctx, r.c, r.meterKeys(meters), args...).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redis hold: %w", err)
	}
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("redis hold: unexpected answer %v", res)
	}
	return int(res[0]) - 1, res[1], nil
}

// Spent implements Counters: one pipelined round trip.
func (r *RedisCounters) Spent(ctx context.Context, meters []Meter) ([]int64, error) {
	pipe := r.c.Pipeline()
	cmds := make([]*redis.StringCmd, len(meters))
	for i, k := range r.meterKeys(meters) {
		cmds[i] = pipe.HGet(ctx, k, "nusd")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redis spent: %w", err)
	}
	out := make([]int64, len(meters))
	for i, c := range cmds {
		out[i], _ = c.Int64()
	}
	return out, nil
}

// Release implements Counters.
func (r *RedisCounters) Release(ctx context.Context, id string, meters []Meter) error {
	if len(meters) == 0 {
		return nil
	}
	if err := releaseScript.Run(ctx, r.c, r.meterKeys(meters), id).Err(); err != nil {
		return fmt.Errorf("redis release: %w", err)
	}
	return nil
}
