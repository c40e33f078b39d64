package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/ingest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// natsStream names a JetStream stream and subject of the test's own,
// deleted when it ends.
func natsStream(t *testing.T) (stream, subject string) {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	stream, subject = "FMGATE_TEST_"+id, "fmgate.test."+id+".events"
	t.Cleanup(func() {
		if nc, err := nats.Connect("nats://127.0.0.1:4222"); err == nil {
			js, _ := jetstream.New(nc)
			_ = js.DeleteStream(context.Background(), stream)
			nc.Close()
		}
	})
	return stream, subject
}

// TestFleetCostFromPostgres runs two gateways publishing to NATS, an
// ingester writing to PostgreSQL, and asks either gateway for the fleet's
// cost: both answer with every turn of both.
func TestFleetCostFromPostgres(t *testing.T) {
	stream, subject := natsStream(t)
	dsn := pgtest.DSN() + "&search_path=" + pgtest.Schema(t)

	cfg := quickConfig()
	cfg.Events.Sinks.NATS.URL, cfg.Events.Sinks.NATS.Stream, cfg.Events.Sinks.NATS.Subject = "nats://127.0.0.1:4222", stream, subject
	cfg.EventStore.Driver, cfg.EventStore.DSN = eventstore.DriverPostgres, dsn
	// Every trace kept whole: the trace view is checked against all of a
	// turn's spans, which the store keeps only for sampled turns.
	cfg.Events.Sampling.Rate = 1
	a, _ := instance(t, cfg)
	g2, _ := instance(t, cfg)

	store, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	in, err := ingest.New(ingest.Config{URL: "nats://127.0.0.1:4222", Stream: stream, Subject: subject, MaxWait: 50 * time.Millisecond}, store, nil)
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
	defer func() { stop(); wg.Wait() }()

	var want float64
	for i, sc := range []*scenario{a, g2, a, g2, a} {
		ans := sc.chat([]string{"hana", "kenji"}[i%2], "おすすめの漫画は？", "ja")
		if ans.Status != 200 {
			t.Fatalf("turn %d: %+v", i, ans)
		}
		want += ans.CostUSD
	}
	var rep eventstore.CostReport
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, sc := range []*scenario{a, g2} {
			if err := json.Unmarshal([]byte(adminGet(t, sc.srv.URL+"/admin/cost?by=user&from=-1h")), &rep); err != nil {
				t.Fatal(err)
			}
		}
		// A turn's spans may reach PostgreSQL in several batches: wait for
		// the whole bill, not only the five turn rows.
		if (rep.Total.Turns >= 5 && rep.Total.CostUSD >= want*0.999) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not timing one
	}
	if rep.Total.Turns != 5 || len(rep.Rows) != 2 {
		t.Fatalf("fleet cost by user: %d turns in %d rows, want 5 turns of 2 users", rep.Total.Turns, len(rep.Rows))
	}
	if rep.Total.CostUSD < want*0.999 {
		t.Errorf("fleet cost $%.6f, want at least the answers' $%.6f", rep.Total.CostUSD, want)
	}
	var turns eventstore.CostReport
	json.Unmarshal([]byte(adminGet(t, g2.srv.URL+"/admin/cost?by=turn&from=-1h")), &turns)
	body := adminGet(t, a.srv.URL+"/admin/cost/trace/"+turns.Rows[0].Key)
	var raw struct{ Spans []json.RawMessage }
	json.Unmarshal([]byte(body), &raw)
	if len(raw.Spans) < 3 {
		t.Fatalf("trace %s has %d spans: %s", turns.Rows[0].Key, len(raw.Spans), body)
	}

	var series eventstore.SeriesReport
	json.Unmarshal([]byte(adminGet(t, a.srv.URL+"/admin/cost/series?from=-1h")), &series)
	turnsSeen := int64(0)
	for _, p := range series.Points {
		turnsSeen += p.Turns
	}
	if turnsSeen != 5 {
		t.Errorf("cost series from PostgreSQL counts %d turns, want 5", turnsSeen)
	}
}

// TestGatewayServesWithPostgresDown: the gateway neither needs PostgreSQL
// to start nor to answer turns; only the cost views fail until it is back.
func TestGatewayServesWithPostgresDown(t *testing.T) {
	cfg := quickConfig()
	cfg.Events.Sinks.NATS.URL = "nats://127.0.0.1:4222"
	cfg.EventStore.Driver, cfg.EventStore.DSN = eventstore.DriverPostgres, "postgres://postgres@127.0.0.1:1/fmgate?connect_timeout=1"
	sc, _ := instance(t, cfg)
	tiers, statuses := sc.run(6, 3, "How long does shipping take?")
	if statuses[200] != 6 {
		t.Fatalf("with PostgreSQL down: statuses %v tiers %v", statuses, tiers)
	}
}
