package retry

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redisbatch"
)

// RedisBudget is the fleet-wide Budget: one window shared by every instance,
// kept in a Redis hash of slot → net units, decided by one Lua script per
// call on Redis TIME.
//
// When Redis fails or is slow (each call is bounded by 100ms, then Redis is
// skipped for a second), decisions fall back to a local MemoryBudget that
// every Deposit also feeds, so an outage of Redis neither stops retries nor
// lets them run unbounded: each instance then holds to the ratio on its own
// traffic.
type RedisBudget struct {
	rdb   redis.Cmdable
	key   string
	l     ledger
	local *MemoryBudget
	gate  redisGate
	// clock replaces Redis TIME in tests; nil in production.
	clock func() time.Time
}

// NewRedisBudget returns a budget stored under prefix+"retry:budget". c must
// be valid.
func NewRedisBudget(rdb redis.Cmdable, prefix string, c BudgetConfig) *RedisBudget {
	return &RedisBudget{
		rdb:   rdb,
		key:   prefix + "retry:budget",
		l:     newLedger(c),
		local: NewMemoryBudget(c, time.Now),
	}
}

// budgetScript: KEYS[1] hash; ARGV clock, op (1 deposit, 0 withdraw), deposit
// units, reserve units, slot µs, slots, token units. Returns 1 when a
// withdrawal is granted (or for a deposit), 0 when refused.
var budgetScript = redis.NewScript(luaNow + `
local key = KEYS[1]
local dep, reserve = tonumber(ARGV[3]), tonumber(ARGV[4])
local slot, nslots, unit = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local cur = math.floor(now / slot)
-- The balance over the live slots; the stale ones are deleted.
local function balance()
  local sum = reserve
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    local idx = tonumber(fields[i])
    if idx <= cur - nslots then
      redis.call('HDEL', key, fields[i])
    else
      sum = sum + tonumber(fields[i+1])
    end
  end
  return sum
end
local ok = 1
if ARGV[2] == '1' then
  -- A deposit needs no balance: the slots are only swept when it opens
  -- a new one, which bounds the hash all the same.
  if redis.call('HINCRBY', key, cur, dep) == dep then balance() end
elseif balance() >= unit then
  redis.call('HINCRBY', key, cur, -unit)
else
  ok = 0
end
redis.call('PEXPIRE', key, math.ceil(slot * (nslots + 1) / 1000))
return ok
`)

func (b *RedisBudget) args(deposit bool) []any {
	op := "0"
	if deposit {
		op = "1"
	}
	return []any{clockArg(b.clock), op, b.l.deposit, b.l.reserve,
		b.l.slot.Microseconds(), budgetSlots, tokenUnits}
}

func (b *RedisBudget) run(ctx context.Context, deposit bool) (bool, error) {
	ctx, cancel := b.gate.ctx(ctx)
	defer cancel()
	n, err := budgetScript.Run(ctx, b.rdb, []string{b.key}, b.args(deposit)...).Int()
	return n == 1, err
}

// Deposit implements Budget. Within a turn's batch (redisbatch) the deposit
// is sent with the turn's next Redis command, or at the turn's end.
func (b *RedisBudget) Deposit(ctx context.Context) {
	b.local.Deposit(ctx)
	if !b.gate.up() {
		return
	}
	args := b.args(true)
	if redisbatch.Later(ctx, budgetScript, []string{b.key}, func(time.Duration) []any { return args }, func(cmd *redis.Cmd) {
		if cmd.Err() != nil {
			b.gate.fail()
		}
	}) {
		return
	}
	if _, err := b.run(ctx, true); err != nil {
		b.gate.fail()
	}
}

// Withdraw implements Budget.
func (b *RedisBudget) Withdraw(ctx context.Context) bool {
	if b.gate.up() {
		ok, err := b.run(ctx, false)
		if err == nil {
			if ok {
				// Keep the fallback's view of this instance's spending.
				b.local.Withdraw(ctx)
			}
			return ok
		}
		b.gate.fail()
	}
	return b.local.Withdraw(ctx)
}
