package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/payloadlog"
	"github.com/fmgate/fmgate/internal/server"
)

// judgeCmd is `fmgate judge`: grade a payload export (GET
// /admin/payloads/export) offline with the judge's rubric, through a
// gateway built in this process from the config (its judge tier and
// prompt, its models: the simulator by default), writing a verdict per
// record and a summary as JSON lines. It keeps nothing: no event store,
// no payload log, no span leaves the process.
func judgeCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("judge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML) naming the models and the judge; default: the embedded profile")
	dataset := fs.String("dataset", "", "payload export to grade (JSON lines); - reads standard input")
	if err := fs.Parse(args); err != nil {
		return helpIsNoError(err)
	}
	if *dataset == "" {
		return errors.New("judge: -dataset FILE is required (a payload export: GET /admin/payloads/export)")
	}
	if parseOnly(ctx) {
		return nil
	}
	cfg := config.Default()
	if *path != "" {
		var err error
		if cfg, err = config.Load(*path); err != nil {
			return err
		}
	}
	offline(&cfg)
	if err := cfg.CheckSecrets(); err != nil {
		return err
	}
	in := io.Reader(os.Stdin)
	if *dataset != "-" {
		f, err := os.Open(*dataset)
		if err != nil {
			return fmt.Errorf("judge: %w", err)
		}
		defer f.Close()
		in = f
	}
	log := slog.New(events.NewLogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	app, err := server.New(ctx, cfg, server.Options{Log: log})
	if err != nil {
		return err
	}
	defer app.Close()
	return app.JudgeDataset(ctx, func(fn func(payloadlog.Record) error) error { return payloadlog.ReadRecords(in, fn) }, stdout)
}

// offline keeps a gateway built to judge from writing anything: no event
// store, write-ahead log or sink, no payload log, no sampled judging, no
// shared state.
func offline(cfg *config.Config) {
	cfg.EventStore.Path, cfg.EventStore.Driver = "", ""
	cfg.Events.WAL.Dir = ""
	cfg.Events.Sinks = events.SinksConfig{}
	cfg.PayloadLog.Enabled, cfg.PayloadLog.Features, cfg.PayloadLog.SampleRate, cfg.PayloadLog.CaptureContent = false, nil, 0, false
	for k, c := range cfg.Auth.Keys {
		c.PayloadLog = false
		cfg.Auth.Keys[k] = c
	}
	cfg.Judge.SampleRate = 0
	cfg.Fleet.Redis = ""
	cfg.Catalog.Enabled = false // a record brings the context its answer had
}
