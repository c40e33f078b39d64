package eventstore_test

import (
	"context"
	"database/sql"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
)

// TestSampledStoreIsSmaller: MangaAssist's traffic written as a gateway
// sampling 5% of traces emits it takes less room than written whole, and
// answers with the same figures after the store is reopened.
func TestSampledStoreIsSmaller(t *testing.T) {
	data := storetest.DatasetEvery(11, 3000, 86*time.Millisecond)
	type raw struct{ rows, whole, tallies, bytes int }
	size := func(name string, batch []events.Event) (int64, raw, eventstore.CostReport) {
		cfg := eventstore.DefaultConfig()
		cfg.Path = filepath.Join(t.TempDir(), name+".db")
		cfg.Retention = 0
		ctx := context.Background()
		s, err := eventstore.Open(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(batch); i += 256 {
			if err := s.Write(ctx, batch[i:min(i+256, len(batch))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s, err = eventstore.Open(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		rep, err := s.Cost(ctx, eventstore.Query{By: eventstore.ByModel, From: storetest.T0.Add(-2 * time.Hour), To: storetest.T0.Add(2 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Trace(ctx, batch[0].TraceID); err != nil {
			t.Fatal(err)
		}
		s.Close()
		var n int64
		for _, f := range []string{cfg.Path, cfg.Path + "-wal"} {
			if st, err := os.Stat(f); err == nil {
				n += st.Size()
			}
		}
		db, err := sql.Open("sqlite", cfg.Path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var r raw
		rows, err := db.Query(`SELECT ts_start, data FROM events`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var ts int64
			var data []byte
			if err := rows.Scan(&ts, &data); err != nil {
				t.Fatal(err)
			}
			r.rows++
			r.bytes += len(data)
			if err := eventstore.EachRecord(data, ts, func(rec []byte, _ int64) error {
				switch rec[0] {
				case 1:
					r.whole++
				case 2:
					r.tallies++
				default:
					t.Fatalf("a record of kind %d", rec[0])
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return n, r, rep
	}
	whole, wholeRaw, wantRep := size("whole", data)
	sampled, sampledRaw, gotRep := size("sampled", storetest.Sample(data, 20, 3*time.Second))
	// Sums of floats agree to rounding: roll-ups add in no fixed order.
	same := func(a, b eventstore.CostRow) bool {
		ac, bc := a.CostUSD, b.CostUSD
		a.CostUSD, b.CostUSD, a.CostPerTurn, b.CostPerTurn = 0, 0, 0, 0
		return a == b && math.Abs(ac-bc) <= 1e-9*max(1, math.Abs(bc))
	}
	if !same(gotRep.Total, wantRep.Total) || len(gotRep.Rows) != len(wantRep.Rows) {
		t.Fatalf("cost by model sampled %+v, whole %+v", gotRep.Total, wantRep.Total)
	}
	for i := range wantRep.Rows {
		if !same(gotRep.Rows[i], wantRep.Rows[i]) {
			t.Errorf("row %d sampled %+v, whole %+v", i, gotRep.Rows[i], wantRep.Rows[i])
		}
	}
	t.Logf("%d spans of 3000 turns: file %d bytes whole, %d sampled (%.0f%%); span records %+v whole, %+v sampled",
		len(data), whole, sampled, 100*float64(sampled)/float64(whole), wholeRaw, sampledRaw)
	if sampledRaw.whole >= wholeRaw.whole || sampledRaw.tallies == 0 || sampledRaw.whole+sampledRaw.tallies != wholeRaw.whole {
		t.Errorf("span records %+v sampled, %+v whole: want fewer whole spans, the rest as tallies", sampledRaw, wholeRaw)
	}
	// An unsampled turn's tallies are stored in its turn span's row.
	if sampledRaw.rows >= sampledRaw.whole+sampledRaw.tallies || sampledRaw.rows >= wholeRaw.rows {
		t.Errorf("%d rows sampled for %d spans (%d rows whole): want the tallies packed into their turn's row",
			sampledRaw.rows, sampledRaw.whole+sampledRaw.tallies, wholeRaw.rows)
	}
	if sampled >= whole || sampledRaw.bytes >= wholeRaw.bytes {
		t.Fatalf("sampled store %d bytes, whole %d: sampling saved no room", sampled, whole)
	}
}
