package retry

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSendRate is the fleet-wide SendRate: one count of the calls wanted
// and accepted per model, shared by every instance, in a Redis hash under
// prefix+"retry:rate:"+model, updated by one Lua script per call on Redis
// TIME. What one instance's calls are throttled paces the whole fleet's
// calls to that model.
//
// While the fleet does not pace a model, an instance asks Redis at most
// every syncEvery per model: the calls in between are granted locally and
// counted, wanted and accepted, at the next sync, so a model that accepts
// its calls costs no round trip per call. A paced model's calls each ask
// Redis.
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
// the fleet paces a model it has not seen paced.
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
// sent per accepted, floor (per second), window µs, calls granted locally
// since the last sync, paceAfter. The same arithmetic as rateState, times in µs.
// Returns 1 when an Allow is granted (and for a throttle), 0 when refused,
// plus 2 when the model's calls are being refused a share.
var sendRateScript = redis.NewScript(luaNow + `
local key, op = KEYS[1], ARGV[2]
local k, floor, window = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local calls, paceAfter = tonumber(ARGV[6]), tonumber(ARGV[7])
local s = redis.call('HMGET', key, 'w', 'a', 't', 'c', 's')
local w, a, t = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or now
local c, sent = tonumber(s[4]) or 1, tonumber(s[5]) or 0
if now > t then
  local f = math.exp(-(now - t) / window)
  w, a, t = w * f, a * f, now
end
w, a = w + calls, a + calls
local function refused()
  if w < paceAfter then return 0 end
  return math.max(0, (w - k * a) / (w + 1))
end
local ok = 1
if op == 'a' then
  w = w + 1
  c = math.min(1, c + 1 - refused())
  if c >= 1 - 1e-9 then
    c = c - 1
  elseif now - sent < 1e6 / floor then
    ok = 0
  end
  if ok == 1 then a, sent = a + 1, now end
else
  a = math.max(0, a - 1)
end
local function f(x) return string.format('%.17g', x) end
redis.call('HSET', key, 'w', f(w), 'a', f(a), 't', f(t), 'c', f(c), 's', f(sent))
redis.call('PEXPIRE', key, math.ceil(10 * window / 1000))
if refused() > 0 then ok = ok + 2 end
return ok
`)

// run calls the script with calls counted towards demand, and reports
// whether an Allow was granted and whether the model is limited.
func (r *RedisSendRate) run(ctx context.Context, model, op string, calls int) (ok, limited bool, err error) {
	ctx, cancel := r.gate.ctx(ctx)
	defer cancel()
	n, err := sendRateScript.Run(ctx, r.rdb, []string{r.prefix + "retry:rate:" + model},
		clockArg(r.clock), op, r.p.k, r.p.floor, r.p.window.Microseconds(), calls, paceAfter).Int()
	return n&1 == 1, n&2 == 2, err
}

// take grants the call being asked for locally when the fleet was not
// pacing the model as of a recent sync; otherwise it returns the calls
// granted locally since, to count with a request to Redis.
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
	calls, f.pending = f.pending, 0
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
