// Package respstore keeps the responses that OpenAI's Responses API
// stores (store: true), so that a later request continues one by its id
// (previous_response_id) and its owner reads or deletes it: in the
// gateway's memory by default, in Redis in fleet mode, so that a
// conversation continues on whichever instance answers its next request.
//
// A record is opaque bytes stored under the response's id with its owner
// (the caller the turn ran as); only the owner reads it back or deletes
// it, and to anyone else it does not exist. Every record expires a fixed
// time after it was stored.
package respstore

import (
	"container/list"
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
var ErrUnavailable = errors.New("response store unavailable")

// DefaultMemoryBytes bounds the records a Memory store holds when its
// caller sets no bound: 256 MiB.
const DefaultMemoryBytes = 256 << 20

// Memory is a store in the gateway's memory, bounded by a count of records
// and by their total size: when either is over, the oldest records (the
// closest to expiry, since every record lives as long) make room. It is
// safe for concurrent use.
type Memory struct {
	maxRecords int
	maxBytes   int64
	ttl        time.Duration
	now        func() time.Time

	mu    sync.Mutex
	order *list.List // of *memRecord, oldest first
	byID  map[string]*list.Element
	bytes int64
}

type memRecord struct {
	id, owner string
	rec       []byte
	expires   time.Time
}

// NewMemory returns a store of at most maxRecords records (at least 1)
// holding at most maxBytes bytes of them (0: DefaultMemoryBytes), each
// kept for ttl, on clock now (nil: time.Now).
func NewMemory(maxRecords int, maxBytes int64, ttl time.Duration, now func() time.Time) *Memory {
	if maxBytes <= 0 {
		maxBytes = DefaultMemoryBytes
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{maxRecords: max(maxRecords, 1), maxBytes: maxBytes, ttl: ttl, now: now,
		order: list.New(), byID: make(map[string]*list.Element)}
}

// Put stores a copy of rec as owner's response id. A record larger than
// the whole store is not kept.
func (m *Memory) Put(_ context.Context, id, owner string, rec []byte) error {
	now := m.now()
	r := &memRecord{id: id, owner: owner, rec: append([]byte(nil), rec...), expires: now.Add(m.ttl)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.byID[id]; ok {
		m.remove(el)
	}
	if int64(len(rec)) > m.maxBytes {
		return nil
	}
	m.byID[id] = m.order.PushBack(r)
	m.bytes += int64(len(rec))
	for el := m.order.Front(); el != nil; el = m.order.Front() {
		old := el.Value.(*memRecord)
		if now.Before(old.expires) && m.order.Len() <= m.maxRecords && m.bytes <= m.maxBytes {
			break
		}
		m.remove(el)
	}
	return nil
}

// Get returns owner's response id; ok is false when there is none, it
// expired or it is another caller's (the cases are not told apart).
func (m *Memory) Get(_ context.Context, id, owner string) ([]byte, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.live(id, owner, now)
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), el.Value.(*memRecord).rec...), true, nil
}

// Delete removes owner's response id, reporting whether there was one.
func (m *Memory) Delete(_ context.Context, id, owner string) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.live(id, owner, now)
	if ok {
		m.remove(el)
	}
	return ok, nil
}

// Len reports how many records are held, expired ones included.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// live finds owner's unexpired record id, dropping it when expired.
func (m *Memory) live(id, owner string, now time.Time) (*list.Element, bool) {
	el, ok := m.byID[id]
	if !ok {
		return nil, false
	}
	r := el.Value.(*memRecord)
	if !now.Before(r.expires) {
		m.remove(el)
		return nil, false
	}
	return el, r.owner == owner
}

func (m *Memory) remove(el *list.Element) {
	r := m.order.Remove(el).(*memRecord)
	delete(m.byID, r.id)
	m.bytes -= int64(len(r.rec))
}

// DefaultRedisTimeout bounds each call of a Redis store.
const DefaultRedisTimeout = time.Second

// Redis is a store shared by a fleet: one string per response under
// prefix, its owner written before the record, expiring ttl after it was
// stored. Redis does not evict records before their ttl: size its memory,
// or set its maxmemory-policy to volatile-lru.
type Redis struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
	// Timeout bounds each call; zero means DefaultRedisTimeout.
	Timeout time.Duration
}

// NewRedis returns a store keeping records under keys starting with
// prefix, each for ttl.
func NewRedis(client redis.UniversalClient, prefix string, ttl time.Duration) *Redis {
	return &Redis{client: client, prefix: prefix, ttl: ttl}
}

func (r *Redis) timeout() time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultRedisTimeout
}

// head is what a stored value of owner's starts with: the owner's length,
// ':', the owner. The length first keeps owners whose bytes run into the
// record apart.
func head(owner string) string { return strconv.Itoa(len(owner)) + ":" + owner }

// Put stores rec as owner's response id.
func (r *Redis) Put(ctx context.Context, id, owner string, rec []byte) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	h := head(owner)
	v := make([]byte, 0, len(h)+len(rec))
	v = append(append(v, h...), rec...)
	if err := r.client.Set(ctx, r.prefix+id, v, max(r.ttl, time.Millisecond)).Err(); err != nil {
		return fmt.Errorf("%w: storing response %s: %w", ErrUnavailable, id, err)
	}
	return nil
}

// Get returns owner's response id; ok is false when there is none, it
// expired or it is another caller's (the cases are not told apart).
func (r *Redis) Get(ctx context.Context, id, owner string) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	b, err := r.client.Get(ctx, r.prefix+id).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("%w: reading response %s: %w", ErrUnavailable, id, err)
	}
	h := head(owner)
	if len(b) < len(h) || string(b[:len(h)]) != h {
		return nil, false, nil
	}
	return b[len(h):], true, nil
}

// deleteScript deletes KEYS[1] when its value starts with ARGV[1] (its
// owner's head), in one round trip: a caller never deletes another's.
var deleteScript = redis.NewScript(`
if redis.call('GETRANGE', KEYS[1], 0, string.len(ARGV[1]) - 1) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Delete removes owner's response id, reporting whether there was one.
func (r *Redis) Delete(ctx context.Context, id, owner string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	n, err := deleteScript.Run(ctx, r.client, []string{r.prefix + id}, head(owner)).Int()
	if err != nil {
		return false, fmt.Errorf("%w: deleting response %s: %w", ErrUnavailable, id, err)
	}
	return n == 1, nil
}
