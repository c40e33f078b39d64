package retry

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// Config is the retry policy. The zero value is not usable; start from
// DefaultConfig.
type Config struct {
	// Strategy is the jitter strategy. Default decorrelated.
	Strategy Strategy `yaml:"strategy"`
	// Base is the first retry's delay scale. Default 100ms.
	Base time.Duration `yaml:"base"`
	// Cap bounds every computed delay (a provider's Retry-After may exceed
	// it). Default 10s; in a 3 s turn the deadline check stops long before.
	Cap time.Duration `yaml:"cap"`
	// Multiplier is the growth per retry; 0 means 2 (3 for decorrelated).
	Multiplier float64 `yaml:"multiplier"`
	// MaxRetries is the retry count for classes without an override.
	// Default 5, at most 20.
	MaxRetries int `yaml:"maxRetries"`
	// Classes overrides the policy per error class (provider.Kind). An entry
	// replaces the default entry for that class; its zero fields inherit
	// the top-level values.
	Classes map[provider.Kind]ClassPolicy `yaml:"classes"`
	// Budget bounds retries relative to first attempts.
	Budget BudgetConfig `yaml:"budget"`
	// Pressure adapts the policy per model to its recent error rate.
	Pressure PressureConfig `yaml:"pressure"`
	// SendRate paces attempts at a model that throttles.
	SendRate SendRateConfig `yaml:"sendRate"`
	// MinAttemptTime is the least time an attempt is worth starting with: a
	// retry whose wait leaves less than this before the turn's deadline is
	// not made, so the caller moves on to the next tier at once. Default
	// 1s: Sonnet's 600 ms to its first token, with room for its jitter; a
	// retry left less would time out and leave the next tier less still.
	MinAttemptTime time.Duration `yaml:"minAttemptTime"`
}

// ClassPolicy overrides the retry policy for one error class.
type ClassPolicy struct {
	// MaxRetries for this class; nil inherits Config.MaxRetries.
	MaxRetries *int `yaml:"maxRetries"`
	// Base delay for this class; 0 inherits Config.Base.
	Base time.Duration `yaml:"base"`
	// Multiplier (growth per retry) for this class; 0 inherits.
	Multiplier float64 `yaml:"multiplier"`
}

// BudgetConfig sizes the retry budget: over any Window, retries may be at
// most Ratio of first attempts plus MinPerSecond·Window, like the retry
// budgets of Finagle and gRPC.
type BudgetConfig struct {
	// Ratio of first attempts that may be retried, in [0,1]. Default 0.2.
	Ratio float64 `yaml:"ratio"`
	// MinPerSecond is a floor of retries allowed however little traffic
	// there is, so a quiet instance can still retry. Default 5.
	MinPerSecond float64 `yaml:"minPerSecond"`
	// Window over which deposits and withdrawals count, at least 1s.
	// Default 10s.
	Window time.Duration `yaml:"window"`
}

// Thresholds are the error rates (over PressureConfig.Window) that move a
// model up a pressure level; a rate must exceed them.
type Thresholds struct {
	Slight float64 `yaml:"slight"` // NORMAL → SLIGHT, default 0.05
	High   float64 `yaml:"high"`   // SLIGHT → HIGH (and back below it), default 0.20
	Open   float64 `yaml:"open"`   // HIGH → CIRCUIT_OPEN, default 0.50
}

// LevelPolicy is how a pressure level tightens the class policy: the class's
// base delay is multiplied by BaseMultiplier, and its retries become
// min(classMaxRetries − FewerRetries, MaxRetries), never below 0.
type LevelPolicy struct {
	BaseMultiplier float64 `yaml:"baseMultiplier"`
	FewerRetries   int     `yaml:"fewerRetries"`
	MaxRetries     int     `yaml:"maxRetries"`
}

// LevelPolicies holds the policy for each level that tightens retries.
// NORMAL uses the configured policy as is; CIRCUIT_OPEN makes no calls.
type LevelPolicies struct {
	Slight   LevelPolicy `yaml:"slight"`
	High     LevelPolicy `yaml:"high"`
	Recovery LevelPolicy `yaml:"recovery"`
}

// SendRateConfig drives the adaptive send rate per model (see SendRate).
type SendRateConfig struct {
	// Enabled paces attempts at a model that throttles. Default true.
	Enabled bool `yaml:"enabled"`
	// SentPerAccepted is how many calls a model is sent, over Window, per
	// call it accepted (did not throttle), > 1. A model throttling less
	// than 1 − 1/SentPerAccepted of its calls is not paced. Default 2.5:
	// up to 60%, so a model throttling half of its calls whatever their
	// rate is sent them all.
	SentPerAccepted float64 `yaml:"sentPerAccepted"`
	// Window is the time constant the counts of calls wanted and accepted
	// decay with, at least 1s. Default 5s.
	Window time.Duration `yaml:"window"`
	// MinPerSecond is the least rate a throttling model is sent, so that
	// it keeps being probed. Default 0.5.
	MinPerSecond float64 `yaml:"minPerSecond"`
}

