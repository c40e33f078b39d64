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
type Counters interface {
	Load(ctx context.Context, userID, sessionID, day string) (Totals, error)
	Add(ctx context.Context, userID, sessionID, day string, in, out int, costUSD float64) error
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

// Add implements Counters.
func (m *MemoryCounters) Add(ctx context.Context, userID, sessionID, day string, in, out int, costUSD float64) error {
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
	dk := [2]string{userID, day}
	d, ok := m.days[dk]
	if !ok || !now.Before(d.expires) {
		d = &dayCount{expires: now.Add(dayTTL)}
		m.days[dk] = d
	}
	d.nano += toNano(costUSD)
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
