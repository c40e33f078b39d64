package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

func TestSeries(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ctx := context.Background()
	type pt struct {
		at                           time.Duration // from t0
		turns, spans, errs, tokensIn int64
		cost                         float64
	}
	tests := []struct {
		name     string
		give     Query
		step     time.Duration
		wantStep int64
		want     []pt
	}{
		{"one-minute steps", Query{From: t0, To: t0.Add(2 * time.Minute)}, time.Minute, 60,
			[]pt{{0, 4, 10, 1, 600, 0.024}, {time.Minute, 1, 2, 0, 100, 0.002}}},
		{"steps before the first span are zero", Query{From: t0.Add(-2 * time.Minute), To: t0.Add(90 * time.Second)}, time.Minute, 60,
			[]pt{{-2 * time.Minute, 0, 0, 0, 0, 0}, {-time.Minute, 0, 0, 0, 0, 0}, {0, 4, 10, 1, 600, 0.024}, {time.Minute, 1, 2, 0, 100, 0.002}}},
		{"unaligned range clips the edge steps", Query{From: t0.Add(1500 * time.Millisecond), To: t0.Add(61*time.Second + 500*time.Millisecond)}, time.Minute, 60,
			[]pt{{0, 2, 4, 0, 200, 0.011}, {time.Minute, 1, 2, 0, 100, 0.002}}},
		{"one step over everything", Query{From: t0, To: t0.Add(time.Hour)}, time.Hour, 3600,
			[]pt{{0, 5, 12, 1, 700, 0.026}}},
		{"model filter selects spans", Query{ModelID: "haiku", From: t0, To: t0.Add(2 * time.Minute)}, time.Minute, 60,
			[]pt{{0, 0, 2, 1, 200, 0.003}, {time.Minute, 0, 1, 0, 100, 0.002}}},
		{"feature and graph filters", Query{Feature: "recommend", GraphVersion: "v17.4", From: t0, To: t0.Add(2 * time.Minute)}, 2 * time.Minute, 120,
			[]pt{{0, 2, 6, 1, 400, 0.013}}},
		{"default step keeps 240 points or fewer", Query{From: t0, To: t0.Add(2 * time.Minute)}, 0, 60,
			[]pt{{0, 4, 10, 1, 600, 0.024}, {time.Minute, 1, 2, 0, 100, 0.002}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := s.Series(ctx, tt.give, tt.step)
			if err != nil {
				t.Fatal(err)
			}
			if rep.StepSeconds != tt.wantStep || len(rep.Points) != len(tt.want) {
				t.Fatalf("step %d, %d points %+v; want step %d, %d points", rep.StepSeconds, len(rep.Points), rep.Points, tt.wantStep, len(tt.want))
			}
			for i, w := range tt.want {
				p := rep.Points[i]
				if !p.T.Equal(t0.Add(w.at)) || p.Turns != w.turns || p.Spans != w.spans || p.Errors != w.errs ||
					p.TokensIn != w.tokensIn || !near(p.CostUSD, w.cost) {
					t.Errorf("point %d = %+v, want %+v", i, p, w)
				}
				if p.Spans > 0 && p.AvgLatencyMS != 10 {
					t.Errorf("point %d avg latency = %v, want 10 ms", i, p.AvgLatencyMS)
				}
			}
		})
	}
}

