package live

import (
	"math"
	"time"
)

// bucket holds the spans that ended in one second.
type bucket struct {
	sec           int64
	turns, failed int64
	errs          map[string]int64 // failed turns by error code
	tiers         map[string]int64 // turns by serving tier
	tokens        map[string]int64 // model_attempt tokens by model
	cost          float64
	lat, ttft     hist
}

func (b *bucket) init() {
	b.sec = math.MinInt64
	b.errs = make(map[string]int64)
	b.tiers = make(map[string]int64)
	b.tokens = make(map[string]int64)
}

func (b *bucket) reset(sec int64) {
	b.sec = sec
	b.turns, b.failed, b.cost = 0, 0, 0
	clear(b.errs)
	clear(b.tiers)
	clear(b.tokens)
	b.lat.reset()
	b.ttft.reset()
}

// refusals are the error codes of turns refused by design (see
// Snapshot.Refused): the client's own errors and the policies' answers.
var refusals = map[string]bool{
	"invalid_request": true, "too_large": true, "request_timeout": true, "method_not_allowed": true,
	"unauthorized": true, "duplicate_request": true, "forbidden_origin": true, "unsupported_media_type": true,
	"not_found": true, "model_not_found": true, "slow_client": true, "canceled": true,
	"rate_limited": true, "quota_exhausted": true, "queue_full": true, "queue_timeout": true, "budget_exceeded": true,
}

// splitRefusals parts failed turns, counted by code in byCode, into
// gateway errors and refusals.
func splitRefusals(failed int64, byCode map[string]int64) (errs, refused int64, errsByCode, refusedByCode map[string]int64) {
	errsByCode, refusedByCode = make(map[string]int64), make(map[string]int64)
	for code, n := range byCode {
		if refusals[code] {
			refusedByCode[code] = n
			refused += n
		} else {
			errsByCode[code] = n
		}
	}
	return failed - refused, refused, errsByCode, refusedByCode
}

// maxKeys bounds the distinct keys of each per-second map (error codes,
// tiers, models); beyond it new keys are counted as "other", so a flood of
// unexpected values cannot grow memory.
const maxKeys = 64

func inc(m map[string]int64, k string, n int64) {
	if _, ok := m[k]; !ok && len(m) >= maxKeys {
		k = "other"
	}
	m[k] += n
}

// bucketAt returns the bucket for a span that ended at t, or nil when t is
// before the window. A zero or future t counts as now. Called with mu held.
func (a *Aggregator) bucketAt(t time.Time, nowSec int64) *bucket {
	sec := nowSec
	if !t.IsZero() {
		sec = min(t.Unix(), nowSec)
	}
	if sec <= nowSec-a.windowSec {
		return nil
	}
	b := &a.ring[((sec%a.windowSec)+a.windowSec)%a.windowSec]
	if b.sec != sec {
		if b.sec > sec { // the clock went back: the slot holds a later second
			return nil
		}
		b.reset(sec)
	}
	return b
}

// windowFigures sums the buckets of the window ending at now into the
// span-derived part of a Snapshot.
func (a *Aggregator) windowFigures(now time.Time) Snapshot {
	s := Snapshot{
		T:             now.UTC().Truncate(time.Millisecond),
		WindowSeconds: int(a.windowSec),
	}
	a.figures(&s, a.collect(now))
	return s
}

// collected is a window's content summed over its buckets, or over the
// windows of a fleet.
type collected struct {
	turns, failed       int64
	errs, tiers, tokens map[string]int64
	cost                float64
	lat, ttft           hist
}

func newCollected() *collected {
	return &collected{errs: make(map[string]int64), tiers: make(map[string]int64), tokens: make(map[string]int64)}
}

// add merges an instance's window.
func (c *collected) add(w Window) {
	c.turns += w.Turns
	c.failed += w.Failed
	c.cost += w.Cost
	for k, v := range w.Errs {
		inc(c.errs, k, v)
	}
	for k, v := range w.Tiers {
		inc(c.tiers, k, v)
	}
	for k, v := range w.Tokens {
		inc(c.tokens, k, v)
	}
	c.lat.mergeWire(w.Lat)
	c.ttft.mergeWire(w.TTFT)
}

