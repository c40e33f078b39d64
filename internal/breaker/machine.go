package breaker

import "time"

// machine is the breaker's state machine with time passed in as Unix
// microseconds. It is not safe for concurrent use; Memory guards it. The Lua
// script in redis.lua implements the same rules step for step, and the
// conformance suite holds the two to each other.
type machine struct {
	cfg Config

	state    State
	gen      int64
	openedAt int64 // µs; start of the current or last open period

	// Half-open: current stage, probes admitted and succeeded in it, and the
	// deadline of each outstanding probe by slot (0 when free or done).
	stage     int
	admitted  int
	succeeded int
	deadlines []int64

	// Closed: outcome counts per window step, ring-indexed by step number.
	buckets [windowBuckets]bucket
}

type bucket struct {
	step      int64
	calls     int
	failures  int
	populated bool
}

// transition is one state change, reported to OnTransition after unlocking.
type transition struct{ from, to State }

// decision is what allow and done report back.
type decision struct {
	allowed    bool
	state      State
	gen        int64
	slot       int // probe slot, -1 for a closed-state permit
	retryAfter int64
}

func newMachine(cfg Config) *machine {
	return &machine{cfg: cfg, deadlines: make([]int64, 0, slicesMax(cfg.Stages))}
}

func slicesMax(s []int) int {
	m := 0
	for _, n := range s {
		m = max(m, n)
	}
	return m
}

func (m *machine) openUs() int64 { return max(m.cfg.OpenTimeout.Microseconds(), 1) }
func (m *machine) waitUs() int64 { return max(m.cfg.HalfOpenWait.Microseconds(), 1) }

// advance applies the transitions time alone causes, each at the instant it
// became due rather than when it is noticed, so the state does not depend on
// how often anyone looks.
func (m *machine) advance(now int64, tr []transition) []transition {
	for {
		switch m.state {
		case Open:
			if now < m.openedAt+m.openUs() {
				return tr
			}
			tr = m.moveTo(HalfOpen, tr)
		case HalfOpen:
			d, ok := m.oldestProbe()
			if !ok || now < d {
				return tr
			}
			tr = m.moveTo(Open, tr)
			m.openedAt = d
		default:
			return tr
		}
	}
}

func (m *machine) moveTo(to State, tr []transition) []transition {
	from := m.state
	m.state = to
	m.gen++
	m.stage, m.admitted, m.succeeded = 0, 0, 0
	m.deadlines = m.deadlines[:0]
	m.buckets = [windowBuckets]bucket{}
	if from != to {
		tr = append(tr, transition{from, to})
	}
	return tr
}

func (m *machine) oldestProbe() (int64, bool) {
	var oldest int64
	found := false
	for _, d := range m.deadlines {
		if d != 0 && (!found || d < oldest) {
			oldest, found = d, true
		}
	}
	return oldest, found
}

func (m *machine) allow(now int64, tr []transition) (decision, []transition) {
	tr = m.advance(now, tr)
	d, tr := m.decide(now, tr)
	d.state = m.state
	return d, tr
}

func (m *machine) decide(now int64, tr []transition) (decision, []transition) {
	switch m.state {
	case Closed:
		return decision{allowed: true, gen: m.gen, slot: -1}, tr
	case Open:
		return decision{gen: m.gen, retryAfter: m.openedAt + m.openUs() - now}, tr
	}
	if m.admitted < m.cfg.Stages[m.stage] {
		slot := len(m.deadlines) // a released probe's slot is not reused
		m.admitted++
		m.deadlines = append(m.deadlines, now+m.waitUs())
		return decision{allowed: true, gen: m.gen, slot: slot}, tr
	}
	var retry int64
	if d, ok := m.oldestProbe(); ok {
		retry = d - now
	}
	return decision{gen: m.gen, retryAfter: retry}, tr
}

func (m *machine) done(now, gen int64, slot int, success bool, tr []transition) []transition {
	tr = m.advance(now, tr)
	if gen != m.gen {
		return tr
	}
	switch m.state {
	case Closed:
		if slot != -1 {
			return tr
		}
		step := now / m.cfg.bucketMicros()
		b := &m.buckets[step%windowBuckets]
		if !b.populated || b.step != step {
			*b = bucket{step: step, populated: true}
		}
		b.calls++
		if !success {
			b.failures++
		}
		if success {
			return tr // a success can only lower the failure count and rate
		}
		calls, failures := m.window(now)
		if failures >= m.cfg.FailureThreshold ||
			(calls >= m.cfg.MinCalls && float64(failures)/float64(calls) >= m.cfg.FailureRate) {
			tr = m.moveTo(Open, tr)
			m.openedAt = now
		}
	case HalfOpen:
		if slot < 0 || slot >= len(m.deadlines) || m.deadlines[slot] == 0 {
			return tr
		}
		m.deadlines[slot] = 0
		if !success {
			tr = m.moveTo(Open, tr)
			m.openedAt = now
			return tr
		}
		m.succeeded++
		if m.succeeded < m.cfg.Stages[m.stage] {
			return tr
		}
		if m.stage+1 == len(m.cfg.Stages) {
			return m.moveTo(Closed, tr)
		}
		next := m.stage + 1
		m.moveTo(HalfOpen, nil)
		m.stage = next
	}
	return tr
}

// release frees the probe slot of a permit given back without a verdict:
// the stage admits another probe in its place.
func (m *machine) release(now, gen int64, slot int, tr []transition) []transition {
	tr = m.advance(now, tr)
	if gen != m.gen || m.state != HalfOpen || slot < 0 || slot >= len(m.deadlines) || m.deadlines[slot] == 0 {
		return tr
	}
	m.deadlines[slot] = 0
	m.admitted--
	return tr
}

// trip opens the breaker now for a whole open period, unless it is open.
func (m *machine) trip(now int64, tr []transition) []transition {
	tr = m.advance(now, tr)
	if m.state == Open {
		return tr
	}
	tr = m.moveTo(Open, tr)
	m.openedAt = now
	return tr
}

// endOpen ends an open period now: the breaker goes half-open, and its
// probes decide as after a whole period.
func (m *machine) endOpen(now int64, tr []transition) []transition {
	tr = m.advance(now, tr)
	if m.state != Open {
		return tr
	}
	return m.moveTo(HalfOpen, tr)
}

// window counts the outcomes in the last windowBuckets steps.
func (m *machine) window(now int64) (calls, failures int) {
	step := now / m.cfg.bucketMicros()
	for _, b := range m.buckets {
		if b.populated && b.step > step-windowBuckets && b.step <= step {
			calls += b.calls
			failures += b.failures
		}
	}
	return calls, failures
}

func (m *machine) snapshot(name string, now int64) Snapshot {
	s := Snapshot{Name: name, State: m.state, Generation: m.gen}
	if m.openedAt != 0 {
		s.OpenedAt = time.UnixMicro(m.openedAt)
	}
	switch m.state {
	case Closed:
		s.Calls, s.Failures = m.window(now)
	case Open:
		s.RetryAfter = time.Duration(m.openedAt+m.openUs()-now) * time.Microsecond
	case HalfOpen:
		s.Stage, s.StageProbes = m.stage, m.cfg.Stages[m.stage]
		s.Admitted, s.Succeeded = m.admitted, m.succeeded
		for _, d := range m.deadlines {
			if d != 0 {
				s.InFlight++
			}
		}
		if m.admitted >= s.StageProbes {
			if d, ok := m.oldestProbe(); ok {
				s.RetryAfter = time.Duration(d-now) * time.Microsecond
			}
		}
	}
	return s
}
