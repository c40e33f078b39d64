package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// memSink records batches; when durable it deduplicates on Event.ID like
// the event store, counting each accepted event once.
type memSink struct {
	name    string
	durable bool

	mu       sync.Mutex
	accepted map[string]Event
	writes   int // events received, duplicates included
	fail     error
	block    chan struct{}
}

func newMemSink(name string, durable bool) *memSink {
	return &memSink{name: name, durable: durable, accepted: map[string]Event{}}
}

func (m *memSink) Name() string  { return m.name }
func (m *memSink) Durable() bool { return m.durable }

func (m *memSink) Write(ctx context.Context, batch []Event) error {
	if m.block != nil {
		select {
		case <-m.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	for _, e := range batch {
		m.writes++
		if _, dup := m.accepted[e.ID()]; !dup {
			m.accepted[e.ID()] = e
		}
	}
	return nil
}

func (m *memSink) count() (accepted, writes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.accepted), m.writes
}

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.BufferSize = 64
	cfg.WAL.Dir = filepath.Join(t.TempDir(), "wal")
	cfg.WAL.FsyncInterval = 5 * time.Millisecond
	return cfg
}

func event(i int, mustPersist bool) Event {
	return Event{
		SchemaVersion: SchemaVersion,
		TraceID:       fmt.Sprintf("%032x", i+1),
		SpanID:        fmt.Sprintf("%016x", i+1),
		Name:          "model_attempt",
		MustPersist:   mustPersist,
		TSStart:       time.Date(2026, 4, 29, 14, 2, 13, 0, time.UTC),
		TSEnd:         time.Date(2026, 4, 29, 14, 2, 14, 0, time.UTC),
		Resource:      Resource{CostUSD: 0.001 * float64(i)},
	}
}

