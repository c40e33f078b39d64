package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/ratelimit"
)

// discard is an Output that drops the answer.
type discard struct{}

func (discard) Write(string) error           { return nil }
func (discard) Started() bool                { return false }
func (discard) Discard()                     {}
func (discard) Finish(*gateway.Result) error { return nil }
func (discard) Fail(*gateway.Error) error    { return nil }

// BenchmarkTurn is one turn through the whole pipeline (every policy on, in
// memory) against the simulator at zero latency. The simulator's own
// tokenizer work is included; see BenchmarkStream in provider/sim for it
// alone.
func BenchmarkTurn(b *testing.B) {
	s, err := New(context.Background(), isolate(b, benchConfig()), Options{Catalog: sharedCatalog(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t := &gateway.Turn{RequestID: strconv.Itoa(i), SessionID: "bench-" + strconv.Itoa(i%64), Message: "おすすめの少年漫画は？",
			Locale: "ja", Route: "sendMessage", Surface: "ws", UserID: "bench"}
		if _, err := s.Gateway.Run(ctx, t, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTurnSinks compares turn latency with no event sinks (no event
// store, no write-ahead log, no exporters; the in-process metrics and live
// figures stay), with each sink alone and with all of them on: the
// write-ahead log, the SQLite event store, the JSONL file, OTLP to a local
// collector and NATS JetStream (when 127.0.0.1:4222 answers). Turns arrive at benchRate per second (open loop); p50 and
// p99 are reported per turn, with the events any sink dropped.
//
//	go test -run '^$' -bench BenchmarkTurnSinks -benchtime 4000x ./internal/server
func BenchmarkTurnSinks(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	natsUp := false
	if c, err := net.DialTimeout("tcp", "127.0.0.1:4222", 200*time.Millisecond); err == nil {
		c.Close()
		natsUp = true
	}
	// Each sink alone, then all of them: which one costs what.
	for _, name := range []string{"none", "wal", "store", "jsonl", "otlp", "nats", "all"} {
		if name == "nats" && !natsUp {
			continue
		}
		cfg := benchConfig()
		cfg.EventStore.Path, cfg.Events.WAL.Dir = "", ""
		dir := b.TempDir()
		on := func(sink string) bool { return name == sink || name == "all" }
		if on("wal") {
			cfg.Events.WAL.Dir = filepath.Join(dir, "wal")
		}
		if on("store") {
			cfg.EventStore.Path = filepath.Join(dir, "events.db")
		}
		if on("jsonl") {
			cfg.Events.Sinks.JSONL.Path = filepath.Join(dir, "events.jsonl")
		}
		if on("otlp") {
			cfg.Events.Sinks.OTLP.Endpoint = collector.URL + "/v1/traces"
		}
		if on("nats") && natsUp {
			cfg.Events.Sinks.NATS.URL = "nats://127.0.0.1:4222"
		}
		name := "sinks=" + name
		b.Run(name, func(b *testing.B) {
			s, err := New(context.Background(), cfg, Options{Catalog: sharedCatalog(b)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			var (
				mu   sync.Mutex
				lats []time.Duration
			)
			// Open loop at a fixed rate well below saturation, so the
			// figures show what the sinks add to a turn, not queueing for
			// the CPU.
			tick := time.NewTicker(time.Second / benchRate)
			defer tick.Stop()
			var wg sync.WaitGroup
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				<-tick.C
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := &gateway.Turn{RequestID: strconv.Itoa(i), SessionID: "bench-" + strconv.Itoa(i%64),
						Message: "おすすめの少年漫画は？", Locale: "ja", Route: "sendMessage", Surface: "ws", UserID: "bench-" + strconv.Itoa(i%500)}
					start := time.Now()
					if _, err := s.Gateway.Run(context.Background(), t, discard{}); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(start)
					mu.Lock()
					lats = append(lats, d)
					mu.Unlock()
				}()
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lats)
			if len(lats) > 0 {
				b.ReportMetric(float64(lats[len(lats)/2].Microseconds())/1000, "p50-ms")
				b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds())/1000, "p99-ms")
			}
			st := s.Events.Stats()
			var dropped uint64
			for _, ss := range st.Sinks {
				dropped += ss.Dropped
			}
			b.ReportMetric(float64(dropped), "dropped-events")
		})
	}
}

// benchRate is the arrival rate of BenchmarkTurnSinks, turns per second.
const benchRate = 200

// benchConfig is the default profile with a zero-latency simulator and the
// limits lifted: the benchmarks measure the pipeline, not refusals.
func benchConfig() config.Config {
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs, st.TokensPerSecond = 0, 0
		cfg.Sim.Models[name] = st
	}
	// Lift the limits: the benchmark measures the pipeline, not refusals.
	cfg.RateLimit.Global = ratelimit.Rule{Limit: ratelimit.PerSecond(1_000_000, 1_000_000)}
	cfg.RateLimit.Routes = nil
	cfg.RateLimit.User = ratelimit.UserRules{}
	cfg.Budget.SessionInput, cfg.Budget.SessionOutput, cfg.Budget.DailyCostUSD = 0, 0, 0
	for m, c := range cfg.Quota.Models {
		c.TPM, c.RPM = 1<<40, 1<<40
		cfg.Quota.Models[m] = c
	}
	return cfg
}

// fixedProvider answers every call at once with the same short text and
// usage, as a provider that reports usage does: what is left of a turn's
// cost is the gateway's own.
type fixedProvider struct{}

func (fixedProvider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return fixedProvider{}.Stream(ctx, req, func(string) error { return nil })
}

func (fixedProvider) Stream(_ context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	const text = "Try Frieren: Beyond Journey's End."
	if err := emit(text); err != nil {
		return &provider.Response{}, err
	}
	return &provider.Response{Text: text, ModelID: req.Model, StopReason: "end_turn",
		Usage: provider.Usage{InputTokens: 120, OutputTokens: 9}}, nil
}

// BenchmarkPipeline is the gateway's own cost per turn: the whole chain on
// in memory mode — every rate-limit scope decided (limits set high, not
// off), budgets, quota reservation and settlement, breaker, retry wrapper,
// events to the write-ahead log and the embedded store, Prometheus metrics
// and live figures — in front of a provider that costs nothing; with and
// without the catalog retrieval step (a bleve search per turn).
//
//	go test -run '^$' -bench BenchmarkPipeline -benchmem ./internal/server
func BenchmarkPipeline(b *testing.B) {
	cfg := benchConfig()
	cfg.RateLimit = ratelimit.DefaultConfig()
	high := ratelimit.PerSecond(1_000_000, 1_000_000)
	cfg.RateLimit.Global = ratelimit.Rule{Limit: high}
	for r := range cfg.RateLimit.Routes {
		cfg.RateLimit.Routes[r] = ratelimit.Rule{Limit: high}
	}
	cfg.RateLimit.User = ratelimit.UserRules{PerSecond: ratelimit.Rule{Limit: high},
		PerMinute: ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1_000_000, Per: time.Minute}},
		PerHour:   ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1_000_000, Per: time.Hour}},
		PerDay:    ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1_000_000, Per: 24 * time.Hour}}}
	cfg.Budget.SessionInput, cfg.Budget.SessionOutput, cfg.Budget.DailyCostUSD = 1<<30, 1<<30, 1e9
	cfg.Judge.SampleRate = 0
	for _, catalog := range []bool{false, true} {
		cfg.Catalog.Enabled = catalog
		b.Run(fmt.Sprintf("catalog=%v", catalog), func(b *testing.B) { benchPipeline(b, cfg) })
	}
}

