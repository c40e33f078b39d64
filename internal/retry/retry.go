// Package retry decides whether, when and how often a failed model call is
// tried again: exponential backoff with jitter, per-error-class limits, a
// retry budget that keeps retries a bounded fraction of traffic, and
// adaptive pressure per model that tightens the policy as a model's error
// rate climbs and tells callers to skip it when it is failing outright, and
// an adaptive send rate per model that paces calls to a model that throttles
// and tells callers to skip it when a call would exceed that pace.
//
// A Retrier prefers giving up early to starting doomed work: it stops as
// soon as a retry would not fit before the turn's deadline, so the caller
// falls back to the next tier with time to spare.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// ErrPressureOpen is returned (wrapped) by Retrier.Do when the model's
// pressure level is CIRCUIT_OPEN: no call was made, the caller should skip
// to its next model.
var ErrPressureOpen = errors.New("retry: model pressure circuit open")

// ErrPaced is returned (wrapped) by Retrier.Do when the model's adaptive
// send rate had no room for a first attempt: no call was made, the caller
// should skip to its next model.
var ErrPaced = errors.New("retry: model paced after throttling")

// ErrFinal marks errors that must not be retried; see Final.
var ErrFinal = errors.New("retry: final")

type finalError struct{ err error }

func (e *finalError) Error() string        { return e.err.Error() }
func (e *finalError) Unwrap() error        { return e.err }
func (e *finalError) Is(target error) bool { return target == ErrFinal }

// Final wraps err so that it is never retried, whatever its kind: the
// gateway wraps failures that happen after the first byte reached the
// client, since a retry would repeat text the user already saw.
// provider.KindOf and errors.As still see through the wrapper. Final(nil)
// is nil.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err: err}
}

// IsFinal reports whether err was wrapped with Final.
func IsFinal(err error) bool { return errors.Is(err, ErrFinal) }

// Unjudged marks err as saying nothing of the model's health (a call cut
// short because its turn ran out of time): it is not recorded to Pressure.
// errors.Is and As see through it.
func Unjudged(err error) error {
	if err == nil {
		return nil
	}
	return &unjudgedError{err: err}
}

type unjudgedError struct{ err error }

func (e *unjudgedError) Error() string { return e.err.Error() }
func (e *unjudgedError) Unwrap() error { return e.err }

func isUnjudged(err error) bool {
	_, ok := errors.AsType[*unjudgedError](err)
	return ok
}

// Stop says why Do made no further attempt.
type Stop string

// Reasons Do stops.
const (
	StopSuccess      Stop = "success"
	StopNotRetryable Stop = "not_retryable" // the error's class is never retried
	StopFinal        Stop = "final"         // wrapped with Final
	StopExhausted    Stop = "exhausted"     // no retries left for the class at this level
	StopBudget       Stop = "budget"        // the retry budget refused
	StopDeadline     Stop = "deadline"      // the wait plus MinAttemptTime would pass the deadline
	StopPressureOpen Stop = "pressure_open" // the model's circuit is open
	StopPaced        Stop = "paced"         // the model's send rate had no room for the attempt
	StopCanceled     Stop = "canceled"      // the context ended
)

// Report describes what Do did, for events and metrics.
type Report struct {
	// Attempts is the number of calls made (0 when the circuit was open or
	// the first attempt was paced).
	Attempts int
	// Retries is Attempts−1 when at least one call was made.
	Retries int
	// Wait is the total time spent waiting between attempts.
	Wait time.Duration
	// LastKind is the class of the last error, empty after a success.
	LastKind provider.Kind
	// BudgetRefused is true when the retry budget refused a retry.
	BudgetRefused bool
	// Level is the pressure level that governed the last decision.
	Level Level
	// Stop is why no further attempt was made.
	Stop Stop
}

