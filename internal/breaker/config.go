package breaker

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Config tunes one breaker. Zero or invalid fields given to a constructor
// take DefaultConfig's values; call Validate to report them instead.
type Config struct {
	// FailureThreshold opens the breaker when this many failures are in the
	// window. Default 5. Must be > 0.
	FailureThreshold int `yaml:"failureThreshold"`
	// FailureRate opens the breaker when failures/calls in the window reach
	// it, once MinCalls outcomes are in the window. Default 0.5. In (0, 1].
	FailureRate float64 `yaml:"failureRate"`
	// MinCalls is the number of outcomes the window needs before FailureRate
	// applies. Default 5. Must be > 0.
	MinCalls int `yaml:"minCalls"`
	// Window is the rolling window over which outcomes count. It advances in
	// steps of Window/20, so an outcome counts for between 95% and 100% of
	// Window. Default 60s. Must be > 0.
	Window time.Duration `yaml:"window"`
	// OpenTimeout is how long the breaker stays open before probing. Default
	// 60s. Must be > 0.
	OpenTimeout time.Duration `yaml:"openTimeout"`
	// Stages are the concurrent probe counts of the half-open recovery
	// stages. Default [1, 3, 10]. Non-empty, each > 0.
	Stages []int `yaml:"stages"`
	// HalfOpenWait is how long an admitted probe may stay outstanding before
	// it counts as failed, so that a probe that never completes cannot wedge
	// the breaker half-open. Default 10s. Must be > 0.
	HalfOpenWait time.Duration `yaml:"halfOpenWait"`
}

// windowBuckets is the number of steps the rolling window advances in: fine
// enough to be fair, coarse enough that the Redis hash stays small.
const windowBuckets = 20

// DefaultConfig is the breaker for the primary model (Sonnet in the
// MangaAssist profile): 5 failures or 50% of at least 5 calls in 60s open it
// for 60s; recovery probes 1, 3, then 10 calls.
func DefaultConfig() Config {
	return Config{
		FailureThreshold: 5,
		FailureRate:      0.5,
		MinCalls:         5,
		Window:           60 * time.Second,
		OpenTimeout:      60 * time.Second,
		Stages:           []int{1, 3, 10},
		HalfOpenWait:     10 * time.Second,
	}
}

// Defaults returns the MangaAssist breakers by name, a fresh map each call:
//
//	sonnet         5 failures or 50%, 60s window, open 60s
//	haiku          8 failures or 50%, 60s window, open 30s
//	redis          15 failures or 40%, 30s window, open 15s
//	session_store  10 failures or 20%, 30s window, open 30s
//	search         5 failures or 30%, 30s window, open 45s (the catalog search)
//	guardrail      5 failures or 50%, 30s window, open 30s (guardrails.bedrock)
//
// All use MinCalls 5, Stages [1, 3, 10] and HalfOpenWait 10s.
func Defaults() map[string]Config {
	with := func(threshold int, rate float64, window, open time.Duration) Config {
		c := DefaultConfig()
		c.FailureThreshold, c.FailureRate, c.Window, c.OpenTimeout = threshold, rate, window, open
		return c
	}
	return map[string]Config{
		"sonnet":        with(5, 0.5, 60*time.Second, 60*time.Second),
		"haiku":         with(8, 0.5, 60*time.Second, 30*time.Second),
		"redis":         with(15, 0.4, 30*time.Second, 15*time.Second),
		"session_store": with(10, 0.2, 30*time.Second, 30*time.Second),
		// The catalog search (seed: opensearch), skipped while open.
		"search": with(5, 0.3, 30*time.Second, 45*time.Second),
		// The remote guardrail check, skipped or refusing while open
		// (guardrails.bedrock.onError).
		"guardrail": with(5, 0.5, 30*time.Second, 30*time.Second),
	}
}

