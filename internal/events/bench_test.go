package events

import (
	"context"
	"syscall"
	"testing"
	"time"
)

type discardSink struct{}

func (discardSink) Name() string                         { return "discard" }
func (discardSink) Write(context.Context, []Event) error { return nil }

// BenchmarkSpanStartEnd is the hot-path cost a turn pays per span: Start,
// a few setters, End and Emit into the emitter's queues.
func BenchmarkSpanStartEnd(b *testing.B) {
	cfg := DefaultConfig()
	em, err := New(context.Background(), cfg, []Sink{discardSink{}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer em.Close(context.Background())
	tr := NewTracer(em, cfg.TracerOptions())
	ctx, root := tr.Start(context.Background(), "turn")
	root.SetSession("s_abc123")
	root.SetUser("user-42")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, s := tr.Start(ctx, "model_attempt", WithKind(KindLLMCall))
			s.SetModel("claude-sonnet-4-6")
			s.SetTokens(4218, 312)
			s.SetCost(0.00451)
			s.End()
		}
	})
	b.StopTimer()
	st := em.Stats().Sinks["discard"]
	b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
}

// BenchmarkEmit measures Emit alone with one sink.
func BenchmarkEmit(b *testing.B) {
	em, err := New(context.Background(), DefaultConfig(), []Sink{discardSink{}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer em.Close(context.Background())
	ev := event(1, false)
	b.ReportAllocs()
	for b.Loop() {
		em.Emit(ev)
	}
}

// BenchmarkEncode measures the allow-listed encoder sinks use.
func BenchmarkEncode(b *testing.B) {
	ev := event(1, false)
	ev.Resource.CapabilityFlagsActive = []string{"recommend_v2"}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendJSON(buf[:0], &ev)
	}
}

func BenchmarkRedact(b *testing.B) {
	const text = "連絡先は taro@example.jp / 090-1234-5678、カード 4111 1111 1111 1111 で払います"
	b.ReportAllocs()
	for b.Loop() {
		Redact(text)
	}
}

type durableDiscard struct{ discardSink }

func (durableDiscard) Durable() bool { return true }

// BenchmarkEmitMustPersist measures a must-persist Emit with the WAL on
// disk: it returns once the record is written and fsync'd, and concurrent
// callers (-cpu sets how many) share a write and an fsync.
func BenchmarkEmitMustPersist(b *testing.B) {
	cfg := DefaultConfig()
	cfg.WAL.Dir = b.TempDir()
	em, err := New(context.Background(), cfg, []Sink{durableDiscard{}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer em.Close(context.Background())
	ev := event(1, true)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			em.Emit(ev)
		}
	})
	b.StopTimer()
	st := em.Stats().WAL
	b.ReportMetric(float64(st.Appended)/float64(b.N), "logged/op")
	b.ReportMetric(float64(st.Late+st.Overflow)/float64(b.N), "unguarded/op")
}

// BenchmarkTailSampler is what the embedded store's sampler costs a turn:
// turns of four spans (a step, a must-persist model call, the turn span, a
// late record) handed over 64 turns a write, as the emitter batches them.
func BenchmarkTailSampler(b *testing.B) {
	clock := time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	c := &collect{}
	tr := NewTracer(c, TracerOptions{HeadSampling: true, SampleRate: 0.05, Now: now})
	// Twice as many turns as the sampler remembers decisions for: every
	// batch is new to it, as in a run.
	cfg := DefaultConfig().Sampling
	cfg.MaxPendingTraces = 1024
	const turns, batches = 64, 32
	for range turns * batches {
		turnSpans(tr, context.Background(), StatusOK, 100*time.Millisecond, &clock)
	}
	per := len(c.evs) / batches
	for _, mode := range []struct {
		name string
		mode SampleMode
	}{{"hold", HoldForDecision}, {"records", KeepRecords}} {
		b.Run(mode.name, func(b *testing.B) {
			s := NewTailSampler(discardSink{}, mode.mode, cfg, now)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				batch := c.evs[i*per : (i+1)*per]
				i = (i + 1) % batches
				if err := s.Write(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*turns), "ns/turn")
		})
	}
}

type namedDiscard struct {
	discardSink
	name string
}

func (s namedDiscard) Name() string { return s.name }

// BenchmarkEmitPaced emits turns of seven spans a millisecond apart to four
// sinks, as a gateway at 1,000 turns/s does, and reports the process's CPU
// per span: the emitting and the sinks' runners gathering their batches
// (BatchWait), which a busy gateway pays on its own cores. Run:
// go test -run '^$' -bench EmitPaced -benchtime 3000x ./internal/events
func BenchmarkEmitPaced(b *testing.B) {
	var sinks []Sink
	for i := range 4 {
		sinks = append(sinks, namedDiscard{name: "discard" + string(rune('a'+i))})
	}
	em, err := New(context.Background(), DefaultConfig(), sinks, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer em.Close(context.Background())
	ev := event(1, false)
	const spans = 7
	cpu := cpuTime()
	for b.Loop() {
		for range spans {
			em.Emit(ev)
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*spans)/1e3, "cpu-µs/span")
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
