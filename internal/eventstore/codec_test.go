package eventstore

import (
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

func TestCodecRoundTrip(t *testing.T) {
	full := fullSpan(strings.Repeat("7f3a", 8), 1, t0.Add(123*time.Millisecond))
	full.PromptExcerpt = "おすすめの漫画は？ [redacted]"
	tests := []struct {
		name string
		give events.Event
	}{
		{"every field", full},
		{"root span", fullSpan(strings.Repeat("7f3a", 8), 0, t0)},
		{"empty", events.Event{}},
		{"no end, workflow of its own, odd-length and uppercase hex", events.Event{
			SchemaVersion: 3, TraceID: "ABCDEF", SpanID: "abc", WorkflowID: "wf", TSStart: t0,
			Resource: events.Resource{TokensIn: -1, CostUSD: 1e-9, CapabilityFlagsActive: []string{""}}}},
		{"end before start", events.Event{TSStart: t0, TSEnd: t0.Add(-time.Second), DurationMS: -1000}},
		{"no start", events.Event{TSEnd: t0, Name: "turn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := encodeSpan(nil, &tt.give)
			var (
				d   spanDecoder
				got events.Event
			)
			if err := d.decode(rec, unixMilli(tt.give.TSStart), &got); err != nil {
				t.Fatal(err)
			}
			if g, w := events.Encode(&got), events.Encode(&tt.give); string(g) != string(w) {
				t.Errorf("round trip:\n got %s\nwant %s", g, w)
			}
			skip := spanDecoder{skipIDs: true}
			if err := skip.decode(rec, unixMilli(tt.give.TSStart), &got); err != nil {
				t.Fatal(err)
			}
			want := tt.give
			want.TraceID, want.SpanID, want.ParentSpanID, want.WorkflowID, want.UserIDHash, want.SessionID, want.PromptExcerpt = "", "", "", "", "", "", ""
			if g, w := events.Encode(&got), events.Encode(&want); string(g) != string(w) {
				t.Errorf("without ids:\n got %s\nwant %s", g, w)
			}
			for cut := range rec {
				if err := d.decode(rec[:cut], 0, &got); err == nil {
					t.Errorf("a record cut at %d of %d decoded", cut, len(rec))
				}
			}
		})
	}
}

func TestCodecIsCompact(t *testing.T) {
	e := fullSpan(strings.Repeat("7f3a", 8), 1, t0)
	rec, js := encodeSpan(nil, &e), events.Encode(&e)
	if len(rec)*2 > len(js) {
		t.Errorf("record %d bytes, JSON %d: want under half", len(rec), len(js))
	}
}

func FuzzCodec(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef", "00f067aa0ba902b7", "turn", "claude", 12, 0.5, int64(1700000000000), true)
	f.Add("", "", "", "", 0, 0.0, int64(0), false)
	f.Fuzz(func(t *testing.T, trace, span, name, model string, tokens int, cost float64, ts int64, eval bool) {
		e := events.Event{SchemaVersion: 3, TraceID: trace, SpanID: span, Name: name, WorkflowID: span,
			Artifact: events.Artifact{ModelID: model}, Resource: events.Resource{TokensIn: tokens, CostUSD: cost,
				CapabilityFlagsActive: []string{model, name}}}
		if ts > 0 && ts < 1<<50 {
			e.TSStart = time.UnixMilli(ts)
			e.TSEnd = e.TSStart.Add(time.Duration(tokens) * time.Millisecond)
		}
		if eval {
			e.Outcome.EvalScore = &cost
		}
		rec := encodeSpan(nil, &e)
		var (
			d   spanDecoder
			got events.Event
		)
		if err := d.decode(rec, unixMilli(e.TSStart), &got); err != nil {
			t.Fatal(err)
		}
		if g, w := events.Encode(&got), events.Encode(&e); string(g) != string(w) {
			t.Fatalf("round trip:\n got %s\nwant %s", g, w)
		}
		// Whatever the bytes, decoding never panics.
		d.decode([]byte(trace+span), 0, &got)
	})
}
