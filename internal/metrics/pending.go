package metrics

import "time"

// spanKey identifies a turn span: its trace id and span id. The strings are
// the event's own, so building a key does not allocate.
type spanKey struct{ trace, span string }

type pendingEntry struct {
	firstByte time.Time // the stream span's start: first text at the client
	added     time.Time // when it was put, by the Metrics clock
	seq       uint64    // matches the ring slot that owns the entry
}

type ringSlot struct {
	key spanKey
	seq uint64
}

// pending holds the first-byte times of stream spans until their turn span
// arrives (the stream span is emitted first). It is bounded: at most max
// entries, each at most maxAge old; beyond that the oldest go first. Not
// safe for concurrent use.
//
// Entries are kept in arrival order in a ring twice the size of max. An
// entry taken by its turn leaves a stale slot behind; stale slots are
// skipped when they reach the head and squeezed out when the ring fills, so
// every operation is amortised O(1) and allocation-free.
type pending struct {
	max    int
	maxAge time.Duration
	m      map[spanKey]pendingEntry
	ring   []ringSlot
	head   int // index of the oldest slot
	n      int // slots in use, stale ones included
	seq    uint64
}

func newPending(max int, maxAge time.Duration) *pending {
	return &pending{
		max:    max,
		maxAge: maxAge,
		m:      make(map[spanKey]pendingEntry, max),
		ring:   make([]ringSlot, 2*max),
	}
}

func (p *pending) len() int { return len(p.m) }

// live returns the slot's map entry when the slot still owns it.
func (p *pending) live(s ringSlot) (pendingEntry, bool) {
	e, ok := p.m[s.key]
	return e, ok && e.seq == s.seq
}

func (p *pending) isLive(s ringSlot) bool {
	_, ok := p.live(s)
	return ok
}

// popHead removes the oldest slot and its entry when it is live.
func (p *pending) popHead() (wasLive bool) {
	s := p.ring[p.head]
	p.ring[p.head] = ringSlot{}
	p.head = (p.head + 1) % len(p.ring)
	p.n--
	if p.isLive(s) {
		delete(p.m, s.key)
		return true
	}
	return false
}

// expire drops stale slots and expired entries from the head.
func (p *pending) expire(now time.Time) (expired int) {
	for p.n > 0 {
		s := p.ring[p.head]
		if e, ok := p.live(s); ok && now.Sub(e.added) < p.maxAge {
			return expired
		}
		if p.popHead() {
			expired++
		}
	}
	return expired
}

// compact squeezes stale slots out of the ring, keeping the order. It runs
// only when the ring is full, which is at most once per max puts since the
// live entries fill at most half of it.
func (p *pending) compact() {
	live := make([]ringSlot, 0, len(p.m))
	for i := range p.n {
		if s := p.ring[(p.head+i)%len(p.ring)]; p.isLive(s) {
			live = append(live, s)
		}
	}
	clear(p.ring)
	p.head, p.n = 0, copy(p.ring, live)
}

// put records the first-byte time of the turn k. A second stream span for
// the same turn is ignored: the first byte is the first one.
func (p *pending) put(k spanKey, firstByte, now time.Time) (evicted, expired int) {
	expired = p.expire(now)
	if _, ok := p.m[k]; ok {
		return 0, expired
	}
	for len(p.m) >= p.max {
		if p.popHead() {
			evicted++
		}
	}
	if p.n == len(p.ring) {
		p.compact()
	}
	p.seq++
	p.ring[(p.head+p.n)%len(p.ring)] = ringSlot{key: k, seq: p.seq}
	p.n++
	p.m[k] = pendingEntry{firstByte: firstByte, added: now, seq: p.seq}
	return evicted, expired
}

// take removes and returns the first-byte time of turn k. expired is true
// when it was found but had waited longer than maxAge.
func (p *pending) take(k spanKey, now time.Time) (firstByte time.Time, ok, expired bool) {
	e, found := p.m[k]
	if !found {
		return time.Time{}, false, false
	}
	delete(p.m, k)
	if now.Sub(e.added) >= p.maxAge {
		return time.Time{}, false, true
	}
	return e.firstByte, true, false
}
