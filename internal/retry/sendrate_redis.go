package retry

import (
	"context"
	"sync"
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
// While the fleet has not seen the model throttle, an instance asks Redis
// at most every syncEvery per model: the calls in between are granted
// locally and counted towards the fleet's demand at the next sync, so an
// unthrottled model costs no round trip per call. A limited model's calls
// each take their token from Redis.
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
	now    func() time.Time
	// clock replaces Redis TIME in tests; nil in production.
	clock func() time.Time

	mu     sync.Mutex
	models map[string]*fleetRate
}

// syncEvery is the longest an instance goes without asking Redis whether
// the fleet limits a model it has not seen limited.
const syncEvery = 250 * time.Millisecond

// fleetRate is what an instance knows of the fleet's state for a model.
type fleetRate struct {
	limited bool      // as of the last reply
	synced  time.Time // the last reply
	pending int       // calls granted locally since
}

// NewRedisSendRate returns a fleet-shared adaptive send rate. c must be
// valid; now is the local clock of the fallback.
func NewRedisSendRate(rdb redis.Cmdable, prefix string, c SendRateConfig, now func() time.Time) *RedisSendRate {
	return &RedisSendRate{rdb: rdb, prefix: prefix, p: newRateParams(c), local: NewMemorySendRate(c, now),
		now: now, models: map[string]*fleetRate{}}
}

// sendRateScript: KEYS[1] hash; ARGV clock, op ("a" allow, "t" throttled),
// decrease, growth, floor (per second), forget µs, demand bucket µs,
// smoothing, calls (granted locally since the last sync, plus the one being
// asked for on "a"). The same arithmetic as MemorySendRate, times in µs.
// Returns 1 when an Allow is granted (and for a throttle), 0 when refused,
// plus 2 when the model is limited.
var sendRateScript = redis.NewScript(luaNow + `
local key, op = KEYS[1], ARGV[2]
local dec, growth, floor = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local forget, bucket, smooth = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local calls = tonumber(ARGV[9])
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
c = c + calls
if op == 'a' then
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
if lim then ok = ok + 2 end
return ok
`)

// run calls the script with calls counted towards demand, and reports
// whether an Allow was granted and whether the model is limited.
func (r *RedisSendRate) run(ctx context.Context, model, op string, calls int) (ok, limited bool, err error) {
	ctx, cancel := r.gate.ctx(ctx)
	defer cancel()
	n, err := sendRateScript.Run(ctx, r.rdb, []string{r.prefix + "retry:rate:" + model},
		clockArg(r.clock), op, r.p.decrease, r.p.growth, r.p.floor,
		r.p.forget.Microseconds(), demandBucket.Microseconds(), demandSmoothing, calls).Int()
	return n&1 == 1, n&2 == 2, err
}

// take returns the model's fleet state, and the calls to flush with a
// request to Redis (0 when the call is granted locally without one).
func (r *RedisSendRate) take(model string, asking bool) (calls int, local bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.models[model]
	if !ok {
		f = &fleetRate{}
		r.models[model] = f
	}
	if asking && !f.limited && r.now().Sub(f.synced) < syncEvery && ok {
		f.pending++
		return 0, true
	}
	calls = f.pending
	if asking {
		calls++
	}
	f.pending = 0
	return calls, false
}

// learn records a reply.
func (r *RedisSendRate) learn(model string, limited bool) {
	r.mu.Lock()
	if f, ok := r.models[model]; ok {
		f.limited, f.synced = limited, r.now()
	}
	r.mu.Unlock()
}

// Allow implements SendRate.
func (r *RedisSendRate) Allow(ctx context.Context, model string) bool {
	local := r.local.Allow(ctx, model)
	if !r.gate.up() {
		return local
	}
	calls, granted := r.take(model, true)
	if granted {
		return true
	}
	ok, limited, err := r.run(ctx, model, "a", calls)
	if err != nil {
		r.gate.fail()
		return local
	}
	r.learn(model, limited)
	return ok
}

// Throttled implements SendRate.
func (r *RedisSendRate) Throttled(ctx context.Context, model string) {
	r.local.Throttled(ctx, model)
	if !r.gate.up() {
		return
	}
	calls, _ := r.take(model, false)
	if _, limited, err := r.run(ctx, model, "t", calls); err != nil {
		r.gate.fail()
	} else {
		r.learn(model, limited)
	}
}
