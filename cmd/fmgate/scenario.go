package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/scenario"
)

const scenarioUsage = `usage: fmgate scenario run NAME [flags]

Runs a game day against a fleet of fmgate instances and checks it against
its goals; exits non-zero when a goal is missed.

scenarios:
%s  all                run every scenario in turn, each on a fresh fleet

flags:
`

// scenarioCmd is `fmgate scenario run NAME`.
func scenarioCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var list strings.Builder
	for _, n := range scenario.Names() {
		fmt.Fprintf(&list, "  %-18s %s\n", n, scenario.About(n))
	}
	fs := flag.NewFlagSet("scenario", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, scenarioUsage, list.String())
		fs.PrintDefaults()
	}
	instances := fs.Int("instances", scenario.DefaultInstances, "gateway instances to start")
	rate := fs.String("rate", "20/s", "chat load, turns per second (20 or 20/s)")
	duration := fs.Duration("duration", scenario.DefaultDuration, "load duration per scenario")
	report := fs.String("report", "scenario-report", "directory for report.md and report.html")
	targets := fs.String("targets", "", "comma-separated loopback URLs of running gateways to drive instead of starting a fleet (admin token from FMGATE_ADMIN_TOKEN)")
	pace := fs.Float64("pace", 1, "speed-up of the simulated models (1 = the MangaAssist profile's pace)")
	ttfb := fs.Duration("ttfb-goal", scenario.DefaultTTFBGoal, "p99 time-to-first-byte goal")
	seed := fs.Int64("seed", 0, "seed of the load's random choices (default: the time)")
	if (len(args) > 0 && isHelp(args[0])) || (len(args) > 1 && args[0] == "run" && isHelp(args[1])) {
		fs.Usage()
		return nil
	}
	if len(args) == 0 || args[0] != "run" {
		fs.Usage()
		return errors.New(`scenario: expected "run NAME"`)
	}
	if len(args) < 2 || strings.HasPrefix(args[1], "-") {
		fs.Usage()
		return errors.New("scenario run: name the scenario (or all)")
	}
	name := args[1]
	if err := fs.Parse(args[2:]); err != nil {
		return helpIsNoError(err)
	}
	r, err := strconv.ParseFloat(strings.TrimSuffix(*rate, "/s"), 64)
	if err != nil || r <= 0 {
		return fmt.Errorf("-rate %q: want turns per second, e.g. 20/s", *rate)
	}
	if parseOnly(ctx) {
		if name != "all" && !slices.Contains(scenario.Names(), name) {
			return fmt.Errorf("scenario run: unknown scenario %q", name)
		}
		return nil
	}
	opts := scenario.Options{
		Name: name, Instances: *instances, Rate: r, Duration: *duration, ReportDir: *report,
		AdminToken: os.Getenv("FMGATE_ADMIN_TOKEN"), Pace: *pace, TTFBGoal: *ttfb, Seed: *seed,
		Progress: stdout, Terminal: isTerminal(stdout),
	}
	if *targets != "" {
		opts.Targets = strings.Split(*targets, ",")
	}
	start := time.Now()
	results, err := scenario.Run(ctx, opts)
	for _, res := range results {
		fmt.Fprintf(stdout, "\n%s:\n", res.Name)
		for _, g := range res.Goals {
			fmt.Fprintf(stdout, "  %-4s  %-36s %s\n", g.Verdict, g.Name, g.Measured)
		}
	}
	if len(results) > 0 {
		fmt.Fprintf(stdout, "\nreport: %s/report.md, %s/report.html (%v)\n", *report, *report, time.Since(start).Round(time.Second))
	}
	return err
}

// isTerminal says w is a character device (a terminal), where a progress
// bar can redraw itself.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
