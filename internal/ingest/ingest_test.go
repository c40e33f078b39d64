package ingest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/events/sinks"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// natsURL is the test NATS JetStream server.
const natsURL = "nats://127.0.0.1:4222"

// testStream returns a config naming a stream of the test's own, deleted
// when the test ends, and a sink publishing to it as a gateway does.
func testStream(t testing.TB) (Config, *sinks.NATS) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	cfg := Config{URL: natsURL, Stream: "FMGATE_TEST_" + id, Subject: "fmgate.test." + id + ".events",
		Batch: 500, MaxWait: 50 * time.Millisecond, AckWait: 2 * time.Second, Workers: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sink, err := sinks.NewNATS(ctx, events.NATSConfig{URL: natsURL, Subject: cfg.Subject, Stream: cfg.Stream}, nil)
	if err != nil {
		t.Fatalf("nats jetstream at %s is not reachable (start nats-server -js): %v", natsURL, err)
	}
	t.Cleanup(func() {
		sink.Close()
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		_ = js.DeleteStream(context.Background(), cfg.Stream)
	})
	return cfg, sink
}

func publish(t testing.TB, sink *sinks.NATS, spans []events.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < len(spans); i += 1000 {
		if err := sink.Write(ctx, spans[i:min(i+1000, len(spans))]); err != nil {
			t.Fatal(err)
		}
	}
}

// crashing commits through the real store, and after the given number of
// commits "crashes": the next batch is committed but the ingester dies
// before acknowledging it.
type crashing struct {
	s      *pgstore.Store
	after  int
	n      atomic.Int64
	crash  context.CancelFunc
	failed atomic.Bool
}

func (c *crashing) Write(ctx context.Context, batch []events.Event) (int64, error) {
	n, err := c.s.Write(ctx, batch)
	if err == nil && c.n.Add(1) > int64(c.after) && !c.failed.Load() {
		c.failed.Store(true)
		c.crash()
		return 0, errors.New("crashed after commit, before the acknowledgement")
	}
	return n, err
}