// Retrier runs a model call with retries. Build it with New; the exported
// fields may be replaced before first use (not concurrently with Do), and a
// nil field means the default.
type Retrier struct {
	// Budget bounds retries fleet- or process-wide. New sets a
	// MemoryBudget; nil means no budget.
	Budget Budget
	// Pressure adapts the policy per model. New sets a MemoryPressure; nil
	// means always NORMAL.
	Pressure Pressure
	// Rate paces attempts at a model that throttles. New sets a
	// MemorySendRate when cfg.SendRate.Enabled; nil means no pacing.
	Rate SendRate
	// Sleep waits d or until ctx ends. Nil: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock the deadline is compared with. Nil: time.Now.
	Now func() time.Time

	cfg atomic.Pointer[Config] // swapped whole by SetConfig
	rnd *lockedRand
}

// New returns a Retrier for a valid cfg. rng supplies the jitter and is
// guarded by the Retrier; nil seeds one from the runtime's random source.
func New(cfg Config, rng *rand.Rand) (*Retrier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("retry: %w", err)
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	r := &Retrier{
		Budget:   NewMemoryBudget(cfg.Budget, time.Now),
		Pressure: NewMemoryPressure(cfg.Pressure, time.Now),
		rnd:      &lockedRand{r: rng},
	}
	r.cfg.Store(&cfg)
	if cfg.SendRate.Enabled {
		r.Rate = NewMemorySendRate(cfg.SendRate, time.Now)
	}
	return r, nil
}

// SetConfig replaces the backoff, the retry counts per class and level and
// MinAttemptTime from the next decision on. The budget, the pressure and
// the send rate keep their state and the settings they were built with.
func (r *Retrier) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("retry: %w", err)
	}
	r.cfg.Store(&cfg)
	return nil
}

// Policy is the effective retry policy for one error class at one pressure
// level.
type Policy struct {
	Backoff    Backoff
	MaxRetries int
}

// Policy returns the effective policy for class at level: the class
// override over the top-level policy, tightened by the level's LevelPolicy.
// At CIRCUIT_OPEN MaxRetries is 0.
func (r *Retrier) Policy(class provider.Kind, level Level) Policy {
	c := r.cfg.Load()
	p := Policy{
		Backoff:    Backoff{Strategy: c.Strategy, Base: c.Base, Cap: c.Cap, Multiplier: c.Multiplier},
		MaxRetries: c.MaxRetries,
	}
	if o, ok := c.Classes[class]; ok {
		if o.MaxRetries != nil {
			p.MaxRetries = *o.MaxRetries
		}
		if o.Base > 0 {
			p.Backoff.Base = o.Base
		}
		if o.Multiplier > 0 {
			p.Backoff.Multiplier = o.Multiplier
		}
	}
	var lp LevelPolicy
	switch level {
	case LevelNormal:
		return p
	case LevelSlight:
		lp = c.Pressure.Levels.Slight
	case LevelHigh:
		lp = c.Pressure.Levels.High
	case LevelRecovery:
		lp = c.Pressure.Levels.Recovery
	default:
		p.MaxRetries = 0
		return p
	}
	p.Backoff.Base = min(c.Cap, time.Duration(float64(p.Backoff.Base)*lp.BaseMultiplier))
	p.MaxRetries = max(0, min(p.MaxRetries-lp.FewerRetries, lp.MaxRetries))
	return p
}

