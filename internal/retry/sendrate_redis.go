package retry

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSendRate is the fleet-wide SendRate: one bucket and one demand
// measure per model, shared by every instance, in a Redis hash under
// prefix+"retry:rate:"+model, updated by one Lua script per call on Redis
// TIME. A throttle seen by one instance slows the whole fleet's calls to
// that model, and the rate the fleet was calling it at is what the cut is
// taken from.
//
// When Redis fails (each call bounded by 100ms, then skipped for a second)
// the decision falls back to a MemorySendRate that every call also feeds,
// so an instance keeps pacing a model it sees throttling on its own.
type RedisSendRate struct {
	rdb    redis.Cmdable
	prefix string
	p      rateParams
	local  *MemorySendRate
	gate   redisGate
	// clock replaces Redis TIME in tests; nil in production.
	clock func() time.Time
}

// NewRedisSendRate returns a fleet-shared adaptive send rate. c must be
// valid; now is the local clock of the fallback.
func NewRedisSendRate(rdb redis.Cmdable, prefix string, c SendRateConfig, now func() time.Time) *RedisSendRate {
	return &RedisSendRate{rdb: rdb, prefix: prefix, p: newRateParams(c), local: NewMemorySendRate(c, now)}
}

// sendRateScript: KEYS[1] hash; ARGV clock, op ("a" allow, "t" throttled),
// decrease, growth, floor (per second), forget µs, demand bucket µs,
// smoothing. The same arithmetic as MemorySendRate, times in µs. Returns 1
// when an Allow is granted (and for a throttle), 0 when refused.
var sendRateScript = redis.NewScript(luaNow + `
local key, op = KEYS[1], ARGV[2]
local dec, growth, floor = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local forget, bucket, smooth = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local s = redis.call('HMGET', key, 'b', 'c', 'm', 'lim', 'w', 'k', 'thr', 'tok', 'ref')
local b, c, m = tonumber(s[1]), tonumber(s[2]) or 0, tonumber(s[3]) or 0
local lim = s[4] == '1'
local w, k, thr = tonumber(s[5]) or 0, tonumber(s[6]) or 0, tonumber(s[7]) or 0
local tok, ref = tonumber(s[8]) or 0, tonumber(s[9]) or now
local cur = math.floor(now / bucket)
if b == nil then
  b = cur
elseif cur > b then
  m = smooth * (c / ((cur - b) * bucket / 1e6)) + (1 - smooth) * m
  b, c = cur, 0
end
local function fill(t)
  local d = t - k
  return math.max(floor, growth * d * d * d + w)
end
local function refill()
  local f = fill((now - thr) / 1e6)
  if now > ref then
    tok = math.min(math.max(1, f), tok + f * (now - ref) / 1e6)
    ref = now
  end
  return f
end
local ok = 1
if op == 'a' then
  c = c + 1
  if lim then
    if now - thr >= forget then
      lim = false
    else
      refill()
      if tok < 1 then ok = 0 else tok = tok - 1 end
    end
  end
else
  local wn = m
  if lim and now - thr < forget then
    wn = math.min(wn, refill())
  else
    lim, tok, ref = true, 1, now
  end
  w, k, thr = wn, (wn * (1 - dec) / growth) ^ (1 / 3), now
  tok = math.min(tok, math.max(1, fill(0)))
end
local function f(x) return string.format('%.17g', x) end
local l = '0'
if lim then l = '1' end
redis.call('HSET', key, 'b', f(b), 'c', f(c), 'm', f(m), 'lim', l, 'w', f(w), 'k', f(k),
  'thr', f(thr), 'tok', f(tok), 'ref', f(ref))
redis.call('PEXPIRE', key, math.ceil((forget + 2 * bucket) / 1000))
return ok
`)

func (r *RedisSendRate) run(ctx context.Context, model, op string) (bool, error) {
	ctx, cancel := r.gate.ctx(ctx)
	defer cancel()
	n, err := sendRateScript.Run(ctx, r.rdb, []string{r.prefix + "retry:rate:" + model},
		clockArg(r.clock), op, r.p.decrease, r.p.growth, r.p.floor,
		r.p.forget.Microseconds(), demandBucket.Microseconds(), demandSmoothing).Int()
	return n == 1, err
}

// Allow implements SendRate.
func (r *RedisSendRate) Allow(ctx context.Context, model string) bool {
	local := r.local.Allow(ctx, model)
	if !r.gate.up() {
		return local
	}
	ok, err := r.run(ctx, model, "a")
	if err != nil {
		r.gate.fail()
		return local
	}
	return ok
}

// Throttled implements SendRate.
func (r *RedisSendRate) Throttled(ctx context.Context, model string) {
	r.local.Throttled(ctx, model)
	if !r.gate.up() {
		return
	}
	if _, err := r.run(ctx, model, "t"); err != nil {
		r.gate.fail()
	}
}
