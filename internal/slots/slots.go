// Package slots caps how many calls of one holder run at once — an API
// key's turns in flight — in memory for one instance, in Redis for a fleet.
// A slot is taken before the work and given back after it; a slot its
// instance never gave back (it died) lapses after its TTL.
package slots

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Slots hands out at most limit slots per key at once.
type Slots interface {
	// Acquire takes a slot of key for call id when fewer than limit are
	// taken; false when none is free.
	Acquire(ctx context.Context, key, id string, limit int, ttl time.Duration) (bool, error)
	// Release gives call id's slot of key back.
	Release(ctx context.Context, key, id string) error
}

// Memory is Slots in the process.
type Memory struct {
	now func() time.Time

	mu    sync.Mutex
	taken map[string]map[string]time.Time // key → id → expiry
}

// NewMemory returns in-process slots on clock now (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, taken: map[string]map[string]time.Time{}}
}

// Acquire implements Slots.
func (m *Memory) Acquire(_ context.Context, key, id string, limit int, ttl time.Duration) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.taken[key]
	for k, exp := range ids {
		if !now.Before(exp) {
			delete(ids, k)
		}
	}
	if len(ids) >= limit {
		return false, nil
	}
	if ids == nil {
		ids = map[string]time.Time{}
		m.taken[key] = ids
	}
	ids[id] = now.Add(ttl)
	return true, nil
}

// Release implements Slots.
func (m *Memory) Release(_ context.Context, key, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ids := m.taken[key]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(m.taken, key)
		}
	}
	return nil
}

// Redis is Slots shared by a fleet: a sorted set per key of the calls
// holding a slot, scored by their expiry on Redis's clock.
type Redis struct {
	c      redis.UniversalClient
	prefix string
}

// NewRedis returns slots under prefix in c.
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix}
}

var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// Acquire implements Slots.
func (r *Redis) Acquire(ctx context.Context, key, id string, limit int, ttl time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, r.c, []string{r.prefix + "slots:" + key}, id, limit, max(ttl.Milliseconds(), 1)).Int()
	if err != nil {
		return false, fmt.Errorf("slots: redis acquire: %w", err)
	}
	return n == 1, nil
}

// Release implements Slots.
func (r *Redis) Release(ctx context.Context, key, id string) error {
	if err := r.c.ZRem(ctx, r.prefix+"slots:"+key, id).Err(); err != nil {
		return fmt.Errorf("slots: redis release: %w", err)
	}
	return nil
}
