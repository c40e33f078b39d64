package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// typicalBatch is turns whole turns as the pipeline emits them: admit,
// budget, quota, one model attempt, stream, turn (six spans each), with a
// throttled first attempt and a degraded answer now and then.
func typicalBatch(turns int) []events.Event {
	batch := make([]events.Event, 0, turns*7)
	for i := range turns {
		trace := fmt.Sprintf("%032x", i+1)
		turn := fmt.Sprintf("%016x", i+1)
		route := routes[i%len(routes)]
		batch = append(batch,
			mk("admit", ids(trace, turn+"a", turn), at(t0, time.Millisecond)),
			mk("budget", ids(trace, turn+"b", turn), at(t0, time.Millisecond)),
			mk("quota", ids(trace, turn+"q", turn), at(t0, 2*time.Millisecond)),
		)
		if i%10 == 0 {
			batch = append(batch, mk("model_attempt", ids(trace, turn+"x", turn), model("claude-sonnet-4-6"),
				status(events.StatusFailed), code("throttled"), at(t0, 40*time.Millisecond)))
		}
		tier, answered := "", "claude-sonnet-4-6"
		if i%20 == 0 {
			tier, answered = "haiku", "claude-haiku-4-5"
		}
		batch = append(batch,
			mk("model_attempt", ids(trace, turn+"m", turn), model(answered), tokens(1800, 350), cost(0.0106),
				at(t0, 1400*time.Millisecond)),
			mk("stream", ids(trace, turn+"s", turn), at(t0.Add(450*time.Millisecond), time.Second)),
			mk("turn", ids(trace, turn, ""), surface(route), model(answered), fb(tier), at(t0, 1450*time.Millisecond)),
		)
	}
	return batch
}

// BenchmarkWrite measures Write for a batch of 64 typical turns (the
// emitter's default batch holds a few hundred spans).
func BenchmarkWrite(b *testing.B) {
	m, _ := newTest(b, Options{})
	batch := typicalBatch(64)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := m.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/span")
}

// BenchmarkGather measures one scrape's collection after traffic, with a
// state callback, without the HTTP encoding.
func BenchmarkGather(b *testing.B) {
	m, _ := newTest(b, Options{})
	feedAll(b, m)
	if err := m.Write(context.Background(), typicalBatch(64)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := m.reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