// waitStored waits, within a deadline, until the store holds want spans.
func waitStored(t testing.TB, s *pgstore.Store, want int64) pgstore.Stats {
	t.Helper()
	wait := time.Minute
	if _, bench := t.(*testing.B); bench {
		wait = 10 * time.Minute
	}
	deadline := time.Now().Add(wait)
	for {
		st, err := s.Stats(context.Background())
		if err == nil && st.Spans >= want || time.Now().After(deadline) {
			return st
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not timing one
	}
}

func TestExactlyOnceAcrossIngesterCrashAndDatabaseRestart(t *testing.T) {
	cfg, sink := testStream(t)
	ctx := context.Background()
	schema := pgtest.Schema(t)
	store, err := pgstore.Open(ctx, pgtest.DSN(), pgstore.Options{Schema: schema, MaxConns: 4, AppName: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	data := storetest.Dataset(11, 600)
	half := len(data) / 2
	publish(t, sink, data[:half])

	// The first ingester crashes between a commit and its acknowledgement.
	actx, crash := context.WithCancel(ctx)
	c := &crashing{s: store, after: 2, crash: crash}
	a, err := New(cfg, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Run(actx); err != nil {
		t.Fatal(err)
	}
	if !c.failed.Load() {
		t.Fatal("the first ingester never reached its crash")
	}

	// Spans keep arriving while no ingester runs; a second one takes over.
	publish(t, sink, data[half:])
	bctx, stop := context.WithCancel(ctx)
	b, err := New(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := b.Run(bctx); err != nil {
			t.Error(err)
		}
	})
	// The database drops every connection of the store mid-stream.
	waitStored(t, store, int64(len(data))*2/3)
	terminateBackends(t, schema)
	publish(t, sink, data[:100]) // and a gateway re-sends some spans

	st := waitStored(t, store, int64(len(data)))
	stop()
	wg.Wait()
	if st.Spans != int64(len(data)) {
		t.Fatalf("store holds %d spans, want %d, each once", st.Spans, len(data))
	}
	// The roll-ups and turns counted each span once too.
	rep, err := store.Cost(ctx, eventstore.Query{From: storetest.T0.Add(-2 * time.Hour), To: storetest.T0.Add(8 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	users, err := store.Cost(ctx, eventstore.Query{By: eventstore.ByUser, From: storetest.T0.Add(-2 * time.Hour), To: storetest.T0.Add(8 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Spans != int64(len(data)) || rep.Total.Turns != 600 || users.Total.Spans != int64(len(data)) {
		t.Fatalf("roll-ups count %d spans and %d turns, turns count %d spans; want %d, 600, %d",
			rep.Total.Spans, rep.Total.Turns, users.Total.Spans, len(data), len(data))
	}
	if a.Stats().Duplicates+b.Stats().Duplicates == 0 {
		t.Errorf("no redelivered span was seen: the crash lost its batch's acknowledgement for nothing? stats %+v, %+v", a.Stats(), b.Stats())
	}
	t.Logf("first ingester %+v, second %+v", a.Stats(), b.Stats())
}

// terminateBackends ends every connection of the store (named app), as a
// database restart would.
func terminateBackends(t *testing.T, app string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no connection of the store to terminate")
	}
}

func TestRejectsMessagesThatAreNotSpans(t *testing.T) {
	cfg, sink := testStream(t)
	ctx := context.Background()
	store, err := pgstore.Open(ctx, pgtest.DSN(), pgstore.Options{Schema: pgtest.Schema(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.Publish(ctx, cfg.Subject, []byte(`{"not":"a span"`)); err != nil {
		t.Fatal(err)
	}
	data := storetest.Dataset(5, 10)
	publish(t, sink, data)
	in, _ := New(cfg, store, nil)
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { in.Run(rctx) })
	st := waitStored(t, store, int64(len(data)))
	stop()
	wg.Wait()
	if st.Spans != int64(len(data)) || in.Stats().Rejected != 1 {
		t.Fatalf("stored %d spans, rejected %d; want %d and 1", st.Spans, in.Stats().Rejected, len(data))
	}
}

// jetStream is a JetStream client on the test server, closed with t.
func jetStream(t testing.TB) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// publishRaw publishes messages as a gateway of the given kind would: one
// plain span each (before packing), or packed with the given header.
func publishRaw(t testing.TB, cfg Config, msgs ...*nats.Msg) {
	t.Helper()
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range msgs {
		m.Subject = cfg.Subject
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}

// plainMsgs are the spans as gateways before packing sent them.
func plainMsgs(spans []events.Event) []*nats.Msg {
	out := make([]*nats.Msg, len(spans))
	for i := range spans {
		out[i] = &nats.Msg{Data: events.Encode(&spans[i]), Header: nats.Header{"Nats-Msg-Id": {spans[i].ID()}}}
	}
	return out
}

// packedMsg packs the spans in one message whose header says n.
func packedMsg(spans []events.Event, n string) *nats.Msg {
	var data []byte
	for i := range spans {
		data = events.AppendPacked(data, events.Encode(&spans[i]))
	}
	return &nats.Msg{Data: data, Header: nats.Header{events.SpansHeader: {n}}}
}

// consumerState is what the durable consumer has delivered and not had
// acknowledged, and what waits.
func consumerState(t testing.TB, cfg Config) (pending uint64, unacked int, redelivered int) {
	t.Helper()
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, cfg.Stream, "fmgate-ingest")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.NumPending, info.NumAckPending, info.NumRedelivered
}

// runUntil runs an ingester on store until the store holds want spans or
// a minute passes, and returns its stats and the store's.
func runUntil(t *testing.T, cfg Config, store Store, pg *pgstore.Store, want int64) (Stats, pgstore.Stats) {
	t.Helper()
	in, err := New(cfg, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := in.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	st := waitStored(t, pg, want)
	// The last batch's acknowledgements follow its commit.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if p, u, _ := consumerState(t, cfg); p == 0 && u == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling a condition, not timing one
	}
	stop()
	wg.Wait()
	return in.Stats(), st
}

func openStore(t *testing.T) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(context.Background(), pgtest.DSN(), pgstore.Options{Schema: pgtest.Schema(t), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestPackedMessagesFromTheSink(t *testing.T) {
	cfg, sink := testStream(t)
	store := openStore(t)
	data := storetest.Dataset(21, 400)
	publish(t, sink, data)
	if p := streamMsgs(t, cfg); p >= uint64(len(data))/10 {
		t.Fatalf("the sink published %d messages for %d spans: not packed", p, len(data))
	}
	stats, st := runUntil(t, cfg, store, store, int64(len(data)))
	if st.Spans != int64(len(data)) || stats.Stored != int64(len(data)) || stats.Rejected != 0 {
		t.Fatalf("store holds %d spans, ingester stored %d and rejected %d; want %d, %d, 0", st.Spans, stats.Stored, stats.Rejected, len(data), len(data))
	}
	if p, u, _ := consumerState(t, cfg); p != 0 || u != 0 {
		t.Errorf("%d messages waiting and %d unacknowledged after every span was stored", p, u)
	}
}

// streamMsgs is how many messages the stream holds.
func streamMsgs(t testing.TB, cfg Config) uint64 {
	t.Helper()
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func TestMixedPlainAndPackedMessages(t *testing.T) {
	cfg, sink := testStream(t)
	store := openStore(t)
	data := storetest.Dataset(22, 300)
	// A fleet half upgraded: plain and packed messages interleave, and an
	// upgraded gateway re-sends, packed, spans sent plain before.
	third := len(data) / 3
	publishRaw(t, cfg, plainMsgs(data[:third])...)
	publish(t, sink, data[third:2*third])
	publishRaw(t, cfg, plainMsgs(data[2*third:])...)
	publish(t, sink, data[:50])
	stats, st := runUntil(t, cfg, store, store, int64(len(data)))
	if st.Spans != int64(len(data)) || stats.Rejected != 0 || stats.Stored != int64(len(data)) {
		t.Fatalf("store holds %d spans (ingester stored %d, rejected %d), want %d each once", st.Spans, stats.Stored, stats.Rejected, len(data))
	}
	if p, u, _ := consumerState(t, cfg); p != 0 || u != 0 {
		t.Errorf("%d messages waiting and %d unacknowledged after every span was stored", p, u)
	}
}

func TestMalformedPackedMessagesAreTerminated(t *testing.T) {
	cfg, sink := testStream(t)
	cfg.AckWait = time.Minute // a stalled message would not come back within the test
	store := openStore(t)
	data := storetest.Dataset(23, 100)
	good := packedMsg(data[:5], "5")
	truncated := packedMsg(data[:5], "5")
	truncated.Data = truncated.Data[:len(truncated.Data)-3]
	publishRaw(t, cfg,
		packedMsg(data[:5], "6"),          // fewer records than the header says
		packedMsg(data[:5], "4"),          // more
		packedMsg(data[:5], "five"),       // a header that is no count
		truncated,                         // cut short
		packedMsg(data[:0], "0"),          // empty
		&nats.Msg{Data: []byte(`{"no":`)}, // a plain message that is not a span
	)
	publish(t, sink, data)
	publishRaw(t, cfg, good) // spans stored already, packed well: no rejection
	stats, st := runUntil(t, cfg, store, store, int64(len(data)))
	if st.Spans != int64(len(data)) || stats.Rejected != 6 {
		t.Fatalf("store holds %d spans, %d messages rejected; want %d and 6", st.Spans, stats.Rejected, len(data))
	}
	if p, u, _ := consumerState(t, cfg); p != 0 || u != 0 {
		t.Errorf("%d messages waiting and %d unacknowledged: a malformed message stalls the consumer", p, u)
	}
}

// recording records the size of every batch committed; with okFirst set,
// every commit after the first okFirst fails.
type recording struct {
	s       *pgstore.Store
	mu      sync.Mutex
	sizes   []int
	okFirst int // commits that succeed before the store fails (0: never fails)
	writes  atomic.Int64
}

func (r *recording) Write(ctx context.Context, batch []events.Event) (int64, error) {
	if r.okFirst > 0 && r.writes.Add(1) > int64(r.okFirst) {
		return 0, errors.New("database down")
	}
	n, err := r.s.Write(ctx, batch)
	if err == nil {
		r.mu.Lock()
		r.sizes = append(r.sizes, len(batch))
		r.mu.Unlock()
	}
	return n, err
}

func TestPackedMessageLargerThanABatch(t *testing.T) {
	cfg, _ := testStream(t)
	cfg.Batch, cfg.Workers = 100, 1
	store := openStore(t)
	data := storetest.Dataset(24, 90)[:350]
	publishRaw(t, cfg, packedMsg(data, "350"))

	// The store fails after the message's first 100 spans commit: the
	// message must not be acknowledged for a part of it.
	down := &recording{s: store, okFirst: 1}
	in, _ := New(cfg, down, nil)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { in.Run(ctx) })
	for deadline := time.Now().Add(time.Minute); down.writes.Load() < 3; { // the first commit and a retry of the second
		if time.Now().After(deadline) {
			t.Fatalf("%d commits tried in a minute", down.writes.Load())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not timing one
	}
	stop()
	wg.Wait()
	if st, _ := store.Stats(context.Background()); st.Spans != 100 {
		t.Fatalf("store holds %d spans after the first commit, want 100", st.Spans)
	}

	// Another ingester gets the whole message again, commits it in batches
	// of at most 100 spans and acknowledges it once all are stored.
	up := &recording{s: store}
	stats, st := runUntil(t, cfg, up, store, int64(len(data)))
	if st.Spans != int64(len(data)) || stats.Duplicates != 100 {
		t.Fatalf("store holds %d spans, %d duplicates; want %d, and the first 100 redelivered", st.Spans, stats.Duplicates, len(data))
	}
	if !slices.Equal(up.sizes, []int{100, 100, 100, 50}) {
		t.Errorf("batches of %v spans, want 100, 100, 100, 50", up.sizes)
	}
	if p, u, _ := consumerState(t, cfg); p != 0 || u != 0 {
		t.Errorf("%d messages waiting and %d unacknowledged after the message was stored", p, u)
	}
}

// BenchmarkIngestFromNATS measures fmgate ingest end to end: b.N spans
// waiting in JetStream, drained into PostgreSQL by one ingester with its
// default workers and batch.
//
//	go test -run '^$' -bench BenchmarkIngestFromNATS -benchtime 200000x ./internal/ingest/
func BenchmarkIngestFromNATS(b *testing.B) {
	cfg, sink := testStream(b)
	cfg.Batch, cfg.MaxWait, cfg.AckWait, cfg.Workers = 5000, 250*time.Millisecond, 60*time.Second, 2
	ctx := context.Background()
	store, err := pgstore.Open(ctx, pgtest.DSN(), pgstore.Options{Schema: pgtest.Schema(b), MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	data := storetest.DatasetEvery(3, b.N/4+1, 86*time.Millisecond)[:b.N]
	publish(b, sink, data)
	in, _ := New(cfg, store, nil)
	b.ResetTimer()
	cpu0 := processCPU(b)
	start := time.Now()
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { in.Run(rctx) })
	// The ingester's own count tells when all are committed: counting
	// the table meanwhile would load the database being measured.
	for deadline := time.Now().Add(10 * time.Minute); in.Stats().Stored < int64(b.N) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond) // polling a condition, not timing one
	}
	el := time.Since(start)
	cpu := processCPU(b) - cpu0
	stop()
	wg.Wait()
	b.StopTimer()
	if st, err := store.Stats(ctx); err != nil || st.Spans != int64(b.N) {
		b.Fatalf("stored %d of %d spans (%v)", st.Spans, b.N, err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "spans/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "ingester-cpu-µs/span")
}

// processCPU is the CPU time this process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// unstorableFeature is a feature no PostgreSQL index can key: random
// letters beyond the roll-up key's size limit, even compressed.
func unstorableFeature() string {
	b := make([]byte, 12_000)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b)
}

// TestUnstorableSpanIsDroppedAlone: a span the store refuses whatever the
// retries does not stall the stream: its batch is stored without it, it is
// dropped and counted, and every message is acknowledged.
func TestUnstorableSpanIsDroppedAlone(t *testing.T) {
	cfg, sink := testStream(t)
	store := openStore(t)
	data := storetest.Dataset(31, 300)
	bad := len(data) / 3
	data[bad].Attribution.Feature = unstorableFeature()
	publish(t, sink, data)
	stats, st := runUntil(t, cfg, store, store, int64(len(data)-1))
	if st.Spans != int64(len(data)-1) || stats.Stored != int64(len(data)-1) || stats.Unstorable != 1 {
		t.Fatalf("store holds %d spans, ingester stored %d and dropped %d; want %d, %d and 1",
			st.Spans, stats.Stored, stats.Unstorable, len(data)-1, len(data)-1)
	}
	if p, u, _ := consumerState(t, cfg); p != 0 || u != 0 {
		t.Errorf("%d messages waiting and %d unacknowledged: the unstorable span stalls the stream", p, u)
	}
}