// collect sums the buckets of the window as of now.
func (a *Aggregator) collect(now time.Time) *collected {
	nowSec := now.Unix()
	c := newCollected()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.ring {
		b := &a.ring[i]
		if b.sec <= nowSec-a.windowSec || b.sec > nowSec {
			continue
		}
		c.turns += b.turns
		c.failed += b.failed
		c.cost += b.cost
		// Each bucket is bounded already; their union is kept whole.
		for k, v := range b.errs {
			c.errs[k] += v
		}
		for k, v := range b.tiers {
			c.tiers[k] += v
		}
		for k, v := range b.tokens {
			c.tokens[k] += v
		}
		c.lat.merge(&b.lat)
		c.ttft.merge(&b.ttft)
	}
	return c
}

// figures fills the span-derived figures of s from c.
func (a *Aggregator) figures(s *Snapshot, c *collected) {
	perMinute := 60 / float64(a.windowSec)
	s.Turns, s.Tiers = c.turns, c.tiers
	s.Errors, s.Refused, s.ErrorsByCode, s.RefusedByCode = splitRefusals(c.failed, c.errs)
	s.TurnsPerSecond = float64(s.Turns) / float64(a.windowSec)
	s.ErrorRate = 0
	if s.Turns > 0 {
		s.ErrorRate = float64(s.Errors) / float64(s.Turns)
	}
	s.CostUSDPerMinute = c.cost * perMinute
	s.TokensPerMinute = make(map[string]float64, len(c.tokens))
	for k, v := range c.tokens {
		s.TokensPerMinute[k] = float64(v) * perMinute
	}
	s.LatencyMs = percentiles(&c.lat)
	s.TTFTMs = percentiles(&c.ttft)
}

func percentiles(h *hist) Percentiles {
	q := func(p float64) *float64 {
		v, ok := h.quantile(p)
		if !ok {
			return nil
		}
		v = round(v, 1)
		return &v
	}
	return Percentiles{P50: q(0.50), P95: q(0.95), P99: q(0.99)}
}

// maxPendingStreams bounds the stream spans waiting for their turn span.
// A stream span is emitted just before its turn, so only the turns in
// flight through the emitter's batch are pending; the oldest entry is
// evicted (its turn gets no TTFT sample) when the map is full.
const maxPendingStreams = 4096

type spanKey struct{ trace, span string }

type pendingEntry struct {
	firstToken time.Time
	slot       int
}

// pendingStreams maps a turn (trace id, turn span id) to the moment its
// first token reached the client, evicting first in, first out.
type pendingStreams struct {
	m    map[spanKey]pendingEntry
	fifo []spanKey
	next int
}

func newPendingStreams(n int) pendingStreams {
	return pendingStreams{m: make(map[spanKey]pendingEntry, n), fifo: make([]spanKey, n)}
}

// put records a stream's first-token time; of several streams of one turn
// the earliest counts.
func (p *pendingStreams) put(k spanKey, t time.Time) {
	if e, ok := p.m[k]; ok {
		if t.Before(e.firstToken) {
			e.firstToken = t
			p.m[k] = e
		}
		return
	}
	old := p.fifo[p.next]
	if e, ok := p.m[old]; ok && e.slot == p.next {
		delete(p.m, old)
	}
	p.fifo[p.next] = k
	p.m[k] = pendingEntry{firstToken: t, slot: p.next}
	p.next = (p.next + 1) % len(p.fifo)
}

// take removes and returns the first-token time of the turn k.
func (p *pendingStreams) take(k spanKey) (time.Time, bool) {
	e, ok := p.m[k]
	if !ok {
		return time.Time{}, false
	}
	delete(p.m, k)
	return e.firstToken, true
}
