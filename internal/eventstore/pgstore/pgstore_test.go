package pgstore

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// writer adapts Store to storetest.Backend.
type writer struct{ *Store }

func (w writer) Write(ctx context.Context, batch []events.Event) error {
	_, err := w.Store.Write(ctx, batch)
	return err
}

func openTest(t *testing.T) *Store {
	t.Helper()
	return openTestSchema(t, pgtest.Schema(t))
}

// openTestSchema opens a store on a test schema.
func openTestSchema(t *testing.T, schema string) *Store {
	t.Helper()
	s, err := Open(t.Context(), pgtest.DSN(), Options{Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend { return writer{openTest(t)} })
}

func TestWriteCountsOnlyNewSpans(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	data := storetest.Dataset(1, 20)
	n, err := s.Write(ctx, data)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("first write stored %d (%v), want %d", n, err, len(data))
	}
	n, err = s.Write(ctx, append(data[:10:10], data[:10]...))
	if err != nil || n != 0 {
		t.Fatalf("a redelivered batch stored %d (%v), want 0", n, err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Spans != int64(len(data)) || st.Turns != 20 {
		t.Fatalf("stats %+v (%v), want %d spans and 20 turns", st, err, len(data))
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	now := storetest.T0.Add(48 * time.Hour)
	s, err := Open(ctx, pgtest.DSN(), Options{Schema: pgtest.Schema(t), Retention: 36 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := storetest.Dataset(2, 5) // around T0: older than the retention
	if n, err := s.Write(ctx, old); err != nil || n != 0 {
		t.Fatalf("spans older than the retention: stored %d (%v), want 0", n, err)
	}
	s.retention = 0
	if _, err := s.Write(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(ctx, storetest.T0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Spans != 0 || st.Turns != 0 {
		t.Fatalf("after Prune: %+v (%v), want nothing left", st, err)
	}
	rep, err := s.Cost(ctx, eventstore.Query{From: storetest.T0.Add(-2 * time.Hour), To: storetest.T0.Add(2 * time.Hour)})
	if err != nil || rep.Total.Spans != 0 {
		t.Fatalf("roll-ups after Prune: %+v (%v), want none", rep.Total, err)
	}
	// The day's partition comes back when new spans of it arrive.
	if n, err := s.Write(ctx, old); err != nil || n != int64(len(old)) {
		t.Fatalf("writing after Prune: stored %d (%v), want %d", n, err, len(old))
	}
}

// TestUserRollupFilledFromStoredTurns opens a store written before the
// user roll-up existed: the first Open fills it from the turns, and a
// feature's users read from it match the turns read directly.
func TestUserRollupFilledFromStoredTurns(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.DSN(), Options{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, storetest.Dataset(5, 200)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `DROP TABLE user_rollup; ALTER TABLE turns DROP COLUMN prev_ts, DROP COLUMN prev_feature, DROP COLUMN prev_user`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, pgtest.DSN(), Options{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := eventstore.Query{By: eventstore.ByUser, Feature: "chat", From: storetest.T0.Add(-26 * time.Hour), To: storetest.T0.Add(26 * time.Hour)}
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		got, total, err := s.featureUsers(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		w := where{}
		w.add("t.ts_start >= ? AND t.ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
		w.eq("t.feature", q.Feature)
		want, err := s.scanRows(ctx, `SELECT t.user_id_hash, `+turnSums+` FROM turns t WHERE `+w.String()+
			` GROUP BY 1 ORDER BY sum(t.cost) DESC, 1`, w.args...)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || len(got) != min(len(want), q.Limit) || total.Spans == 0 {
			t.Fatalf("%d users (total %+v), want %d", len(got), total, len(want))
		}
		for i := range got {
			if got[i].Key != want[i].Key || got[i].Spans != want[i].Spans || got[i].Turns != want[i].Turns {
				t.Errorf("user %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	check()
	// Writes after the migration keep it exact.
	if _, err := s.Write(ctx, storetest.Dataset(6, 50)); err != nil {
		t.Fatal(err)
	}
	check()
}

// TestOpenAddsCacheColumns opens a store written before spans and the
// roll-up kept the prompt cache's figures: its rows are kept, and spans
// written from then on, new or redelivered with new ones, add their cache
// figures to the same roll-up rows.
func TestOpenAddsCacheColumns(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	s, err := Open(ctx, pgtest.DSN(), Options{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	old := storetest.Dataset(8, 40)
	if _, err := s.Write(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ALTER TABLE spans DROP COLUMN tokens_cache_read, DROP COLUMN tokens_cache_write, DROP COLUMN cache_saved;
		ALTER TABLE rollup DROP COLUMN cache_read, DROP COLUMN cache_write, DROP COLUMN cache_saved`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, pgtest.DSN(), Options{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := eventstore.Query{By: eventstore.ByModel, From: storetest.T0.Add(-2 * time.Hour), To: storetest.T0.Add(4 * time.Hour)}
	before, err := s.Cost(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Spans != int64(len(old)) || before.Total.Spans != int64(len(old)) || before.Total.CacheReadTokens != 0 {
		t.Fatalf("after reopening: %+v (%v), total %+v; want the %d spans stored, no cache figures", st, err, before.Total, len(old))
	}
	// New spans with cache figures, in a batch of their own and in one
	// redelivered with some of the old ones (the staging path).
	cached := storetest.PromptCache(storetest.Dataset(9, 40))
	if _, err := s.Write(ctx, cached[:len(cached)/2]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, append(slices.Clone(old[:20]), cached[len(cached)/2:]...)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Cost(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var read, write int64
	var saved float64
	for _, e := range cached {
		read += int64(e.Resource.TokensCacheRead)
		write += int64(e.Resource.TokensCacheWrite)
		saved += e.Resource.CacheSavedUSD
	}
	tot := got.Total
	if read == 0 || tot.Spans != int64(len(old)+len(cached)) || tot.CacheReadTokens != read || tot.CacheWriteTokens != write ||
		math.Abs(tot.CacheSavedUSD-saved) > 1e-9 || tot.CacheReadRatio != float64(read)/float64(tot.TokensIn) {
		t.Fatalf("total %+v; want %d spans, %d read, %d written, $%v saved", tot, len(old)+len(cached), read, write, saved)
	}
}

// A batch holding spans stored already and new ones (a redelivery that
// overlaps new spans) adds exactly the new ones: the store answers as one
// that received every span once.
func TestOverlappingBatchAddsOnlyNewSpans(t *testing.T) {
	ctx := context.Background()
	data := storetest.Dataset(7, 300)
	once, twice := openTest(t), openTest(t)
	if n, err := once.Write(ctx, data); err != nil || n != int64(len(data)) {
		t.Fatalf("stored %d (%v), want %d", n, err, len(data))
	}
	half := len(data) / 2
	if _, err := twice.Write(ctx, data[:half]); err != nil {
		t.Fatal(err)
	}
	// The second half, with a third of the first half again; a turn
	// split across both halves is completed by it.
	overlap := append(slices.Clone(data[half/3:half]), data[half:]...)
	if n, err := twice.Write(ctx, overlap); err != nil || n != int64(len(data)-half) {
		t.Fatalf("the overlapping batch stored %d (%v), want %d", n, err, len(data)-half)
	}
	from, to := storetest.T0.Add(-48*time.Hour), storetest.T0.Add(30*24*time.Hour)
	for _, q := range []eventstore.Query{
		{By: eventstore.ByFeature},
		{By: eventstore.ByModel},
		{By: eventstore.ByUser},
		{By: eventstore.ByUser, Feature: "chat"},
		{By: eventstore.ByTurn, Limit: eventstore.MaxLimit},
	} {
		q.From, q.To = from, to
		want, err := once.Cost(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := twice.Cost(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(want.Rows) == 0 || len(got.Rows) != len(want.Rows) {
			t.Fatalf("by %s %q: %d rows, want %d", q.By, q.Feature, len(got.Rows), len(want.Rows))
		}
		for i, w := range append([]eventstore.CostRow{want.Total}, want.Rows...) {
			g := got.Total
			if i > 0 {
				g = got.Rows[i-1]
			}
			if g.Key != w.Key || g.Spans != w.Spans || g.Turns != w.Turns || g.TokensIn != w.TokensIn ||
				g.Errors != w.Errors || g.Fallbacks != w.Fallbacks || math.Abs(g.CostUSD-w.CostUSD) > 1e-9 {
				t.Errorf("by %s %q row %d: %+v, want %+v", q.By, q.Feature, i, g, w)
			}
		}
	}
}

// TestValuesPostgreSQLCannotHold: a NUL byte, which a PostgreSQL text
// cannot hold, is stored as U+FFFD in the columns and kept in the trace
// view; a value beyond PostgreSQL's limits fails the batch with
// eventstore.ErrUnstorable, so that a writer can tell it from an outage.
func TestValuesPostgreSQLCannotHold(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	data := storetest.Dataset(41, 3)
	data[0].Attribution.Feature = "re\x00commend"
	if n, err := s.Write(ctx, data); err != nil || n != int64(len(data)) {
		t.Fatalf("a batch with a NUL stored %d of %d spans: %v", n, len(data), err)
	}
	rep, err := s.Trace(ctx, data[0].TraceID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sp := range rep.Spans {
		found = found || sp.SpanID == data[0].SpanID && sp.Attribution.Feature == "re\x00commend"
	}
	if !found {
		t.Errorf("the trace view does not show the span's feature as sent")
	}
	var col string
	if err := s.pool.QueryRow(ctx, `SELECT feature FROM spans WHERE span_id = $1`, data[0].SpanID).Scan(&col); err != nil || col != "re\uFFFDcommend" {
		t.Errorf("feature column %q (%v), want the NUL as U+FFFD", col, err)
	}

	if _, err := s.Cost(ctx, eventstore.Query{By: eventstore.ByFeature, Feature: "re\x00commend"}); !errors.Is(err, eventstore.ErrInvalid) {
		t.Errorf("a filter with a NUL: %v, want ErrInvalid (a 400), not PostgreSQL's refusal", err)
	}

	long := storetest.Dataset(42, 1)
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 12_000) // random letters: too long for a key even compressed
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	long[0].Attribution.Feature = string(b)
	if _, err := s.Write(ctx, long); !errors.Is(err, eventstore.ErrUnstorable) {
		t.Fatalf("a feature too long for the roll-up's key: %v, want ErrUnstorable", err)
	}
}

func TestFirstSchema(t *testing.T) {
	for give, want := range map[string]string{
		"": "", "fmgate": "fmgate", "FmGate, public": "fmgate", `"FmGate", public`: "FmGate",
		`"$user", public`: "", "$user": "", ` analytics ,public`: "analytics", `"a""b"`: `a"b`,
	} {
		if got := firstSchema(give); got != want {
			t.Errorf("firstSchema(%q) = %q, want %q", give, got, want)
		}
	}
}

// TestOpenCreatesTheSchemaOfTheSearchPath: a DSN naming a schema that does
// not exist yet in its search_path gets it created, as Options.Schema does.
func TestOpenCreatesTheSchemaOfTheSearchPath(t *testing.T) {
	ctx := context.Background()
	name := pgtest.Schema(t) + "_sp" // not created by pgtest
	t.Cleanup(func() {
		if s, err := Open(ctx, pgtest.DSN(), Options{ReadOnly: true}); err == nil {
			_, _ = s.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+name+` CASCADE`)
			s.Close()
		}
	})
	s, err := Open(ctx, pgtest.DSN()+"&search_path="+name, Options{})
	if err != nil {
		t.Fatalf("Open with search_path=%s: %v", name, err)
	}
	defer s.Close()
	if _, err := s.Write(ctx, storetest.Dataset(5, 2)); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := s.pool.QueryRow(ctx, `SELECT table_schema FROM information_schema.tables WHERE table_name = 'turns' AND table_schema = $1`, name).Scan(&schema); err != nil {
		t.Fatalf("no turns table in schema %s: %v", name, err)
	}
}

// TestUnavailableIsA503: a cost view while no ingester has created the
// tables, or while PostgreSQL cannot be reached, answers 503 saying what to
// do, not 500 "internal error".
func TestUnavailableIsA503(t *testing.T) {
	ctx := context.Background()
	empty, err := Open(ctx, pgtest.DSN(), Options{Schema: pgtest.Schema(t), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	down, err := Open(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2", Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	// Tables an earlier version's ingest created, without the prompt
	// cache's columns.
	schema := pgtest.Schema(t)
	if _, err := openTestSchema(t, schema).pool.Exec(ctx, `ALTER TABLE spans DROP COLUMN tokens_cache_read, DROP COLUMN tokens_cache_write, DROP COLUMN cache_saved;
		ALTER TABLE rollup DROP COLUMN cache_read, DROP COLUMN cache_write, DROP COLUMN cache_saved`); err != nil {
		t.Fatal(err)
	}
	older, err := Open(ctx, pgtest.DSN(), Options{Schema: schema, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer older.Close()
	for _, tt := range []struct {
		name string
		s    *Store
		want string
	}{
		{"no tables yet", empty, "start `fmgate ingest`"},
		{"postgres down", down, "cannot be reached"},
		{"tables of an earlier version", older, "start this version's `fmgate ingest`"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			eventstore.NewHandler(tt.s, time.Now, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest("GET", "/admin/cost?by=feature", nil))
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"code":"store_unavailable"`) ||
				!strings.Contains(rec.Body.String(), tt.want) {
				t.Fatalf("cost view = %d %s; want 503 store_unavailable saying %q", rec.Code, rec.Body, tt.want)
			}
		})
	}
}
