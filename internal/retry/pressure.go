package retry

import (
	"context"
	"sync"
	"time"
)

// Level is a model's pressure level. Levels are ordered from least to most
// conservative, so the larger of two levels is the safer one to act on.
type Level int

// Pressure levels.
const (
	LevelNormal      Level = iota // the configured policy
	LevelSlight                   // sporadic errors: longer waits, fewer retries
	LevelRecovery                 // probing after an open circuit: one retry
	LevelHigh                     // error rate above the high threshold: one retry
	LevelCircuitOpen              // no calls: callers skip the model
)

var levelNames = [...]string{"NORMAL", "SLIGHT", "RECOVERY", "HIGH", "CIRCUIT_OPEN"}

func (l Level) String() string {
	if l < 0 || int(l) >= len(levelNames) {
		return "UNKNOWN"
	}
	return levelNames[l]
}

// Pressure tracks each model's recent outcomes and the pressure level they
// put it in.
//
// Transitions (error rate over the window; a rate must exceed a threshold):
//
//	NORMAL       → SLIGHT        on a failure with rate > slight
//	SLIGHT       → NORMAL        after normalAfter consecutive successes
//	SLIGHT       → HIGH          on a failure with rate > high
//	HIGH         → SLIGHT        when rate < high
//	HIGH         → CIRCUIT_OPEN  on a failure with rate > open and ≥ minSamples outcomes
//	CIRCUIT_OPEN → RECOVERY      after cooldown (the window starts afresh)
//	RECOVERY     → NORMAL        after recoveredAfter consecutive successes
//	RECOVERY     → CIRCUIT_OPEN  on any failure (the probe failed)
//
// Escalation happens only on a failure, so a success never raises the level
// just because older failures are still in the window.
//
// A throttle is a failure for SLIGHT and HIGH (longer waits, fewer
// retries) but never opens the circuit, in the rate that opens it or as a
// failed probe in RECOVERY: a model that throttles still answers the calls
// it accepts, and the send rate (SendRate) sheds just the calls beyond
// those. An open circuit would shed them all for the whole cooldown.
//
// A model is any name: a tier ("sonnet") or one deployment of a tier
// ("sonnet@east", as its breaker and quota are named), each with a level
// of its own, so that a deployment's throttles raise neither its tier's
// level nor its siblings'.
type Pressure interface {
	Record(ctx context.Context, model string, o Outcome)
	Level(ctx context.Context, model string) Level
	// Levels returns the level of each of models, in order, as Level
	// would one by one: for a caller that weighs several at once (a
	// tier's deployments), in one call to any shared state.
	Levels(ctx context.Context, models []string) []Level
}

// Outcome is what one call says about the model it was made to.
type Outcome int

// Outcomes.
const (
	OutcomeOK        Outcome = iota // answered, or refused the request itself
	OutcomeThrottled                // the provider asked to slow down
	OutcomeFailed                   // failed in a way that blames the model
)

const pressureSlots = 60

// MemoryPressure is the in-process Pressure.
type MemoryPressure struct {
	c    PressureConfig
	slot time.Duration
	now  func() time.Time

	mu     sync.Mutex
	models map[string]*modelPressure
}

type modelPressure struct {
	level    Level
	streak   int // consecutive successes
	openedAt time.Time
	slots    [pressureSlots]outcomeSlot
}

type outcomeSlot struct {
	idx                  int64
	ok, throttles, fails int
}

// NewMemoryPressure returns pressure tracking for one process. c must be
// valid; now is the clock.
func NewMemoryPressure(c PressureConfig, now func() time.Time) *MemoryPressure {
	return &MemoryPressure{c: c, slot: c.Window / pressureSlots, now: now, models: map[string]*modelPressure{}}
}

// Record implements Pressure.
func (p *MemoryPressure) Record(_ context.Context, model string, o Outcome) {
	p.record(model, o)
}

// Level implements Pressure.
func (p *MemoryPressure) Level(_ context.Context, model string) Level {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, found := p.models[model]
	if !found {
		return LevelNormal
	}
	p.cool(st, p.now())
	return st.level
}

// Levels implements Pressure.
func (p *MemoryPressure) Levels(ctx context.Context, models []string) []Level {
	out := make([]Level, len(models))
	for i, m := range models {
		out[i] = p.Level(ctx, m)
	}
	return out
}

// record applies one outcome and returns the level before and after.
func (p *MemoryPressure) record(model string, o Outcome) (before, after Level) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, found := p.models[model]
	if !found {
		st = &modelPressure{}
		p.models[model] = st
	}
	now := p.now()
	p.cool(st, now)
	before = st.level

	idx := now.UnixNano() / int64(p.slot)
	s := &st.slots[idx%pressureSlots]
	if s.idx != idx {
		*s = outcomeSlot{idx: idx}
	}
	switch o {
	case OutcomeOK:
		s.ok++
		st.streak++
	case OutcomeThrottled:
		s.throttles++
		st.streak = 0
	default:
		s.fails++
		st.streak = 0
	}
	ok, failed := o == OutcomeOK, o == OutcomeFailed
	rate, failRate, samples := st.rate(idx)

	th := p.c.Thresholds
	switch st.level {
	case LevelNormal:
		if !ok && rate > th.Slight {
			st.level = LevelSlight
		}
	case LevelSlight:
		switch {
		case ok && st.streak >= p.c.NormalAfter:
			st.level = LevelNormal
		case !ok && rate > th.High:
			st.level = LevelHigh
		}
	case LevelHigh:
		switch {
		case rate < th.High:
			st.level = LevelSlight
		case failed && failRate > th.Open && samples >= p.c.MinSamples:
			st.level, st.openedAt = LevelCircuitOpen, now
		}
	case LevelRecovery:
		switch {
		case failed:
			st.level, st.openedAt = LevelCircuitOpen, now
		case st.streak >= p.c.RecoveredAfter:
			st.level = LevelNormal
		}
	}
	return before, st.level
}

// cool moves an open circuit to RECOVERY once the cooldown has passed. The
// outcomes that opened it are forgotten: recovery is judged on fresh ones.
func (p *MemoryPressure) cool(st *modelPressure, now time.Time) {
	if st.level == LevelCircuitOpen && now.Sub(st.openedAt) >= p.c.Cooldown {
		st.level, st.streak, st.slots = LevelRecovery, 0, [pressureSlots]outcomeSlot{}
	}
}

// rate returns the window's error rate (throttles and failures), the rate
// of failures alone, and the number of outcomes.
func (st *modelPressure) rate(cur int64) (errors, failures float64, n int) {
	var ok, throttles, fails int
	for _, s := range st.slots {
		if s.idx > cur-pressureSlots {
			ok += s.ok
			throttles += s.throttles
			fails += s.fails
		}
	}
	n = ok + throttles + fails
	if n == 0 {
		return 0, 0, 0
	}
	return float64(throttles+fails) / float64(n), float64(fails) / float64(n), n
}

// Steady is a Pressure that always reports NORMAL, for callers that want
// the configured policy without adaptation.
type Steady struct{}

// Record implements Pressure.
func (Steady) Record(context.Context, string, Outcome) {}

// Level implements Pressure.
func (Steady) Level(context.Context, string) Level { return LevelNormal }

// Levels implements Pressure.
func (Steady) Levels(_ context.Context, models []string) []Level { return make([]Level, len(models)) }
