package retry

import (
	"context"
	"sync/atomic"
	"time"
)

// Redis calls are bounded so a slow or absent Redis costs a turn at most
// redisTimeout, and after a failure Redis is left alone for redisPause so
// that every turn does not pay the timeout again (a breaker of its own).
const (
	redisTimeout = 100 * time.Millisecond
	redisPause   = time.Second
)

// redisGate tracks whether Redis is currently being skipped after a failure.
type redisGate struct {
	timeout   time.Duration
	downUntil atomic.Int64 // unix nanos
}

func (g *redisGate) up() bool { return time.Now().UnixNano() >= g.downUntil.Load() }

func (g *redisGate) fail() { g.downUntil.Store(time.Now().Add(redisPause).UnixNano()) }

func (g *redisGate) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	t := g.timeout
	if t <= 0 {
		t = redisTimeout
	}
	// A caller that is already gone must not stop the bookkeeping short.
	return context.WithTimeout(context.WithoutCancel(ctx), t)
}

// clockArg is the time passed to scripts: the test clock in microseconds,
// or -1 to make the script read Redis TIME, the fleet's shared clock.
func clockArg(now func() time.Time) int64 {
	if now == nil {
		return -1
	}
	return now().UnixMicro()
}

// luaNow is the script prelude that picks the clock (microseconds).
const luaNow = `
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`
