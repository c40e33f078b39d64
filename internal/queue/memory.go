package queue

import (
	"container/list"
	"context"
	"strconv"
	"sync"
	"time"
)

// NewMemory returns an in-process queue reading time from now (time.Now if
// nil). Invalid config fields take their defaults.
func NewMemory(cfg Config, now func() time.Time) *Queue {
	cfg = withDefaults(cfg)
	if now == nil {
		now = time.Now
	}
	m := &memBackend{now: now, cfg: cfg, byHandle: make(map[string]*list.Element)}
	for i := range m.lists {
		m.lists[i] = list.New()
	}
	return newQueue(m, cfg)
}

func withDefaults(cfg Config) Config {
	d := DefaultConfig()
	if cfg.Capacity < 1 {
		cfg.Capacity = d.Capacity
	}
	if cfg.TTL <= 0 {
		cfg.TTL = d.TTL
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = d.PollInterval
	}
	return cfg
}

type memEntry struct {
	handle string
	prio   Priority
	at     time.Time
}

// memBackend keeps one FIFO list per priority; since every entry has the
// same TTL, expired entries are always at the fronts.
type memBackend struct {
	now func() time.Time
	cfg Config

	mu       sync.Mutex
	seq      uint64
	lists    [numPriorities]*list.List
	byHandle map[string]*list.Element
}

func (m *memBackend) prune(now time.Time) {
	for _, l := range m.lists {
		for e := l.Front(); e != nil; e = l.Front() {
			en := e.Value.(*memEntry)
			if now.Sub(en.at) < m.cfg.TTL {
				break
			}
			l.Remove(e)
			delete(m.byHandle, en.handle)
		}
	}
}

func (m *memBackend) oldest() (time.Time, bool) {
	var at time.Time
	found := false
	for _, l := range m.lists {
		if e := l.Front(); e != nil {
			if t := e.Value.(*memEntry).at; !found || t.Before(at) {
				at, found = t, true
			}
		}
	}
	return at, found
}

func (m *memBackend) add(_ context.Context, t Ticket) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.prune(now)
	if len(m.byHandle) >= m.cfg.Capacity {
		at, _ := m.oldest()
		return "", &FullError{RetryAfter: max(m.cfg.TTL-now.Sub(at), m.cfg.PollInterval)}
	}
	m.seq++
	h := strconv.FormatUint(m.seq, 10) + ":" + t.ID
	m.byHandle[h] = m.lists[t.Priority].PushBack(&memEntry{handle: h, prio: t.Priority, at: now})
	return h, nil
}

func (m *memBackend) place(_ context.Context, h string) (place, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.prune(m.now())
	e, ok := m.byHandle[h]
	if !ok {
		return placeGone, nil
	}
	for _, l := range m.lists {
		if f := l.Front(); f != nil {
			if f == e {
				return placeHead, nil
			}
			return placeWaiting, nil
		}
	}
	return placeWaiting, nil
}

func (m *memBackend) remove(_ context.Context, h string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byHandle[h]; ok {
		m.lists[e.Value.(*memEntry).prio].Remove(e)
		delete(m.byHandle, h)
	}
	return nil
}

func (m *memBackend) stats(_ context.Context) (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.prune(now)
	var s Stats
	for i, l := range m.lists {
		s.ByPriority[i] = l.Len()
		s.Depth += l.Len()
	}
	if at, ok := m.oldest(); ok {
		s.OldestWait = now.Sub(at)
	}
	return s, nil
}