func TestSeriesDefaultStep(t *testing.T) {
	s := openTest(t, ":memory:")
	tests := []struct {
		span     time.Duration
		wantStep time.Duration
		wantN    int
	}{
		{15 * time.Minute, time.Minute, 15},
		{time.Hour, time.Minute, 60},
		{4 * time.Hour, time.Minute, 240},
		{24 * time.Hour, 10 * time.Minute, 144},
		{7 * 24 * time.Hour, time.Hour, 168},
		// 3h would need 241 steps: 30 days from 14:00 start in the step
		// that began at 12:00.
		{30 * 24 * time.Hour, 6 * time.Hour, 121},
	}
	for _, tt := range tests {
		t.Run(tt.span.String(), func(t *testing.T) {
			rep, err := s.Series(context.Background(), Query{From: t0.Add(-tt.span), To: t0}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if rep.StepSeconds != int64(tt.wantStep.Seconds()) || len(rep.Points) != tt.wantN {
				t.Errorf("step %ds, %d points; want %v, %d", rep.StepSeconds, len(rep.Points), tt.wantStep, tt.wantN)
			}
		})
	}
}

func TestSeriesInvalid(t *testing.T) {
	s := openTest(t, ":memory:")
	tests := []struct {
		name string
		give Query
		step time.Duration
		want string
	}{
		{"sub-minute step", Query{}, 30 * time.Second, "whole number of minutes"},
		{"fractional minutes", Query{}, 90 * time.Second, "whole number of minutes"},
		{"too many points", Query{From: t0.Add(-30 * 24 * time.Hour), To: t0}, time.Minute, "at most 10000"},
		{"grouping", Query{By: ByFeature}, 0, "no grouping"},
		{"user", Query{User: "alice"}, 0, "no grouping, user"},
		{"from after to", Query{From: t0, To: t0.Add(-time.Minute)}, 0, "from must be before to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Series(context.Background(), tt.give, tt.step)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func f64(v float64) *float64 { return &v }

// canary: prompt p1 is the baseline, p2 the canary. Turn 104 tried both
// prompts; turn 105 started outside the range; turn 106 has no root span
// yet; turn 107 only carries p1 on a model span inside a graph v2 turn.
var canary = []turnSpec{
	{n: 100, user: "a", feature: "f", graph: "g1", rootMS: 100, eval: f64(0.8), spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 0.010}}},
	{n: 101, user: "a", feature: "f", graph: "g1", at: time.Second, rootMS: 200, eval: f64(0.6), spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 0.020}}},
	{n: 102, user: "b", feature: "f", graph: "g1", at: 2 * time.Second, rootMS: 300, rootStatus: events.StatusFailed,
		spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 0.001, failed: true}}},
	{n: 103, user: "b", feature: "f", graph: "g2", at: 3 * time.Second, rootMS: 5000, rootStatus: events.StatusFallback, eval: f64(0.2),
		spans: []span{{name: "m", model: "haiku", prompt: "p2", cost: 0.004}}},
	{n: 104, user: "c", feature: "f", graph: "g2", at: 4 * time.Second, rootMS: 400,
		spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 0.002}, {name: "m", model: "haiku", prompt: "p2", cost: 0.003}}},
	{n: 105, user: "c", feature: "f", graph: "g1", at: -time.Hour, rootMS: 9000, spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 1}}},
	{n: 107, user: "d", feature: "f", graph: "g2", at: 5 * time.Second, rootMS: 700, spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 0.005}}},
}

