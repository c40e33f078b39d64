package budget

import (
	"context"
	"sync"
	"time"
)

// Totals are the counters Check reads for one request.
type Totals struct {
	SessionInput  int
	SessionOutput int
	DayCostUSD    float64
}

// Counters stores session and per-user daily usage. day is the calendar day
// ("2006-01-02") in the enforcer's zone; a new day starts from zero.
// Sessions are keyed by user and session, so one user cannot spend another's
// session budget by reusing its id.
//
// The daily cost is also held for turns in flight, so that concurrent
// turns cannot together spend past the budget: Hold reserves a turn's
// estimated cost when the day's spend and the holds in force leave room for
// it, Add with the hold's id settles it at the real cost, and Release ends
// it without one. A hold lapses after its TTL (an instance that died
// mid-turn releases nothing).
type Counters interface {
	Load(ctx context.Context, userID, sessionID, day string) (Totals, error)
	// Hold holds nanoUSD of userID's day for turn id when the day's spend
	// plus the holds in force plus nanoUSD is at most limitNano; false,
	// holding nothing, when it is not.
	Hold(ctx context.Context, userID, day, id string, nanoUSD, limitNano int64, ttl time.Duration) (bool, error)
	// Add adds a turn's usage; with a hold id it ends that hold in the
	// same step.
	Add(ctx context.Context, userID, sessionID, day, hold string, in, out int, costUSD float64) error
	// Release ends hold id without a cost.
	Release(ctx context.Context, userID, day, hold string) error
}

// nanoUSD is the unit costs are summed in: integers, so that many tiny
// additions neither drift nor need floating-point increments in Redis.
const nanoUSD = 1e9

func toNano(usd float64) int64 { return int64(usd*nanoUSD + 0.5) }

// dayTTL keeps a day's counter through the whole day in any zone, then lets
// it go.
const dayTTL = 48 * time.Hour

// MemoryCounters keeps counters in the process. Idle sessions are forgotten
// after the session TTL, days after 48 hours.
type MemoryCounters struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	sessions  map[[2]string]*sessionCount
	days      map[[2]string]*dayCount
	lastSweep time.Time
}

type sessionCount struct {
	in, out int
	expires time.Time
}

type dayCount struct {
	nano    int64
	expires time.Time
	holds   map[string]hold
}

type hold struct {
	nano  int64
	until time.Time
}

// NewMemoryCounters returns in-process counters; now is the clock (time.Now
// when nil).
func NewMemoryCounters(sessionTTL time.Duration, now func() time.Time) *MemoryCounters {
	if now == nil {
		now = time.Now
	}
	return &MemoryCounters{ttl: sessionTTL, now: now, sessions: map[[2]string]*sessionCount{}, days: map[[2]string]*dayCount{}}
}

// Load implements Counters.
func (m *MemoryCounters) Load(ctx context.Context, userID, sessionID, day string) (Totals, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var t Totals
	if s, ok := m.sessions[[2]string{userID, sessionID}]; ok && now.Before(s.expires) {
		t.SessionInput, t.SessionOutput = s.in, s.out
	}
	if d, ok := m.days[[2]string{userID, day}]; ok && now.Before(d.expires) {
		t.DayCostUSD = float64(d.nano) / nanoUSD
	}
	return t, nil
}

// dayLocked is userID's count for day, created when missing or expired.
func (m *MemoryCounters) dayLocked(now time.Time, userID, day string) *dayCount {
	dk := [2]string{userID, day}
	d, ok := m.days[dk]
	if !ok || !now.Before(d.expires) {
		d = &dayCount{expires: now.Add(dayTTL)}
		m.days[dk] = d
	}
	return d
}

// Hold implements Counters.
func (m *MemoryCounters) Hold(ctx context.Context, userID, day, id string, nanoUSD, limitNano int64, ttl time.Duration) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dayLocked(now, userID, day)
	held := d.nano
	for k, h := range d.holds {
		if !now.Before(h.until) {
			delete(d.holds, k)
			continue
		}
		held += h.nano
	}
	if held+nanoUSD > limitNano {
		return false, nil
	}
	if d.holds == nil {
		d.holds = map[string]hold{}
	}
	d.holds[id] = hold{nano: nanoUSD, until: now.Add(ttl)}
	return true, nil
}

// Release implements Counters.
func (m *MemoryCounters) Release(ctx context.Context, userID, day, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.days[[2]string{userID, day}]; ok {
		delete(d.holds, id)
	}
	return nil
}

// Add implements Counters.
func (m *MemoryCounters) Add(ctx context.Context, userID, sessionID, day, hold string, in, out int, costUSD float64) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.lastSweep) > time.Minute {
		m.sweep(now)
	}
	sk := [2]string{userID, sessionID}
	s, ok := m.sessions[sk]
	if !ok || !now.Before(s.expires) {
		s = &sessionCount{}
		m.sessions[sk] = s
	}
	s.in += in
	s.out += out
	s.expires = now.Add(m.ttl)
	d := m.dayLocked(now, userID, day)
	d.nano += toNano(costUSD)
	delete(d.holds, hold)
	return nil
}

func (m *MemoryCounters) sweep(now time.Time) {
	m.lastSweep = now
	for k, s := range m.sessions {
		if !now.Before(s.expires) {
			delete(m.sessions, k)
		}
	}
	for k, d := range m.days {
		if !now.Before(d.expires) {
			delete(m.days, k)
		}
	}
}
