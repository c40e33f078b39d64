// Package ingest moves the fleet's spans from NATS JetStream into the
// fleet-wide event store: a durable pull consumer fetches batches, the
// store commits each batch in one transaction, and only then are the
// messages acknowledged. A crash between commit and acknowledgement
// redelivers the batch, which the store skips span by span (it keeps each
// span id once), so every span is stored exactly once whatever stops: the
// ingester, the database or NATS. Several ingesters may share the durable
// consumer; JetStream hands each message to one of them.
//
// While no ingester runs, or the database is down, spans wait in the
// stream, bounded by its limits (events.sinks.nats); the gateways never
// wait for either.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
)

// Store commits a batch of spans, skipping those already stored, and
// reports how many were new.
type Store interface {
	Write(ctx context.Context, batch []events.Event) (int64, error)
}

// Config configures an ingester.
type Config struct {
	// URL, Stream and Subject of NATS JetStream, as the gateways' NATS sink
	// publishes them (events.sinks.nats).
	URL, Stream, Subject string
	// MaxAge and MaxBytes bound the stream when the ingester creates it
	// (no gateway has yet), as events.sinks.nats does; 0 is no bound.
	MaxAge   time.Duration
	MaxBytes int64
	// Durable is the consumer's name, shared by every ingester of the
	// fleet. Default "fmgate-ingest".
	Durable string
	// Batch is the most spans committed in one transaction. Default 5000;
	// limit 50000.
	Batch int
	// MaxWait is the longest a partial batch waits for more spans. Default
	// 250ms.
	MaxWait time.Duration
	// Workers commit batches concurrently, while as many fetchers fetch
	// and decode the next ones. Default 2.
	Workers int
	// AckWait is how long JetStream waits for an acknowledgement before
	// redelivering; a batch being retried is kept alive meanwhile. Default
	// 60s.
	AckWait time.Duration
}

