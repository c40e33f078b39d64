// Package breaker implements circuit breakers with progressive recovery, one
// per model and per dependency, so that a failing provider is skipped at once
// (serving the fallback without burning tokens) and is brought back gradually
// instead of by a thundering herd.
//
// A breaker is CLOSED while calls succeed. It OPENS when the failures in its
// rolling window reach Config.FailureThreshold, or when the failure rate
// reaches Config.FailureRate once Config.MinCalls outcomes are in the window.
// After Config.OpenTimeout it turns HALF_OPEN and admits probes in stages
// (by default 1, then 3, then 10 concurrent probes): when every probe of a
// stage succeeds the next stage opens, and after the last stage the breaker
// closes with an empty window. Any failed probe, or a probe outstanding longer
// than Config.HalfOpenWait, re-opens it for a new open period.
//
// Every transition starts a new generation. A Permit remembers the generation
// it was issued in, and its outcome is ignored once the breaker has moved on,
// so a slow call that started before an outage cannot close or re-open a
// breaker that has since changed state.
//
// Two implementations pass the same conformance suite: Memory (one process)
// and Redis (a fleet sharing state through atomic Lua scripts and the Redis
// clock).
package breaker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// State is the position of a breaker in its state machine.
type State int

// The three breaker states. The zero value is Closed.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String returns "closed", "open" or "half_open", the names used in logs,
// metrics labels and the admin API.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// MarshalText encodes the state as its String form, for JSON snapshots.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Breaker guards one model or dependency.
//
// Call Allow before the guarded call and Done on the returned Permit after
// it. Allow never returns a nil Permit, so `defer p.Done(ctx, ok)` is always
// safe; a Permit that came with an error records nothing.
type Breaker interface {
	// Allow asks to make one call. A refusal is an *OpenError (errors.Is
	// ErrOpen): the caller should fall back at once. Any other error means the
	// breaker's state could not be read (ErrUnavailable): the caller should
	// treat the call as allowed.
	Allow(ctx context.Context) (Permit, error)
	// Snapshot reports the breaker's current state for the admin API and
	// metrics. It applies time-based transitions that are due.
	Snapshot(ctx context.Context) (Snapshot, error)
}

// Stater is a Breaker that reads its state more cheaply than a Snapshot
// when the rolling window's counts are not wanted.
type Stater interface {
	// State is Snapshot with Calls and Failures left 0.
	State(ctx context.Context) (Snapshot, error)
}

// StateOf reports b's state and when it admits again: its Stater's State, or
// its Snapshot.
func StateOf(ctx context.Context, b Breaker) (Snapshot, error) {
	if s, ok := b.(Stater); ok {
		return s.State(ctx)
	}
	return b.Snapshot(ctx)
}

// AllowState is what an Allow's answer says of the breaker's state, when
// it says it: that of an *OpenError (with when it admits again), or that
// of a permit which knows the state it was issued in. The planner's read
// of a breaker whose permit was just asked for is then no second call.
func AllowState(p Permit, err error) (Snapshot, bool) {
	var open *OpenError
	if errors.As(err, &open) {
		return Snapshot{Name: open.Name, State: open.State, RetryAfter: open.RetryAfter}, true
	}
	if sp, ok := p.(interface{ State() State }); ok && err == nil {
		return Snapshot{State: sp.State()}, true
	}
	return Snapshot{}, false
}

// Permit is the right to make one call, issued by Allow.
type Permit interface {
	// Done records the call's outcome against the generation the permit was
	// issued in. Only the first call has an effect. Done does not honour the
	// cancellation of ctx (an outcome of a cancelled request must still be
	// recorded) but keeps its values.
	Done(ctx context.Context, success bool)
	// Release gives the permit back without a verdict, when the call says
	// nothing about the guarded dependency's health (it was throttled, or
	// its caller left before it ended). A half-open probe's place goes to
	// the next caller instead of being held until Config.HalfOpenWait and
	// then counted as a failure. After Done or Release, either has no
	// effect. Like Done, it does not honour the cancellation of ctx.
	Release(ctx context.Context)
}

// Snapshot is a breaker's state at one instant.
type Snapshot struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Generation counts transitions; it changes on every state or stage change.
	Generation int64 `json:"generation"`
	// Calls and Failures are the outcomes in the rolling window (closed only).
	Calls    int `json:"calls"`
	Failures int `json:"failures"`
	// Stage is the 0-based recovery stage and StageProbes its probe count
	// (half-open only).
	Stage       int `json:"stage"`
	StageProbes int `json:"stageProbes"`
	// Admitted and Succeeded count the probes of the current stage; InFlight
	// the admitted probes without an outcome yet.
	Admitted  int `json:"admitted"`
	Succeeded int `json:"succeeded"`
	InFlight  int `json:"inFlight"`
	// OpenedAt is when the current or last open period began (zero if never).
	OpenedAt time.Time `json:"openedAt"`
	// RetryAfter is how long until Allow may admit again (0 when it would now).
	RetryAfter time.Duration `json:"retryAfter"`
	// Error is set, and the rest left zero, when the state could not be
	// read (only in Set.Snapshots).
	Error string `json:"error,omitempty"`
}

// ErrOpen is matched (errors.Is) by every refusal from Allow.
var ErrOpen = errors.New("breaker: open")

// ErrUnavailable is matched by errors from a breaker whose shared state could
// not be reached. Callers treat the call as allowed ("breaker unknown").
var ErrUnavailable = errors.New("breaker: state unavailable")

// OpenError is the refusal Allow returns while the breaker is open or while
// every probe of the current half-open stage is taken.
type OpenError struct {
	Name string
	// RetryAfter is the time until the breaker may admit again: the rest of
	// the open period, or in half-open the time until the oldest outstanding
	// probe expires (an upper bound; the stage may advance sooner).
	RetryAfter time.Duration
	State      State
}

func (e *OpenError) Error() string {
	return fmt.Sprintf("breaker %s: %s, retry after %s", e.Name, e.State, e.RetryAfter)
}

// Is makes errors.Is(err, ErrOpen) true.
func (e *OpenError) Is(target error) bool { return target == ErrOpen }

// TransitionFunc is told of each state change of the named breaker, for logs
// and metrics. It is called synchronously, outside any lock, and must be fast.
// Stage advances within HALF_OPEN are not reported.
type TransitionFunc func(name string, from, to State)

// noopPermit is handed out with errors so that callers may always call Done.
type noopPermit struct{}

func (noopPermit) Done(context.Context, bool) {}
func (noopPermit) Release(context.Context)    {}
