package pgstore

import (
	"context"
	"hash/fnv"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// spansFor returns n distinct spans, turns of four to seven spans from T0.
func spansFor(n int, seed uint64) []events.Event {
	out := storetest.DatasetEvery(seed+uint64(n), n/4+1, 86*time.Millisecond)
	return out[:n]
}

func benchWrite(b *testing.B, s *Store, data []events.Event, batch, writers int) {
	ctx := context.Background()
	next := make(chan []events.Event)
	done := make(chan error, writers)
	start := time.Now()
	for range writers {
		go func() {
			for chunk := range next {
				if _, err := s.Write(ctx, chunk); err != nil {
					done <- err
					for range next {
					}
					return
				}
			}
			done <- nil
		}()
	}
	for i := 0; i < len(data); i += batch {
		next <- data[i:min(i+batch, len(data))]
	}
	close(next)
	for range writers {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(len(data))/el.Seconds(), "spans/s")
}

// BenchmarkIngest writes b.N spans into a fresh schema in batches of 5000
// spans, two writers at once (fmgate ingest's defaults), and reports
// spans/s.
//
//	go test -run '^$' -bench BenchmarkIngest -benchtime 500000x ./internal/eventstore/pgstore/
//
// Sub-benchmarks: every trace kept whole (events.sampling off), and the
// default head sampling (5%), where the turn span of the other 95% of
// traces says so and their spans but the turn's and the must-persist
// records are stored without their record.
func BenchmarkIngest(b *testing.B) {
	b.Run("sampling=off", func(b *testing.B) { benchIngest(b, 1) })
	b.Run("sampling=5%", func(b *testing.B) { benchIngest(b, 0.05) })
}

func benchIngest(b *testing.B, rate float64) {
	s := openBench(b)
	data := spansFor(b.N, 1)
	sampleOut(data, rate)
	batch, writers := 5000, 2
	if v, err := strconv.Atoi(os.Getenv("FMGATE_BENCH_BATCH")); err == nil {
		batch = v
	}
	if v, err := strconv.Atoi(os.Getenv("FMGATE_BENCH_WRITERS")); err == nil {
		writers = v
	}
	b.ResetTimer()
	benchWrite(b, s, data, batch, writers)
}

// sampleOut marks the turn span of all but about rate of the traces as
// sampled out, as the tracer's head sampling does.
func sampleOut(data []events.Event, rate float64) {
	for i := range data {
		if e := &data[i]; e.Name == "turn" {
			h := fnv.New32a()
			h.Write([]byte(e.TraceID))
			e.SampledOut = float64(h.Sum32()%10_000) >= rate*10_000
		}
	}
}

func openBench(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), pgtest.DSN(), Options{Schema: pgtest.Schema(b), MaxConns: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkDrillDownLarge times the drill-down over a store of
// FMGATE_BENCH_PG_SPANS spans (e.g. 10000000: about 2.2M turns of 50,000
// users, 1M turns a day), kept in the schema fmgate_bench_users between
// runs: total → feature → users of the feature → one user's turns → the
// spans of a turn. Each step's slowest time is reported.
//
//	FMGATE_BENCH_PG_SPANS=10000000 go test -run '^$' -bench BenchmarkDrillDownLarge -benchtime 5x -timeout 2h ./internal/eventstore/pgstore/
func BenchmarkDrillDownLarge(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("FMGATE_BENCH_PG_SPANS"))
	if n <= 0 {
		b.Skip("set FMGATE_BENCH_PG_SPANS (e.g. 10000000) to run")
	}
	ctx := context.Background()
	s, err := Open(ctx, pgtest.DSN(), Options{Schema: "fmgate_bench_users", MaxConns: 8})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st.Spans < int64(n) {
		b.Logf("loading %d spans", int64(n)-st.Spans)
		for off := st.Spans; off < int64(n); off += 1_000_000 {
			m := min(1_000_000, int64(n)-off)
			data := storetest.DatasetUsers(uint64(off)+1000, int(m)/4+1, 86*time.Millisecond, 50_000)[:m]
			// Each million follows the previous one: about 5 hours each.
			shift := time.Duration(off/1_000_000) * 6 * time.Hour
			for i := range data {
				data[i].TSStart, data[i].TSEnd = data[i].TSStart.Add(shift), data[i].TSEnd.Add(shift)
			}
			benchWrite(b, s, data, 10000, 2)
		}
		if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
			b.Fatal(err)
		}
	}
	from, to := storetest.T0.Add(-2*time.Hour), storetest.T0.Add(40*24*time.Hour)
	worst := map[string]time.Duration{}
	timed := func(name string, q eventstore.Query) eventstore.CostReport {
		q.From, q.To = from, to
		t0 := time.Now()
		rep, err := s.Cost(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		worst[name] = max(worst[name], time.Since(t0))
		return rep
	}
	b.ResetTimer()
	for range b.N {
		timed("total", eventstore.Query{By: eventstore.ByTotal})
		timed("by-feature", eventstore.Query{By: eventstore.ByFeature})
		timed("feature-by-user", eventstore.Query{By: eventstore.ByUser, Feature: "chat"})
		turns := timed("user-by-turn", eventstore.Query{By: eventstore.ByTurn, User: storetest.UserHash(7), Limit: 10})
		if len(turns.Rows) == 0 {
			b.Fatal("no turn of the user")
		}
		timed("turn-by-node", eventstore.Query{By: eventstore.ByNode, Trace: turns.Rows[0].Key})
	}
	for name, d := range worst {
		b.ReportMetric(float64(d.Milliseconds()), name+"-ms")
	}
}