func (c *Config) defaults() error {
	if c.URL == "" || c.Stream == "" || c.Subject == "" {
		return errors.New("ingest: NATS url, stream and subject are required (events.sinks.nats)")
	}
	if c.Durable == "" {
		c.Durable = "fmgate-ingest"
	}
	if c.Batch == 0 {
		c.Batch = 5000
	}
	if c.Batch < 1 || c.Batch > 50000 {
		return errors.New("ingest: batch must be in 1..50000")
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 250 * time.Millisecond
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.AckWait <= 0 {
		c.AckWait = 60 * time.Second
	}
	return nil
}

// Stats count what an ingester did since it started.
type Stats struct {
	// Stored spans were new to the store; Duplicates were stored already
	// (redeliveries); Rejected could not be decoded and were dropped from
	// the stream (each logged).
	Stored, Duplicates, Rejected, Batches int64
	// Retries are failed commits tried again.
	Retries int64
}

// Ingester moves spans from the stream into a Store.
type Ingester struct {
	cfg   Config
	store Store
	log   *slog.Logger

	stored, dups, rejected, batches, retries atomic.Int64
}

// New returns an ingester; Run starts it.
func New(cfg Config, store Store, log *slog.Logger) (*Ingester, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Ingester{cfg: cfg, store: store, log: log}, nil
}

// Stats returns the counts so far.
func (in *Ingester) Stats() Stats {
	return Stats{Stored: in.stored.Load(), Duplicates: in.dups.Load(), Rejected: in.rejected.Load(),
		Batches: in.batches.Load(), Retries: in.retries.Load()}
}

// Run ingests until ctx ends, then finishes the batches in hand (their
// commits, bounded by a few seconds) and returns nil. It returns an error
// only when it cannot start: NATS unreachable or the stream missing.
func (in *Ingester) Run(ctx context.Context) error {
	nc, err := nats.Connect(in.cfg.URL, nats.Name("fmgate-ingest"), nats.Timeout(2*time.Second), nats.MaxReconnects(-1))
	if err != nil {
		return fmt.Errorf("ingest: nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("ingest: nats: %w", err)
	}
	cons, err := in.consumer(ctx, js)
	if err != nil {
		return err
	}
	// Fetchers keep the writers supplied: batches are fetched and decoded
	// while the previous ones commit.
	batches := make(chan fetchedBatch, in.cfg.Workers)
	var fetchers, writers sync.WaitGroup
	for range in.cfg.Workers {
		fetchers.Go(func() { in.fetch(ctx, cons, batches) })
		writers.Go(func() { in.write(ctx, batches) })
	}
	fetchers.Wait()
	close(batches)
	writers.Wait()
	return nil
}

// consumer creates (or updates) the durable consumer, creating the stream
// as the gateways' sink would when no gateway has run yet.
func (in *Ingester) consumer(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := js.Stream(cctx, in.cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(cctx, jetstream.StreamConfig{Name: in.cfg.Stream, Subjects: []string{in.cfg.Subject},
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxAge: in.cfg.MaxAge,
			MaxBytes: maxBytes(in.cfg.MaxBytes), Discard: jetstream.DiscardOld})
		if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, fmt.Errorf("ingest: create stream %s: %w", in.cfg.Stream, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("ingest: stream %s: %w", in.cfg.Stream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(cctx, in.cfg.Stream, jetstream.ConsumerConfig{
		Durable:         in.cfg.Durable,
		AckPolicy:       jetstream.AckExplicitPolicy,
		AckWait:         in.cfg.AckWait,
		MaxAckPending:   4 * in.cfg.Workers * in.cfg.Batch,
		FilterSubject:   in.cfg.Subject,
		MaxRequestBatch: in.cfg.Batch,
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: consumer %s: %w", in.cfg.Durable, err)
	}
	return cons, nil
}

func maxBytes(n int64) int64 {
	if n == 0 {
		return -1 // JetStream's "no limit"
	}
	return n
}

// fetchedBatch is one fetch: the spans decoded and their messages.
type fetchedBatch struct {
	spans []events.Event
	msgs  []jetstream.Msg
}

// fetch fetches and decodes batches into out until ctx ends.
func (in *Ingester) fetch(ctx context.Context, cons jetstream.Consumer, out chan<- fetchedBatch) {
	for ctx.Err() == nil {
		fetched, err := cons.Fetch(in.cfg.Batch, jetstream.FetchMaxWait(in.cfg.MaxWait))
		if err != nil {
			in.log.Warn("ingest: fetch", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		b := fetchedBatch{spans: make([]events.Event, 0, in.cfg.Batch), msgs: make([]jetstream.Msg, 0, in.cfg.Batch)}
		for m := range fetched.Messages() {
			e, err := events.Decode(m.Data())
			if err != nil {
				// It will never decode: keeping it would stall the stream.
				meta, _ := m.Metadata()
				var seq uint64
				if meta != nil {
					seq = meta.Sequence.Stream
				}
				in.log.Error("ingest: dropping a message that is not a span", "stream_seq", seq, "err", err)
				in.rejected.Add(1)
				_ = m.Term()
				continue
			}
			b.spans = append(b.spans, e)
			b.msgs = append(b.msgs, m)
		}
		if err := fetched.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			in.log.Warn("ingest: fetch", "err", err)
		}
		if len(b.spans) == 0 {
			continue
		}
		select {
		case out <- b:
		case <-ctx.Done():
			nakAll(b.msgs)
			return
		}
	}
}

// write commits the batches of in and acknowledges them; once ctx has
// ended, the batches left are handed back for redelivery.
func (in *Ingester) write(ctx context.Context, batches <-chan fetchedBatch) {
	for b := range batches {
		if ctx.Err() != nil || !in.commit(ctx, b.spans, b.msgs) {
			nakAll(b.msgs)
			continue
		}
		for _, m := range b.msgs {
			_ = m.Ack()
		}
	}
}

func nakAll(msgs []jetstream.Msg) {
	for _, m := range msgs {
		_ = m.Nak()
	}
}

// commit writes the batch, retrying with backoff while the store fails;
// the messages are kept alive meanwhile. It returns false when ctx ended
// first.
func (in *Ingester) commit(ctx context.Context, batch []events.Event, msgs []jetstream.Msg) bool {
	write := func() (int64, error) {
		// A commit in flight when ctx ends may finish: its spans are then
		// acknowledged rather than redelivered.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return in.store.Write(wctx, batch)
	}
	backoff := 100 * time.Millisecond
	for {
		n, err := write()
		if err == nil {
			in.stored.Add(n)
			in.dups.Add(int64(len(batch)) - n)
			in.batches.Add(1)
			return true
		}
		in.retries.Add(1)
		if ctx.Err() != nil || !sleep(ctx, backoff) {
			return false
		}
		in.log.Warn("ingest: commit failed; retrying", "spans", len(batch), "err", err, "retry_in", backoff)
		for _, m := range msgs {
			_ = m.InProgress()
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Pending is how many spans wait in the stream for the durable consumer,
// and how many were delivered but not yet acknowledged.
func Pending(ctx context.Context, url, stream, durable string) (waiting uint64, unacked int, err error) {
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second))
	if err != nil {
		return 0, 0, fmt.Errorf("ingest: nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, 0, err
	}
	c, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		return 0, 0, fmt.Errorf("ingest: consumer %s: %w", durable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return info.NumPending, info.NumAckPending, nil
}