// Do calls call until it succeeds or a retry is not allowed, and returns the
// last call's error unchanged (so errors.Is/As and provider.KindOf work on
// it). attempt counts from 0.
//
// Before the first call, a model at CIRCUIT_OPEN is skipped: Do returns an
// error satisfying errors.Is(err, ErrPressureOpen) without calling; so is a
// model whose send rate (Rate) has no room for the call, with ErrPaced. The
// first call deposits into the budget. After a failure Do retries only if
// all hold: the error is retryable (Classify) and not Final; the context is
// live; the model's current level is not CIRCUIT_OPEN; fewer retries were
// made than the class allows at that level; the wait (backoff, at least the
// provider's Retry-After) plus MinAttemptTime ends before ctx's deadline;
// the send rate has room for one more call; and the budget grants a
// withdrawal. Otherwise it stops at once. Every outcome is recorded to Pressure,
// except cancellations, which say nothing about the model; every throttle
// is recorded to Rate.
func (r *Retrier) Do(ctx context.Context, model string, call func(ctx context.Context, attempt int) error) (Report, error) {
	var rep Report
	rep.Level = r.pressure().Level(ctx, model)
	if rep.Level == LevelCircuitOpen {
		rep.Stop = StopPressureOpen
		return rep, fmt.Errorf("retry: %s: %w", model, ErrPressureOpen)
	}
	if !r.rate().Allow(ctx, model) {
		rep.Stop = StopPaced
		return rep, fmt.Errorf("retry: %s: %w", model, ErrPaced)
	}
	r.budget().Deposit(ctx)

	var prev time.Duration
	for attempt := 0; ; attempt++ {
		rep.Attempts++
		err := call(ctx, attempt)
		if err == nil {
			r.pressure().Record(ctx, model, OutcomeOK)
			rep.LastKind, rep.Stop = "", StopSuccess
			return rep, nil
		}
		kind := provider.KindOf(err)
		rep.LastKind = kind
		if kind != provider.KindCanceled && !isUnjudged(err) {
			r.pressure().Record(ctx, model, outcomeOf(kind))
		}
		if kind == provider.KindThrottled {
			r.rate().Throttled(ctx, model)
		}

		wait, of, stop := r.next(ctx, model, err, &rep, &prev)
		if stop != "" {
			rep.Stop = stop
			return rep, err
		}
		traceWaiting(ctx, Wait{Attempt: rep.Retries + 2, Of: of, Delay: wait, Kind: kind})
		if serr := r.sleep(ctx, wait); serr != nil {
			rep.Stop = StopCanceled
			return rep, err
		}
		rep.Retries++
		rep.Wait += wait
	}
}

// next decides whether to retry after err and how long to wait first, and
// reports the most attempts the policy allows. It
// withdraws from the budget only once every other check has passed, so a
// retry that would not be made costs no token.
func (r *Retrier) next(ctx context.Context, model string, err error, rep *Report, prev *time.Duration) (time.Duration, int, Stop) {
	if IsFinal(err) {
		return 0, 0, StopFinal
	}
	if ctx.Err() != nil {
		return 0, 0, StopCanceled
	}
	class, ok := Classify(err)
	if !ok {
		return 0, 0, StopNotRetryable
	}
	rep.Level = r.pressure().Level(ctx, model)
	if rep.Level == LevelCircuitOpen {
		return 0, 0, StopPressureOpen
	}
	pol := r.Policy(class, rep.Level)
	if rep.Retries >= pol.MaxRetries {
		return 0, 0, StopExhausted
	}
	wait := r.rnd.delay(pol.Backoff, rep.Retries, *prev)
	*prev = wait
	wait = max(wait, provider.RetryAfterOf(err))
	if dl, has := ctx.Deadline(); has && r.now().Add(wait+r.cfg.Load().MinAttemptTime).After(dl) {
		return 0, 0, StopDeadline
	}
	if !r.rate().Allow(ctx, model) {
		return 0, 0, StopPaced
	}
	if !r.budget().Withdraw(ctx) {
		rep.BudgetRefused = true
		return 0, 0, StopBudget
	}
	return wait, pol.MaxRetries + 1, ""
}

func (r *Retrier) budget() Budget {
	if r.Budget == nil {
		return Unlimited{}
	}
	return r.Budget
}

func (r *Retrier) pressure() Pressure {
	if r.Pressure == nil {
		return Steady{}
	}
	return r.Pressure
}

func (r *Retrier) rate() SendRate {
	if r.Rate == nil {
		return Unpaced{}
	}
	return r.Rate
}

func (r *Retrier) now() time.Time {
	if r.Now == nil {
		return time.Now()
	}
	return r.Now()
}

func (r *Retrier) sleep(ctx context.Context, d time.Duration) error {
	if r.Sleep != nil {
		return r.Sleep(ctx, d)
	}
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
