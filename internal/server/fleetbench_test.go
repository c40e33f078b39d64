package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/ingest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// BenchmarkTurnFleetEvents measures a gateway's turn latency with its
// spans going to NATS and the cost views read from PostgreSQL, while
// fmgate ingest runs, while it is stopped, and with PostgreSQL unreachable:
// the turn's path touches neither, so the figures should not move. Turns
// arrive at benchRate per second (open loop).
//
//	go test -run '^$' -bench BenchmarkTurnFleetEvents -benchtime 4000x ./internal/server
func BenchmarkTurnFleetEvents(b *testing.B) {
	for _, mode := range []string{"ingest-running", "ingest-stopped", "postgres-down"} {
		b.Run(mode, func(b *testing.B) {
			var id [4]byte
			_, _ = rand.Read(id[:])
			stream, subject := "FMGATE_BENCH_"+hex.EncodeToString(id[:]), "fmgate.bench."+hex.EncodeToString(id[:])+".events"
			defer func() {
				if nc, err := nats.Connect("nats://127.0.0.1:4222"); err == nil {
					js, _ := jetstream.New(nc)
					_ = js.DeleteStream(context.Background(), stream)
					nc.Close()
				}
			}()
			dsn := pgtest.DSN() + "&search_path=" + pgtest.Schema(b)
			cfg := benchConfig()
			cfg.EventStore.Path, cfg.Events.WAL.Dir = "", ""
			cfg.Events.Sinks.NATS.URL, cfg.Events.Sinks.NATS.Stream, cfg.Events.Sinks.NATS.Subject = "nats://127.0.0.1:4222", stream, subject
			cfg.EventStore.Driver, cfg.EventStore.DSN = eventstore.DriverPostgres, dsn
			if mode == "postgres-down" {
				cfg.EventStore.DSN = "postgres://postgres@127.0.0.1:1/fmgate?connect_timeout=1"
			}
			s, err := New(context.Background(), cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if mode == "ingest-running" {
				store, err := pgstore.Open(context.Background(), dsn, pgstore.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer store.Close()
				in, _ := ingest.New(ingest.Config{URL: "nats://127.0.0.1:4222", Stream: stream, Subject: subject}, store, nil)
				ctx, stop := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				wg.Go(func() { in.Run(ctx) })
				defer func() { stop(); wg.Wait() }()
			}
			var (
				mu   sync.Mutex
				lats []time.Duration
				wg   sync.WaitGroup
			)
			tick := time.NewTicker(time.Second / benchRate)
			defer tick.Stop()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				<-tick.C
				wg.Go(func() {
					t := &gateway.Turn{RequestID: strconv.Itoa(i), SessionID: "bench-" + strconv.Itoa(i%64),
						Message: "おすすめの少年漫画は？", Locale: "ja", Route: "sendMessage", Surface: "ws", UserID: "bench-" + strconv.Itoa(i%500)}
					start := time.Now()
					if _, err := s.Gateway.Run(context.Background(), t, discard{}); err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					lats = append(lats, time.Since(start))
					mu.Unlock()
				})
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lats)
			if len(lats) > 0 {
				b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
			}
		})
	}
}
