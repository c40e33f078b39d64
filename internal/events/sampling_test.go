package events

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

type recSink struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recSink) Name() string { return "rec" }
func (r *recSink) Write(_ context.Context, b []Event) error {
	r.mu.Lock()
	r.evs = append(r.evs, b...)
	r.mu.Unlock()
	return nil
}

// names returns the span names received for trace.
func (r *recSink) names(trace string) []string {
	var out []string
	for _, e := range r.evs {
		if e.TraceID == trace {
			out = append(out, e.Name)
		}
	}
	return out
}

type collect struct{ evs []Event }

func (c *collect) Emit(e Event) { c.evs = append(c.evs, e) }

// turnSpans plays one turn: a non-persist step, a must-persist model call,
// the turn span, then a late must-persist record, as the pipeline does.
func turnSpans(tr *Tracer, ctx context.Context, status Status, dur time.Duration, clock *time.Time) {
	ctx, turn := tr.Start(ctx, "turn", WithMustPersist())
	_, step := tr.Start(ctx, "admit")
	step.End()
	_, call := tr.Start(ctx, "model_attempt", WithMustPersist())
	call.End()
	*clock = clock.Add(dur)
	turn.SetStatus(status)
	turn.End()
	_, rec := tr.Start(ctx, "record", WithMustPersist())
	rec.End()
}

func TestHeadSamplingRate(t *testing.T) {
	c := &collect{}
	tr := NewTracer(c, TracerOptions{HeadSampling: true, SampleRate: 0.05, Rand: rand.New(rand.NewPCG(1, 2))})
	const n = 4000
	sampled := 0
	for range n {
		_, s := tr.Start(context.Background(), "turn")
		s.End()
	}
	for _, e := range c.evs {
		if e.Sampled {
			sampled++
		}
	}
	if got := float64(sampled) / n; got < 0.04 || got > 0.06 {
		t.Fatalf("head-sampled %.3f of new traces, want about 0.05", got)
	}
}

func TestTraceparentFlagHonoured(t *testing.T) {
	tests := []struct {
		name   string
		flags  byte
		rate   float64
		sample bool
	}{
		{"caller sampled, rate 0", 1, 0, true},
		{"caller not sampled, rate 1", 0, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collect{}
			tr := NewTracer(c, TracerOptions{HeadSampling: true, SampleRate: tt.rate})
			remote := TraceContext{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: tt.flags}
			ctx, turn := tr.Start(ContextWithRemote(context.Background(), remote), "turn")
			_, child := tr.Start(ctx, "admit")
			child.End()
			turn.End()
			for _, e := range c.evs {
				if e.Sampled != tt.sample {
					t.Errorf("%s span sampled %v, want the caller's %v", e.Name, e.Sampled, tt.sample)
				}
			}
			// Propagated: the traceparent of the turn carries the same flag.
			if got := FormatTraceparent(turn.Context()); got[53:] != FormatTraceparent(remote)[53:] {
				t.Errorf("propagated traceparent %s does not carry flags %02x", got, tt.flags)
			}
		})
	}
}

