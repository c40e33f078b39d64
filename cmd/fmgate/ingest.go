package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/ingest"
)

// ingestCmd is `fmgate ingest`: move the fleet's spans from NATS JetStream
// into PostgreSQL until interrupted. Run one or more; they share the
// durable consumer.
func ingestCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML) naming events.sinks.nats and eventStore.dsn; default: the embedded profile")
	natsURL := fs.String("nats", "", "NATS URL (overrides events.sinks.nats.url)")
	dsn := fs.String("dsn", "", "PostgreSQL DSN (overrides FMGATE_PG_DSN and eventStore.dsn); default postgres://postgres@127.0.0.1:5432/fmgate")
	durable := fs.String("durable", "fmgate-ingest", "name of the durable consumer, shared by every ingester")
	batch := fs.Int("batch", 5000, "most spans per transaction (1..50000)")
	workers := fs.Int("workers", 2, "batches fetched and committed at once")
	every := fs.Duration("stats", 10*time.Second, "how often to log the counts and the stream's backlog (0: never)")
	if err := fs.Parse(args); err != nil {
		return helpIsNoError(err)
	}
	switch {
	case *batch < 1 || *batch > 50000:
		return fmt.Errorf("ingest: -batch %d: must be in 1..50000 spans", *batch)
	case *workers < 1 || *workers > 64:
		return fmt.Errorf("ingest: -workers %d: must be in 1..64", *workers)
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
	n := cfg.Events.Sinks.NATS
	if *natsURL != "" {
		n.URL = *natsURL
	}
	if n.URL == "" {
		return errors.New("ingest: no NATS URL: set events.sinks.nats.url or -nats")
	}
	pg := *dsn
	if pg == "" {
		pg = cfg.EventStore.PostgresDSN()
	}
	if pg == "" {
		pg = "postgres://postgres@127.0.0.1:5432/fmgate"
	}
	log := slog.New(events.NewLogHandler(slog.NewJSONHandler(stderr, nil)))

	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	store, err := pgstore.Open(octx, pg, pgstore.Options{Log: log, MaxConns: int32(*workers) + 2, Retention: cfg.EventStore.Retention})
	cancel()
	if err != nil {
		return err
	}
	defer store.Close()
	in, err := ingest.New(ingest.Config{URL: n.URL, Stream: n.Stream, Subject: n.Subject, MaxAge: n.MaxAge, MaxBytes: n.MaxBytes, Durable: *durable,
		Batch: *batch, Workers: *workers}, store, log)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fmgate ingest: %s stream %s → PostgreSQL (consumer %s, %d workers, batches of %d)\n",
		n.URL, n.Stream, *durable, *workers, *batch)
	if *every > 0 {
		go logProgress(ctx, in, *every, n, *durable, log)
	}
	if r := cfg.EventStore.Retention; r > 0 {
		go prune(ctx, store, r, cfg.EventStore.RetentionInterval, log)
	}
	err = in.Run(ctx)
	st := in.Stats()
	fmt.Fprintf(stdout, "fmgate ingest: stopped; stored %d spans, %d redelivered duplicates, %d rejected messages, %d unstorable spans, %d retried commits\n",
		st.Stored, st.Duplicates, st.Rejected, st.Unstorable, st.Retries)
	return err
}

// logProgress logs the counts and the backlog waiting in the stream, in
// messages: one span each from gateways before packing, up to
// sinks.MaxPackedSpans from the others.
func logProgress(ctx context.Context, in *ingest.Ingester, every time.Duration, n events.NATSConfig, durable string, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := in.Stats()
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		waiting, unacked, err := ingest.Pending(qctx, n.URL, n.Stream, durable)
		cancel()
		attrs := []any{"stored", st.Stored, "spans_per_s", float64(st.Stored-last) / every.Seconds(),
			"duplicates", st.Duplicates, "rejected_messages", st.Rejected, "unstorable_spans", st.Unstorable,
			"retries", st.Retries}
		if err == nil {
			attrs = append(attrs, "backlog_messages", waiting, "unacked_messages", unacked)
		}
		last = st.Stored
		log.Info("ingest progress", attrs...)
	}
}

// prune drops what is older than the retention (eventStore.retention),
// every interval. Several ingesters pruning at once is harmless.
func prune(ctx context.Context, store *pgstore.Store, retention, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, every)
		if err := store.Prune(pctx, time.Now().Add(-retention)); err != nil && ctx.Err() == nil {
			log.Warn("ingest: retention", "err", err)
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
