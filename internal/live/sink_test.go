package live

import (
	"context"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

var _ events.Sink = (*Aggregator)(nil)

// Spans from the real tracer and emitter, with the write-ahead log on (turn
// and model_attempt spans are must-persist and go through it; the stream
// span does not), still correlate into a TTFT sample.
func TestThroughEmitter(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	cfg := events.DefaultConfig()
	cfg.WAL.Dir = t.TempDir()
	em, err := events.New(context.Background(), cfg, []events.Sink{a}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := events.NewTracer(em, events.TracerOptions{Now: clk.Now})

	ctx, turnSpan := tr.Start(context.Background(), "turn", events.WithMustPersist())
	turnSpan.SetModel("sonnet-id")
	_, att := tr.Start(ctx, "model_attempt", events.WithMustPersist())
	att.SetModel("sonnet-id")
	att.SetTokens(1200, 300)
	att.SetCost(0.0081)
	clk.Advance(400 * time.Millisecond)
	first := clk.Now()
	clk.Advance(600 * time.Millisecond)
	att.End()
	_, st := tr.Start(ctx, "stream", events.WithStartTime(first))
	st.End()
	turnSpan.End()
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	s := a.Snapshot(context.Background())
	if s.Turns != 1 || s.Tiers["sonnet-id"] != 1 || s.TokensPerMinute["sonnet-id"] != 1500 {
		t.Fatalf("turns %d tiers %v tokens %v", s.Turns, s.Tiers, s.TokensPerMinute)
	}
	if s.TTFTMs.P50 == nil || *s.TTFTMs.P50 != 400 || *s.LatencyMs.P50 != 1000 {
		t.Fatalf("ttft p50 %v latency p50 %v; want 400 and 1000", deref(s.TTFTMs.P50), deref(s.LatencyMs.P50))
	}
}
