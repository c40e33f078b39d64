package sinks

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/fmgate/fmgate/internal/events"
)

func batch(n, from int) []events.Event {
	out := make([]events.Event, n)
	for i := range out {
		k := from + i
		out[i] = events.Event{
			SchemaVersion: events.SchemaVersion,
			TraceID:       fmt.Sprintf("%032x", 0xabc),
			SpanID:        fmt.Sprintf("%016x", k+1),
			Name:          "model_attempt",
			TSStart:       time.Date(2026, 4, 29, 14, 2, 13, 418e6, time.UTC),
			TSEnd:         time.Date(2026, 4, 29, 14, 2, 13, 802e6, time.UTC),
			DurationMS:    384,
			Artifact:      events.Artifact{ArtifactKind: events.KindLLMCall, ModelID: "claude-sonnet-4-6"},
			Resource:      events.Resource{TokensIn: 4218, TokensOut: 312, CostUSD: 0.00451},
			Outcome:       events.Outcome{Status: events.StatusOK},
		}
		if k > 0 {
			out[i].ParentSpanID = fmt.Sprintf("%016x", 1)
		}
	}
	return out
}

func TestJSONLRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	line := len(events.Encode(&batch(1, 1)[0])) + 1
	s, err := NewJSONL(events.JSONLConfig{Path: path, MaxBytes: int64(3 * line), MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := s.Write(context.Background(), batch(1, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// 10 lines, 3 per file: live holds 1, .1 and .2 hold 3 each, the
	// oldest 3 rotated away.
	wantLines := map[string]int{path: 1, path + ".1": 3, path + ".2": 3}
	for p, want := range wantLines {
		if got := countLines(t, p); got != want {
			t.Errorf("%s: %d lines, want %d", filepath.Base(p), got, want)
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("maxFiles exceeded: %v", err)
	}
	f, _ := os.ReadFile(path)
	ev, err := events.Decode([]byte(strings.TrimSpace(string(f))))
	if err != nil || ev.SpanID != fmt.Sprintf("%016x", 10) {
		t.Errorf("live file holds %+v (%v), want the newest event", ev.SpanID, err)
	}
}

func countLines(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
	}
	return n
}

// otlpReceiver is an OTLP/HTTP trace endpoint that counts spans.
type otlpReceiver struct {
	mu     sync.Mutex
	spans  int
	names  map[string]bool
	parent map[string]string
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans++
				r.names[sp.Name] = true
				r.parent[fmt.Sprintf("%x", sp.SpanId)] = fmt.Sprintf("%x", sp.ParentSpanId)
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func TestOTLPExportsEverySpan(t *testing.T) {
	rcv := &otlpReceiver{names: map[string]bool{}, parent: map[string]string{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()

	s, err := NewOTLP(context.Background(), events.OTLPConfig{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Write(ctx, batch(7, 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, batch(5, 7)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if rcv.spans != 12 {
		t.Errorf("receiver got %d spans, want 12", rcv.spans)
	}
	if got := rcv.parent[fmt.Sprintf("%016x", 5)]; got != fmt.Sprintf("%016x", 1) {
		t.Errorf("parent of span 5 = %q, want our parent id", got)
	}
	if got := rcv.parent[fmt.Sprintf("%016x", 1)]; got != "" {
		t.Errorf("root has parent %q", got)
	}
}

func TestOTLPWriteFailsWhenCollectorDown(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	s, err := NewOTLP(context.Background(), events.OTLPConfig{Endpoint: srv.URL + "/v1/traces"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Write(ctx, batch(1, 0)); err == nil {
		t.Error("want an error from a 503 collector")
	}
}

func TestNATSPublishesToStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	uniq := fmt.Sprintf("%d", time.Now().UnixNano())
	cfg := events.NATSConfig{
		URL:     "nats://127.0.0.1:4222",
		Subject: "fmgate.test." + uniq + ".events",
		Stream:  "FMGATE_TEST_" + uniq,
	}
	s, err := NewNATS(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("NATS must be running at %s: %v", cfg.URL, err)
	}
	nc, err := nats.Connect(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	defer js.DeleteStream(context.Background(), cfg.Stream)

	if err := s.Write(ctx, batch(20, 0)); err != nil {
		t.Fatal(err)
	}
	// A re-send of the same batch is dropped by the duplicate window.
	if err := s.Write(ctx, batch(20, 0)); err != nil {
		t.Fatal(err)
	}
	// A second sink finds the stream already there.
	s2, err := NewNATS(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Write(ctx, batch(5, 20)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*NATS{s, s2} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := js.Stream(ctx, cfg.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages, want 2: each batch packed in one, the re-send dropped", info.State.Msgs)
	}
	msg, err := st.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(msg.Header.Get(events.SpansHeader))
	spans, err := events.DecodePacked(nil, msg.Data, n)
	if err != nil || len(spans) != 20 || spans[0].SpanID != fmt.Sprintf("%016x", 1) || spans[19].SpanID != fmt.Sprintf("%016x", 20) || msg.Subject != cfg.Subject {
		t.Errorf("first message on %s holds %d spans (%v), want the 20 of the first batch in order", msg.Subject, len(spans), err)
	}
}

func TestPackBoundsMessages(t *testing.T) {
	big := batch(1, 7)[0]
	big.PromptExcerpt = strings.Repeat("x", 4000)
	tests := []struct {
		name      string
		give      []events.Event
		limit     int
		wantSpans []int // spans per message; 0 is a plain one-span message
	}{
		{name: "one message", give: batch(300, 0), limit: MaxPackedBytes, wantSpans: []int{300}},
		{name: "span count", give: batch(2500, 0), limit: 64 << 20, wantSpans: []int{MaxPackedSpans, MaxPackedSpans, 500}},
		{name: "bytes", give: batch(10, 1), limit: 3 * events.PackedSize(len(events.Encode(&batch(1, 1)[0]))), wantSpans: []int{3, 3, 3, 1}},
		{name: "a span larger than a message goes alone, plain", give: append(append(batch(2, 0), big), batch(2, 2)...), limit: 2000,
			wantSpans: []int{2, 0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := pack("s", tt.give, tt.limit)
			var got []int
			var all []events.Event
			for _, m := range msgs {
				if len(m.msg.Data) > tt.limit && m.msg.Header.Get(events.SpansHeader) != "" {
					t.Errorf("packed message of %d bytes, limit %d", len(m.msg.Data), tt.limit)
				}
				h := m.msg.Header.Get(events.SpansHeader)
				if h == "" {
					e, err := events.Decode(m.msg.Data)
					if err != nil || m.id != e.ID() {
						t.Fatalf("plain message %q (id %s): %v", m.msg.Data, m.id, err)
					}
					got, all = append(got, 0), append(all, e)
					continue
				}
				n, _ := strconv.Atoi(h)
				spans, err := events.DecodePacked(nil, m.msg.Data, n)
				if err != nil {
					t.Fatal(err)
				}
				got, all = append(got, n), append(all, spans...)
			}
			if !slices.Equal(got, tt.wantSpans) {
				t.Errorf("spans per message %v, want %v", got, tt.wantSpans)
			}
			if len(all) != len(tt.give) {
				t.Fatalf("messages hold %d spans, want %d", len(all), len(tt.give))
			}
			for i := range all {
				if all[i].ID() != tt.give[i].ID() {
					t.Fatalf("span %d is %s, want %s: order lost", i, all[i].ID(), tt.give[i].ID())
				}
			}
		})
	}
}

func TestPackMessageIDs(t *testing.T) {
	a := pack("s", batch(10, 0), MaxPackedBytes)
	again := pack("s", batch(10, 0), MaxPackedBytes)
	other := pack("s", batch(10, 1), MaxPackedBytes)
	if len(a) != 1 || a[0].id != again[0].id {
		t.Errorf("the same batch packed twice has ids %s and %s, want one", a[0].id, again[0].id)
	}
	if a[0].id == other[0].id {
		t.Errorf("different spans share the message id %s", a[0].id)
	}
	if got := packedLimit(1 << 20); got != MaxPackedBytes {
		t.Errorf("packedLimit(1 MiB) = %d, want %d", got, MaxPackedBytes)
	}
	if got := packedLimit(64 << 10); got >= 64<<10 {
		t.Errorf("packedLimit(64 KiB) = %d, leaves no room for the headers", got)
	}
}

func TestEmitterWithSinksEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfg := events.DefaultConfig()
	cfg.Sinks.JSONL.Path = filepath.Join(dir, "events.jsonl")
	cfg.WAL.Dir = filepath.Join(dir, "wal")
	sinks, err := FromConfig(context.Background(), cfg.Sinks, nil)
	if err != nil {
		t.Fatal(err)
	}
	em, err := events.New(context.Background(), cfg, sinks, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := events.NewTracer(em, cfg.TracerOptions())
	ctx, turn := tr.Start(context.Background(), "turn")
	turn.SetUser("taro@example.jp")
	turn.SetExcerpt("taro@example.jp") // excerpts are off by default
	_, m := tr.Start(ctx, "model_attempt", events.WithMustPersist())
	m.End()
	turn.End()
	if err := em.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(cfg.Sinks.JSONL.Path)
	if n := strings.Count(string(b), "\n"); n != 2 {
		t.Errorf("jsonl has %d lines, want 2", n)
	}
	if strings.Contains(string(b), "taro") {
		t.Errorf("raw user id reached the file: %s", b)
	}
}

// genAIReceiver keeps the attributes of the spans it receives, by name.
type genAIReceiver struct {
	mu    sync.Mutex
	spans map[string]map[string]*commonpb.AnyValue
	kinds map[string]tracepb.Span_SpanKind
	// events are the span events of each span, by span name.
	events map[string][]*tracepb.Span_Event
}

func (r *genAIReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	var msg coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range msg.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				attrs := map[string]*commonpb.AnyValue{}
				for _, kv := range sp.Attributes {
					attrs[kv.Key] = kv.Value
				}
				r.spans[sp.Name], r.kinds[sp.Name] = attrs, sp.Kind
				if r.events != nil {
					r.events[sp.Name] = sp.Events
				}
			}
		}
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestOTLPModelAttemptsFollowTheGenAIConventions: a collector receives a
// model attempt as OpenTelemetry's GenAI conventions name one — a client
// span "chat MODEL" with gen_ai.* attributes of the conventions' types —
// beside its fmgate.* attributes; other spans keep their own names.
func TestOTLPModelAttemptsFollowTheGenAIConventions(t *testing.T) {
	rcv := &genAIReceiver{spans: map[string]map[string]*commonpb.AnyValue{}, kinds: map[string]tracepb.Span_SpanKind{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	s, err := NewOTLP(context.Background(), events.OTLPConfig{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Insecure: true,
		Providers: func(tier string) string { return map[string]string{"sonnet": "aws.bedrock"}[tier] }})
	if err != nil {
		t.Fatal(err)
	}
	b := batch(2, 0)
	b[0].Name, b[0].Artifact = "turn", events.Artifact{ArtifactKind: events.KindInternal}
	b[1].Node.NodeID = "sonnet"
	b[1].Resource.TokensCacheRead, b[1].Resource.TokensCacheWrite = 3000, 200
	b[1].Outcome.StopReason = "tool_use"
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	attempt, ok := rcv.spans["chat claude-sonnet-4-6"]
	if !ok || rcv.kinds["chat claude-sonnet-4-6"] != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("spans %v: want the attempt as a client span named \"chat claude-sonnet-4-6\"", rcv.kinds)
	}
	str := func(k string) string { return attempt[k].GetStringValue() }
	num := func(k string) int64 {
		if _, isInt := attempt[k].GetValue().(*commonpb.AnyValue_IntValue); !isInt {
			t.Errorf("%s is %v, want an integer", k, attempt[k])
		}
		return attempt[k].GetIntValue()
	}
	if str("gen_ai.operation.name") != "chat" || str("gen_ai.provider.name") != "aws.bedrock" ||
		str("gen_ai.request.model") != "claude-sonnet-4-6" || str("gen_ai.response.model") != "claude-sonnet-4-6" {
		t.Errorf("gen_ai string attributes %v", attempt)
	}
	if num("gen_ai.usage.input_tokens") != 4218 || num("gen_ai.usage.output_tokens") != 312 ||
		num("gen_ai.usage.cache_read.input_tokens") != 3000 || num("gen_ai.usage.cache_creation.input_tokens") != 200 {
		t.Errorf("gen_ai usage attributes %v", attempt)
	}
	if attempt["fmgate.resource.cost_usd"] == nil {
		t.Error("the fmgate.* attributes are gone")
	}
	if r := attempt["gen_ai.response.finish_reasons"].GetArrayValue().GetValues(); len(r) != 1 || r[0].GetStringValue() != "tool_call" {
		t.Errorf("gen_ai.response.finish_reasons %v, want [tool_call]", r)
	}
	if turn, ok := rcv.spans["turn"]; !ok || turn["gen_ai.operation.name"] != nil {
		t.Errorf("the turn span: %v, want it named turn and without gen_ai attributes", turn)
	}
}

// TestOTLPContentEventsOnlyWhereCaptured: a model attempt that carries its
// content reaches the collector with one gen_ai.client.inference.operation.details
// event whose gen_ai.input.messages and gen_ai.output.messages are the
// conventions' JSON; an attempt without it has no event and no text; a
// tool the gateway ran is an execute_tool span.
func TestOTLPContentEventsOnlyWhereCaptured(t *testing.T) {
	rcv := &genAIReceiver{spans: map[string]map[string]*commonpb.AnyValue{}, kinds: map[string]tracepb.Span_SpanKind{},
		events: map[string][]*tracepb.Span_Event{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	s, err := NewOTLP(context.Background(), events.OTLPConfig{Endpoint: strings.TrimPrefix(srv.URL, "http://"), Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	b := batch(3, 0)
	b[0].Artifact.ModelID = "captured-model"
	b[0].Content = &events.Content{
		Input: []events.ContentMessage{{Role: "user", Parts: []events.ContentPart{{Type: "text", Content: "おすすめは？ [CARD]"}}}},
		Output: []events.ContentMessage{{Role: "assistant", FinishReason: "tool_call", Parts: []events.ContentPart{
			{Type: "text", Content: "Let me look."}, {Type: "tool_call", ID: "c1", Name: "search", Arguments: json.RawMessage(`{"q":"frieren"}`)}}}},
	}
	b[1].Artifact.ModelID = "plain-model"
	b[2].Name, b[2].Artifact = "retrieve", events.Artifact{ArtifactKind: events.KindToolCall, ToolID: "catalog_search", ToolVersion: "bleve-v2"}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	evs := rcv.events["chat captured-model"]
	if len(evs) != 1 || evs[0].Name != "gen_ai.client.inference.operation.details" {
		t.Fatalf("events of the captured attempt: %v", evs)
	}
	attrs := map[string]string{}
	for _, kv := range evs[0].Attributes {
		attrs[kv.Key] = kv.Value.GetStringValue()
	}
	var in, out []map[string]any
	if err := json.Unmarshal([]byte(attrs["gen_ai.input.messages"]), &in); err != nil || len(in) != 1 || in[0]["role"] != "user" ||
		in[0]["parts"].([]any)[0].(map[string]any)["content"] != "おすすめは？ [CARD]" {
		t.Errorf("gen_ai.input.messages %s (%v)", attrs["gen_ai.input.messages"], err)
	}
	if err := json.Unmarshal([]byte(attrs["gen_ai.output.messages"]), &out); err != nil || len(out) != 1 || out[0]["finish_reason"] != "tool_call" {
		t.Fatalf("gen_ai.output.messages %s (%v)", attrs["gen_ai.output.messages"], err)
	}
	call := out[0]["parts"].([]any)[1].(map[string]any)
	if call["type"] != "tool_call" || call["name"] != "search" || call["arguments"].(map[string]any)["q"] != "frieren" {
		t.Errorf("the tool call part %v", call)
	}
	if evs := rcv.events["chat plain-model"]; len(evs) != 0 {
		t.Errorf("an attempt without captured content carries events %v", evs)
	}
	for name, a := range rcv.spans {
		for k, v := range a {
			if strings.Contains(v.String(), "おすすめ") && name != "chat captured-model" {
				t.Errorf("span %s attribute %s carries the text", name, k)
			}
		}
	}
	tool, ok := rcv.spans["execute_tool catalog_search"]
	if !ok || tool["gen_ai.operation.name"].GetStringValue() != "execute_tool" || tool["gen_ai.tool.name"].GetStringValue() != "catalog_search" ||
		tool["gen_ai.tool.type"].GetStringValue() != "datastore" || rcv.kinds["execute_tool catalog_search"] != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("the catalog search's span: %v (spans %v)", tool, rcv.kinds)
	}
}
