package events

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// recorder collects events in memory.
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) Emit(e Event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.mu.Unlock()
}

// fakeClock advances by step on every reading.
func fakeClock(step time.Duration) func() time.Time {
	t := time.Date(2026, 4, 29, 14, 2, 13, 418_000_000, time.UTC)
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(step)
		return t
	}
}

// scriptedTurn plays the spans of one turn that fell back from Sonnet to
// Haiku after a throttle.
func scriptedTurn(tr *Tracer) {
	ctx, turn := tr.Start(context.Background(), "turn")
	turn.SetSession("s_abc123")
	turn.SetUser("user-42")
	turn.SetAttribution(Attribution{Feature: "discovery_recommend", Surface: "chat", Locale: "ja-JP", UserTier: "premium", Priority: "P0"})
	turn.SetCapabilityFlags("recommend_v2")
	turn.SetExcerpt("連絡先は taro@example.jp / 090-1234-5678 です")

	_, admit := tr.Start(ctx, "admit")
	admit.End()

	_, quota := tr.Start(ctx, "quota", WithMustPersist())
	quota.SetTokens(4218, 0)
	quota.End()

	actx, a1 := tr.Start(ctx, "model_attempt", WithKind(KindLLMCall), WithNodeID("Plan"))
	a1.SetModel("claude-sonnet-4-6")
	a1.SetPromptVersion("planner-prompt-v23")
	a1.SetStatus(StatusFailed)
	a1.SetErrorCode("throttled")
	_, retry := tr.Start(actx, "retry")
	retry.SetStatus(StatusFailed)
	retry.SetErrorCode("throttled")
	retry.End()
	a1.End()

	_, a2 := tr.Start(ctx, "model_attempt", WithKind(KindLLMCall), WithNodeID("Plan"))
	a2.SetModel("claude-haiku-4-5")
	a2.SetPromptVersion("planner-prompt-v23")
	a2.SetTokens(4218, 312)
	a2.SetCost(0.00451)
	a2.SetCacheHit(CachePrefixPartial)
	a2.SetMustPersist()
	a2.End()

	_, st := tr.Start(ctx, "stream")
	st.SetTokens(0, 312)
	st.End()

	turn.SetStatus(StatusFallback)
	turn.SetFallbackUsed("haiku")
	turn.SetEvalScore(0.87)
	turn.End()
	turn.SetCost(99) // after End: ignored
	turn.End()       // second End: ignored
}

func newTestTracer(rec Recorder, excerpt bool) *Tracer {
	return NewTracer(rec, TracerOptions{
		GraphVersion: "v17.4",
		Now:          fakeClock(7 * time.Millisecond),
		Rand:         rand.New(rand.NewPCG(1, 2)),
		Hasher:       NewHasher([]byte("0123456789abcdef-test")),
		Excerpt:      excerpt,
		ExcerptChars: 40,
	})
}

func TestSpanTreeGolden(t *testing.T) {
	rec := &recorder{}
	scriptedTurn(newTestTracer(rec, true))

	var got bytes.Buffer
	for i := range rec.evs {
		got.Write(Encode(&rec.evs[i]))
		got.WriteByte('\n')
	}
	golden := filepath.Join("testdata", "turn.golden.jsonl")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("events differ from %s:\n got: %s\nwant: %s", golden, got.Bytes(), want)
	}
}

