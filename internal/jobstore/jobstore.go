// Package jobstore keeps the state of batch jobs where their callers can read
// it: in the gateway's memory by default, in Redis in fleet mode, so that a
// job's status answers from whichever instance the load balancer picks, and
// after the instance running it restarts.
//
// A state is opaque bytes (the job as its status endpoint shows it), stored
// under the job's id with its owner; only the owner reads it back. Every
// stored job expires: the caller gives the time to live on each Put.
package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable is matched (errors.Is) by every error of a store whose
// backing service could not be reached or answered too late.
var ErrUnavailable = errors.New("batch job store unavailable")

// Memory is a Store in the gateway's memory, holding at most max jobs: when
// full, the job closest to expiry makes room. It is safe for concurrent use.
type Memory struct {
	max int
	now func() time.Time

	mu   sync.Mutex
	jobs map[string]memJob
}

type memJob struct {
	owner   string
	state   []byte
	expires time.Time
}

// NewMemory returns a store of at most limit jobs (at least 1) on clock now
// (nil: time.Now).
func NewMemory(limit int, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{max: max(limit, 1), now: now, jobs: make(map[string]memJob)}
}

// Put stores a copy of state as owner's job id for ttl.
func (m *Memory) Put(_ context.Context, id, owner string, state []byte, ttl time.Duration) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.jobs[id]; !ok && len(m.jobs) >= m.max {
		m.evict(now)
	}
	m.jobs[id] = memJob{owner: owner, state: append([]byte(nil), state...), expires: now.Add(ttl)}
	return nil
}

// evict drops the expired jobs, or else the one closest to expiry.
func (m *Memory) evict(now time.Time) {
	for id, j := range m.jobs {
		if !now.Before(j.expires) {
			delete(m.jobs, id)
		}
	}
	if len(m.jobs) < m.max {
		return
	}
	var first string
	for id, j := range m.jobs {
		if first == "" || j.expires.Before(m.jobs[first].expires) {
			first = id
		}
	}
	delete(m.jobs, first)
}

// Get returns owner's job id; ok is false when there is none, it expired or
// it is another caller's (the cases are not told apart).
func (m *Memory) Get(_ context.Context, id, owner string) ([]byte, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	switch {
	case !ok:
		return nil, false, nil
	case !now.Before(j.expires):
		delete(m.jobs, id)
		return nil, false, nil
	case j.owner != owner:
		return nil, false, nil
	}
	return append([]byte(nil), j.state...), true, nil
}

// DefaultRedisTimeout bounds each call of a Redis store.
const DefaultRedisTimeout = time.Second

// Redis is a Store shared by a fleet: one string per job under prefix, its
// owner written before the state, expiring with the ttl of its last Put.
type Redis struct {
	client redis.UniversalClient
	prefix string
	// Timeout bounds each call; zero means DefaultRedisTimeout.
	Timeout time.Duration
}

// NewRedis returns a store keeping jobs under keys starting with prefix.
func NewRedis(client redis.UniversalClient, prefix string) *Redis {
	return &Redis{client: client, prefix: prefix}
}

func (r *Redis) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultRedisTimeout
}

// value is the stored string: the owner's length, ':', the owner, the state.
func value(owner string, state []byte) []byte {
	b := make([]byte, 0, 8+len(owner)+len(state))
	b = strconv.AppendInt(b, int64(len(owner)), 10)
	b = append(b, ':')
	b = append(b, owner...)
	return append(b, state...)
}

// Put stores state as owner's job id for ttl.
func (r *Redis) Put(ctx context.Context, id, owner string, state []byte, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	if err := r.client.Set(ctx, r.prefix+id, value(owner, state), max(ttl, time.Millisecond)).Err(); err != nil {
		return fmt.Errorf("%w: saving job %s: %w", ErrUnavailable, id, err)
	}
	return nil
}

// Get returns owner's job id; ok is false when there is none, it expired or
// it is another caller's (the cases are not told apart).
func (r *Redis) Get(ctx context.Context, id, owner string) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	b, err := r.client.Get(ctx, r.prefix+id).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w: reading job %s: %w", ErrUnavailable, id, err)
	}
	head, rest, ok := cutOwner(b)
	if !ok || head != owner {
		return nil, false, nil
	}
	return rest, true, nil
}

// cutOwner splits a stored value into its owner and state.
func cutOwner(b []byte) (owner string, state []byte, ok bool) {
	i := 0
	for i < len(b) && b[i] >= '0' && b[i] <= '9' && i < 8 {
		i++
	}
	if i == 0 || i >= len(b) || b[i] != ':' || (b[0] == '0' && i > 1) {
		return "", nil, false
	}
	n, err := strconv.Atoi(string(b[:i]))
	if err != nil || n > len(b)-i-1 {
		return "", nil, false
	}
	return string(b[i+1 : i+1+n]), b[i+1+n:], true
}
