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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
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
	// Batch is the most spans committed in one transaction, counted in
	// spans whatever messages they came in: a packed message may be split
	// between two consecutive transactions, and is acknowledged once both
	// committed. Default 5000; limit 50000.
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
	// (redeliveries); Rejected are messages that could not be decoded,
	// dropped from the stream with all they held (each logged); Unstorable
	// are spans the store refused whatever the retries, dropped alone while
	// the rest of their batch is stored (each logged).
	Stored, Duplicates, Rejected, Unstorable, Batches int64
	// Retries are failed commits tried again.
	Retries int64
}

// Ingester moves spans from the stream into a Store.
type Ingester struct {
	cfg   Config
	store Store
	log   *slog.Logger

	stored, dups, rejected, unstorable, batches, retries atomic.Int64
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
		Unstorable: in.unstorable.Load(), Batches: in.batches.Load(), Retries: in.retries.Load()}
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
		fetchers.Go(func() { in.fetch(ctx, cons, int(nc.MaxPayload())+64<<10, batches) })
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
	// MaxAckPending counts messages. Every message holds at least one span
	// and one ingester holds at most 4 × Workers batches of messages (a
	// batch being filled and the fetch beyond it, one waiting and one
	// committing per worker), so it never throttles an ingester, while it
	// bounds what ingesters sharing the consumer hold.
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

// held is a fetched message: the spans of a packed message may be
// committed by two consecutive batches, and the message is acknowledged
// once all of them are, or handed back for redelivery (at most once
// either).
type held struct {
	m    jetstream.Msg
	left atomic.Int64 // spans not committed yet
	done atomic.Bool  // acknowledged or handed back
}

// committed counts n of the message's spans committed, and acknowledges
// the message when they were the last.
func (h *held) committed(n int) {
	if h.left.Add(-int64(n)) == 0 && h.done.CompareAndSwap(false, true) {
		_ = h.m.Ack()
	}
}

// handBack has JetStream redeliver the message, unless it was
// acknowledged already; spans of it committed meanwhile are skipped by
// the store when they come again.
func (h *held) handBack() {
	if h.done.CompareAndSwap(false, true) {
		_ = h.m.Nak()
	}
}

// piece is n consecutive spans of a batch, all from one message.
type piece struct {
	h *held
	n int
}

// fetchedBatch is a batch of spans and the messages they came in.
type fetchedBatch struct {
	spans  []events.Event
	pieces []piece
}

// take moves spans from the front of from into b until b holds limit
// spans, splitting a message between the two when it must. What from
// keeps moves to the front of its arrays, so that the next spans decoded
// into it follow it there instead of growing new ones.
func (b *fetchedBatch) take(from *fetchedBatch, limit int) {
	used, np := 0, 0
	for np < len(from.pieces) && len(b.spans) < limit {
		p := &from.pieces[np]
		k := min(p.n, limit-len(b.spans))
		b.spans = append(b.spans, from.spans[used:used+k]...)
		b.pieces = append(b.pieces, piece{h: p.h, n: k})
		used += k
		if k == p.n {
			np++
		} else {
			p.n -= k
		}
	}
	if used == 0 {
		return
	}
	// The places left behind are cleared: they hold on to no strings.
	n := copy(from.spans, from.spans[used:])
	clear(from.spans[n:])
	from.spans = from.spans[:n]
	m := copy(from.pieces, from.pieces[np:])
	clear(from.pieces[m:])
	from.pieces = from.pieces[:m]
}

func (b *fetchedBatch) handBack() {
	for _, p := range b.pieces {
		p.h.handBack()
	}
}

// Fetch bounds. A fetch asks for as many messages as the batch misses
// spans: every message holds at least one, so a stream of one-span
// messages (from gateways before packing) fills a batch in one fetch, and
// no more. Packed messages hold hundreds: the fetch's bytes, about
// spanBytes a span missing and never less than the largest message the
// server takes, bound what it brings beyond the batch, which waits
// decoded for the next one.
const (
	spanBytes    = 1024 // an encoded span is 0.5–1 KiB
	minFetchWait = 10 * time.Millisecond
)

// fetch fetches and decodes batches into out until ctx ends.
func (in *Ingester) fetch(ctx context.Context, cons jetstream.Consumer, maxMsg int, out chan<- fetchedBatch) {
	var carry fetchedBatch // spans fetched beyond the last batch
	defer func() { carry.handBack() }()
	for ctx.Err() == nil {
		b := in.fill(ctx, cons, maxMsg, &carry)
		if len(b.spans) == 0 {
			continue
		}
		select {
		case out <- b:
		case <-ctx.Done():
			b.handBack()
			return
		}
	}
}

