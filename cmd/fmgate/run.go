package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/fmgate/fmgate/internal/config"
)

// version and commit are set at build time with
// -ldflags "-X main.version=… -X main.commit=…" (scripts/release does).
var (
	version = "dev"
	commit  = ""
)

const usage = `usage: fmgate [command] [flags]

commands:
  serve     run the gateway (the default)
  validate  check a config file and list every problem
  sim       serve the model simulator over the OpenAI, Anthropic and Bedrock APIs
  ingest    move the fleet's spans from NATS JetStream into PostgreSQL
  scenario  run a game day against a fleet: scenario run NAME (primary-outage, …, all)
  judge     grade a payload export offline with the judge's rubric: judge -dataset FILE
  version   print the version, the commit and the Go version it was built with

Run "fmgate <command> -h" for the command's flags.
`

// run is the whole program; main only turns its error into an exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, stdout, stderr)
	case "validate":
		return validate(ctx, args, stdout, stderr)
	case "sim":
		return simulate(ctx, args, stdout, stderr)
	case "ingest":
		return ingestCmd(ctx, args, stdout, stderr)
	case "scenario":
		return scenarioCmd(ctx, args, stdout, stderr)
	case "judge":
		return judgeCmd(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func validate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file to check (YAML)")
	if err := fs.Parse(args); err != nil {
		return helpIsNoError(err)
	}
	if *path == "" {
		return errors.New("validate: -config FILE is required")
	}
	if parseOnly(ctx) {
		return nil
	}
	cfg, err := config.Load(*path)
	if err == nil {
		err = cfg.CheckSecrets()
	}
	var lines []string
	if err != nil {
		var p *config.Problems
		if !errors.As(err, &p) {
			return err
		}
		lines = p.List
	}
	lines = append(lines, credentialProblems(ctx, cfg)...)
	lines = append(lines, sinkProblems(ctx, cfg)...)
	if len(lines) > 0 {
		for _, line := range lines {
			fmt.Fprintln(stdout, line)
		}
		return fmt.Errorf("%s: %d problem(s)", *path, len(lines))
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return nil
}

// parseOnlyKey marks a context in which a command returns once its
// arguments are parsed and checked, doing nothing: the commands the
// documentation shows are checked by the same parsing that runs them.
type parseOnlyKey struct{}

// checkArgs parses and checks a command line as fmgate would, without
// running the command.
func checkArgs(args []string, stderr io.Writer) error {
	return run(context.WithValue(context.Background(), parseOnlyKey{}, true), args, io.Discard, stderr)
}

func parseOnly(ctx context.Context) bool {
	only, _ := ctx.Value(parseOnlyKey{}).(bool)
	return only
}

// isHelp reports whether arg asks for help as the flag package
// understands it.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--h" || arg == "--help"
}

// helpIsNoError turns the flag package's answer to -h (the usage is
// printed) into success, so "fmgate serve -h" exits 0.
func helpIsNoError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// versionLine is what "fmgate version" prints, e.g.
// "fmgate 1.2.0 (commit 0dec542, go1.26.8 linux/amd64)".
func versionLine() string {
	return fmt.Sprintf("fmgate %s (commit %s, %s %s/%s)", buildVersion(), buildCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildCommit is the stamped commit, else the one Go recorded from the
// checkout, else "unknown".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func buildVersion() string {
	if version != "dev" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return version
}
