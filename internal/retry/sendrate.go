package retry

import (
	"context"
	"math"
	"sync"
	"time"
)

// SendRate paces the calls to a model that throttles, the way the
// client-side throttling of Google's SRE book does: over a sliding window
// it counts the calls the gateway wanted to make to the model and the calls
// the model accepted (sent and not throttled), and refuses the share
//
//	max(0, (wanted − SentPerAccepted × accepted) / (wanted + 1))
//
// of new calls, once it wanted 10 calls or more over the window. A model
// that accepts every call is never paced. A model
// that throttles beyond its capacity (a quota of tokens per minute) gets
// about SentPerAccepted times what it accepts, so the calls it would throttle
// anyway go to the next tier unsent. A model that throttles a share of calls
// whatever their rate still gets them all while that share is under
// 1 − 1/SentPerAccepted (50% by default), so it answers every call it can:
// cutting its rate would not make it throttle less. However little a model
// accepts, it is sent at least MinPerSecond calls, which find out when it
// accepts again.
//
// An attempt the rate has no room for is not sent: the caller moves on to
// its next tier at once, instead of spending an upstream call that would
// most likely be throttled and then a second one on the next tier.
type SendRate interface {
	// Allow reports whether an attempt at model may be sent now. Every
	// call counts as one the gateway wanted to make; a granted one counts
	// as accepted until Throttled says otherwise.
	Allow(ctx context.Context, model string) bool
	// Throttled records that the provider throttled an attempt at model.
	Throttled(ctx context.Context, model string)
}

// rateParams are the parameters shared by the memory and Redis
// implementations.
type rateParams struct {
	k, floor float64
	window   time.Duration
}

func newRateParams(c SendRateConfig) rateParams {
	return rateParams{k: c.SentPerAccepted, floor: c.MinPerSecond, window: c.Window}
}

// rateState is one model's counts; the Redis script keeps the same fields
// and does the same arithmetic.
type rateState struct {
	wanted, accepted float64   // decayed counts
	at               time.Time // when they were last decayed
	credit           float64   // the share of a call earned towards the next grant, at most 1
	sent             time.Time // the last grant
}

// decay ages the counts to now: each weighs e^(−age/window).
func (s *rateState) decay(p rateParams, now time.Time) {
	if dt := now.Sub(s.at); dt > 0 {
		f := math.Exp(-dt.Seconds() / p.window.Seconds())
		s.wanted, s.accepted, s.at = s.wanted*f, s.accepted*f, now
	}
}

// paceAfter is the fewest calls wanted over the window for their share
// accepted to say anything: below it, on a quiet instance, a throttled
// call is retried as if nothing were paced.
const paceAfter = 10

// refused is the share of new calls to refuse.
func (s *rateState) refused(p rateParams) float64 {
	if s.wanted < paceAfter {
		return 0
	}
	return math.Max(0, (s.wanted-p.k*s.accepted)/(s.wanted+1))
}

// allow counts one wanted call and reports whether it is granted: when the
// credit of the calls not refused reaches a whole call, or when the last
// grant is older than the floor's interval.
func (s *rateState) allow(p rateParams, now time.Time) bool {
	s.decay(p, now)
	s.wanted++
	s.credit = math.Min(1, s.credit+1-s.refused(p))
	switch {
	case s.credit >= 1-1e-9:
		s.credit--
	case now.Sub(s.sent).Seconds() >= 1/p.floor:
	default:
		return false
	}
	s.accepted++
	s.sent = now
	return true
}

func (s *rateState) throttled(p rateParams, now time.Time) {
	s.decay(p, now)
	s.accepted = math.Max(0, s.accepted-1)
}

// MemorySendRate is the in-process SendRate.
type MemorySendRate struct {
	p   rateParams
	now func() time.Time

	mu     sync.Mutex
	models map[string]*rateState
}

// NewMemorySendRate returns an adaptive send rate for one process. c must be
// valid; now is the clock.
func NewMemorySendRate(c SendRateConfig, now func() time.Time) *MemorySendRate {
	return &MemorySendRate{p: newRateParams(c), now: now, models: map[string]*rateState{}}
}

func (r *MemorySendRate) model(name string) *rateState {
	s, ok := r.models[name]
	if !ok {
		s = &rateState{at: r.now(), credit: 1}
		r.models[name] = s
	}
	return s
}

// Allow implements SendRate.
func (r *MemorySendRate) Allow(_ context.Context, model string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.model(model).allow(r.p, r.now())
}

// Throttled implements SendRate.
func (r *MemorySendRate) Throttled(_ context.Context, model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.model(model).throttled(r.p, r.now())
}

// Unpaced is a SendRate that never limits.
type Unpaced struct{}

// Allow implements SendRate.
func (Unpaced) Allow(context.Context, string) bool { return true }

// Throttled implements SendRate.
func (Unpaced) Throttled(context.Context, string) {}
