package retry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisPressure shares pressure levels across a fleet. Each instance runs
// the level machine on its own outcomes (as MemoryPressure) and publishes its
// level per model, with a TTL of ShareTTL, to a Redis hash of instance →
// level; Level answers the most conservative of the local level and every
// unexpired published one. Publishing and reading are one Lua script on Redis
// TIME, run on each Level call and on each local transition.
//
// When Redis fails (each call bounded by 100ms, then skipped for a second)
// the local level is used alone: an instance keeps protecting a model it
// sees failing, it only stops hearing about the others.
type RedisPressure struct {
	local    *MemoryPressure
	rdb      redis.Cmdable
	prefix   string
	instance string
	ttl      time.Duration
	gate     redisGate
	// clock replaces Redis TIME in tests; nil in production.
	clock func() time.Time
}

// NewRedisPressure returns fleet-shared pressure keyed under
// prefix+"retry:pressure:"+model. instance names this process in the fleet
// (empty: a random id). c must be valid; now is the local machine's clock.
func NewRedisPressure(rdb redis.Cmdable, prefix, instance string, c PressureConfig, now func() time.Time) *RedisPressure {
	if instance == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		instance = hex.EncodeToString(b[:])
	}
	return &RedisPressure{
		local:    NewMemoryPressure(c, now),
		rdb:      rdb,
		prefix:   prefix,
		instance: instance,
		ttl:      c.ShareTTL,
	}
}

// pressureScript: KEYS[1] hash; ARGV clock, instance, level, ttl µs. Stores
// "level:expiry" for the instance and returns the highest unexpired level.
var pressureScript = redis.NewScript(luaNow + `
local key, inst, lvl, ttl = KEYS[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', key, inst, string.format('%d:%d', lvl, now + ttl))
local top = 0
local fields = redis.call('HGETALL', key)
for i = 1, #fields, 2 do
  local l, exp = string.match(fields[i+1], '^(%d+):(%d+)$')
  if l == nil or tonumber(exp) <= now then
    redis.call('HDEL', key, fields[i])
  elseif tonumber(l) > top then
    top = tonumber(l)
  end
end
redis.call('PEXPIRE', key, math.ceil(ttl / 1000))
return top
`)

func (p *RedisPressure) publish(ctx context.Context, model string, l Level) (Level, bool) {
	if !p.gate.up() {
		return l, false
	}
	ctx, cancel := p.gate.ctx(ctx)
	defer cancel()
	n, err := pressureScript.Run(ctx, p.rdb, []string{p.prefix + "retry:pressure:" + model},
		clockArg(p.clock), p.instance, int(l), p.ttl.Microseconds()).Int()
	if err != nil {
		p.gate.fail()
		return l, false
	}
	return Level(n), true
}

// Record implements Pressure. It reaches Redis only when the local level
// changed.
func (p *RedisPressure) Record(ctx context.Context, model string, o Outcome) {
	if before, after := p.local.record(model, o); before != after {
		p.publish(ctx, model, after)
	}
}

// Level implements Pressure.
func (p *RedisPressure) Level(ctx context.Context, model string) Level {
	local := p.local.Level(ctx, model)
	fleet, _ := p.publish(ctx, model, local)
	return max(local, fleet)
}
