package eventstore

import (
	"bufio"
	"encoding/hex"
	"os"
	"slices"
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
		{"prompt cache read and written", withCache(full, 3000, 200, 0.0071)},
		{"prompt cache written only, a loss", withCache(full, 0, 4000, -0.0042)},
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

// withCache returns e with the prompt cache's figures set.
func withCache(e events.Event, read, write int, saved float64) events.Event {
	e.Resource.TokensCacheRead, e.Resource.TokensCacheWrite, e.Resource.CacheSavedUSD = read, write, saved
	return e
}

// tallyOf is what a tally of e reads as: the figures the views sum, group
// and filter on, without the span's ids and other details.
func tallyOf(e events.Event) events.Event {
	t := events.Event{SchemaVersion: events.SchemaVersion, TraceID: e.TraceID, WorkflowID: e.TraceID,
		UserIDHash: e.UserIDHash, SessionID: e.SessionID, TSStart: e.TSStart, DurationMS: e.DurationMS,
		TSEnd: e.TSStart.Add(time.Duration(e.DurationMS) * time.Millisecond), Name: e.Name}
	t.Node.GraphVersion = e.Node.GraphVersion
	t.Artifact = events.Artifact{ModelID: e.Artifact.ModelID, PromptVersion: e.Artifact.PromptVersion, ToolID: e.Artifact.ToolID}
	r := &e.Resource
	t.Resource = events.Resource{TokensIn: r.TokensIn, TokensOut: r.TokensOut, CostUSD: r.CostUSD,
		TokensCacheRead: r.TokensCacheRead, TokensCacheWrite: r.TokensCacheWrite, CacheSavedUSD: r.CacheSavedUSD}
	t.Outcome = events.Outcome{Status: e.Outcome.Status, FallbackUsed: e.Outcome.FallbackUsed, EvalScore: e.Outcome.EvalScore}
	a := &e.Attribution
	t.Attribution = events.Attribution{Feature: a.Feature, Surface: a.Surface, Locale: a.Locale, UserTier: a.UserTier}
	return t
}

func TestTallyRoundTrip(t *testing.T) {
	full := fullSpan(strings.Repeat("7f3a", 8), 1, t0.Add(123*time.Millisecond))
	noEval := full
	noEval.Outcome.EvalScore = nil
	tests := []struct {
		name string
		give events.Event
	}{
		{"with an eval score", full},
		{"without an eval score", noEval},
		{"prompt cache and an eval score", withCache(full, 3000, 200, 0.0071)},
		{"prompt cache without an eval score", withCache(noEval, 0, 4000, -0.0042)},
		{"prompt cache saving only", withCache(noEval, 0, 0, 1e-7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := encodeTally(nil, &tt.give)
			var (
				d   spanDecoder
				got events.Event
			)
			if err := d.decode(rec, unixMilli(tt.give.TSStart), &got); err != nil {
				t.Fatal(err)
			}
			want := tallyOf(tt.give)
			if g, w := events.Encode(&got), events.Encode(&want); string(g) != string(w) {
				t.Errorf("round trip:\n got %s\nwant %s", g, w)
			}
			for cut := range rec {
				if err := d.decode(rec[:cut], 0, &got); err == nil {
					t.Errorf("a tally cut at %d of %d decoded", cut, len(rec))
				}
			}
		})
	}
	// A flag byte with a bit no layout defines is corrupt, not skipped.
	rec := encodeTally(nil, &noEval)
	i := strings.Index(string(rec), "\x0ahaiku\x00") + len("\x0ahaiku")
	rec[i] = 4
	var d spanDecoder
	if err := d.decode(rec, 0, new(events.Event)); err == nil {
		t.Error("a tally with an unknown flag decoded")
	}
}

// TestCodecReadsOldRecords decodes span records and tallies written before
// spans carried the prompt cache's figures: they read as they did, with no
// cache figures, and a span without them is still written byte for byte
// the same.
func TestCodecReadsOldRecords(t *testing.T) {
	full := fullSpan(strings.Repeat("7f3a", 8), 1, t0.Add(123*time.Millisecond))
	noEval := full
	noEval.Outcome.EvalScore = nil
	tests := map[string]struct {
		encode func(*events.Event) []byte
		give   events.Event
		want   events.Event
	}{
		"span":          {func(e *events.Event) []byte { return encodeSpan(nil, e) }, full, full},
		"tally":         {func(e *events.Event) []byte { return encodeTally(nil, e) }, full, tallyOf(full)},
		"tally-no-eval": {func(e *events.Event) []byte { return encodeTally(nil, e) }, noEval, tallyOf(noEval)},
	}
	f, err := os.Open("testdata/records-before-cache.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		name, hexRec, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		tt, known := tests[name]
		if !known {
			t.Fatalf("testdata has a record %q the test does not know", name)
		}
		seen++
		rec, err := hex.DecodeString(hexRec)
		if err != nil {
			t.Fatal(err)
		}
		var (
			d   spanDecoder
			got events.Event
		)
		if err := d.decode(rec, unixMilli(tt.give.TSStart), &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if g, w := events.Encode(&got), events.Encode(&tt.want); string(g) != string(w) {
			t.Errorf("%s:\n got %s\nwant %s", name, g, w)
		}
		if now := tt.encode(&tt.give); string(now) != string(rec) {
			t.Errorf("%s without cache figures is now written as %x, was %x", name, now, rec)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(tests) {
		t.Fatalf("testdata has %d of the %d records", seen, len(tests))
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
	f.Add("0123456789abcdef0123456789abcdef", "00f067aa0ba902b7", "turn", "claude", 12, 0.5, int64(1700000000000), true, 0)
	f.Add("", "", "", "", 0, 0.0, int64(0), false, 0)
	f.Add("0123456789abcdef0123456789abcdef", "00f067aa0ba902b7", "model_attempt", "claude", 4000, 0.01, int64(1700000000000), false, 3500)
	f.Fuzz(func(t *testing.T, trace, span, name, model string, tokens int, cost float64, ts int64, eval bool, cached int) {
		e := events.Event{SchemaVersion: 3, TraceID: trace, SpanID: span, Name: name, WorkflowID: span,
			Artifact: events.Artifact{ModelID: model}, Resource: events.Resource{TokensIn: tokens, CostUSD: cost,
				TokensCacheRead: cached, TokensCacheWrite: tokens - cached, CacheSavedUSD: cost / 2,
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

// FuzzEachRecord: a stored row, packed or not, is read without a panic,
// and every record of a packed row lies inside it.
func FuzzEachRecord(f *testing.F) {
	var p packer
	p.begin(nil, 100, 2)
	p.add([]byte{codecTally, 1, 2}, 105)
	p.add([]byte{codecVersion, 3}, 99)
	f.Add(p.b)
	f.Add([]byte{codecPack, 1, 0, 9, 1})
	f.Add([]byte{codecPack, 200})
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = eachRecord(data, 0, func(rec []byte, _ int64) error {
			if len(rec) > len(data) {
				t.Fatalf("a record of %d bytes in a row of %d", len(rec), len(data))
			}
			return nil
		})
	})
}

func TestEachRecordReadsAPackedRow(t *testing.T) {
	var p packer
	p.begin(nil, 1000, 2)
	p.add([]byte{codecVersion, 7}, 1000)
	p.add([]byte{codecTally, 8, 9}, 1012)
	type got struct {
		rec string
		ts  int64
	}
	var all []got
	if err := eachRecord(p.b, 1000, func(rec []byte, ts int64) error {
		all = append(all, got{string(rec), ts})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []got{{string([]byte{codecVersion, 7}), 1000}, {string([]byte{codecTally, 8, 9}), 1012}}
	if !slices.Equal(all, want) {
		t.Fatalf("records %v, want %v", all, want)
	}
	if err := eachRecord(p.b[:len(p.b)-1], 1000, func([]byte, int64) error { return nil }); err == nil {
		t.Fatal("a cut packed row read without an error")
	}
}