func TestSpanTreeNesting(t *testing.T) {
	rec := &recorder{}
	scriptedTurn(newTestTracer(rec, false))

	if len(rec.evs) != 7 {
		t.Fatalf("got %d events, want 7 (one per span, End twice counts once)", len(rec.evs))
	}
	byName := map[string][]Event{}
	for _, e := range rec.evs {
		byName[e.Name] = append(byName[e.Name], e)
	}
	turn := byName["turn"][0]
	if turn.ParentSpanID != "" {
		t.Errorf("root parent = %q, want empty (null)", turn.ParentSpanID)
	}
	if turn.Resource.CostUSD != 0 {
		t.Errorf("SetCost after End changed the event: %v", turn.Resource.CostUSD)
	}
	if turn.PromptExcerpt != "" {
		t.Errorf("excerpt recorded while disabled: %q", turn.PromptExcerpt)
	}
	ids := map[string]bool{}
	for _, e := range rec.evs {
		if e.TraceID != turn.TraceID {
			t.Errorf("%s: trace %s, want %s", e.Name, e.TraceID, turn.TraceID)
		}
		if len(e.TraceID) != 32 || len(e.SpanID) != 16 {
			t.Errorf("%s: id lengths %d/%d", e.Name, len(e.TraceID), len(e.SpanID))
		}
		if ids[e.SpanID] {
			t.Errorf("duplicate span id %s", e.SpanID)
		}
		ids[e.SpanID] = true
		if e.Name != "turn" && (e.SessionID != turn.SessionID || len(e.SessionID) != 32) {
			t.Errorf("%s: session %q not inherited", e.Name, e.SessionID)
		}
		if e.UserIDHash == "" || e.UserIDHash == "user-42" {
			t.Errorf("%s: user hash %q", e.Name, e.UserIDHash)
		}
		if e.TSEnd.Before(e.TSStart) || e.DurationMS != e.TSEnd.Sub(e.TSStart).Milliseconds() {
			t.Errorf("%s: times %v..%v duration %d", e.Name, e.TSStart, e.TSEnd, e.DurationMS)
		}
	}
	for _, name := range []string{"admit", "quota", "model_attempt", "stream"} {
		for _, e := range byName[name] {
			if e.ParentSpanID != turn.SpanID {
				t.Errorf("%s parent = %s, want turn %s", name, e.ParentSpanID, turn.SpanID)
			}
		}
	}
	retry := byName["retry"][0]
	if retry.ParentSpanID != byName["model_attempt"][0].SpanID {
		t.Errorf("retry parent = %s, want first model_attempt", retry.ParentSpanID)
	}
	if !byName["quota"][0].MustPersist || !byName["model_attempt"][1].MustPersist {
		t.Error("must_persist lost")
	}
}

func TestStartContinuesRemoteTrace(t *testing.T) {
	rec := &recorder{}
	tr := NewTracer(rec, TracerOptions{})
	tc, ok := ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if !ok {
		t.Fatal("parse failed")
	}
	ctx, s := tr.Start(ContextWithRemote(context.Background(), tc), "turn")
	if got := TraceID(ctx); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("TraceID(ctx) = %s", got)
	}
	if got := SpanID(ctx); got != s.Context().SpanHex() || got == "00f067aa0ba902b7" {
		t.Errorf("SpanID(ctx) = %s", got)
	}
	s.End()
	if rec.evs[0].ParentSpanID != "00f067aa0ba902b7" {
		t.Errorf("parent = %s, want the remote span", rec.evs[0].ParentSpanID)
	}
	if out := FormatTraceparent(s.Context()); out[:36] != "00-4bf92f3577b34da6a3ce929d0e0e4736-" || out[52:] != "-01" {
		t.Errorf("outgoing traceparent %s", out)
	}
	if TraceID(context.Background()) != "" || SpanID(context.Background()) != "" {
		t.Error("ids from an empty context")
	}
}

func TestNilTracerAndSpanAreNoOps(t *testing.T) {
	var tr *Tracer
	ctx, s := tr.Start(context.Background(), "turn")
	s.SetModel("x")
	s.SetCost(1)
	s.End()
	if s != nil || SpanFromContext(ctx) != nil {
		t.Error("nil tracer made a span")
	}
}

// A model attempt's captured content reaches the in-process sinks with
// its event, and no encoding of the event: the stores, the span log and
// the stream never see the text.
func TestContentIsNeverEncoded(t *testing.T) {
	var got []Event
	tr := NewTracer(recorderFunc(func(e Event) { got = append(got, e) }), TracerOptions{})
	_, span := tr.Start(context.Background(), "model_attempt")
	span.SetContent(&Content{Input: []ContentMessage{{Role: "user", Parts: []ContentPart{{Type: "text", Content: "secret question"}}}}})
	span.End()
	if len(got) != 1 || got[0].Content == nil || got[0].Content.Input[0].Parts[0].Content != "secret question" {
		t.Fatalf("the sink got %+v", got)
	}
	if b := Encode(&got[0]); strings.Contains(string(b), "secret") {
		t.Fatalf("Encode wrote the content: %s", b)
	}
	if b, _ := json.Marshal(got[0]); strings.Contains(string(b), "secret") {
		t.Fatalf("json.Marshal wrote the content: %s", b)
	}
}

type recorderFunc func(Event)

func (f recorderFunc) Emit(e Event) { f(e) }