// fill returns the next batch: spans fetched already, then as many
// fetches as it takes to hold cfg.Batch spans, within cfg.MaxWait.
func (in *Ingester) fill(ctx context.Context, cons jetstream.Consumer, maxMsg int, carry *fetchedBatch) fetchedBatch {
	b := fetchedBatch{spans: make([]events.Event, 0, in.cfg.Batch)}
	b.take(carry, in.cfg.Batch)
	deadline := time.Now().Add(in.cfg.MaxWait)
	for len(b.spans) < in.cfg.Batch && ctx.Err() == nil {
		wait := time.Until(deadline)
		if wait < minFetchWait && len(b.spans) > 0 {
			break
		}
		missing := in.cfg.Batch - len(b.spans)
		fetched, err := cons.Fetch(missing, jetstream.FetchMaxBytes(max(missing*spanBytes, maxMsg)),
			jetstream.FetchMaxWait(max(wait, minFetchWait)))
		if err != nil {
			in.log.Warn("ingest: fetch", "err", err)
			sleep(ctx, time.Second)
			break
		}
		got := 0
		for m := range fetched.Messages() {
			got++
			n := len(carry.spans)
			if carry.spans, err = decode(carry.spans, m); err != nil {
				in.reject(m, err)
				continue
			}
			h := &held{m: m}
			h.left.Store(int64(len(carry.spans) - n))
			carry.pieces = append(carry.pieces, piece{h: h, n: len(carry.spans) - n})
		}
		if err := fetched.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			in.log.Warn("ingest: fetch", "err", err)
		}
		b.take(carry, in.cfg.Batch)
		if got == 0 {
			break
		}
	}
	return b
}

// decode appends the spans of m to dst: the spans of a packed message
// (events.SpansHeader), or the one span of a plain message, as gateways
// before packing sent them.
func decode(dst []events.Event, m jetstream.Msg) ([]events.Event, error) {
	h := m.Headers().Get(events.SpansHeader)
	if h == "" {
		e, err := events.Decode(m.Data())
		if err != nil {
			return dst, err
		}
		return append(dst, e), nil
	}
	n, err := strconv.Atoi(h)
	if err != nil {
		return dst, fmt.Errorf("ingest: %s header %q: %w", events.SpansHeader, h, events.ErrPacked)
	}
	return events.DecodePacked(dst, m.Data(), n)
}

// reject drops a message that will never decode: keeping it would stall
// the stream.
func (in *Ingester) reject(m jetstream.Msg, err error) {
	var seq uint64
	if meta, _ := m.Metadata(); meta != nil {
		seq = meta.Sequence.Stream
	}
	in.log.Error("ingest: dropping a message that does not hold spans", "stream_seq", seq, "err", err)
	in.rejected.Add(1)
	_ = m.Term()
}

// write commits the batches of in and acknowledges their messages; once
// ctx has ended, the batches left are handed back for redelivery.
func (in *Ingester) write(ctx context.Context, batches <-chan fetchedBatch) {
	for b := range batches {
		if ctx.Err() != nil || !in.commit(ctx, b) {
			b.handBack()
			continue
		}
		for _, p := range b.pieces {
			p.h.committed(p.n)
		}
	}
}

// commit writes the batch, retrying with backoff while the store fails;
// the messages are kept alive meanwhile. It returns false when ctx ended
// first.
func (in *Ingester) commit(ctx context.Context, b fetchedBatch) bool {
	batch := b.spans
	write := func(spans []events.Event) (int64, error) {
		// A commit in flight when ctx ends may finish: its spans are then
		// acknowledged rather than redelivered.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return in.store.Write(wctx, spans)
	}
	backoff := 100 * time.Millisecond
	for {
		n, err := write(batch)
		var dropped int64
		if errors.Is(err, eventstore.ErrUnstorable) {
			n, dropped, err = in.storeApart(write, batch, err)
		}
		if err == nil {
			in.stored.Add(n)
			in.dups.Add(int64(len(batch)) - n - dropped)
			in.unstorable.Add(dropped)
			in.batches.Add(1)
			return true
		}
		in.retries.Add(1)
		if ctx.Err() != nil || !sleep(ctx, backoff) {
			return false
		}
		in.log.Warn("ingest: commit failed; retrying", "spans", len(batch), "err", err, "retry_in", backoff)
		for _, p := range b.pieces {
			if !p.h.done.Load() {
				_ = p.h.m.InProgress()
			}
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// storeApart stores a batch the store refused for a span it cannot hold
// (failed, eventstore.ErrUnstorable): it writes the batch in halves, and
// the halves that fail so in halves again, down to the spans at fault,
// which it drops, logged. It returns the spans stored and dropped, or the
// first other error, after which the whole batch is retried (the store
// skips the spans stored meanwhile).
func (in *Ingester) storeApart(write func([]events.Event) (int64, error), batch []events.Event, failed error) (stored, dropped int64, err error) {
	if len(batch) == 1 {
		e := &batch[0]
		in.log.Error("ingest: dropping a span the store cannot hold", "trace_id", e.TraceID, "span_id", e.SpanID,
			"name", e.Name, "err", failed)
		return 0, 1, nil
	}
	mid := len(batch) / 2
	for _, half := range [][]events.Event{batch[:mid], batch[mid:]} {
		n, err := write(half)
		var d int64
		if errors.Is(err, eventstore.ErrUnstorable) {
			n, d, err = in.storeApart(write, half, err)
		}
		if err != nil {
			return stored, dropped, err
		}
		stored, dropped = stored+n, dropped+d
	}
	return stored, dropped, nil
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

// Pending is how many messages wait in the stream for the durable
// consumer, and how many were delivered but not yet acknowledged. A
// message holds one span (gateways before packing) or up to
// sinks.MaxPackedSpans.
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
