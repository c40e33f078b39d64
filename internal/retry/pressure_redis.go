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
// TIME, run on each Level call (one for all the models of a Levels call)
// and on each local transition.
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
// prefix+"retry:pressure:"+model (a deployment's model is its
// "<tier>@<deployment>"). instance names this process in the fleet
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

// pressureScript: KEYS the hashes of one or more models; ARGV clock,
// instance, ttl µs, then the instance's level for each key. Stores
// "level:expiry" for the instance in each hash and returns, for each, the
// highest unexpired level.
var pressureScript = redis.NewScript(luaNow + `
local inst, ttl = ARGV[2], tonumber(ARGV[3])
local out = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  redis.call('HSET', key, inst, string.format('%d:%d', tonumber(ARGV[3 + k]), now + ttl))
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
  out[k] = top
end
return out
`)

// publish stores this instance's level of each of models and returns the
// fleet's, in one script; ok is false when Redis was not asked or did not
// answer.
func (p *RedisPressure) publish(ctx context.Context, models []string, local []Level) (fleet []Level, ok bool) {
	if !p.gate.up() {
		return nil, false
	}
	ctx, cancel := p.gate.ctx(ctx)
	defer cancel()
	keys := make([]string, len(models))
	args := make([]any, 0, 3+len(models))
	args = append(args, clockArg(p.clock), p.instance, p.ttl.Microseconds())
	for i, m := range models {
		keys[i] = p.prefix + "retry:pressure:" + m
		args = append(args, int(local[i]))
	}
	v, err := pressureScript.Run(ctx, p.rdb, keys, args...).Int64Slice()
	if err != nil || len(v) != len(models) {
		p.gate.fail()
		return nil, false
	}
	fleet = make([]Level, len(v))
	for i, n := range v {
		fleet[i] = Level(n)
	}
	return fleet, true
}

// Record implements Pressure. It reaches Redis only when the local level
// changed.
func (p *RedisPressure) Record(ctx context.Context, model string, o Outcome) {
	if before, after := p.local.record(model, o); before != after {
		p.publish(ctx, []string{model}, []Level{after})
	}
}

// Level implements Pressure.
func (p *RedisPressure) Level(ctx context.Context, model string) Level {
	return p.Levels(ctx, []string{model})[0]
}

// Levels implements Pressure: one script for all of models.
func (p *RedisPressure) Levels(ctx context.Context, models []string) []Level {
	local := p.local.Levels(ctx, models)
	if len(models) == 0 {
		return local
	}
	if fleet, ok := p.publish(ctx, models, local); ok {
		for i := range local {
			local[i] = max(local[i], fleet[i])
		}
	}
	return local
}
