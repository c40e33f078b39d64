package payloadlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/pgtest"
)

var t0 = time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)

func testKey() []byte { return bytes.Repeat([]byte{0x42}, 32) }

func rec(i int, user string) Record {
	return Record{TraceID: fmt.Sprintf("%032x", i+1), At: t0.Add(time.Duration(i) * time.Minute), UserHash: user, KeyID: "key_shop",
		Feature: []string{"chat", "recommend"}[i%2],
		Payload: Payload{Locale: "ja", Question: fmt.Sprintf("question %d: おすすめは？ [CARD]", i), Answer: fmt.Sprintf("answer %d", i),
			Tier: "sonnet", Source: "model", ModelID: "claude", Guardrail: []string{"redacted:card"}}}
}

// conformance is the suite every Store passes, through a Log.
func conformance(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()
	newLog := func(t *testing.T) *Log {
		l, err := New(open(t), testKey())
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	t.Run("put, get, scan in time order, a trace written once", func(t *testing.T) {
		l := newLog(t)
		var recs []Record
		for i := range 6 {
			recs = append(recs, rec(i, []string{"u-a", "u-b"}[i%3/2]))
		}
		// Out of order, in two batches, one record twice.
		if err := l.Put(ctx, []Record{recs[3], recs[1], recs[5]}); err != nil {
			t.Fatal(err)
		}
		again := recs[1]
		again.Payload.Answer = "changed"
		if err := l.Put(ctx, []Record{recs[0], recs[2], recs[4], again}); err != nil {
			t.Fatal(err)
		}
		got, ok, err := l.Get(ctx, recs[1].TraceID)
		if err != nil || !ok {
			t.Fatalf("Get: %v %v", ok, err)
		}
		if got.Payload.Answer != "answer 1" || got.Payload.Question != recs[1].Payload.Question || !got.At.Equal(recs[1].At) ||
			got.UserHash != recs[1].UserHash || got.KeyID != "key_shop" || got.Feature != "recommend" || got.Payload.Guardrail[0] != "redacted:card" {
			t.Fatalf("Get = %+v, want %+v (a trace's payload is written once)", got, recs[1])
		}
		if _, ok, err := l.Get(ctx, fmt.Sprintf("%032x", 999)); ok || err != nil {
			t.Fatalf("Get of an unknown trace: %v %v", ok, err)
		}
		var order []string
		if err := l.Scan(ctx, Filter{}, func(r Record) error { order = append(order, r.TraceID); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(order) != 6 || order[0] != recs[0].TraceID || order[5] != recs[5].TraceID {
			t.Fatalf("Scan order %v", order)
		}
		tests := []struct {
			name string
			give Filter
			want int
		}{
			{"range", Filter{From: recs[1].At, To: recs[4].At}, 3},
			{"feature", Filter{Feature: "chat"}, 3},
			{"user", Filter{UserHash: "u-b"}, 2},
			{"key", Filter{KeyID: "key_shop"}, 6},
			{"other key", Filter{KeyID: "key_other"}, 0},
			{"limit", Filter{Limit: 2}, 2},
		}
		for _, tt := range tests {
			n := 0
			if err := l.Scan(ctx, tt.give, func(Record) error { n++; return nil }); err != nil || n != tt.want {
				t.Errorf("%s: %d records (%v), want %d", tt.name, n, err, tt.want)
			}
		}
	})
	t.Run("forget deletes one user's payloads only", func(t *testing.T) {
		l := newLog(t)
		if err := l.Put(ctx, []Record{rec(0, "u-a"), rec(1, "u-b"), rec(2, "u-a")}); err != nil {
			t.Fatal(err)
		}
		n, err := l.Forget(ctx, "u-a")
		if err != nil || n != 2 {
			t.Fatalf("Forget: %d, %v; want 2", n, err)
		}
		if _, ok, _ := l.Get(ctx, rec(0, "").TraceID); ok {
			t.Fatal("a forgotten user's payload is still there")
		}
		if _, ok, _ := l.Get(ctx, rec(1, "").TraceID); !ok {
			t.Fatal("another user's payload went too")
		}
	})
	t.Run("prune deletes what is older, in bounded batches", func(t *testing.T) {
		l := newLog(t)
		var recs []Record
		for i := range PruneBatch + 5 {
			r := rec(i, "u")
			r.At = t0.Add(time.Duration(i) * time.Millisecond)
			recs = append(recs, r)
		}
		for i := 0; i < len(recs); i += 500 {
			if err := l.Put(ctx, recs[i:min(i+500, len(recs))]); err != nil {
				t.Fatal(err)
			}
		}
		keep := recs[PruneBatch+2]
		n, err := l.Prune(ctx, keep.At)
		if err != nil || n != PruneBatch+2 {
			t.Fatalf("Prune: %d, %v; want %d", n, err, PruneBatch+2)
		}
		if _, ok, _ := l.Get(ctx, keep.TraceID); !ok {
			t.Fatal("the first payload at the horizon was pruned")
		}
		if _, ok, _ := l.Get(ctx, recs[PruneBatch+1].TraceID); ok {
			t.Fatal("a payload before the horizon survived")
		}
	})
	t.Run("concurrent puts all land", func(t *testing.T) {
		l := newLog(t)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if err := l.Put(ctx, []Record{rec(i, "u")}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		n := 0
		_ = l.Scan(ctx, Filter{}, func(Record) error { n++; return nil })
		if n != 16 {
			t.Fatalf("%d payloads, want 16", n)
		}
	})
}

func TestSQLiteConformance(t *testing.T) {
	conformance(t, func(t *testing.T) Store {
		s, err := OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "payloads.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestPostgresConformance(t *testing.T) {
	conformance(t, func(t *testing.T) Store {
		s, err := OpenPostgres(context.Background(), pgtest.DSN(), pgtest.Schema(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// The file on disk holds neither the question nor the answer, and a
// payload sealed under one key does not open under another.
func TestPayloadsAreSealedOnDisk(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "payloads.db")
	s, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := New(s, testKey())
	r := rec(0, "u-a")
	r.Payload.Question = "ワンピースの最新刊はいつ発売ですか？ secret-question-marker"
	r.Payload.Answer = "secret-answer-marker: 来月です。"
	if err := l.Put(ctx, []Record{r}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var disk []byte
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		disk = append(disk, b...)
	}
	if !bytes.Contains(disk, []byte(r.TraceID)) {
		t.Fatal("the trace id is not in the file: the test reads the wrong file")
	}
	for _, plain := range []string{"secret-question-marker", "secret-answer-marker", "ワンピース", "来月です"} {
		if bytes.Contains(disk, []byte(plain)) {
			t.Errorf("%q is in the file in plain text", plain)
		}
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("payloads.db mode %v (%v), want 0600", info.Mode().Perm(), err)
	}

	s2, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, ok, err := mustLog(t, s2, testKey()).Get(ctx, r.TraceID); err != nil || !ok || got.Payload.Answer != r.Payload.Answer {
		t.Fatalf("reopened with its key: %+v %v %v", got, ok, err)
	}
	if _, _, err := mustLog(t, s2, bytes.Repeat([]byte{7}, 32)).Get(ctx, r.TraceID); !errors.Is(err, ErrSealed) {
		t.Fatalf("opened under another key: %v, want ErrSealed", err)
	}
	// A row whose user was changed in the file does not open either.
	if _, err := s2.db.Exec(`UPDATE payloads SET user_id_hash = 'u-other'`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mustLog(t, s2, testKey()).Get(ctx, r.TraceID); !errors.Is(err, ErrSealed) {
		t.Fatalf("a row moved to another user opened: %v", err)
	}
}

func mustLog(t *testing.T, s Store, key []byte) *Log {
	l, err := New(s, key)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestExportReadsBack(t *testing.T) {
	ctx := context.Background()
	s, _ := OpenSQLite(ctx, ":memory:")
	defer s.Close()
	l := mustLog(t, s, testKey())
	if err := l.Put(ctx, []Record{rec(0, "u"), rec(1, "u"), rec(2, "u")}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := l.Export(ctx, Filter{Feature: "chat"}, &buf)
	if err != nil || n != 2 || strings.Count(buf.String(), "\n") != 2 {
		t.Fatalf("Export: %d, %v:\n%s", n, err, buf.String())
	}
	var back []Record
	if err := ReadRecords(&buf, func(r Record) error { back = append(back, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[1].Payload.Question != rec(2, "").Payload.Question || back[0].Feature != "chat" {
		t.Fatalf("read back %+v", back)
	}
	if err := ReadRecords(strings.NewReader("{\"traceId\":\"a\"}\nnot json\n"), func(Record) error { return nil }); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a bad line: %v, want an error naming line 2", err)
	}
}

// failing is a store whose writes fail until released.
type failing struct {
	Store
	mu    sync.Mutex
	fail  bool
	block chan struct{}
}

func (f *failing) Put(ctx context.Context, rows []Row) error {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return errors.New("disk on fire")
	}
	return f.Store.Put(ctx, rows)
}

func TestWriterCountsWhatItCannotWrite(t *testing.T) {
	ctx := context.Background()
	mem, _ := OpenSQLite(ctx, ":memory:")
	defer mem.Close()

	t.Run("written", func(t *testing.T) {
		w := NewWriter(mustLog(t, mem, testKey()), 8, time.Second, nil)
		for i := range 5 {
			if !w.Keep(rec(i, "u")) {
				t.Fatal("Keep refused with room in the queue")
			}
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.Written != 5 || st.Queued != 0 || st.Dropped[DropQueueFull]+st.Dropped[DropWriteFailed]+st.Dropped[DropShutdown] != 0 {
			t.Fatalf("stats %+v, want 5 written", st)
		}
		if w.Keep(rec(9, "u")) || w.Stats().Dropped[DropShutdown] != 1 {
			t.Fatalf("Keep after Close: %+v", w.Stats())
		}
	})
	t.Run("queue full and a slow disk", func(t *testing.T) {
		f := &failing{Store: mem, block: make(chan struct{})}
		w := NewWriter(mustLog(t, f, testKey()), 2, 50*time.Millisecond, nil)
		took := 0
		start := time.Now()
		for i := range 20 {
			if w.Keep(rec(100+i, "u")) {
				took++
			}
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Keep waited %s on a blocked store", d)
		}
		// The writer holds one batch, the queue two more: the rest is full.
		if st := w.Stats(); st.Dropped[DropQueueFull] != uint64(20-took) || took > 3+writeBatch {
			t.Fatalf("took %d, stats %+v", took, st)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = w.Close(cctx)
		st := w.Stats()
		if got := st.Written + st.Dropped[DropWriteFailed] + st.Dropped[DropShutdown]; got != uint64(took) {
			t.Fatalf("%d taken, %+v accounted for", took, st)
		}
		if st.Dropped[DropWriteFailed] == 0 {
			t.Fatalf("a store that never answers within writeTimeout: %+v, want write_failed counted", st)
		}
	})
	t.Run("failed writes", func(t *testing.T) {
		f := &failing{Store: mem, fail: true}
		w := NewWriter(mustLog(t, f, testKey()), 8, time.Second, nil)
		w.Keep(rec(200, "u"))
		w.Keep(rec(201, "u"))
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if st := w.Stats(); st.Dropped[DropWriteFailed] != 2 || st.Written != 0 {
			t.Fatalf("stats %+v, want 2 write_failed", st)
		}
	})
}

func TestConfig(t *testing.T) {
	on := DefaultConfig()
	on.Enabled = true
	tests := []struct {
		name string
		give func(c *Config)
		want string
	}{
		{"defaults, off", func(c *Config) { *c = DefaultConfig() }, ""},
		{"on", func(c *Config) {}, ""},
		{"sample rate", func(c *Config) { c.SampleRate = 1.5 }, "sampleRate"},
		{"retention", func(c *Config) { c.Retention = time.Minute }, "retention"},
		{"queue", func(c *Config) { c.Queue = 0 }, "queue"},
		{"key env", func(c *Config) { c.KeyEnv = "NOT A NAME" }, "keyEnv"},
		{"features while off", func(c *Config) { c.Enabled = false; c.Features = []string{"chat"} }, "enabled"},
	}
	for _, tt := range tests {
		c := on
		tt.give(&c)
		err := c.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	on.Features, on.SampleRate = []string{"support"}, 0.1
	for _, tt := range []struct {
		key     bool
		feature string
		draw    float64
		want    bool
	}{{true, "chat", 0.9, true}, {false, "support", 0.9, true}, {false, "chat", 0.05, true}, {false, "chat", 0.5, false}} {
		if got := on.Chooses(tt.key, tt.feature, tt.draw); got != tt.want {
			t.Errorf("Chooses(%v, %q, %v) = %v", tt.key, tt.feature, tt.draw, got)
		}
	}
	if (Config{}).Chooses(true, "x", 0) {
		t.Error("payload logs off chose a turn")
	}
}
