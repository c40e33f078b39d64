package retry

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Strategy names a jitter strategy for exponential backoff.
type Strategy string

// Jitter strategies, with v = min(cap, base·multiplier^n) for the n-th retry
// (n from 0):
//
//	none          v
//	full          U(0, v)
//	equal         v/2 + U(0, v/2)
//	decorrelated  min(cap, U(base, multiplier·prev)), prev starting at base
//
// Decorrelated is the default: across a fleet it keeps retries from lining up
// without the very short waits full jitter sometimes draws.
const (
	StrategyNone         Strategy = "none"
	StrategyFull         Strategy = "full"
	StrategyEqual        Strategy = "equal"
	StrategyDecorrelated Strategy = "decorrelated"
)

func (s Strategy) valid() bool {
	switch s {
	case StrategyNone, StrategyFull, StrategyEqual, StrategyDecorrelated:
		return true
	}
	return false
}

// Backoff computes retry delays. A zero Multiplier means the strategy's
// customary growth: 2 for none/full/equal, 3 for decorrelated.
type Backoff struct {
	Strategy   Strategy
	Base       time.Duration
	Cap        time.Duration
	Multiplier float64
}

func (b Backoff) growth() float64 {
	if b.Multiplier > 0 {
		return b.Multiplier
	}
	if b.Strategy == StrategyDecorrelated {
		return 3
	}
	return 2
}

// Ceiling returns v = min(cap, base·multiplier^n), the envelope every
// exponential strategy draws under. It never overflows.
func (b Backoff) Ceiling(n int) time.Duration {
	v := float64(b.Base) * math.Pow(b.growth(), float64(n))
	if v >= float64(b.Cap) || math.IsInf(v, 0) || math.IsNaN(v) {
		return b.Cap
	}
	return time.Duration(v)
}

// Delay returns the wait before retry n (0 for the first retry). prev is the
// delay returned for the previous retry, or 0 before the first; only the
// decorrelated strategy uses it. r must not be shared without a lock.
func (b Backoff) Delay(r *rand.Rand, n int, prev time.Duration) time.Duration {
	switch b.Strategy {
	case StrategyFull:
		return uniform(r, 0, b.Ceiling(n))
	case StrategyEqual:
		v := b.Ceiling(n)
		return v/2 + uniform(r, 0, v/2)
	case StrategyDecorrelated:
		if prev < b.Base {
			prev = b.Base
		}
		hi := b.Base
		if up := float64(prev) * b.growth(); up > float64(hi) {
			hi = b.Cap
			if up < float64(b.Cap) {
				hi = time.Duration(up)
			}
		}
		return min(b.Cap, uniform(r, b.Base, hi))
	}
	// StrategyNone, and anything Config.Validate would have refused.
	return b.Ceiling(n)
}

// uniform draws from [lo, hi] inclusive.
func uniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
}

// lockedRand guards a *rand.Rand, which is not safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) delay(b Backoff, n int, prev time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return b.Delay(l.r, n, prev)
}
