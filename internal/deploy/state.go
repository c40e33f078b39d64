package deploy

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Memory is the State of one instance.
type Memory struct {
	now func() time.Time

	mu   sync.Mutex
	deps map[[2]string]*memDep
}

type memDep struct {
	calls   map[string]time.Time // id → expiry
	latency time.Duration
	until   time.Time
}

// NewMemory returns an empty in-memory state on clock now (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, deps: map[[2]string]*memDep{}}
}

func (m *Memory) dep(tier, dep string) *memDep {
	d, ok := m.deps[[2]string{tier, dep}]
	if !ok {
		d = &memDep{calls: map[string]time.Time{}}
		m.deps[[2]string{tier, dep}] = d
	}
	return d
}

// Stats implements State.
func (m *Memory) Stats(_ context.Context, tier string, deps []string) ([]Stat, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Stat, len(deps))
	for i, name := range deps {
		d := m.dep(tier, name)
		for id, exp := range d.calls {
			if !now.Before(exp) {
				delete(d.calls, id)
			}
		}
		out[i] = Stat{InFlight: len(d.calls), Latency: d.latency, ThrottledUntil: d.until}
	}
	return out, nil
}

// Begin implements State.
func (m *Memory) Begin(_ context.Context, tier, dep, id string, ttl time.Duration) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dep(tier, dep).calls[id] = now.Add(ttl)
	return nil
}

// End implements State.
func (m *Memory) End(_ context.Context, tier, dep, id string, latency time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dep(tier, dep)
	delete(d.calls, id)
	d.latency = ewma(d.latency, latency)
	return nil
}

// Throttle implements State.
func (m *Memory) Throttle(_ context.Context, tier, dep string, for_ time.Duration) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dep(tier, dep)
	if until := now.Add(for_); until.After(d.until) {
		d.until = until
	}
	return nil
}

func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return time.Duration(float64(avg)*(1-ewmaWeight) + float64(sample)*ewmaWeight)
}

// Redis is the State of a fleet: per deployment, a sorted set of the calls
// in flight (scored by their expiry) and a hash of its average latency and
// throttle, under prefix. Times are Redis's own (TIME), so every instance
// agrees on them.
type Redis struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedis returns the state under prefix in c.
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix}
}

func (r *Redis) keys(tier, dep string) (calls, info string) {
	base := r.prefix + "deploy:" + strconv.Itoa(len(tier)) + ":" + tier + ":" + dep
	return base + ":calls", base + ":info"
}

// statsScript returns, for each deployment (KEYS in pairs: calls, info),
// its calls in flight (dropping the expired), its latency in µs and its
// throttle's end in ms, then Redis's time in ms.
var statsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 1, #KEYS, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  out[#out + 1] = redis.call('ZCARD', KEYS[i])
  local v = redis.call('HMGET', KEYS[i + 1], 'lat', 'until')
  out[#out + 1] = tonumber(v[1] or '0')
  out[#out + 1] = tonumber(v[2] or '0')
end
out[#out + 1] = now
return out
`)

// Stats implements State.
func (r *Redis) Stats(ctx context.Context, tier string, deps []string) ([]Stat, error) {
	keys := make([]string, 0, 2*len(deps))
	for _, d := range deps {
		c, i := r.keys(tier, d)
		keys = append(keys, c, i)
	}
	v, err := statsScript.Run(ctx, r.c, keys).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("deploy: redis stats: %w", err)
	}
	if len(v) != 3*len(deps)+1 {
		return nil, fmt.Errorf("deploy: redis stats: unexpected answer %v", v)
	}
	out := make([]Stat, len(deps))
	redisNow, now := v[len(v)-1], time.Now()
	for i := range deps {
		out[i] = Stat{InFlight: int(v[3*i]), Latency: time.Duration(v[3*i+1]) * time.Microsecond}
		if until := v[3*i+2]; until > redisNow {
			// Redis's clock, read on this one's.
			out[i].ThrottledUntil = now.Add(time.Duration(until-redisNow) * time.Millisecond)
		}
	}
	return out, nil
}

var beginScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// Begin implements State.
func (r *Redis) Begin(ctx context.Context, tier, dep, id string, ttl time.Duration) error {
	c, _ := r.keys(tier, dep)
	if err := beginScript.Run(ctx, r.c, []string{c}, id, max(ttl.Milliseconds(), 1)).Err(); err != nil {
		return fmt.Errorf("deploy: redis begin: %w", err)
	}
	return nil
}

// endScript ends call ARGV[1] and folds ARGV[2] µs into the average, with
// weight ARGV[3].
var endScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
local avg = tonumber(redis.call('HGET', KEYS[2], 'lat') or '0')
local s = tonumber(ARGV[2])
if avg == 0 then avg = s else avg = math.floor(avg * (1 - tonumber(ARGV[3])) + s * tonumber(ARGV[3])) end
redis.call('HSET', KEYS[2], 'lat', avg)
redis.call('PEXPIRE', KEYS[2], 86400000)
return 1
`)

// End implements State.
func (r *Redis) End(ctx context.Context, tier, dep, id string, latency time.Duration) error {
	c, i := r.keys(tier, dep)
	if err := endScript.Run(ctx, r.c, []string{c, i}, id, latency.Microseconds(), strconv.FormatFloat(ewmaWeight, 'f', -1, 64)).Err(); err != nil {
		return fmt.Errorf("deploy: redis end: %w", err)
	}
	return nil
}

var throttleScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local till = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if till > cur then redis.call('HSET', KEYS[1], 'until', till) end
redis.call('PEXPIRE', KEYS[1], 86400000)
return 1
`)

// Throttle implements State.
func (r *Redis) Throttle(ctx context.Context, tier, dep string, d time.Duration) error {
	_, i := r.keys(tier, dep)
	if err := throttleScript.Run(ctx, r.c, []string{i}, max(d.Milliseconds(), 1)).Err(); err != nil {
		return fmt.Errorf("deploy: redis throttle: %w", err)
	}
	return nil
}
