package budget

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Totals are the counters Check reads for one request.
type Totals struct {
	SessionInput  int
	SessionOutput int
	DayCostUSD    float64
}

// A Meter is one spend counter a turn is held and charged against: a
// user's day, an API key's month, a team's or a feature's day… Key names
// it uniquely, period included (see meterKey); Limit is its budget in
// nano-USD (0: counted, never refused); TTL is how long the counter lives
// after its last change, longer than its period.
type Meter struct {
	Key   string
	Limit int64
	TTL   time.Duration
}

// Counters stores session usage and the spend meters. Sessions are keyed
// by user and session, so one user cannot spend another's session budget
// by reusing its id.
//
// Spend is also held for turns in flight, so that concurrent turns cannot
// together spend past a budget: Hold reserves a turn's estimated cost on
// every limited meter at once, or on none of them, when each meter's spend
// and the holds in force leave room for it; Add with the hold's id settles
// it at the real cost, and Release ends it without one. A hold lapses after
// its TTL (an instance that died mid-turn releases nothing).
type Counters interface {
	// Load reads userID's session and userID's spend on day (its
	// UserDayMeter). An empty sessionID is no session: its totals are
	// zero, and nothing is read for it.
	Load(ctx context.Context, userID, sessionID, day string) (Totals, error)
	// Hold holds nanoUSD on each of meters for turn id when each has room
	// for it under its Limit. When one has not, it holds nothing and
	// returns that meter's index and what it has spent (holds not
	// counted); refused is -1 when the hold was taken.
	Hold(ctx context.Context, id string, nanoUSD int64, meters []Meter, ttl time.Duration) (refused int, spentNano int64, err error)
	// Add adds a turn's tokens to its session and its cost to each of
	// meters; with a hold id it ends that hold on them in the same step.
	// An empty sessionID counts no session (a stateless turn, which
	// brought its whole conversation): only the meters are written, so
	// that such turns leave no counter behind for the session TTL.
	Add(ctx context.Context, userID, sessionID, hold string, meters []Meter, in, out int, costUSD float64) error
	// Release ends hold id on meters without a cost.
	Release(ctx context.Context, hold string, meters []Meter) error
	// Spent reads what each of meters has spent, in nano-USD (holds not
	// counted).
	Spent(ctx context.Context, meters []Meter) ([]int64, error)
}

// nanoUSD is the unit costs are summed in: integers, so that many tiny
// additions neither drift nor need floating-point increments in Redis.
const nanoUSD = 1e9

func toNano(usd float64) int64 { return int64(usd*nanoUSD + 0.5) }

// dayTTL keeps a day's counter through the whole day in any zone, then lets
// it go; monthTTL a month's.
const (
	dayTTL   = 48 * time.Hour
	monthTTL = 62 * 24 * time.Hour
)

// meterKey names scope's meter of id for period: lengths make it
// unambiguous whatever the id contains.
func meterKey(scope, period, id string) string {
	return scope + ":" + period + ":" + strconv.Itoa(len(id)) + ":" + id
}

// UserDayMeter is userID's spend on day ("2006-01-02"), the meter Load
// reads, limited to limitUSD (0: none).
func UserDayMeter(userID, day string, limitUSD float64) Meter {
	return Meter{Key: meterKey("day", day, userID), Limit: toNano(limitUSD), TTL: dayTTL}
}

// MemoryCounters keeps counters in the process. Idle sessions are forgotten
// after the session TTL, meters after theirs.
type MemoryCounters struct {
	ttl time.Duration
	now func() time.Time

	mu        sync.Mutex
	sessions  map[[2]string]*sessionCount
	meters    map[string]*meterCount
	lastSweep time.Time
}

type sessionCount struct {
	in, out int
	expires time.Time
}

type meterCount struct {
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
	return &MemoryCounters{ttl: sessionTTL, now: now, sessions: map[[2]string]*sessionCount{}, meters: map[string]*meterCount{}}
}

// Load implements Counters.
func (m *MemoryCounters) Load(ctx context.Context, userID, sessionID, day string) (Totals, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var t Totals
	if s, ok := m.sessions[[2]string{userID, sessionID}]; sessionID != "" && ok && now.Before(s.expires) {
		t.SessionInput, t.SessionOutput = s.in, s.out
	}
	if d, ok := m.meters[UserDayMeter(userID, day, 0).Key]; ok && now.Before(d.expires) {
		t.DayCostUSD = float64(d.nano) / nanoUSD
	}
	return t, nil
}

// meterLocked is the count of mt, created when missing or expired.
func (m *MemoryCounters) meterLocked(now time.Time, mt Meter) *meterCount {
	d, ok := m.meters[mt.Key]
	if !ok || !now.Before(d.expires) {
		d = &meterCount{expires: now.Add(mt.TTL)}
		m.meters[mt.Key] = d
	}
	return d
}

// Hold implements Counters.
func (m *MemoryCounters) Hold(ctx context.Context, id string, nanoUSD int64, meters []Meter, ttl time.Duration) (int, int64, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, mt := range meters {
		d := m.meterLocked(now, mt)
		held := d.nano
		for k, h := range d.holds {
			if !now.Before(h.until) {
				delete(d.holds, k)
				continue
			}
			held += h.nano
		}
		if mt.Limit > 0 && held+nanoUSD > mt.Limit {
			return i, d.nano, nil
		}
	}
	for _, mt := range meters {
		d := m.meterLocked(now, mt)
		if d.holds == nil {
			d.holds = map[string]hold{}
		}
		d.holds[id] = hold{nano: nanoUSD, until: now.Add(ttl)}
	}
	return -1, 0, nil
}

// Release implements Counters.
func (m *MemoryCounters) Release(ctx context.Context, id string, meters []Meter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mt := range meters {
		if d, ok := m.meters[mt.Key]; ok {
			delete(d.holds, id)
		}
	}
	return nil
}

// Add implements Counters.
func (m *MemoryCounters) Add(ctx context.Context, userID, sessionID, hold string, meters []Meter, in, out int, costUSD float64) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.lastSweep) > time.Minute {
		m.sweep(now)
	}
	if sessionID != "" {
		sk := [2]string{userID, sessionID}
		s, ok := m.sessions[sk]
		if !ok || !now.Before(s.expires) {
			s = &sessionCount{}
			m.sessions[sk] = s
		}
		s.in += in
		s.out += out
		s.expires = now.Add(m.ttl)
	}
	nano := toNano(costUSD)
	for _, mt := range meters {
		d := m.meterLocked(now, mt)
		d.nano += nano
		d.expires = now.Add(mt.TTL)
		delete(d.holds, hold)
	}
	return nil
}

// Spent implements Counters.
func (m *MemoryCounters) Spent(ctx context.Context, meters []Meter) ([]int64, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int64, len(meters))
	for i, mt := range meters {
		if d, ok := m.meters[mt.Key]; ok && now.Before(d.expires) {
			out[i] = d.nano
		}
	}
	return out, nil
}

func (m *MemoryCounters) sweep(now time.Time) {
	m.lastSweep = now
	for k, s := range m.sessions {
		if !now.Before(s.expires) {
			delete(m.sessions, k)
		}
	}
	for k, d := range m.meters {
		if !now.Before(d.expires) {
			delete(m.meters, k)
		}
	}
}
