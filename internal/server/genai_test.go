package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
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
