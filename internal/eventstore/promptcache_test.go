package eventstore

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"
)

// TestOpenAddsCacheColumns opens a file written before the roll-up summed
// the prompt cache's figures: its spans and sums are kept (no layout
// change drops them), and spans written from then on add their cache
// figures to the same buckets.
func TestOpenAddsCacheColumns(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "events.db")
	s := openTest(t, path)
	write(t, s, dataset...)
	q := Query{By: ByModel, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)}
	before, err := s.Cost(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The file as the store left it before: the roll-up without the
	// cache columns.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range addedColumns {
		if _, err := db.Exec(`ALTER TABLE ` + c.table + ` DROP COLUMN ` + c.name); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s = openTest(t, path)
	after, err := s.Cost(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if after.Total.Spans != before.Total.Spans || !near(after.Total.CostUSD, before.Total.CostUSD) || len(after.Rows) != len(before.Rows) {
		t.Fatalf("after reopening: %+v (%d rows), want what was stored: %+v (%d rows)", after.Total, len(after.Rows), before.Total, len(before.Rows))
	}
	// The sums just added read from the roll-up's buckets: with the
	// spans' figures there, the added columns are what they show.
	more := []turnSpec{{n: 10, user: "dave", feature: "recommend", graph: "v17.4", at: 5 * time.Second, spans: []span{
		{name: "plan", model: "sonnet", prompt: "planner-prompt-v23", cost: 0.003}}}}
	var spans = more[0].build()
	spans[0].Resource.TokensCacheRead, spans[0].Resource.TokensCacheWrite, spans[0].Resource.CacheSavedUSD = 60, 30, 0.0004
	if err := s.Write(ctx, spans); err != nil {
		t.Fatal(err)
	}
	got, err := s.Cost(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	sonnet := keyed(got.Rows)["sonnet"]
	if sonnet.Spans != keyed(before.Rows)["sonnet"].Spans+1 || sonnet.CacheReadTokens != 60 || sonnet.CacheWriteTokens != 30 ||
		!near(sonnet.CacheSavedUSD, 0.0004) || !near(sonnet.CacheReadRatio, 60/float64(sonnet.TokensIn)) {
		t.Errorf("sonnet after a span with cache figures: %+v", sonnet)
	}
	var v int
	if err := s.w.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Errorf("user_version %d (%v), want %d", v, err, schemaVersion)
	}
}
