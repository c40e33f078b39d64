package cache

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// entryOverhead approximates the bookkeeping per entry (list element, map
// slot, strings headers) so that many tiny entries still count against
// MaxBytes.
const entryOverhead = 96

// Memory is an in-process LRU cache bounded by MaxEntries and MaxBytes. It is
// safe for concurrent use.
type Memory struct {
	cfg Config
	now func() time.Time

	mu    sync.Mutex
	ll    *list.List // front = most recently used
	items map[string]*list.Element
	bytes int64
}

type memItem struct {
	key      string
	text     string
	storedAt time.Time
}

func (it *memItem) size() int64 { return int64(len(it.key) + len(it.text) + entryOverhead) }

// NewMemory returns an empty cache. now is the clock (time.Now when nil); the
// caller should validate cfg first.
func NewMemory(cfg Config, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{cfg: cfg, now: now, ll: list.New(), items: make(map[string]*list.Element)}
}

// Get implements Cache. An entry older than TTL+StaleFor is dropped.
func (m *Memory) Get(_ context.Context, key string) (Entry, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.items[key]
	if !ok {
		return Entry{}, false, nil
	}
	it := el.Value.(*memItem)
	if now.Sub(it.storedAt) >= m.cfg.TTL+m.cfg.StaleFor {
		m.remove(el)
		return Entry{}, false, nil
	}
	m.ll.MoveToFront(el)
	return Entry{Text: it.text, StoredAt: it.storedAt}, true, nil
}

// Set implements Cache, evicting least recently used entries until both
// bounds hold. It returns ErrTooLarge for an entry that alone exceeds MaxBytes.
func (m *Memory) Set(_ context.Context, key, text string) error {
	it := &memItem{key: key, text: text, storedAt: m.now()}
	if it.size() > m.cfg.MaxBytes {
		return ErrTooLarge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
	m.items[key] = m.ll.PushFront(it)
	m.bytes += it.size()
	for m.ll.Len() > m.cfg.MaxEntries || m.bytes > m.cfg.MaxBytes {
		m.remove(m.ll.Back())
	}
	return nil
}

// Len reports the number of entries held, expired ones included until they
// are touched or evicted.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ll.Len()
}

// Bytes reports the accounted size of the entries held.
func (m *Memory) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}

func (m *Memory) remove(el *list.Element) {
	it := m.ll.Remove(el).(*memItem)
	delete(m.items, it.key)
	m.bytes -= it.size()
}
