// Package canary runs a new prompt version beside the one in force: a
// share of sessions (sticky by the keyed hash of their owner and session
// id) gets version B, the rest keep A. A verdict compares the two sides from
// the event store — latency p50/p95/p99, error rate, fallback rate, cost per
// turn, mean eval score, each with its counts — and, when automatic action
// is on, ramps B up step by step while it passes and rolls it back the
// moment it fails.
package canary

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/eventstore"
)

// Config is the canary section.
type Config struct {
	// Percent of sessions routed to version B, 0..100. 0 (the default)
	// runs no canary.
	Percent float64 `yaml:"percent"`
	// Prompt is version B's system prompt: System text or a File, with a
	// Name for its version label (default: the live prompt's name).
	Prompt PromptB `yaml:"prompt"`
	// MinTurns each side needs before a verdict is more than "not
	// comparable". Default 50.
	MinTurns int64 `yaml:"minTurns"`
	// Window of turns the verdict reads, back from now. Default 1h.
	Window     time.Duration `yaml:"window"`
	Thresholds Thresholds    `yaml:"thresholds"`
	Auto       Auto          `yaml:"auto"`
}

// PromptB is the candidate system prompt.
type PromptB struct {
	Name   string `yaml:"name"`
	System string `yaml:"system"`
	File   string `yaml:"file"`
}

// Thresholds say how much worse than A version B may be and still pass.
type Thresholds struct {
	// LatencyP95Ratio: B's p95 turn latency over A's. Default 1.25.
	LatencyP95Ratio float64 `yaml:"latencyP95Ratio" json:"latencyP95Ratio"`
	// ErrorRateDelta: B's error rate minus A's. Default 0.02.
	ErrorRateDelta float64 `yaml:"errorRateDelta" json:"errorRateDelta"`
	// FallbackRateDelta: B's fallback rate minus A's. Default 0.05.
	FallbackRateDelta float64 `yaml:"fallbackRateDelta" json:"fallbackRateDelta"`
	// CostPerTurnRatio: B's cost per turn over A's. Default 1.25.
	CostPerTurnRatio float64 `yaml:"costPerTurnRatio" json:"costPerTurnRatio"`
	// EvalDrop: A's mean eval score minus B's, counted once each side has
	// MinEvals scored turns. Default 0.05.
	EvalDrop float64 `yaml:"evalDrop" json:"evalDrop"`
	// MinEvals scored turns per side before eval scores count. Default 10.
	MinEvals int64 `yaml:"minEvals" json:"minEvals"`
}

// Auto is the automatic action on the verdict.
type Auto struct {
	// Enabled ramps B on pass and rolls it back on fail. Default off: the
	// verdict is only reported (GET /admin/canary) and alerted on.
	Enabled bool `yaml:"enabled"`
	// Interval between verdicts. Default 1m.
	Interval time.Duration `yaml:"interval"`
	// Steps are the percentages B ramps through on consecutive passes.
	// Default 5, 25, 50, 100.
	Steps []float64 `yaml:"steps"`
}

// DefaultConfig runs no canary; its thresholds and ramp are the defaults a
// canary gets when Percent is set.
func DefaultConfig() Config {
	return Config{
		MinTurns: 50,
		Window:   time.Hour,
		Thresholds: Thresholds{LatencyP95Ratio: 1.25, ErrorRateDelta: 0.02, FallbackRateDelta: 0.05,
			CostPerTurnRatio: 1.25, EvalDrop: 0.05, MinEvals: 10},
		Auto: Auto{Interval: time.Minute, Steps: []float64{5, 25, 50, 100}},
	}
}

