// Package scenario runs game days against a fleet of fmgate gateways: it
// starts the fleet (subprocesses of the fmgate binary sharing a Redis it
// started itself, each on its own loopback port) or drives existing
// loopback targets, sends realistic bilingual chat load (many users, WebSocket,
// SSE and JSON turns, mixed priorities, a batch job), injects one fault
// through the admin API or process signals, and checks the outcome against
// goals: answered share, no 5xx, time to first byte, retry amplification,
// fleet rate-limit accuracy, no turn lost to a kill, no must-persist event
// lost, sessions continuing across instances. It writes report.md and a
// self-contained report.html (inline SVG charts) and says which goals were
// missed.
//
// Every wait is bounded and every process it starts is stopped when Run
// returns, on cancellation (Ctrl-C) too.
package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	DefaultInstances = 3
	DefaultRate      = 20
	DefaultDuration  = 60 * time.Second
	DefaultTTFBGoal  = 3 * time.Second
)

// Options configure a run. Zero values are the defaults.
type Options struct {
	// Name is a scenario name (Names) or "all".
	Name string
	// Instances is how many gateways to start (default 3); ignored with
	// Targets.
	Instances int
	// Rate is the chat load in turns per second (default 20).
	Rate float64
	// Duration of the load, per scenario (default 60 s).
	Duration time.Duration
	// ReportDir receives report.md and report.html (and, for "all", one
	// folder per scenario). Default: scenario-report.
	ReportDir string
	// Targets, when set, are running gateways (loopback URLs only) to drive
	// instead of starting a fleet; scenarios that signal processes or stop
	// Redis cannot run against targets.
	Targets []string
	// AdminToken is the targets' admin token; a started fleet gets a fresh
	// one.
	AdminToken string
	// Executable is the fmgate binary to start instances with, ExecArgs
	// arguments put before "serve", Env extra environment variables.
	// Default: this process's own executable.
	Executable string
	ExecArgs   []string
	Env        []string
	// RedisServer is the redis-server binary (default: from PATH).
	RedisServer string
	// RedisTimeout, when set, overrides the per-call Redis timeouts of the
	// rate limiter and the session store in the started fleet's config
	// (default: the gateway's own, 50 ms and 250 ms). Past them a limiter
	// decides on its local share and a turn answers without history, which
	// a slow machine (race-built instances) would show as misses.
	RedisTimeout time.Duration
	// Pace speeds the simulated models up (2 = twice the tokens per second,
	// half the time to first token); default 1, the MangaAssist profile.
	Pace float64
	// TTFBGoal is the p99 time-to-first-byte goal (default 3 s, the
	// first-byte deadline).
	TTFBGoal time.Duration
	// Progress receives the live progress display; Terminal draws a bar,
	// otherwise a plain line every few seconds. nil: no display.
	Progress io.Writer
	Terminal bool
	// Seed makes the load reproducible (default: the time).
	Seed int64
}

func (o Options) withDefaults() Options {
	if o.Instances <= 0 {
		o.Instances = DefaultInstances
	}
	if len(o.Targets) > 0 {
		o.Instances = len(o.Targets)
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.ReportDir == "" {
		o.ReportDir = "scenario-report"
	}
	if o.TTFBGoal <= 0 {
		o.TTFBGoal = DefaultTTFBGoal
	}
	if o.Pace <= 0 {
		o.Pace = 1
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	return o
}

// users is how many distinct chat users the load spreads over.
func (o Options) users() int { return max(40, int(o.Rate*6)) }

// Names lists the scenarios in the order "all" runs them.
func Names() []string {
	out := make([]string, len(definitions))
	for i, d := range definitions {
		out[i] = d.name
	}
	return out
}

// About is a scenario's one-line description.
func About(name string) string {
	for _, d := range definitions {
		if d.name == name {
			return d.about
		}
	}
	return ""
}

// ErrGoalsMissed is returned (wrapped) when a run completed but missed at
// least one goal.
var ErrGoalsMissed = errors.New("goals missed")

// Run runs the scenario opts.Name (or every one for "all"), writes the
// report and returns the results; the error wraps ErrGoalsMissed when a
// goal was missed.
func Run(ctx context.Context, opts Options) ([]*Result, error) {
	opts = opts.withDefaults()
	var defs []definition
	if opts.Name == "all" {
		defs = definitions
	} else {
		i := slices.IndexFunc(definitions, func(d definition) bool { return d.name == opts.Name })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q; known: %s, all", opts.Name, strings.Join(Names(), ", "))
		}
		defs = definitions[i : i+1]
	}
	if len(opts.Targets) > 0 {
		for _, d := range defs {
			if d.ownFleet {
				return nil, fmt.Errorf("scenario %s signals processes or stops Redis: it needs a fleet it starts itself, not -targets", d.name)
			}
		}
	}
	if opts.Executable == "" && len(opts.Targets) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the fmgate binary: %w", err)
		}
		opts.Executable = exe
	}
	if opts.AdminToken == "" {
		if len(opts.Targets) > 0 {
			return nil, errors.New("-targets needs the targets' admin token (FMGATE_ADMIN_TOKEN)")
		}
		opts.AdminToken = fmt.Sprintf("scenario-%x", opts.Seed)
	}
	// Absolute: each instance runs in its directory under it, and is handed
	// its config's path from there.
	dir, err := filepath.Abs(opts.ReportDir)
	if err != nil {
		return nil, fmt.Errorf("report dir: %w", err)
	}
	opts.ReportDir = dir
	if err := os.MkdirAll(opts.ReportDir, 0o755); err != nil {
		return nil, fmt.Errorf("report dir: %w", err)
	}
	var results []*Result
	for _, d := range defs {
		dir := opts.ReportDir
		if len(defs) > 1 {
			dir = filepath.Join(opts.ReportDir, d.name)
		}
		res, err := runOne(ctx, opts, d, dir)
		if res != nil {
			results = append(results, res)
		}
		if err != nil {
			// Interrupted: report what was measured so far.
			if len(results) > 0 {
				_ = writeReport(opts.ReportDir, opts, results)
			}
			return results, fmt.Errorf("%s: %w", d.name, err)
		}
		if len(defs) > 1 {
			if err := writeReport(dir, opts, []*Result{res}); err != nil {
				return results, err
			}
		}
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	if err := writeReport(opts.ReportDir, opts, results); err != nil {
		return results, err
	}
	var missed []string
	for _, r := range results {
		for _, g := range r.Goals {
			if g.Verdict == Fail {
				missed = append(missed, r.Name+": "+g.Name)
			}
		}
	}
	if len(missed) > 0 {
		return results, fmt.Errorf("%w: %s", ErrGoalsMissed, strings.Join(missed, "; "))
	}
	return results, nil
}