// Filled returns c with each zero field taken from base.
func (c Config) Filled(base Config) Config {
	if c.FailureThreshold == 0 {
		c.FailureThreshold = base.FailureThreshold
	}
	if c.FailureRate == 0 {
		c.FailureRate = base.FailureRate
	}
	if c.MinCalls == 0 {
		c.MinCalls = base.MinCalls
	}
	if c.Window == 0 {
		c.Window = base.Window
	}
	if c.OpenTimeout == 0 {
		c.OpenTimeout = base.OpenTimeout
	}
	if len(c.Stages) == 0 {
		c.Stages = slices.Clone(base.Stages)
	}
	if c.HalfOpenWait == 0 {
		c.HalfOpenWait = base.HalfOpenWait
	}
	return c
}

// FillDefaults gives each config's zero fields the value of its name's
// entry in Defaults, or of DefaultConfig for another name, so that a
// config file may set only the fields it changes.
func FillDefaults(configs map[string]Config) {
	named := Defaults()
	for name, c := range configs {
		base, ok := named[name]
		if !ok {
			base = DefaultConfig()
		}
		configs[name] = c.Filled(base)
	}
}

// Validate reports every invalid field, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	bad := func(field, problem string) { errs = append(errs, fmt.Errorf("%s: %s", field, problem)) }
	if c.FailureThreshold <= 0 {
		bad("failureThreshold", "must be > 0")
	}
	if !(c.FailureRate > 0 && c.FailureRate <= 1) {
		bad("failureRate", "must be in (0, 1]")
	}
	if c.MinCalls <= 0 {
		bad("minCalls", "must be > 0")
	}
	if c.Window <= 0 {
		bad("window", "must be > 0")
	} else if c.Window < windowBuckets*time.Microsecond {
		bad("window", fmt.Sprintf("must be >= %s", windowBuckets*time.Microsecond))
	}
	if c.OpenTimeout <= 0 {
		bad("openTimeout", "must be > 0")
	}
	if len(c.Stages) == 0 {
		bad("stages", "must not be empty")
	}
	for i, n := range c.Stages {
		if n <= 0 {
			bad(fmt.Sprintf("stages[%d]", i), "must be > 0")
		}
	}
	if c.HalfOpenWait <= 0 {
		bad("halfOpenWait", "must be > 0")
	}
	return errors.Join(errs...)
}

// ValidateAll validates a set of named configs, prefixing each problem with
// the breaker's name ("sonnet.failureRate: must be in (0, 1]").
func ValidateAll(configs map[string]Config) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(configs)) {
		if err := configs[name].Validate(); err != nil {
			for _, e := range unjoin(err) {
				errs = append(errs, fmt.Errorf("%s.%w", name, e))
			}
		}
	}
	return errors.Join(errs...)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// normalized replaces zero or invalid fields with DefaultConfig's, so a
// constructor always yields a working breaker.
func (c Config) normalized() Config {
	d := DefaultConfig()
	if c.FailureThreshold <= 0 {
		c.FailureThreshold = d.FailureThreshold
	}
	if !(c.FailureRate > 0 && c.FailureRate <= 1) {
		c.FailureRate = d.FailureRate
	}
	if c.MinCalls <= 0 {
		c.MinCalls = d.MinCalls
	}
	if c.Window < windowBuckets*time.Microsecond {
		c.Window = d.Window
	}
	if c.OpenTimeout <= 0 {
		c.OpenTimeout = d.OpenTimeout
	}
	if len(c.Stages) == 0 || slices.ContainsFunc(c.Stages, func(n int) bool { return n <= 0 }) {
		c.Stages = d.Stages
	}
	c.Stages = slices.Clone(c.Stages)
	if c.HalfOpenWait <= 0 {
		c.HalfOpenWait = d.HalfOpenWait
	}
	return c
}

// bucketMicros is the width of one window step in microseconds, the unit
// both implementations count time in (Redis TIME resolution).
func (c Config) bucketMicros() int64 {
	return max(c.Window.Microseconds()/windowBuckets, 1)
}