// TestTailSampler: the trace export gets whole traces of sampled, failed,
// fallback and slow turns and nothing of the others; the raw span log also
// gets the turn and must-persist records of every turn, late ones included.
func TestTailSampler(t *testing.T) {
	clock := time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	c := &collect{}
	tr := NewTracer(c, TracerOptions{HeadSampling: true, SampleRate: 0, Now: now})
	cfg := DefaultConfig().Sampling
	type turn struct {
		name   string
		status Status
		dur    time.Duration
		head   bool
		keep   bool
	}
	turns := []turn{
		{"normal", StatusOK, 100 * time.Millisecond, false, false},
		{"failed", StatusFailed, 100 * time.Millisecond, false, true},
		{"fallback", StatusFallback, 100 * time.Millisecond, false, true},
		{"slow", StatusOK, 4 * time.Second, false, true},
		{"head-sampled", StatusOK, 100 * time.Millisecond, true, true},
	}
	traces := map[string]string{}
	for _, tt := range turns {
		ctx := context.Background()
		if tt.head {
			ctx = ContextWithRemote(ctx, TraceContext{TraceID: [16]byte{9}, SpanID: [8]byte{9}, Flags: 1})
		}
		n := len(c.evs)
		turnSpans(tr, ctx, tt.status, tt.dur, &clock)
		traces[tt.name] = c.evs[n].TraceID
	}
	export, log := &recSink{}, &recSink{}
	ts := []*TailSampler{NewTailSampler(export, DropUnsampled, cfg, now), NewTailSampler(log, KeepRecords, cfg, now)}
	for _, s := range ts {
		// One event at a time, as small batches arrive in production.
		for _, e := range c.evs {
			if err := s.Write(context.Background(), []Event{e}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tt := range turns {
		got := len(export.names(traces[tt.name]))
		if want := map[bool]int{true: 4, false: 0}[tt.keep]; got != want {
			t.Errorf("%s turn: export got %d spans, want %d", tt.name, got, want)
		}
		got = len(log.names(traces[tt.name]))
		if want := map[bool]int{true: 4, false: 3}[tt.keep]; got != want {
			t.Errorf("%s turn: span log got %v, want %d spans (turn and must-persist records always)", tt.name, log.names(traces[tt.name]), want)
		}
	}
}

// TestTailSamplerBounds: spans whose turn never ends are passed on whole
// once they outlive the TTL or the buffer, and on Close.
func TestTailSamplerBounds(t *testing.T) {
	clock := time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	cfg := SamplingConfig{Enabled: true, SlowTurn: time.Second, MaxPendingTraces: 2, PendingTTL: time.Minute}
	out := &recSink{}
	s := NewTailSampler(out, DropUnsampled, cfg, now)
	write := func(trace string) {
		_ = s.Write(context.Background(), []Event{{TraceID: trace, Name: "batch_item"}})
	}
	write("a")
	write("b")
	if len(out.evs) != 0 {
		t.Fatalf("passed %d spans before any bound was hit", len(out.evs))
	}
	write("c") // three pending traces, the bound is two: the oldest goes out whole
	if len(out.names("a")) != 1 {
		t.Fatalf("oldest trace not passed on at the buffer bound: %v", out.evs)
	}
	clock = clock.Add(2 * time.Minute)
	write("d") // b and c are past the TTL
	if len(out.names("b")) != 1 || len(out.names("c")) != 1 {
		t.Fatalf("expired traces not passed on: %v", out.evs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if len(out.names("d")) != 1 {
		t.Fatal("Close did not pass on the waiting trace")
	}
}

// TestTurnSpanRecordsDecision: the turn span of a turn that is not sampled
// says so in its encoded event (sampled_out), so that stores fed from the
// NATS stream apply the same decision; other spans and sampled turns carry
// nothing, and with sampling off no turn is sampled out.
func TestTurnSpanRecordsDecision(t *testing.T) {
	clock := time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	tests := []struct {
		name     string
		sampling bool
		status   Status
		dur      time.Duration
		head     bool
		out      bool
	}{
		{"normal", true, StatusOK, 100 * time.Millisecond, false, true},
		{"failed", true, StatusFailed, 100 * time.Millisecond, false, false},
		{"fallback", true, StatusFallback, 100 * time.Millisecond, false, false},
		{"slow", true, StatusOK, 4 * time.Second, false, false},
		{"caller sampled", true, StatusOK, 100 * time.Millisecond, true, false},
		{"sampling off", false, StatusOK, 100 * time.Millisecond, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &collect{}
			tr := NewTracer(c, TracerOptions{HeadSampling: tt.sampling, SampleRate: 0, Now: now})
			ctx := context.Background()
			if tt.head {
				ctx = ContextWithRemote(ctx, TraceContext{TraceID: [16]byte{9}, SpanID: [8]byte{9}, Flags: 1})
			}
			turnSpans(tr, ctx, tt.status, tt.dur, &clock)
			for _, e := range c.evs {
				want := tt.out && e.Name == "turn"
				if e.SampledOut != want {
					t.Errorf("%s span: sampled out %v, want %v", e.Name, e.SampledOut, want)
				}
				back, err := Decode(Encode(&e))
				if err != nil || back.SampledOut != e.SampledOut {
					t.Errorf("%s span: decoded sampled out %v (%v), want %v", e.Name, back.SampledOut, err, e.SampledOut)
				}
			}
		})
	}
}

type writesSink struct{ batches [][]Event }

func (b *writesSink) Name() string { return "writes" }
func (b *writesSink) Write(_ context.Context, batch []Event) error {
	b.batches = append(b.batches, append([]Event(nil), batch...))
	return nil
}

// TestHoldForDecision: every span of every turn is passed on; a span that
// is neither the turn's nor must-persist waits for its turn span and is
// passed in the same write, while must-persist spans (in the write-ahead
// log, acknowledged by a durable sink once written) are never held.
func TestHoldForDecision(t *testing.T) {
	clock := time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	c := &collect{}
	tr := NewTracer(c, TracerOptions{HeadSampling: true, SampleRate: 0, Now: now})
	turnSpans(tr, context.Background(), StatusOK, 100*time.Millisecond, &clock)
	turnSpans(tr, context.Background(), StatusFailed, 100*time.Millisecond, &clock)

	out := &writesSink{}
	s := NewTailSampler(out, HoldForDecision, DefaultConfig().Sampling, now)
	for _, e := range c.evs { // one event at a time
		if err := s.Write(context.Background(), []Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	var got int
	for i, b := range out.batches {
		for _, e := range b {
			got++
			switch e.Name {
			case "admit":
				turnHere := false
				for _, o := range b {
					turnHere = turnHere || (o.Name == "turn" && o.TraceID == e.TraceID)
				}
				if !turnHere {
					t.Errorf("write %d: admit span passed without its turn span", i)
				}
			case "model_attempt":
				if len(b) != 1 {
					t.Errorf("write %d: the must-persist model_attempt span was held back (passed with %d others)", i, len(b)-1)
				}
			}
		}
	}
	if got != len(c.evs) {
		t.Fatalf("passed %d spans of %d", got, len(c.evs))
	}
	if kept, dropped := s.Stats(); kept != uint64(len(c.evs)) || dropped != 0 {
		t.Fatalf("stats kept %d dropped %d", kept, dropped)
	}
}

// TestTailSamplerConcurrentWrites: writers sharing a sampler (its reused
// buffers) each see exactly their own turns passed on, span for span, in
// their own writes.
func TestTailSamplerConcurrentWrites(t *testing.T) {
	clock := time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	const writers, turns = 4, 300
	evs := make([][]Event, writers)
	for w := range writers {
		c := &collect{}
		tr := NewTracer(c, TracerOptions{HeadSampling: true, SampleRate: 0, Now: func() time.Time { return clock }})
		for range turns {
			turnSpans(tr, context.Background(), StatusOK, 100*time.Millisecond, &clock)
		}
		for i := range c.evs {
			c.evs[i].SessionID = fmt.Sprintf("writer-%d", w)
		}
		evs[w] = c.evs
	}
	out := &checkSink{spans: map[string]int{}}
	s := NewTailSampler(out, HoldForDecision, DefaultConfig().Sampling, now)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for b := 0; b < len(evs[w]); b += 7 {
				if err := s.Write(context.Background(), evs[w][b:min(b+7, len(evs[w]))]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if out.mixed != 0 {
		t.Fatalf("%d writes mixed two writers' spans", out.mixed)
	}
	for w := range writers {
		want := map[string]int{}
		for _, e := range evs[w] {
			want[e.SpanID]++
		}
		for id, n := range want {
			if out.spans[id] != n {
				t.Fatalf("writer %d: span %s passed %d times, want %d", w, id, out.spans[id], n)
			}
		}
	}
	if len(out.spans) != writers*turns*4 {
		t.Fatalf("passed %d distinct spans, want %d", len(out.spans), writers*turns*4)
	}
}

// checkSink counts spans by id and the writes whose spans came from more
// than one session.
type checkSink struct {
	mu    sync.Mutex
	spans map[string]int
	mixed int
}

func (c *checkSink) Name() string { return "check" }
func (c *checkSink) Write(_ context.Context, b []Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range b {
		c.spans[b[i].SpanID]++
		if b[i].SessionID != b[0].SessionID {
			c.mixed++
			break
		}
	}
	return nil
}