// Validate reports every problem, each worded "field: problem".
func (c Config) Validate() error {
	var errs []error
	if c.Percent < 0 || c.Percent > 100 {
		errs = append(errs, errors.New("percent: must be in 0..100"))
	}
	if c.Percent > 0 && c.Prompt.System == "" && c.Prompt.File == "" {
		errs = append(errs, errors.New("prompt: a canary needs version B's prompt: set system or file"))
	}
	if c.MinTurns < 1 {
		errs = append(errs, errors.New("minTurns: must be >= 1"))
	}
	if c.Window <= 0 {
		errs = append(errs, errors.New("window: must be > 0"))
	}
	t := c.Thresholds
	if t.LatencyP95Ratio < 1 || t.CostPerTurnRatio < 1 {
		errs = append(errs, errors.New("thresholds: latencyP95Ratio and costPerTurnRatio must be >= 1"))
	}
	if t.ErrorRateDelta < 0 || t.FallbackRateDelta < 0 || t.EvalDrop < 0 || t.MinEvals < 0 {
		errs = append(errs, errors.New("thresholds: deltas, evalDrop and minEvals must be >= 0"))
	}
	if c.Auto.Interval <= 0 {
		errs = append(errs, errors.New("auto.interval: must be > 0"))
	}
	for i, s := range c.Auto.Steps {
		if s <= 0 || s > 100 || (i > 0 && s <= c.Auto.Steps[i-1]) {
			errs = append(errs, errors.New("auto.steps: must rise strictly within (0, 100]"))
			break
		}
	}
	return errors.Join(errs...)
}

// Verdict statuses.
const (
	// StatusPass: B is within every threshold of A.
	StatusPass = "pass"
	// StatusFail: B is worse than A beyond a threshold.
	StatusFail = "fail"
	// StatusNotComparable: the sides are the same version, or a side has
	// fewer than MinTurns turns; nothing can be said yet.
	StatusNotComparable = "not_comparable"
)

// Check is one comparison of the verdict.
type Check struct {
	Name  string  `json:"name"`
	A     float64 `json:"a"`
	B     float64 `json:"b"`
	Limit string  `json:"limit"`
	OK    bool    `json:"ok"`
	// Skipped says why the check did not count (too few scored turns).
	Skipped string `json:"skipped,omitempty"`
}

// Verdict is the canary's result over one window.
type Verdict struct {
	Status  string                 `json:"status"`
	Reasons []string               `json:"reasons"`
	Checks  []Check                `json:"checks"`
	A       eventstore.CompareSide `json:"a"`
	B       eventstore.CompareSide `json:"b"`
	From    time.Time              `json:"from"`
	To      time.Time              `json:"to"`
}

