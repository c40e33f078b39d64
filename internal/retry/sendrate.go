package retry

import (
	"context"
	"math"
	"sync"
	"time"
)

// SendRate is a client-side send rate per model that adapts to the
// provider's throttling, like the adaptive retry mode of the AWS SDKs: a
// model that has not throttled is called without limit; its first throttle
// puts it behind a token bucket filled at Decrease × the rate it was being
// called at, every further throttle cuts that rate again, and between
// throttles the rate grows back along a cubic (the CUBIC congestion
// window), slowly near the rate that last drew a throttle and faster away
// from it. A model not throttled for ForgetAfter is unlimited again.
//
// An attempt the bucket has no token for is not sent: the caller moves on to
// its next tier at once, instead of spending an upstream call that would
// most likely be throttled and then a second one on the next tier.
type SendRate interface {
	// Allow reports whether an attempt at model may be sent now, taking a
	// token when the model is limited. Every call counts towards the
	// model's measured demand.
	Allow(ctx context.Context, model string) bool
	// Throttled records that the provider throttled an attempt at model.
	Throttled(ctx context.Context, model string)
}

// Demand is measured as an exponentially weighted moving average of the
// Allow calls per second, over buckets of demandBucket.
const (
	demandBucket    = 500 * time.Millisecond
	demandSmoothing = 0.8 // weight of the newest bucket
)

// rateParams are the derived parameters shared by the memory and Redis
// implementations.
type rateParams struct {
	decrease, growth, floor float64
	forget                  time.Duration
}

func newRateParams(c SendRateConfig) rateParams {
	return rateParams{decrease: c.Decrease, growth: c.Growth, floor: c.MinPerSecond, forget: c.ForgetAfter}
}

// fill is the bucket's fill rate (tokens per second) t seconds after the
// last throttle, which came at rate wmax: growth·(t−k)³ + wmax, where k is
// the time the cubic takes to climb from decrease·wmax back to wmax; never
// below the floor.
func (p rateParams) fill(wmax, k, t float64) float64 {
	d := t - k
	return math.Max(p.floor, p.growth*d*d*d+wmax)
}

// plateau is k for a throttle at rate w.
func (p rateParams) plateau(w float64) float64 {
	return math.Cbrt(w * (1 - p.decrease) / p.growth)
}

// MemorySendRate is the in-process SendRate.
type MemorySendRate struct {
	p   rateParams
	now func() time.Time

	mu     sync.Mutex
	models map[string]*modelRate
}

type modelRate struct {
	// demand
	bucket   int64   // index of the current demand bucket
	count    float64 // Allow calls in it
	measured float64 // smoothed calls per second

	// limit, while limited
	limited     bool
	wmax, k     float64   // rate at the last throttle, and the cubic's plateau time
	throttledAt time.Time // the last throttle
	tokens      float64
	refilled    time.Time
}

// NewMemorySendRate returns an adaptive send rate for one process. c must be
// valid; now is the clock.
func NewMemorySendRate(c SendRateConfig, now func() time.Time) *MemorySendRate {
	return &MemorySendRate{p: newRateParams(c), now: now, models: map[string]*modelRate{}}
}

func (r *MemorySendRate) model(name string) *modelRate {
	m, ok := r.models[name]
	if !ok {
		m = &modelRate{bucket: math.MinInt64}
		r.models[name] = m
	}
	return m
}

// measure counts n calls at now into the demand average.
func (m *modelRate) measure(now time.Time, n float64) {
	b := now.UnixNano() / int64(demandBucket)
	switch {
	case m.bucket == math.MinInt64:
		m.bucket = b
	case b > m.bucket:
		elapsed := float64(b-m.bucket) * demandBucket.Seconds()
		m.measured = demandSmoothing*(m.count/elapsed) + (1-demandSmoothing)*m.measured
		m.bucket, m.count = b, 0
	}
	m.count += n
}

// refill adds the tokens earned since the last refill; the bucket holds at
// most one second of its fill rate, and at least one token.
func (r *MemorySendRate) refill(m *modelRate, now time.Time) float64 {
	f := r.p.fill(m.wmax, m.k, now.Sub(m.throttledAt).Seconds())
	if dt := now.Sub(m.refilled).Seconds(); dt > 0 {
		m.tokens = math.Min(math.Max(1, f), m.tokens+f*dt)
		m.refilled = now
	}
	return f
}

// Allow implements SendRate.
func (r *MemorySendRate) Allow(_ context.Context, model string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	m := r.model(model)
	m.measure(now, 1)
	if !m.limited {
		return true
	}
	if now.Sub(m.throttledAt) >= r.p.forget {
		m.limited = false
		return true
	}
	r.refill(m, now)
	if m.tokens < 1 {
		return false
	}
	m.tokens--
	return true
}

// Throttled implements SendRate.
func (r *MemorySendRate) Throttled(_ context.Context, model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	m := r.model(model)
	m.measure(now, 0)
	w := m.measured
	if m.limited && now.Sub(m.throttledAt) < r.p.forget {
		w = math.Min(w, r.refill(m, now))
	} else {
		// The bucket starts with one token: the call that drew the first
		// throttle may still be retried once.
		m.limited, m.tokens, m.refilled = true, 1, now
	}
	m.wmax, m.k, m.throttledAt = w, r.p.plateau(w), now
	m.tokens = math.Min(m.tokens, math.Max(1, r.p.fill(m.wmax, m.k, 0)))
}

// Unpaced is a SendRate that never limits.
type Unpaced struct{}

// Allow implements SendRate.
func (Unpaced) Allow(context.Context, string) bool { return true }

// Throttled implements SendRate.
func (Unpaced) Throttled(context.Context, string) {}