// PressureConfig drives the per-model pressure levels.
type PressureConfig struct {
	// Window is the sliding window of outcomes the error rate is computed
	// over. Default 60s.
	Window time.Duration `yaml:"window"`
	// Thresholds, defaults 5% / 20% / 50%.
	Thresholds Thresholds `yaml:"thresholds"`
	// Cooldown is how long CIRCUIT_OPEN lasts before RECOVERY. Default 30s.
	Cooldown time.Duration `yaml:"cooldown"`
	// MinSamples is the least number of outcomes in the window before HIGH
	// may open the circuit, so three failures on a quiet instance do not
	// shut a model out for the cooldown. Default 10.
	MinSamples int `yaml:"minSamples"`
	// NormalAfter consecutive successes move SLIGHT to NORMAL. Default 3.
	NormalAfter int `yaml:"normalAfter"`
	// RecoveredAfter consecutive successes move RECOVERY to NORMAL. Default 2.
	RecoveredAfter int `yaml:"recoveredAfter"`
	// ShareTTL is how long an instance's published level counts for the
	// fleet (Redis only) after its last refresh. Default 30s.
	ShareTTL time.Duration `yaml:"shareTTL"`
	// Levels maps each level to its retry policy.
	Levels LevelPolicies `yaml:"levels"`
}

func intp(n int) *int { return &n }

// DefaultConfig returns the MangaAssist policy: decorrelated jitter, base
// 100ms, cap 10s, 5 retries; per class the scaled step-function matrix
// (throttled 3 retries from 200ms growing ×3, unavailable 2, not_ready 2 from
// 250ms, timeout 1 with no growth, guardrail 0); a 20% retry budget with a
// floor of 5/s over 10s; pressure over 60s with thresholds 5/20/50%; an
// adaptive send rate per throttling model (2.5 calls sent per call
// accepted over a 5 s window, floor 0.5/s).
//
// The matrix's intervals (2s, 1s) are seconds-scale for workflows with
// minutes to spare; a chat turn must answer within 3 s, so the intervals are
// divided by ten while retry counts and growth rates are kept. Pressure
// levels stretch the base delay the way the adaptive client does
// (1s/2s/5s/3s → ×1, ×2, ×5, ×3) and cut retries: SLIGHT one fewer and at
// most 2, RECOVERY one fewer and at most 1, HIGH none. The seeds' HIGH
// waits 5 s for its one retry, which a turn's 3 s first-byte budget has no
// room for: with more than 20% of calls failing, the next tier answers
// sooner than a retry.
func DefaultConfig() Config {
	return Config{
		Strategy:   StrategyDecorrelated,
		Base:       100 * time.Millisecond,
		Cap:        10 * time.Second,
		MaxRetries: 5,
		Classes: map[provider.Kind]ClassPolicy{
			provider.KindThrottled:   {MaxRetries: intp(3), Base: 200 * time.Millisecond, Multiplier: 3},
			provider.KindUnavailable: {MaxRetries: intp(2), Base: 100 * time.Millisecond, Multiplier: 2},
			provider.KindNotReady:    {MaxRetries: intp(2), Base: 250 * time.Millisecond},
			provider.KindTimeout:     {MaxRetries: intp(1), Base: 100 * time.Millisecond, Multiplier: 1},
			provider.KindGuardrail:   {MaxRetries: intp(0)},
		},
		Budget: BudgetConfig{Ratio: 0.2, MinPerSecond: 5, Window: 10 * time.Second},
		Pressure: PressureConfig{
			Window:         60 * time.Second,
			Thresholds:     Thresholds{Slight: 0.05, High: 0.20, Open: 0.50},
			Cooldown:       30 * time.Second,
			MinSamples:     10,
			NormalAfter:    3,
			RecoveredAfter: 2,
			ShareTTL:       30 * time.Second,
			Levels: LevelPolicies{
				Slight:   LevelPolicy{BaseMultiplier: 2, FewerRetries: 1, MaxRetries: 2},
				High:     LevelPolicy{BaseMultiplier: 5, FewerRetries: 1, MaxRetries: 0},
				Recovery: LevelPolicy{BaseMultiplier: 3, FewerRetries: 1, MaxRetries: 1},
			},
		},
		SendRate:       SendRateConfig{Enabled: true, SentPerAccepted: 2.5, Window: 5 * time.Second, MinPerSecond: 0.5},
		MinAttemptTime: time.Second,
	}
}

