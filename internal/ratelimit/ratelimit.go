// Package ratelimit is fmgate's admission step: GCRA token buckets with a
// rate and a burst, kept in memory (the embedded default) or in Redis (fleet
// mode), and a multi-scope Limiter that checks the global, per-route and
// per-user limits of a turn in one all-or-nothing decision and renders the
// refusal as Retry-After / RateLimit headers and a localized message.
//
// The algorithm is GCRA (the generic cell rate algorithm), which is a token
// bucket stored as one number: the theoretical arrival time (TAT) at which
// the bucket would be full again. Storing one timestamp instead of a count and
// a refill time keeps the Redis script short and makes every decision exact:
// a bucket of rate r and burst b never admits more than b + r·t tokens in any
// interval of length t.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Never is the RetryAfter of a request that can never be admitted because it
// asks for more tokens than the bucket's burst.
const Never = time.Duration(math.MaxInt64)

// ErrInvalidCost is returned for a negative token count.
var ErrInvalidCost = errors.New("ratelimit: cost must be >= 0")

// Limit is one bucket: Rate tokens per Per, holding at most Burst tokens.
// Burst 0 means Burst = Rate. The emission interval Per/Rate must be at least
// one microsecond (the Redis store's resolution), i.e. at most 1,000,000/s.
type Limit struct {
	// Rate is how many tokens are added per Per. 0 disables the limit.
	Rate int `yaml:"rate"`
	// Per is the period Rate is counted over; 0 means one second.
	Per time.Duration `yaml:"per"`
	// Burst is the bucket capacity; 0 means Rate.
	Burst int `yaml:"burst"`
}

// PerSecond is a Limit of rate tokens per second with the given burst.
func PerSecond(rate, burst int) Limit { return Limit{Rate: rate, Per: time.Second, Burst: burst} }

// Enabled reports whether the limit restricts anything.
func (l Limit) Enabled() bool { return l.Rate > 0 }

func (l Limit) per() time.Duration {
	if l.Per <= 0 {
		return time.Second
	}
	return l.Per
}

func (l Limit) burst() int {
	if l.Burst <= 0 {
		return l.Rate
	}
	return l.Burst
}

// interval is the time one token takes to refill, rounded down to the
// nanosecond (over-admitting by at most a few parts per billion).
func (l Limit) interval() time.Duration {
	return l.per() / time.Duration(l.Rate)
}

// Scale returns the limit with rate and burst multiplied by f (premium tiers),
// rounded to the nearest token and at least 1.
func (l Limit) Scale(f float64) Limit {
	if !l.Enabled() || f == 1 {
		return l
	}
	return Limit{
		Rate:  max(1, int(math.Round(float64(l.Rate)*f))),
		Per:   l.per(),
		Burst: max(1, int(math.Round(float64(l.burst())*f))),
	}
}

// Share returns this instance's share of a fleet-wide limit when n instances
// each enforce it locally: 1/n of the rate (by stretching the period) and
// 1/n of the burst, rounded up, at least 1.
func (l Limit) Share(n int) Limit {
	if !l.Enabled() || n <= 1 {
		return l
	}
	return Limit{Rate: l.Rate, Per: l.per() * time.Duration(n), Burst: max(1, (l.burst()+n-1)/n)}
}

func (l Limit) validate(path string) error {
	var errs []error
	if l.Rate < 0 {
		errs = append(errs, fmt.Errorf("%s.rate: must be >= 0", path))
	}
	if l.Per < 0 {
		errs = append(errs, fmt.Errorf("%s.per: must be >= 0", path))
	}
	if l.Burst < 0 {
		errs = append(errs, fmt.Errorf("%s.burst: must be >= 0", path))
	}
	if l.Rate > 0 && l.Per >= 0 && l.interval() < time.Microsecond {
		errs = append(errs, fmt.Errorf("%s.rate: must be at most 1000000 per second", path))
	}
	return errors.Join(errs...)
}

func (l Limit) String() string {
	return fmt.Sprintf("%d/%s burst %d", l.Rate, l.per(), l.burst())
}

// Decision is the outcome of asking a bucket for n tokens.
type Decision struct {
	// Allowed reports whether the tokens were taken.
	Allowed bool
	// Remaining is how many whole tokens the bucket holds after the decision.
	Remaining int
	// RetryAfter is, when refused, exactly how long until the n tokens are
	// available (assuming nobody else takes them); Never if n > burst; 0 when
	// allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
}

// Bucket names one bucket of a multi-bucket request.
type Bucket struct {
	Key   string
	Limit Limit
}

// Store keeps bucket state. Implementations are safe for concurrent use.
type Store interface {
	// Allow takes n tokens from the bucket key if it has them.
	Allow(ctx context.Context, key string, l Limit, n int) (Decision, error)
	// AllowAll takes n tokens from every bucket or from none: it admits only
	// if each bucket has n tokens, and a refusal leaves every bucket
	// untouched. out must have len(buckets) elements; out[i] is bucket i's
	// own verdict (Allowed reports whether that bucket had the tokens).
	// Keys must be distinct.
	AllowAll(ctx context.Context, buckets []Bucket, n int, out []Decision) (bool, error)
}

// gcra decides a request of n tokens at now (ns) against a bucket whose
// stored TAT is tat (ns, 0 when absent). It returns the decision and the TAT
// to store if every bucket of the request admits.
func gcra(tat, now int64, l Limit, n int) (Decision, int64) {
	t := int64(l.interval())
	b := int64(l.burst())
	tau := b * t
	if tat < now {
		tat = now
	}
	avail := func(at int64) int { return int((now - (at - tau)) / t) }
	if int64(n) > b {
		return Decision{Remaining: avail(tat), RetryAfter: Never, ResetAfter: time.Duration(tat - now)}, tat
	}
	newTat := tat + int64(n)*t
	allowAt := newTat - tau
	if allowAt > now {
		return Decision{Remaining: avail(tat), RetryAfter: time.Duration(allowAt - now), ResetAfter: time.Duration(tat - now)}, tat
	}
	return Decision{Allowed: true, Remaining: avail(newTat), ResetAfter: time.Duration(newTat - now)}, newTat
}
