package queue

import (
	"container/heap"
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
	m := &memBackend{now: now, cfg: cfg, byHandle: make(map[string]*memEntry), arrivals: list.New()}
	for i := range m.classes {
		m.classes[i] = &memClass{finish: map[string]float64{}}
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
	band   int // the class it waits in (Ticket.band)
	at     time.Time
	start  float64 // virtual start tag in its class
	seq    uint64
	index  int // in its class's heap
	elem   *list.Element
}

// memClass is one priority class: its waiting tickets ordered by start tag
// (then arrival), its virtual time and each flow's last finish tag.
type memClass struct {
	h       entryHeap
	virtual float64
	finish  map[string]float64
}

type entryHeap []*memEntry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if h[i].start != h[j].start {
		return h[i].start < h[j].start
	}
	return h[i].seq < h[j].seq
}
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*memEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// memBackend keeps one fair-queueing heap per band and one list of all
// entries in arrival order; since every entry has the same TTL, expired
// entries are always at the list's front.
type memBackend struct {
	now func() time.Time
	cfg Config

	mu       sync.Mutex
	seq      uint64
	classes  [numBands]*memClass
	arrivals *list.List
	byHandle map[string]*memEntry
}

func (m *memBackend) prune(now time.Time) {
	for e := m.arrivals.Front(); e != nil; e = m.arrivals.Front() {
		en := e.Value.(*memEntry)
		if now.Sub(en.at) < m.cfg.TTL {
			break
		}
		m.drop(en, false)
	}
}

// drop removes en; served says it left from the head of its class, which
// moves the class's virtual time to its start tag.
func (m *memBackend) drop(en *memEntry, served bool) {
	c := m.classes[en.band]
	heap.Remove(&c.h, en.index)
	m.arrivals.Remove(en.elem)
	delete(m.byHandle, en.handle)
	if served && en.start > c.virtual {
		c.virtual = en.start
	}
	if len(c.finish) > 4*m.cfg.Capacity {
		for f, fin := range c.finish {
			if fin <= c.virtual {
				delete(c.finish, f) // an idle flow starts at the virtual time anyway
			}
		}
	}
}

func (m *memBackend) add(_ context.Context, t Ticket) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.prune(now)
	if len(m.byHandle) >= m.cfg.Capacity {
		at := m.arrivals.Front().Value.(*memEntry).at
		return "", &FullError{RetryAfter: max(m.cfg.TTL-now.Sub(at), m.cfg.PollInterval)}
	}
	m.seq++
	h := strconv.FormatUint(m.seq, 10) + ":" + t.ID
	c := m.classes[t.band()]
	flow := t.flow()
	start := max(c.virtual, c.finish[flow])
	c.finish[flow] = start + tagUnit/m.cfg.weight(t)
	en := &memEntry{handle: h, band: t.band(), at: now, start: start, seq: m.seq}
	heap.Push(&c.h, en)
	en.elem = m.arrivals.PushBack(en)
	m.byHandle[h] = en
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
	for _, c := range m.classes {
		if len(c.h) > 0 {
			if c.h[0] == e {
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
		m.drop(e, m.classes[e.band].h[0] == e)
	}
	return nil
}

func (m *memBackend) stats(_ context.Context) (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	m.prune(now)
	var s Stats
	for band, c := range m.classes {
		s.ByPriority[band/2] += len(c.h)
		s.Depth += len(c.h)
	}
	if f := m.arrivals.Front(); f != nil {
		s.OldestWait = now.Sub(f.Value.(*memEntry).at)
	}
	return s, nil
}
