package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// bodies keeps the body of every request an upstream got.
type bodies struct {
	mu  sync.Mutex
	got [][]byte
}

func (b *bodies) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.got = append(b.got, body)
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

func (b *bodies) last(t *testing.T) map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.got) == 0 {
		t.Fatal("the upstream got no request")
	}
	var m map[string]any
	if err := json.Unmarshal(b.got[len(b.got)-1], &m); err != nil {
		t.Fatalf("upstream body: %v", err)
	}
	return m
}

// blocks is a JSON list of objects.
func blocks(v any) []map[string]any {
	var out []map[string]any
	for _, b := range v.([]any) {
		out = append(out, b.(map[string]any))
	}
	return out
}

func post(t *testing.T, url, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "marks")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
}

// TestCacheMarksCrossTheDoors: a client's prompt cache marks reach a tier
// of the other vendor at the same places — Anthropic cache_control served
// by a Bedrock tier becomes cachePoint blocks, and Bedrock cachePoint
// served by an Anthropic tier becomes cache_control — with fmgate's own
// mark after its system prompt before them.
func TestCacheMarksCrossTheDoors(t *testing.T) {
	const client, shared, question = "Answer briefly.", "Shared context.", "Recommend a fantasy manga"

	t.Run("anthropic door to a bedrock tier", func(t *testing.T) {
		cfg := quickConfig()
		cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
		up, _ := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
		got := &bodies{}
		srv := httptest.NewUnstartedServer(got.wrap(simserver.Handler(up)))
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		srv.Start()
		t.Cleanup(srv.Close)
		_, gw := startServer(t, onBedrock(cfg, srv.URL))
		post(t, gw.URL+"/v1/messages", `{"model":"sonnet","max_tokens":200,
			"system":[{"type":"text","text":"`+client+`","cache_control":{"type":"ephemeral"}}],
			"messages":[{"role":"user","content":[{"type":"text","text":"`+shared+`","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"`+question+`"}]}]}`)

		body := got.last(t)
		sys := blocks(body["system"])
		var points []int
		for i, b := range sys {
			if _, ok := b["cachePoint"]; ok {
				points = append(points, i)
			}
		}
		if len(points) < 2 || points[0] == 0 {
			t.Fatalf("system blocks %v: want fmgate's mark and the client's as cachePoint blocks after text", sys)
		}
		if txt, _ := sys[points[1]-1]["text"].(string); !strings.HasSuffix(txt, client) {
			t.Errorf("the second cachePoint follows %q, want the client's system text", txt)
		}
		msgs := blocks(body["messages"])
		content := blocks(msgs[len(msgs)-1]["content"])
		if len(content) != 3 || content[0]["text"] != shared || content[2]["text"] != "\n\n"+question {
			t.Fatalf("last message %v: want the shared text, a cachePoint, then the question", content)
		}
		cp, _ := content[1]["cachePoint"].(map[string]any)
		if cp["type"] != "default" || cp["ttl"] != "1h" {
			t.Errorf("message cachePoint %v, want type default, ttl 1h", cp)
		}
	})

	t.Run("bedrock door to an anthropic tier", func(t *testing.T) {
		cfg := quickConfig()
		cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
		t.Setenv(anthropicKeyEnv, "sk-sim")
		up, err := sim.New(cfg.SimConfig(), sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := &bodies{}
		srv := httptest.NewServer(got.wrap(simserver.Handler(up)))
		t.Cleanup(srv.Close)
		m := cfg.Models[0]
		m.Provider, m.APIKeyEnv, m.Endpoint = "anthropic", anthropicKeyEnv, srv.URL
		cfg.Models[0] = m
		_, gw := startServer(t, cfg)
		post(t, gw.URL+"/model/"+m.ModelID+"/converse", `{
			"system":[{"text":"`+client+`"},{"cachePoint":{"type":"default"}}],
			"messages":[{"role":"user","content":[{"text":"`+shared+`"},{"cachePoint":{"type":"default","ttl":"1h"}},{"text":"`+question+`"}]}]}`)

		body := got.last(t)
		sys := blocks(body["system"])
		var marked []string
		for _, b := range sys {
			if _, ok := b["cache_control"]; ok {
				marked = append(marked, b["text"].(string))
			}
		}
		if len(marked) < 2 || !strings.HasSuffix(marked[1], client) {
			t.Fatalf("system blocks %v: want fmgate's prompt and the client's each ending in cache_control", sys)
		}
		msgs := blocks(body["messages"])
		content := blocks(msgs[len(msgs)-1]["content"])
		if len(content) != 2 || content[0]["text"] != shared || content[1]["text"] != question {
			t.Fatalf("last message %v: want the shared text with cache_control, then the question", content)
		}
		cc, _ := content[0]["cache_control"].(map[string]any)
		if cc["type"] != "ephemeral" || cc["ttl"] != "1h" {
			t.Errorf("message cache_control %v, want ephemeral, 1h", cc)
		}
		if _, ok := content[1]["cache_control"]; ok {
			t.Errorf("the question carries a cache_control it was not sent with")
		}
	})
}