func TestCompare(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, canary...)
	// A turn whose root span has not arrived: no duration, not counted.
	orphan := turnSpec{n: 106, user: "d", feature: "f", graph: "g1", at: 5 * time.Second, spans: []span{{name: "m", model: "sonnet", prompt: "p1", cost: 0.5}}}.build()
	if err := s.Write(context.Background(), orphan[:1]); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		dim  string
		a, b string
		want [2]CompareSide
	}{
		{"prompts", ByPrompt, "p1", "p2", [2]CompareSide{
			{Version: "p1", Turns: 5, Errors: 1, ErrorRate: 0.2, CostUSD: 0.010 + 0.020 + 0.001 + 0.005 + 0.005, CostPerTurn: 0.041 / 5,
				LatencyP50MS: 300, LatencyP95MS: 700, LatencyP99MS: 700, EvalMean: 0.7, EvalCount: 2},
			{Version: "p2", Turns: 2, Fallbacks: 1, FallbackRate: 0.5, CostUSD: 0.004 + 0.005, CostPerTurn: 0.0045,
				LatencyP50MS: 400, LatencyP95MS: 5000, LatencyP99MS: 5000, EvalMean: 0.2, EvalCount: 1},
		}},
		{"graphs", ByGraph, "g1", "g2", [2]CompareSide{
			{Version: "g1", Turns: 3, Errors: 1, ErrorRate: 1.0 / 3, CostUSD: 0.031, CostPerTurn: 0.031 / 3,
				LatencyP50MS: 200, LatencyP95MS: 300, LatencyP99MS: 300, EvalMean: 0.7, EvalCount: 2},
			{Version: "g2", Turns: 3, Fallbacks: 1, FallbackRate: 1.0 / 3, CostUSD: 0.014, CostPerTurn: 0.014 / 3,
				LatencyP50MS: 700, LatencyP95MS: 5000, LatencyP99MS: 5000, EvalMean: 0.2, EvalCount: 1},
		}},
		{"models, a version never seen", ByModel, "haiku", "opus", [2]CompareSide{
			{Version: "haiku", Turns: 2, Fallbacks: 1, FallbackRate: 0.5, CostUSD: 0.009, CostPerTurn: 0.0045,
				LatencyP50MS: 400, LatencyP95MS: 5000, LatencyP99MS: 5000, EvalMean: 0.2, EvalCount: 1},
			{Version: "opus"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := s.Compare(context.Background(), tt.dim, tt.a, tt.b, t0, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Dim != tt.dim || !rep.From.Equal(t0) || !rep.To.Equal(t0.Add(time.Hour)) {
				t.Errorf("dim %q range %v..%v", rep.Dim, rep.From, rep.To)
			}
			for i, got := range []CompareSide{rep.A, rep.B} {
				want := tt.want[i]
				if !near(got.CostUSD, want.CostUSD) || !near(got.CostPerTurn, want.CostPerTurn) ||
					!near(got.ErrorRate, want.ErrorRate) || !near(got.FallbackRate, want.FallbackRate) || !near(got.EvalMean, want.EvalMean) {
					t.Errorf("side %d = %+v, want %+v", i, got, want)
				}
				got.CostUSD, got.CostPerTurn, got.ErrorRate, got.FallbackRate, got.EvalMean = 0, 0, 0, 0, 0
				want.CostUSD, want.CostPerTurn, want.ErrorRate, want.FallbackRate, want.EvalMean = 0, 0, 0, 0, 0
				if got != want {
					t.Errorf("side %d counts = %+v, want %+v", i, got, want)
				}
			}
		})
	}
	// The turn that started an hour earlier enters with a wider range.
	rep, err := s.Compare(context.Background(), ByPrompt, "p1", "p2", t0.Add(-2*time.Hour), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.A.Turns != 6 || rep.A.LatencyP99MS != 9000 {
		t.Errorf("wider range: %+v, want 6 turns, p99 9000 ms", rep.A)
	}
}

func TestCompareInvalid(t *testing.T) {
	s := openTest(t, ":memory:")
	tests := []struct {
		name, dim, a, b string
		want            string
	}{
		{"unknown dim", "tool", "x", "y", "dim must be"},
		{"missing a", ByPrompt, "", "y", "both versions"},
		{"missing b", ByModel, "x", "", "both versions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Compare(context.Background(), tt.dim, tt.a, tt.b, t0, t0.Add(time.Hour))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		give []int64
		p    float64
		want int64
	}{
		{nil, 50, 0},
		{[]int64{7}, 99, 7},
		{[]int64{1, 2, 3, 4}, 50, 2},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 95, 10},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{[]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, 1},
	}
	for _, tt := range tests {
		if got := percentile(tt.give, tt.p); got != tt.want {
			t.Errorf("percentile(%v, %v) = %d, want %d", tt.give, tt.p, got, tt.want)
		}
	}
}

func TestVersions(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ms := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name     string
		from, to time.Time
		want     VersionsReport
	}{
		{"whole range", t0, t0.Add(time.Hour), VersionsReport{
			Graph: []VersionSeen{{"v17.4", 10, ms(0), ms(61*time.Second + time.Millisecond)}, {"v17.5", 2, ms(2 * time.Second), ms(2*time.Second + time.Millisecond)}},
			Prompt: []VersionSeen{{"faq-v1", 2, ms(3*time.Second + time.Millisecond), ms(61*time.Second + time.Millisecond)},
				{"planner-prompt-v24", 1, ms(2*time.Second + time.Millisecond), ms(2*time.Second + time.Millisecond)},
				{"planner-prompt-v23", 3, ms(time.Millisecond), ms(time.Second + 2*time.Millisecond)}},
			Model: []VersionSeen{{"haiku", 3, ms(time.Second + 2*time.Millisecond), ms(61*time.Second + time.Millisecond)},
				{"sonnet", 3, ms(time.Millisecond), ms(2*time.Second + time.Millisecond)}},
			Tool: []VersionSeen{{"search", 1, ms(2 * time.Millisecond), ms(2 * time.Millisecond)}},
		}},
		{"unaligned range inside the first minute", t0.Add(1500 * time.Millisecond), t0.Add(50 * time.Second), VersionsReport{
			Graph:  []VersionSeen{{"v17.4", 2, ms(3 * time.Second), ms(3*time.Second + time.Millisecond)}, {"v17.5", 2, ms(2 * time.Second), ms(2*time.Second + time.Millisecond)}},
			Prompt: []VersionSeen{{"faq-v1", 1, ms(3*time.Second + time.Millisecond), ms(3*time.Second + time.Millisecond)}, {"planner-prompt-v24", 1, ms(2*time.Second + time.Millisecond), ms(2*time.Second + time.Millisecond)}},
			Model:  []VersionSeen{{"haiku", 1, ms(3*time.Second + time.Millisecond), ms(3*time.Second + time.Millisecond)}, {"sonnet", 1, ms(2*time.Second + time.Millisecond), ms(2*time.Second + time.Millisecond)}},
			Tool:   []VersionSeen{},
		}},
		{"range crossing a minute boundary", t0.Add(30 * time.Second), t0.Add(2 * time.Minute), VersionsReport{
			Graph:  []VersionSeen{{"v17.4", 2, ms(61 * time.Second), ms(61*time.Second + time.Millisecond)}},
			Prompt: []VersionSeen{{"faq-v1", 1, ms(61*time.Second + time.Millisecond), ms(61*time.Second + time.Millisecond)}},
			Model:  []VersionSeen{{"haiku", 1, ms(61*time.Second + time.Millisecond), ms(61*time.Second + time.Millisecond)}},
			Tool:   []VersionSeen{},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Versions(context.Background(), tt.from, tt.to)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// fullSpan sets every field of the schema, so that a round trip through
// the store shows any field lost.
func fullSpan(trace string, i int, at time.Time) events.Event {
	e := events.Event{
		SchemaVersion: events.SchemaVersion, TraceID: trace, SpanID: fmt.Sprintf("%016x", 0xabc0+i),
		ParentSpanID: fmt.Sprintf("%016x", 0xabc0), WorkflowID: "wf-1", UserIDHash: "u_5f2c", SessionID: "s_abc123",
		TSStart: at, TSEnd: at.Add(384 * time.Millisecond), DurationMS: 384, Name: "model_attempt", MustPersist: true,
		Node: events.Node{GraphVersion: "v17.4", NodeID: "Plan", InvocationMode: events.ModeSyncStreaming},
		Artifact: events.Artifact{ArtifactKind: events.KindLLMCall, ModelID: "claude-sonnet-4-6", PromptVersion: "planner-prompt-v23",
			ToolID: "catalog", ToolVersion: "1.2.0", SubAgentID: "recommender", SubAgentVersion: "3"},
		Resource: events.Resource{TokensIn: 4218, TokensOut: 312, CostUSD: 0.00451, CacheHit: events.CachePrefixPartial,
			CapabilityFlagsActive: []string{"adult_ok", "recommend_v2"}},
		Outcome:     events.Outcome{Status: events.StatusFallback, ErrorCode: "throttled", FallbackUsed: "haiku", EvalScore: f64(0.75)},
		Attribution: events.Attribution{Feature: "discovery_recommend", Surface: "ws", Locale: "ko-KR", UserTier: "prime", Priority: "P0"},
	}
	if i == 0 {
		e.Name, e.ParentSpanID, e.MustPersist = "turn", "", false
		e.Outcome = events.Outcome{Status: events.StatusOK}
		e.Resource = events.Resource{}
		e.Artifact = events.Artifact{ArtifactKind: events.KindInternal}
	}
	return e
}

func TestTrace(t *testing.T) {
	s := openTest(t, ":memory:")
	trace := strings.Repeat("7f3a", 8)
	// Children end (and are written) before the root, out of start order.
	in := []events.Event{fullSpan(trace, 2, t0.Add(30*time.Millisecond)), fullSpan(trace, 1, t0.Add(10*time.Millisecond)), fullSpan(trace, 0, t0)}
	if err := s.Write(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	write(t, s, dataset...)
	rep, err := s.Trace(context.Background(), trace)
	if err != nil {
		t.Fatal(err)
	}
	want := []events.Event{in[2], in[1], in[0]}
	if rep.TraceID != trace || len(rep.Spans) != len(want) {
		t.Fatalf("trace %s: %d spans, want 3", rep.TraceID, len(rep.Spans))
	}
	for i := range want {
		w, g := events.Encode(&want[i]), events.Encode(&rep.Spans[i])
		if string(g) != string(w) {
			t.Errorf("span %d:\n got %s\nwant %s", i, g, w)
		}
	}
	// The handler's body is those same encodings.
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/admin/cost/trace/"+trace, nil))
	var body struct {
		TraceID string            `json:"traceId"`
		Spans   []json.RawMessage `json:"spans"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != 200 {
		t.Fatalf("GET trace = %d %s (%v)", rec.Code, rec.Body, err)
	}
	if body.TraceID != trace || len(body.Spans) != 3 || string(body.Spans[0]) != string(events.Encode(&want[0])) {
		t.Errorf("GET trace body = %s", rec.Body)
	}
	if _, err := s.Trace(context.Background(), traceID(99)); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown trace: err = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("A", 32), trace + "0"} {
		if _, err := s.Trace(context.Background(), bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Trace(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// A turn answered by a fallback tier counts as one fallback, however many
// of its spans (the fallback step, the cache miss, the FAQ hit) carry the
// fallback status.
func TestFallbacksCountTurns(t *testing.T) {
	s := openTest(t, ":memory:")
	var all []events.Event
	for n := range 3 {
		ts := turnSpec{n: n, user: "dana", feature: "chat", graph: "v1", at: time.Duration(n) * time.Second,
			spans: []span{{name: "model_attempt", model: "sonnet", failed: true}, {name: "fallback"}, {name: "cache"}, {name: "faq"}}}
		evs := ts.build()
		for i := range evs {
			switch evs[i].Name {
			case "fallback", "cache", "faq":
				evs[i].Outcome.Status = events.StatusFallback
			case "turn":
				evs[i].Outcome.Status = events.StatusFallback
				evs[i].Outcome.FallbackUsed = "faq"
			}
		}
		all = append(all, evs...)
	}
	all = append(all, turnSpec{n: 9, user: "dana", feature: "chat", graph: "v1", spans: []span{{name: "model_attempt", model: "sonnet"}}}.build()...)
	if err := s.Write(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Series(context.Background(), Query{From: t0, To: t0.Add(time.Minute)}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Points[0]; p.Turns != 4 || p.Fallbacks != 3 {
		t.Fatalf("series: %d turns, %d fallbacks; want 4 turns of which 3 fell back", p.Turns, p.Fallbacks)
	}
	tot, err := s.Cost(context.Background(), Query{By: ByTotal, From: t0, To: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(tot.Rows) != 1 || tot.Rows[0].Fallbacks != 3 {
		t.Fatalf("total: %+v; want 3 fallbacks", tot.Rows)
	}
}
