package events

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// variedEvents covers every optional key and value shape AppendJSON writes.
func variedEvents() []Event {
	score := 0.75
	full := event(3, true)
	full.ParentSpanID = "00000000000000aa"
	full.WorkflowID, full.UserIDHash, full.SessionID = "wf", "u1", "s1"
	full.DurationMS, full.Name = 1234, "turn"
	full.PromptExcerpt, full.SampledOut = "ワンピース 108 巻", true
	full.Node = Node{GraphVersion: "g1", NodeID: "n", InvocationMode: ModeSyncStreaming}
	full.Artifact = Artifact{ArtifactKind: KindLLMCall, ModelID: "sonnet", PromptVersion: "p2", ToolID: "t", ToolVersion: "1",
		SubAgentID: "a", SubAgentVersion: "2"}
	full.Resource = Resource{TokensIn: 4218, TokensOut: -1, CostUSD: 1.5e-9, CacheHit: CachePrefixPartial,
		TokensCacheRead: 3000, TokensCacheWrite: 200, CacheSavedUSD: -2.5e-4,
		CapabilityFlagsActive: []string{"a", "b"}, ToolCalls: 2, ToolNames: []string{"get_weather", "get_time"}, Images: 3, ImageBytes: 123456,
		ImageTokens: 640, ImageCostUSD: 0.00192}
	full.Outcome = Outcome{Status: StatusFailed, ErrorCode: "throttled", FallbackUsed: "haiku", EvalScore: &score, VendorCode: "X", StopReason: "end_turn"}
	full.Attribution = Attribution{Feature: "chat", Surface: "web", Locale: "ja-JP", UserTier: "free", Priority: "P0"}
	zeroTime := event(4, false)
	zeroTime.TSStart, zeroTime.TSEnd = time.Time{}, time.Time{}
	big := event(5, false)
	big.Resource.CostUSD = 3e22
	big.TSStart = time.Date(1969, 12, 31, 23, 59, 59, 999e6, time.UTC)
	return []Event{event(1, false), full, zeroTime, big, {}}
}

func TestDecodeCanonicalMatchesEncodingJSON(t *testing.T) {
	for i, e := range variedEvents() {
		enc := Encode(&e)
		var fast Event
		if !decodeCanonical(enc, &fast) {
			t.Fatalf("event %d: %s not taken by the canonical decoder", i, enc)
		}
		var slow Event
		if err := json.Unmarshal(enc, &slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("event %d: canonical decoder %+v, encoding/json %+v", i, fast, slow)
		}
	}
}

func TestDecodeFallsBackOnOtherShapes(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "escaped string", give: `{"schema_version":3,"trace_id":"a\"b"}`},
		{name: "whitespace", give: `{ "schema_version": 3, "trace_id": "x" }`},
		{name: "other key order", give: `{"trace_id":"x","schema_version":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e Event
			if decodeCanonical([]byte(tt.give), &e) {
				t.Fatal("canonical decoder took a non-canonical event")
			}
			got, err := Decode([]byte(tt.give))
			var want Event
			werr := json.Unmarshal([]byte(tt.give), &want)
			if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode = %+v, %v; encoding/json %+v, %v", got, err, want, werr)
			}
		})
	}
}

// FuzzDecodeCanonical: whatever the canonical decoder takes, encoding/json
// decodes to the same event.
func FuzzDecodeCanonical(f *testing.F) {
	for _, e := range variedEvents() {
		f.Add(Encode(&e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast Event
		if !decodeCanonical(b, &fast) {
			return
		}
		var slow Event
		if err := json.Unmarshal(b, &slow); err != nil {
			t.Fatalf("canonical decoder took %q, encoding/json refuses it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: canonical decoder %+v, encoding/json %+v", b, fast, slow)
		}
	})
}

func BenchmarkDecode(b *testing.B) {
	e := variedEvents()[1]
	enc := Encode(&e)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParseUTCMillisMatchesTimeParse(t *testing.T) {
	for _, s := range []string{
		"2026-11-27T06:49:23.123Z", "1969-12-31T23:59:59.999Z", "0000-01-01T00:00:00.000Z", "9999-12-31T23:59:59.999Z",
		"2024-02-29T12:00:00.000Z", "2025-02-29T12:00:00.000Z", "2026-04-31T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
		"2026-00-10T00:00:00.000Z", "2026-01-00T00:00:00.000Z", "2026-01-01T24:00:00.000Z", "2026-01-01T00:60:00.000Z",
		"2026-01-01T00:00:60.000Z", "2026-01-01T00:00:00.00xZ", "2026-01-01T00:00:00.000+", "2026-01-01 00:00:00.000Z",
		"+026-01-01T00:00:00.000Z",
	} {
		got, ok := parseUTCMillis([]byte(s))
		want, err := time.Parse(timeLayout, s)
		canonical := err == nil && want.Format(timeLayout) == s
		if ok != canonical || ok && !reflect.DeepEqual(got, want) {
			t.Errorf("%s: parseUTCMillis = %v, %v; time.Parse = %v, %v (canonical %v)", s, got, ok, want, err, canonical)
		}
	}
}

func BenchmarkDecodePacked(b *testing.B) {
	var batch []byte
	for i := range 1000 {
		e := variedEvents()[1]
		e.SpanID = strconv.Itoa(i)
		batch = AppendPacked(batch, Encode(&e))
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(batch)))
	var dst []Event
	for b.Loop() {
		var err error
		if dst, err = DecodePacked(dst[:0], batch, 1000); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/span")
}
