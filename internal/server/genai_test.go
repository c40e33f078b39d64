package server

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestTurnsReachOTLPAsGenAICalls: a turn's model attempt reaches an OTLP
// collector as a GenAI chat span naming the tier's model and its vendor.
func TestTurnsReachOTLPAsGenAICalls(t *testing.T) {
	var mu sync.Mutex
	attrs := map[string]map[string]string{} // span name → string attributes
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var msg coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &msg); err == nil {
			mu.Lock()
			for _, rs := range msg.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					for _, sp := range ss.Spans {
						m := map[string]string{}
						for _, kv := range sp.Attributes {
							m[kv.Key] = kv.Value.GetStringValue()
						}
						attrs[sp.Name] = m
					}
				}
			}
			mu.Unlock()
		}
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer collector.Close()
	cfg := quickConfig()
	cfg.Events.Sinks.OTLP.Endpoint = strings.TrimPrefix(collector.URL, "http://")
	cfg.Events.Sinks.OTLP.Insecure = true
	cfg.Events.Sampling.Rate = 1 // every trace exported, not the sampled share
	sc := newScenario(t, cfg)
	if a := sc.chat("otel-user", "Recommend a fantasy manga", "en"); a.Status != http.StatusOK {
		t.Fatalf("turn: %d", a.Status)
	}
	name := "chat " + cfg.Models[0].ModelID
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mu.Lock()
		got, ok := attrs[name]
		mu.Unlock()
		if ok {
			if got["gen_ai.provider.name"] != "fmgate.sim" || got["gen_ai.request.model"] != cfg.Models[0].ModelID {
				t.Fatalf("%s: %v", name, got)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no span %q reached the collector; got %v", name, attrs)
		}
	}
}

// TestOTLPContentOnlyForLoggedTurns: with payloadLog.captureContent on, a
// turn whose payload is logged reaches the collector with its prompt
// (redacted) and answer as the GenAI conventions' content event on its
// model attempt; a turn of a key that logs nothing carries no text. With
// captureContent off no turn does.
func TestOTLPContentOnlyForLoggedTurns(t *testing.T) {
	for _, capture := range []bool{true, false} {
		var mu sync.Mutex
		events := map[string][]*tracepb.Span_Event{} // trace id → the events of its model attempts
		attempts := map[string]int{}
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			var msg coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &msg); err == nil {
				mu.Lock()
				for _, rs := range msg.ResourceSpans {
					for _, ss := range rs.ScopeSpans {
						for _, sp := range ss.Spans {
							if strings.HasPrefix(sp.Name, "chat ") {
								trace := hex.EncodeToString(sp.TraceId)
								attempts[trace]++
								events[trace] = append(events[trace], sp.Events...)
							}
						}
					}
				}
				mu.Unlock()
			}
			out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write(out)
		}))
		cfg := payloadConfig(t)
		cfg.PayloadLog.CaptureContent = capture
		cfg.Events.Sinks.OTLP.Endpoint = strings.TrimPrefix(collector.URL, "http://")
		cfg.Events.Sinks.OTLP.Insecure = true
		cfg.Events.Sampling.Rate = 1
		sc := newScenario(t, cfg)
		logged := shopTurn(t, sc.srv.URL, shopKey, "s1", "Recommend a fantasy manga; card 4111 1111 1111 1111")
		plain := shopTurn(t, sc.srv.URL, otherKey, "s2", "Recommend a fantasy manga; card 4111 1111 1111 1111")
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			n := attempts[logged.TraceID] + attempts[plain.TraceID]
			mu.Unlock()
			if n >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the model attempts did not reach the collector: %v", attempts)
			}
		}
		sc.s.Close() // every span exported
		collector.Close()
		mu.Lock()
		got, none := events[logged.TraceID], events[plain.TraceID]
		mu.Unlock()
		if len(none) != 0 {
			t.Errorf("capture %v: a turn not logged carries content events %v", capture, none)
		}
		if !capture {
			if len(got) != 0 {
				t.Errorf("captureContent off: a logged turn carries content events %v", got)
			}
			continue
		}
		if len(got) != 1 || got[0].Name != "gen_ai.client.inference.operation.details" {
			t.Fatalf("the logged turn's attempt events: %v", got)
		}
		attrs := map[string]string{}
		for _, kv := range got[0].Attributes {
			attrs[kv.Key] = kv.Value.GetStringValue()
		}
		in, out := attrs["gen_ai.input.messages"], attrs["gen_ai.output.messages"]
		if !strings.Contains(in, `[CARD]`) || strings.Contains(in, "4111") || !strings.Contains(in, `"role":"user"`) {
			t.Errorf("gen_ai.input.messages %s: want the question as the model saw it", in)
		}
		var msgs []struct {
			Role         string `json:"role"`
			FinishReason string `json:"finish_reason"`
			Parts        []struct {
				Type, Content string
			} `json:"parts"`
		}
		if err := json.Unmarshal([]byte(out), &msgs); err != nil || len(msgs) != 1 || msgs[0].Role != "assistant" ||
			msgs[0].FinishReason != "stop" || len(msgs[0].Parts) == 0 || msgs[0].Parts[0].Content != logged.Text {
			t.Errorf("gen_ai.output.messages %s (%v): want the answer the client got", out, err)
		}
	}
}
