package live

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// turnTree returns the spans of n turns in emission order: admit, budget,
// quota, model_attempt, cache, stream, then the turn.
func turnTree(n int, now time.Time) []events.Event {
	var out []events.Event
	for i := range n {
		tr := turn(turnSpec{end: now, duration: time.Duration(200+i%2000) * time.Millisecond, model: "sonnet"})
		if i%20 == 0 {
			tr.Outcome = events.Outcome{Status: events.StatusFailed, ErrorCode: "unavailable"}
		}
		for _, name := range []string{"admit", "budget", "quota", "cache"} {
			out = append(out, events.Event{Name: name, TraceID: tr.TraceID, ParentSpanID: tr.SpanID, TSEnd: now})
		}
		out = append(out, attempt("sonnet", now, 800, 300, 0.0069), stream(tr, time.Duration(100+i%900)*time.Millisecond), tr)
	}
	return out
}

// BenchmarkWrite reports the cost of folding one span into the window
// (ns/op is per span), for single-span writes and emitter-sized batches.
func BenchmarkWrite(b *testing.B) {
	for _, size := range []int{1, 256} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			clk := newClock()
			a := New(DefaultConfig(), nil, clk.Now)
			spans := turnTree(1024, clk.Now())
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += size {
				from := i % len(spans)
				to := min(from+size, len(spans), from+b.N-i)
				_ = a.Write(ctx, spans[from:to])
			}
		})
	}
}

// BenchmarkSnapshot is the cost of one snapshot of a full 60 s window.
func BenchmarkSnapshot(b *testing.B) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	for range 60 {
		clk.Advance(time.Second)
		_ = a.Write(context.Background(), turnTree(100, clk.Now()))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		a.Snapshot(context.Background())
	}
}
