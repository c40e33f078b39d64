package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// TestTraceparentPropagates: every chat response — /v1/chat as JSON and
// as SSE, and each vendor front door — carries the turn's traceparent; an
// incoming traceparent's trace and sampled flag are continued; and the
// upstream model call carries the model attempt's traceparent, a child of
// the turn in the same trace with the same flag, through the vendor SDK.
func TestTraceparentPropagates(t *testing.T) {
	cfg := fastConfig()
	up, err := sim.New(cfg.SimConfig(), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := simserver.NewRecorder(0)
	upstream := httptest.NewServer(rec.Wrap(simserver.Handler(up)))
	t.Cleanup(upstream.Close)
	cfg.Models[0].Provider = "openai"
	cfg.Models[0].Endpoint = upstream.URL + "/v1"
	primary, primaryID := cfg.Models[0].Name, cfg.Models[0].ModelID
	_, srv := startServer(t, cfg)

	msgs := `[{"role":"user","content":"Recommend a fantasy manga"}]`
	tests := []struct {
		name, path, body string
	}{
		{"chat json", "/v1/chat", `{"sessionId":"s-tp","message":"Recommend a fantasy manga","locale":"en"}`},
		{"chat sse", "/v1/chat", `{"sessionId":"s-tp","message":"Recommend a fantasy manga","locale":"en","stream":true}`},
		{"openai door", "/v1/chat/completions", `{"model":"` + primary + `","messages":` + msgs + `}`},
		{"openai door stream", "/v1/chat/completions", `{"model":"` + primary + `","stream":true,"messages":` + msgs + `}`},
		{"anthropic door", "/v1/messages", `{"model":"` + primary + `","max_tokens":200,"messages":` + msgs + `}`},
		{"anthropic door stream", "/v1/messages", `{"model":"` + primary + `","max_tokens":200,"stream":true,"messages":` + msgs + `}`},
		{"bedrock door", "/model/" + primaryID + "/converse", `{"messages":[{"role":"user","content":[{"text":"Recommend a fantasy manga"}]}]}`},
		{"bedrock door stream", "/model/" + primaryID + "/converse-stream", `{"messages":[{"role":"user","content":[{"text":"Recommend a fantasy manga"}]}]}`},
	}
	for _, tt := range tests {
		for _, incoming := range []string{
			"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"00-5cf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
			"",
		} {
			t.Run(tt.name+"/"+incoming, func(t *testing.T) {
				calls := len(rec.Last())
				req, _ := http.NewRequest(http.MethodPost, srv.URL+tt.path, strings.NewReader(tt.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-User-Id", "tp-user")
				if incoming != "" {
					req.Header.Set("traceparent", incoming)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				turn, ok := events.ParseTraceparent(resp.Header.Get("traceparent"))
				if !ok {
					t.Fatalf("response traceparent %q is not valid", resp.Header.Get("traceparent"))
				}
				if in, ok := events.ParseTraceparent(incoming); ok {
					if turn.TraceID != in.TraceID || turn.Flags != in.Flags || turn.SpanID == in.SpanID {
						t.Errorf("response traceparent %s does not continue %s as the turn's span", resp.Header.Get("traceparent"), incoming)
					}
				}
				got := rec.Last()[calls:]
				if len(got) == 0 {
					t.Fatal("the upstream got no call")
				}
				for _, c := range got {
					a, ok := events.ParseTraceparent(c.Traceparent)
					if !ok || a.TraceID != turn.TraceID || a.Flags != turn.Flags || a.SpanID == turn.SpanID {
						t.Errorf("upstream call %s got traceparent %q; want a span of trace %s with flags %02x", c.Path, c.Traceparent, turn.TraceHex(), turn.Flags)
					}
				}
			})
		}
	}
}