func benchPipeline(b *testing.B, cfg config.Config) {
	s, err := New(context.Background(), isolate(b, cfg), Options{
		WrapProvider: func(string, provider.Provider) provider.Provider { return fixedProvider{} }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	n := 0
	for i := 0; b.Loop(); i++ {
		t := &gateway.Turn{RequestID: strconv.Itoa(i), SessionID: "bench-" + strconv.Itoa(i%64), Message: "Which fantasy manga should I read next?",
			Locale: "en", Route: "chat", Surface: "openai", UserID: "bench-" + strconv.Itoa(i%256)}
		if _, err := s.Gateway.Run(ctx, t, discard{}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	// The sinks' work on these turns' events is part of their cost.
	waitForSinks(b, s)
	b.ReportMetric(float64(cpuTime()-cpu)/float64(n)/1e3, "cpu-µs/op")
}

// cpuTime is the CPU time the process used so far, user and system, on
// every thread: on a shared machine it counts the work, not the waiting.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitForSinks waits, 30 s at most, until every event sink has written (or
// dropped) every event emitted so far.
func waitForSinks(b *testing.B, s *Server) {
	b.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		st := s.Events.Stats()
		behind := false
		for _, sk := range st.Sinks {
			behind = behind || sk.Written+sk.Dropped < st.Emitted
		}
		if !behind {
			return
		}
	}
	b.Fatal("the event sinks did not catch up within 30s")
}

// roundTrips counts the commands and pipelines a Redis client sends: one
// network round trip each.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkPipelineFleet is BenchmarkPipeline with every policy's state in
// Redis (127.0.0.1:6379), reporting the Redis round trips a turn costs.
//
//	go test -run '^$' -bench BenchmarkPipelineFleet -benchmem ./internal/server
func BenchmarkPipelineFleet(b *testing.B) {
	cfg := benchConfig()
	cfg.Judge.SampleRate = 0
	// The catalog search, with its question embedding (a simulated model
	// call of its own, its latency and its own breaker, quota and pressure
	// in Redis), is measured apart (BenchmarkPipeline's catalog=true).
	cfg.Catalog.Enabled = false
	cfg.Fleet.Redis = "127.0.0.1:6379"
	cfg.Fleet.KeyPrefix = fmt.Sprintf("fmgate-bench-%d:", time.Now().UnixNano())
	s, err := New(context.Background(), isolate(b, cfg), Options{
		WrapProvider: func(string, provider.Provider) provider.Provider { return fixedProvider{} }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rt := &roundTrips{}
	s.Redis.AddHook(rt)
	ctx := context.Background()
	run := func(i int) {
		t := &gateway.Turn{RequestID: strconv.Itoa(i), SessionID: "bench-" + strconv.Itoa(i%64), Message: "Which fantasy manga should I read next?",
			Locale: "en", Route: "chat", Surface: "openai", UserID: "bench-" + strconv.Itoa(i%256)}
		if _, err := s.Gateway.Run(ctx, t, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	run(-1) // scripts loaded, connections open
	rt.n.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		run(i)
		i++
	}
	b.ReportMetric(float64(rt.n.Load())/float64(i), "redis-trips/op")
}