func TestEmitNeverBlocksAndCountsDrops(t *testing.T) {
	cfg := testConfig(t)
	cfg.WAL.Dir = ""
	cfg.BatchSize = 8
	slow := newMemSink("slow", false)
	slow.block = make(chan struct{})
	fast := newMemSink("fast", false)
	em, err := New(context.Background(), cfg, []Sink{slow, fast}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	done := make(chan struct{})
	go func() {
		for i := range n {
			em.Emit(event(i, false))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked behind a stuck sink")
	}
	st := em.Stats()
	// The slow sink holds at most one batch in Write plus a full queue.
	if maxKept := uint64(cfg.BufferSize + cfg.BatchSize); st.Sinks["slow"].Dropped < n-maxKept {
		t.Errorf("slow sink dropped %d, want >= %d", st.Sinks["slow"].Dropped, n-maxKept)
	}
	close(slow.block)
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = em.Stats()
	for _, name := range []string{"slow", "fast"} {
		s := st.Sinks[name]
		if s.Written+s.Dropped != n {
			t.Errorf("%s: written %d + dropped %d != %d", name, s.Written, s.Dropped, n)
		}
	}
	if st.Emitted != n {
		t.Errorf("emitted %d", st.Emitted)
	}
	em.Emit(event(0, false)) // after Close: ignored, no panic
}

func TestFailingSinkDoesNotAffectOthers(t *testing.T) {
	cfg := testConfig(t)
	cfg.WAL.Dir = ""
	bad := newMemSink("bad", false)
	bad.fail = errors.New("store down")
	good := newMemSink("good", false)
	em, err := New(context.Background(), cfg, []Sink{bad, good}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		em.Emit(event(i, false))
	}
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := good.count(); got != 10 {
		t.Errorf("good sink got %d, want 10", got)
	}
	if s := em.Stats().Sinks["bad"]; s.Dropped != 10 || s.Failed == 0 {
		t.Errorf("bad sink stats %+v", s)
	}
}

func TestWALReplayAfterCrashIsExactlyOnce(t *testing.T) {
	cfg := testConfig(t)
	cfg.BufferSize = 1024
	cfg.WAL.FsyncInterval = time.Hour // no acknowledgement persisted before the crash
	store := newMemSink("store", true)
	file := newMemSink("file", false)
	em, err := New(context.Background(), cfg, []Sink{store, file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for i := range n {
		em.Emit(event(i, i%3 != 0)) // 200 must-persist
	}
	// Crash: the store received the events but the acknowledgements never
	// reached disk.
	if err := em.shutdown(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	acc, writes := store.count()
	if acc != n || writes != n {
		t.Fatalf("before crash store has %d/%d, want %d", acc, writes, n)
	}

	store2 := newMemSink("store", true)
	store2.accepted = store.accepted // the same database after restart
	store2.writes = store.writes
	em2, err := New(context.Background(), cfg, []Sink{store2, newMemSink("file", false)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := em2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	acc, writes = store2.count()
	if acc != n {
		t.Errorf("store holds %d distinct events, want %d", acc, n)
	}
	if replayed := writes - n; replayed != 200 {
		t.Errorf("replayed %d events, want the 200 must-persist ones", replayed)
	}
	// Clean shutdown after replay leaves nothing to replay.
	store3 := newMemSink("store", true)
	em3, err := New(context.Background(), cfg, []Sink{store3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := em3.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, w := store3.count(); w != 0 {
		t.Errorf("third start replayed %d events, want 0", w)
	}
	if segs := walSegments(t, cfg.WAL.Dir); len(segs) != 0 {
		t.Errorf("segments left after every sink acknowledged: %v", segs)
	}
}

func TestWALReplaysWhatADownStoreMissed(t *testing.T) {
	cfg := testConfig(t)
	down := newMemSink("store", true)
	down.fail = errors.New("disk full")
	em, err := New(context.Background(), cfg, []Sink{down}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		em.Emit(event(i, true))
	}
	em.Emit(event(99, false)) // not must-persist: not in the WAL
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := em.Stats(); !s.Sinks["store"].Behind || s.WAL.Appended != 50 {
		t.Errorf("stats after failed store: %+v", s)
	}
	up := newMemSink("store", true)
	em2, err := New(context.Background(), cfg, []Sink{up}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Events emitted after the restart are acknowledged normally.
	em2.Emit(event(200, true))
	if err := em2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	acc, writes := up.count()
	if acc != 51 || writes != 51 {
		t.Errorf("store got %d distinct / %d writes, want 51 / 51", acc, writes)
	}
	if _, ok := up.accepted[event(99, false).ID()]; ok {
		t.Error("a non-must-persist event was replayed")
	}
	if segs := walSegments(t, cfg.WAL.Dir); len(segs) != 0 {
		t.Errorf("segments left: %v", segs)
	}
}

func TestWALSkipsTornRecord(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(cfg.WAL.Dir, 0o750); err != nil {
		t.Fatal(err)
	}
	e := event(1, true)
	line := append([]byte(`{"seq":1,"event":`), Encode(&e)...)
	line = append(line, "}\n{\"seq\":2,\"event\":{\"schema_ver"...)
	if err := os.WriteFile(filepath.Join(cfg.WAL.Dir, "wal-00000000000000000001.jsonl"), line, 0o640); err != nil {
		t.Fatal(err)
	}
	store := newMemSink("store", true)
	em, err := New(context.Background(), cfg, []Sink{store}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if acc, _ := store.count(); acc != 1 {
		t.Errorf("replayed %d, want 1", acc)
	}
}

// A must-persist Emit returns only once the event's record is in the log,
// so a crash right after it — when the caller has answered the client — can
// no longer lose it. No timer may be needed for that.
func TestEmitMustPersistReturnsOnceTheRecordIsInTheLog(t *testing.T) {
	cfg := testConfig(t)
	cfg.WAL.FsyncInterval = time.Hour
	store := newMemSink("store", true)
	store.block = make(chan struct{}) // the store sees nothing before the check
	em, err := New(context.Background(), cfg, []Sink{store}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(store.block)
		if err := em.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	for i := range 3 {
		em.Emit(event(i, true))
		var ids []string
		for _, name := range walSegments(t, cfg.WAL.Dir) {
			_, recs, err := readSegment(name)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				ids = append(ids, r.ev.ID())
			}
		}
		if !slices.Contains(ids, event(i, true).ID()) || len(ids) != i+1 {
			t.Fatalf("after Emit #%d the log holds %v, want the %d events emitted", i+1, ids, i+1)
		}
	}
	if st := em.Stats().WAL; st.Appended != 3 || st.Late != 0 || st.Overflow != 0 {
		t.Errorf("wal stats %+v, want 3 appended, none late or overflowing", st)
	}
}

// After a clean stop the log has no segment left, only the
// acknowledgements; the next run must number its records above them, or a
// crash would lose every record the store had not yet taken.
func TestWALNumbersKeepGrowingAfterACleanStop(t *testing.T) {
	cfg := testConfig(t)
	em, err := New(context.Background(), cfg, []Sink{newMemSink("store", true)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		em.Emit(event(i, true))
	}
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if segs := walSegments(t, cfg.WAL.Dir); len(segs) != 0 {
		t.Fatalf("segments after a clean stop: %v", segs)
	}

	// The store is down for the whole second run: its events wait in the log.
	down := newMemSink("store", true)
	down.fail = errors.New("disk full")
	em2, err := New(context.Background(), cfg, []Sink{down}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 13; i++ {
		em2.Emit(event(i, true))
	}
	if err := em2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	up := newMemSink("store", true)
	em3, err := New(context.Background(), cfg, []Sink{up}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := em3.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 13; i++ {
		if _, ok := up.accepted[event(i, true).ID()]; !ok {
			t.Errorf("event %d of the second run was not replayed", i)
		}
	}
	if acc, writes := up.count(); acc != 3 || writes != 3 {
		t.Errorf("replay delivered %d distinct / %d writes, want 3 / 3", acc, writes)
	}
}

// A crash can leave a segment without one whole record: created just
// before the crash, or holding only a torn line. The next run must neither
// reuse it (gluing its first record onto the torn line) nor delete it from
// under itself as "fully acknowledged" while writing to it.
func TestWALNeverWritesIntoASegmentLeftByACrash(t *testing.T) {
	tests := []struct {
		name string
		give string // content of the segment the crash left
	}{
		{name: "empty segment", give: ""},
		{name: "torn record only", give: `{"seq":8,"event":{"schema_version":3,"trace_id":"0a`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			if err := os.MkdirAll(cfg.WAL.Dir, 0o750); err != nil {
				t.Fatal(err)
			}
			// The store acknowledged 1..7; the crash came as segment 8 began.
			if err := os.WriteFile(filepath.Join(cfg.WAL.Dir, acksFile), []byte(`{"store":7}`), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg.WAL.Dir, "wal-00000000000000000008.jsonl"), []byte(tt.give), 0o640); err != nil {
				t.Fatal(err)
			}
			down := newMemSink("store", true)
			down.fail = errors.New("disk full")
			em, err := New(context.Background(), cfg, []Sink{down}, nil)
			if err != nil {
				t.Fatal(err)
			}
			em.Emit(event(1, true))
			em.Emit(event(2, true))
			if err := em.shutdown(context.Background(), false); err != nil { // crash
				t.Fatal(err)
			}

			up := newMemSink("store", true)
			em2, err := New(context.Background(), cfg, []Sink{up}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := em2.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if acc, _ := up.count(); acc != 2 {
				t.Errorf("replay after the second crash delivered %d events, want the 2 the store never took", acc)
			}
		})
	}
}

func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wal-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// schemaKeys is the allow-list: every key an encoded event may carry.
var schemaKeys = []string{
	"schema_version", "trace_id", "span_id", "parent_span_id", "workflow_id",
	"user_id_hash", "session_id", "ts_start", "ts_end", "duration_ms",
	"name", "must_persist", "prompt_excerpt", "sampled_out",
	"node", "node.graph_version", "node.node_id", "node.invocation_mode",
	"artifact", "artifact.artifact_kind", "artifact.model_id", "artifact.prompt_version",
	"artifact.tool_id", "artifact.tool_version", "artifact.sub_agent_id", "artifact.sub_agent_version",
	"resource", "resource.tokens_in", "resource.tokens_out", "resource.cost_usd",
	"resource.tokens_cache_read", "resource.tokens_cache_write", "resource.cache_saved_usd",
	"resource.tool_calls", "resource.tool_names", "resource.images", "resource.image_bytes", "resource.image_tokens", "resource.image_cost_usd",
	"resource.cache_hit", "resource.capability_flags_active",
	"outcome", "outcome.status", "outcome.error_code", "outcome.fallback_used", "outcome.eval_score", "outcome.vendor_code", "outcome.stop_reason",
	"attribution", "attribution.feature", "attribution.surface", "attribution.locale",
	"attribution.user_tier", "attribution.priority",
}

func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	var keys []string
	for k, v := range m {
		keys = append(keys, k)
		if sub, ok := v.(map[string]any); ok {
			for sk := range sub {
				keys = append(keys, k+"."+sk)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func structKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue // in-process only (Event.Sampled): never encoded
		}
		keys = append(keys, prefix+name)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]() {
			keys = append(keys, structKeys(f.Type, prefix+name+".")...)
		}
	}
	return keys
}

func TestEncodeWritesOnlyAllowListedFields(t *testing.T) {
	want := slices.Sorted(slices.Values(schemaKeys))
	// Every field of Event is in the allow-list, so adding a field without
	// deciding that it may leave the process fails here.
	if got := slices.Sorted(slices.Values(structKeys(reflect.TypeFor[Event](), ""))); !slices.Equal(got, want) {
		t.Errorf("Event fields %v\nallow-list %v", got, want)
	}
	score := 0.5
	full := event(1, true)
	full.PromptExcerpt = "x"
	full.SampledOut = true
	full.Attribution.Priority = "P0"
	full.Outcome.VendorCode = "ThrottlingException"
	full.Outcome.StopReason = "tool_use"
	full.Resource.TokensCacheRead, full.Resource.TokensCacheWrite, full.Resource.CacheSavedUSD = 10, 2, 0.001
	full.Resource.ToolCalls, full.Resource.ToolNames = 1, []string{"get_weather"}
	full.Resource.Images, full.Resource.ImageBytes = 2, 4096
	full.Resource.ImageTokens, full.Resource.ImageCostUSD = 1280, 0.00384
	full.Outcome.EvalScore = &score
	if got := jsonKeys(t, Encode(&full)); !slices.Equal(got, want) {
		t.Errorf("encoded keys %v", got)
	}
	// An event smuggling extra keys through decoding loses them.
	in := []byte(`{"schema_version":3,"trace_id":"t","span_id":"s","message":"taro@example.jp",` +
		`"resource":{"tokens_in":1,"raw_prompt":"secret"},"attribution":{"email":"a@b.io"}}`)
	ev, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	out := Encode(&ev)
	for _, leak := range []string{"message", "raw_prompt", "secret", "email", "a@b.io", "taro"} {
		if bytes.Contains(out, []byte(leak)) {
			t.Errorf("%q reached the encoded event: %s", leak, out)
		}
	}
	// encoding/json goes through the same encoder.
	viaJSON, err := json.Marshal(ev)
	if err != nil || !bytes.Equal(viaJSON, out) {
		t.Errorf("json.Marshal differs: %s vs %s (%v)", viaJSON, out, err)
	}
	back, err := Decode(out)
	if err != nil || !bytes.Equal(Encode(&back), out) {
		t.Errorf("round trip changed the event: %s vs %s (%v)", Encode(&back), out, err)
	}
}

func TestEncodeEscapesAndNulls(t *testing.T) {
	e := Event{SessionID: "a\"b\\c\n\x01\xff\u2028", Resource: Resource{CostUSD: 1e-9}}
	b := Encode(&e)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON: %v: %s", err, b)
	}
	if got := m["session_id"]; got != "a\"b\\c\n\x01\ufffd\u2028" {
		t.Errorf("session_id = %q", got)
	}
	if m["ts_start"] != nil || m["parent_span_id"] != nil {
		t.Error("zero time / root parent should be null")
	}
	if flags := m["resource"].(map[string]any)["capability_flags_active"]; !reflect.DeepEqual(flags, []any{}) {
		t.Errorf("flags = %#v, want []", flags)
	}
}

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("svc", "fmgate")
	tr := NewTracer(nil, TracerOptions{})
	ctx, s := tr.Start(context.Background(), "turn")
	log.InfoContext(ctx, "hello")
	log.Info("no span")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	var first, second map[string]any
	_ = json.Unmarshal(lines[0], &first)
	_ = json.Unmarshal(lines[1], &second)
	if first["trace_id"] != s.TraceID() || first["span_id"] != s.Context().SpanHex() || first["svc"] != "fmgate" {
		t.Errorf("record with span: %s", lines[0])
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("record without span got ids: %s", lines[1])
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   []string
	}{
		{name: "defaults", modify: func(*Config) {}},
		{name: "buffer", modify: func(c *Config) { c.BufferSize = 0 }, want: []string{"bufferSize: "}},
		{name: "wal", modify: func(c *Config) { c.WAL.Dir = "x"; c.WAL.FsyncInterval = 0; c.WAL.Batch = 0 },
			want: []string{"wal.fsyncInterval: ", "wal.batch: "}},
		{name: "nats", modify: func(c *Config) {
			c.Sinks.NATS.URL = "nats://x"
			c.Sinks.NATS.Subject = "a.>"
			c.Sinks.NATS.Stream = "a.b"
		},
			want: []string{"sinks.nats.subject: ", "sinks.nats.stream: "}},
		{name: "jsonl", modify: func(c *Config) { c.Sinks.JSONL.Path = "x"; c.Sinks.JSONL.MaxBytes = 1 }, want: []string{"sinks.jsonl.maxBytes: "}},
		{name: "privacy", modify: func(c *Config) { c.Privacy.HashSecret = "short"; c.Privacy.Excerpt = true; c.Privacy.ExcerptChars = 0 },
			want: []string{"privacy.hashSecret: ", "privacy.excerptChars: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// batchSink counts the Write calls and the events in them.
type batchSink struct {
	mu             sync.Mutex
	writes, events int
	sizes          []int
}

func (*batchSink) Name() string { return "batches" }
func (b *batchSink) Write(_ context.Context, batch []Event) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes++
	b.events += len(batch)
	b.sizes = append(b.sizes, len(batch))
	return nil
}

func (b *batchSink) counts() (writes, events int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.writes, b.events
}

// Events emitted one after another within BatchWait reach a sink in one
// write; with BatchWait 0 the first is written at once, alone (how the nine
// after it are grouped is then up to the scheduler).
func TestBatchWaitGathersOneWrite(t *testing.T) {
	for _, tt := range []struct {
		name string
		wait time.Duration
		want int // writes for the first event and the nine after it; 0: any number
	}{
		{"wait", time.Second, 1},
		{"no wait", 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.BatchWait = tt.wait
			sink := &batchSink{}
			em, err := New(context.Background(), cfg, []Sink{sink}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer em.Close(context.Background())
			em.Emit(event(0, false))
			if tt.wait == 0 {
				// Written alone before the others come.
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					if _, n := sink.counts(); n == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the first event was not written within 5s")
					}
				}
			}
			for i := 1; i < 10; i++ {
				em.Emit(event(i, false))
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if _, n := sink.counts(); n == 10 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the events were not written within 5s")
				}
			}
			if w, _ := sink.counts(); tt.want > 0 && w != tt.want {
				t.Fatalf("%d writes for 10 events, want %d", w, tt.want)
			}
		})
	}
}

// A whole batch queued is written at once, not after BatchWait: the runner
// waiting for more is woken when the batch is full.
func TestFullBatchIsNotHeldForBatchWait(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BatchWait = time.Second
	cfg.BatchSize = 8
	sink := &batchSink{}
	em, err := New(context.Background(), cfg, []Sink{sink}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer em.Close(context.Background())
	start := time.Now()
	for i := range 3 * cfg.BatchSize {
		em.Emit(event(i, false))
	}
	for deadline := start.Add(cfg.BatchWait / 2); ; time.Sleep(time.Millisecond) {
		if _, n := sink.counts(); n == 3*cfg.BatchSize {
			break
		}
		if time.Now().After(deadline) {
			w, n := sink.counts()
			sink.mu.Lock()
			sizes := sink.sizes
			sink.mu.Unlock()
			t.Fatalf("%d of %d events written (%d writes: %v) after %v: full batches waited for BatchWait (%v)",
				n, 3*cfg.BatchSize, w, sizes, time.Since(start), cfg.BatchWait)
		}
	}
}

// Close does not wait out BatchWait: the batch gathering goes out at once.
func TestCloseWritesAWaitingBatch(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BatchWait = time.Second
	sink := &batchSink{}
	em, err := New(context.Background(), cfg, []Sink{sink}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		em.Emit(event(i, false))
	}
	time.Sleep(10 * time.Millisecond) // the sink is now waiting for more
	start := time.Now()
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > cfg.BatchWait*8/10 {
		t.Fatalf("Close took %v: it waited for the batch", took)
	}
	if _, n := sink.counts(); n != 3 {
		t.Fatalf("%d events written, want 3", n)
	}
}

// Two emitters never share a write-ahead log: the second is refused with
// what to do, and once the first is closed the log opens again.
func TestWALRefusesASecondWriter(t *testing.T) {
	cfg := testConfig(t)
	first, err := New(context.Background(), cfg, []Sink{newMemSink("store", true)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), cfg, []Sink{newMemSink("store", true)}, nil)
	if err == nil || !strings.Contains(err.Error(), "in use by another fmgate") || !strings.Contains(err.Error(), "events.wal.dir") {
		t.Fatalf("a second emitter on %s: %v; want it refused, naming events.wal.dir", cfg.WAL.Dir, err)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := New(context.Background(), cfg, []Sink{newMemSink("store", true)}, nil)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if err := again.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Segments rotated while the log runs are fsynced and closed off the
// writer; every record in them is still there for the replay after a
// crash.
func TestWALRotatedSegmentsKeepEveryRecord(t *testing.T) {
	cfg := testConfig(t)
	cfg.WAL.SegmentBytes = 1 << 10 // a rotation every few records
	cfg.WAL.FsyncInterval = time.Millisecond
	down := newMemSink("store", true)
	down.fail = errors.New("disk full")
	em, err := New(context.Background(), cfg, []Sink{down}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		em.Emit(event(i, true))
		if i%20 == 0 {
			time.Sleep(3 * time.Millisecond) // let compaction rotate
		}
	}
	if err := em.shutdown(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if segs := walSegments(t, cfg.WAL.Dir); len(segs) < 5 {
		t.Fatalf("%d segments on disk, want the log rotated several times", len(segs))
	}
	up := newMemSink("store", true)
	em2, err := New(context.Background(), cfg, []Sink{up}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := em2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if acc, _ := up.count(); acc != n {
		t.Errorf("replay gave the store %d events, want %d", acc, n)
	}
}