// Decide compares the sides of rep against th; each side needs minTurns.
func Decide(rep eventstore.CompareReport, minTurns int64, th Thresholds) Verdict {
	v := Verdict{A: rep.A, B: rep.B, From: rep.From, To: rep.To, Reasons: []string{}, Checks: []Check{}}
	switch {
	case rep.A.Version == rep.B.Version:
		v.Status = StatusNotComparable
		v.Reasons = append(v.Reasons, "A and B are the same version "+rep.A.Version)
		return v
	case rep.A.Turns < minTurns || rep.B.Turns < minTurns:
		v.Status = StatusNotComparable
		v.Reasons = append(v.Reasons, fmt.Sprintf("too few turns to compare: A %d, B %d (each side needs %d)", rep.A.Turns, rep.B.Turns, minTurns))
		return v
	}
	a, b := rep.A, rep.B
	ratio := func(name string, av, bv, limit float64) {
		ok := bv <= av*limit || bv-av < 1e-9
		v.Checks = append(v.Checks, Check{Name: name, A: av, B: bv, Limit: "B ≤ " + strconv.FormatFloat(limit, 'f', -1, 64) + "× A", OK: ok})
		if !ok {
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s %.4g vs %.4g (limit %.2f×)", name, bv, av, limit))
		}
	}
	delta := func(name string, av, bv, limit float64) {
		ok := bv-av <= limit+1e-12
		v.Checks = append(v.Checks, Check{Name: name, A: av, B: bv, Limit: "B ≤ A + " + strconv.FormatFloat(limit, 'f', -1, 64), OK: ok})
		if !ok {
			v.Reasons = append(v.Reasons, fmt.Sprintf("%s %.1f%% vs %.1f%% (limit +%.1f points)", name, 100*bv, 100*av, 100*limit))
		}
	}
	ratio("latency p95 ms", float64(a.LatencyP95MS), float64(b.LatencyP95MS), th.LatencyP95Ratio)
	delta("error rate", a.ErrorRate, b.ErrorRate, th.ErrorRateDelta)
	delta("fallback rate", a.FallbackRate, b.FallbackRate, th.FallbackRateDelta)
	ratio("cost per turn", a.CostPerTurn, b.CostPerTurn, th.CostPerTurnRatio)
	if a.EvalCount >= th.MinEvals && b.EvalCount >= th.MinEvals && (a.EvalCount > 0 || b.EvalCount > 0) {
		ok := a.EvalMean-b.EvalMean <= th.EvalDrop+1e-12
		v.Checks = append(v.Checks, Check{Name: "eval mean", A: a.EvalMean, B: b.EvalMean, Limit: "B ≥ A − " + strconv.FormatFloat(th.EvalDrop, 'f', -1, 64), OK: ok})
		if !ok {
			v.Reasons = append(v.Reasons, fmt.Sprintf("eval mean %.3f vs %.3f (limit −%.2f)", b.EvalMean, a.EvalMean, th.EvalDrop))
		}
	} else {
		v.Checks = append(v.Checks, Check{Name: "eval mean", A: a.EvalMean, B: b.EvalMean, Limit: "B ≥ A − " + strconv.FormatFloat(th.EvalDrop, 'f', -1, 64), OK: true,
			Skipped: fmt.Sprintf("scored turns A %d, B %d; each side needs %d", a.EvalCount, b.EvalCount, th.MinEvals)})
	}
	v.Status = StatusPass
	if len(v.Reasons) > 0 {
		v.Status = StatusFail
	}
	return v
}

// Judgement is a verdict together with the limits it was reached under,
// for a reader who sees the figures beside it (the dashboard's canary view,
// through GET /admin/cost/compare).
type Judgement struct {
	Status     string     `json:"status"`
	Reasons    []string   `json:"reasons"`
	Checks     []Check    `json:"checks"`
	MinTurns   int64      `json:"minTurns"`
	Thresholds Thresholds `json:"thresholds"`
}

// Judge is the verdict a canary configured as c reaches on rep: Decide
// with c's MinTurns and Thresholds, which any two versions of a prompt,
// graph or model can be put to.
func (c Config) Judge(rep eventstore.CompareReport) Judgement {
	v := Decide(rep, c.MinTurns, c.Thresholds)
	return Judgement{Status: v.Status, Reasons: v.Reasons, Checks: v.Checks, MinTurns: c.MinTurns, Thresholds: c.Thresholds}
}

// Bucket maps a session's keyed hash (hex) to 0..9999, the same on every
// instance, so a session sticks to its side.
func Bucket(hashHex string) int {
	if len(hashHex) > 8 {
		hashHex = hashHex[:8]
	}
	n, err := strconv.ParseUint(hashHex, 16, 32)
	if err != nil {
		return 0
	}
	return int(n % 10000)
}

// InB reports whether a session in bucket falls in the first percent of
// the buckets.
func InB(bucket int, percent float64) bool {
	return float64(bucket) < math.Round(percent*100)
}

// Step is one change of the canary's share, for its history.
type Step struct {
	At      time.Time `json:"at"`
	From    float64   `json:"fromPercent"`
	To      float64   `json:"toPercent"`
	Reason  string    `json:"reason"`
	Verdict string    `json:"verdict"`
}

// nextStep is the ramp's next percentage after p, or p at the top.
func nextStep(steps []float64, p float64) float64 {
	for _, s := range steps {
		if s > p {
			return s
		}
	}
	return p
}

// Compare reads the two sides from the event store.
type Compare func(ctx context.Context, a, b string, from, to time.Time) (eventstore.CompareReport, error)

// state is the canary's mutable part, guarded by mu.
type state struct {
	mu      sync.Mutex
	percent float64
	last    *Verdict
	steps   []Step
}