// maxRetriesLimit keeps a typo from turning into a retry storm.
const maxRetriesLimit = 20

var knownKinds = []provider.Kind{
	provider.KindThrottled, provider.KindUnavailable, provider.KindTimeout,
	provider.KindNotReady, provider.KindValidation, provider.KindAccessDenied,
	provider.KindNotFound, provider.KindGuardrail, provider.KindCanceled,
	provider.KindUnknown,
}

// Validate reports every problem, each worded "field: problem".
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !c.Strategy.valid() {
		bad("strategy", "must be one of none, full, equal, decorrelated (got %q)", c.Strategy)
	}
	if c.Base <= 0 {
		bad("base", "must be > 0")
	}
	if c.Cap < c.Base {
		bad("cap", "must be >= base (%s)", c.Base)
	}
	if c.Multiplier != 0 && c.Multiplier < 1 {
		bad("multiplier", "must be 0 (strategy default) or >= 1")
	}
	if c.MaxRetries < 0 || c.MaxRetries > maxRetriesLimit {
		bad("maxRetries", "must be in [0,%d]", maxRetriesLimit)
	}
	kinds := slices.Sorted(maps.Keys(c.Classes))
	for _, kind := range kinds {
		p := c.Classes[kind]
		f := "classes." + string(kind)
		if !slices.Contains(knownKinds, kind) {
			bad(f, "unknown error class")
			continue
		}
		if p.MaxRetries != nil {
			if *p.MaxRetries < 0 || *p.MaxRetries > maxRetriesLimit {
				bad(f+".maxRetries", "must be in [0,%d]", maxRetriesLimit)
			} else if *p.MaxRetries > 0 && !kind.Retryable() {
				bad(f+".maxRetries", "must be 0: %s errors are never retried", kind)
			}
		}
		if p.Base < 0 {
			bad(f+".base", "must be >= 0")
		} else if p.Base > c.Cap && c.Cap > 0 {
			bad(f+".base", "must be <= cap (%s)", c.Cap)
		}
		if p.Multiplier != 0 && p.Multiplier < 1 {
			bad(f+".multiplier", "must be 0 (inherit) or >= 1")
		}
	}
	if c.MinAttemptTime < 0 {
		bad("minAttemptTime", "must be >= 0")
	}

	b := c.Budget
	if b.Ratio < 0 || b.Ratio > 1 {
		bad("budget.ratio", "must be in [0,1]")
	}
	if b.MinPerSecond < 0 {
		bad("budget.minPerSecond", "must be >= 0")
	}
	if b.Window < time.Second {
		bad("budget.window", "must be >= 1s")
	}

	p := c.Pressure
	if p.Window < time.Second {
		bad("pressure.window", "must be >= 1s")
	}
	th := p.Thresholds
	if th.Slight <= 0 || th.Slight >= 1 {
		bad("pressure.thresholds.slight", "must be in (0,1)")
	}
	if th.High <= th.Slight || th.High >= 1 {
		bad("pressure.thresholds.high", "must be in (slight,1)")
	}
	if th.Open <= th.High || th.Open > 1 {
		bad("pressure.thresholds.open", "must be in (high,1]")
	}
	if p.Cooldown <= 0 {
		bad("pressure.cooldown", "must be > 0")
	}
	if p.MinSamples < 1 {
		bad("pressure.minSamples", "must be >= 1")
	}
	if p.NormalAfter < 1 {
		bad("pressure.normalAfter", "must be >= 1")
	}
	if p.RecoveredAfter < 1 {
		bad("pressure.recoveredAfter", "must be >= 1")
	}
	if p.ShareTTL <= 0 {
		bad("pressure.shareTTL", "must be > 0")
	}
	sr := c.SendRate
	if sr.SentPerAccepted <= 1 {
		bad("sendRate.sentPerAccepted", "must be > 1")
	}
	if sr.Window < time.Second {
		bad("sendRate.window", "must be >= 1s")
	}
	if sr.MinPerSecond <= 0 {
		bad("sendRate.minPerSecond", "must be > 0")
	}
	levels := []struct {
		name string
		lp   LevelPolicy
	}{{"slight", p.Levels.Slight}, {"high", p.Levels.High}, {"recovery", p.Levels.Recovery}}
	for _, l := range levels {
		f, lp := "pressure.levels."+l.name, l.lp
		if lp.BaseMultiplier < 1 {
			bad(f+".baseMultiplier", "must be >= 1")
		}
		if lp.FewerRetries < 0 {
			bad(f+".fewerRetries", "must be >= 0")
		}
		if lp.MaxRetries < 0 || lp.MaxRetries > maxRetriesLimit {
			bad(f+".maxRetries", "must be in [0,%d]", maxRetriesLimit)
		}
	}
	return errors.Join(errs...)
}