// definition is one scenario: its faults, at fractions of the run.
type definition struct {
	name, about string
	// ownFleet: the scenario signals processes or stops Redis.
	ownFleet bool
	steps    []step
	// primaryShare, when set, is a goal: the share of the turns answered
	// between the first two marks that the primary model answered.
	primaryShare float64
}

// step is one action of a scenario's timeline, at a fraction of the run;
// an empty label marks nothing (the action marks its own moment).
type step struct {
	at    float64
	label string
	do    func(ctx context.Context, r *runner) error
}

var definitions = []definition{
	{
		name:  "primary-outage",
		about: "Sonnet goes down on every instance, then comes back: turns move to Haiku, then back.",
		steps: []step{
			{0.25, "sonnet outage", func(ctx context.Context, r *runner) error {
				return r.simAll(ctx, "sonnet", `{"outage":true}`)
			}},
			{0.65, "sonnet restored", func(ctx context.Context, r *runner) error {
				return r.simAll(ctx, "sonnet", `{"outage":false}`)
			}},
		},
	},
	{
		name:  "throttle-storm",
		about: "Sonnet throttles half of all calls whatever their rate: Sonnet keeps answering what it accepts, Haiku the turns it throttled.",
		// Half of Sonnet's calls go through: it should answer close to half
		// of the turns, not hand them all to Haiku.
		primaryShare: 0.35,
		steps: []step{
			{0.25, "sonnet throttling 50%", func(ctx context.Context, r *runner) error {
				return r.simAll(ctx, "sonnet", `{"errorRate":{"throttled":0.5}}`)
			}},
			{0.65, "throttling stopped", func(ctx context.Context, r *runner) error {
				return r.simAll(ctx, "sonnet", `{"errorRate":{}}`)
			}},
		},
	},
	{
		name:  "tpm-cut",
		about: "The provider cuts Sonnet's tokens-per-minute ceiling to 10%: P0 downshifts, batch pauses, no provider throttle.",
		steps: []step{
			{0.25, "sonnet TPM ceiling cut to 10%", func(ctx context.Context, r *runner) error {
				return r.cutTPM(ctx, "sonnet", 0.10)
			}},
			{0.65, "ceiling restored", func(ctx context.Context, r *runner) error {
				return r.cutTPM(ctx, "sonnet", 1)
			}},
		},
	},
	{
		name:     "redis-loss",
		about:    "The fleet's Redis crashes and comes back empty: no turn hangs, limits fall back to local shares.",
		ownFleet: true,
		steps: []step{
			{0.25, "redis killed", func(_ context.Context, r *runner) error {
				r.fleet.redis.stop()
				return nil
			}},
			{0.55, "redis restarted (empty)", func(ctx context.Context, r *runner) error {
				return r.fleet.redis.start(ctx)
			}},
		},
	},
	{
		name:     "instance-kill",
		about:    "One instance is SIGKILLed mid-stream, then started again: its in-flight turns end in a visible error, its events are replayed.",
		ownFleet: true,
		steps: []step{
			{0.30, "", func(_ context.Context, r *runner) error {
				r.waitStreaming(0, 3*time.Second) // mid-stream
				r.mark("SIGKILL instance 0")
				return r.kill(0, syscall.SIGKILL)
			}},
			{0.50, "instance 0 restarted", func(ctx context.Context, r *runner) error {
				return r.startInstance(ctx, 0)
			}},
		},
	},
	{
		name:     "rolling-restart",
		about:    "Each instance in turn gets SIGTERM, drains and is started again: no accepted turn is lost.",
		ownFleet: true,
		steps: []step{
			{0.20, "rolling restart", func(ctx context.Context, r *runner) error {
				for i := range r.fleet.instances {
					r.mark(fmt.Sprintf("SIGTERM instance %d", i))
					if err := r.kill(i, syscall.SIGTERM); err != nil {
						return err
					}
					if err := r.startInstance(ctx, i); err != nil {
						return err
					}
					r.mark(fmt.Sprintf("instance %d back", i))
				}
				return nil
			}},
		},
	},
}
