package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCountTokensAskTheTiersVendor: count_tokens on the Anthropic door is
// answered by the tier's vendor over its wire where it counts tokens
// (Anthropic's count_tokens, Bedrock's CountTokens), and equals the input
// the same request is then billed; a tier on OpenAI, which cannot count,
// gets fmgate's estimate, said in x-fmgate-token-count.
func TestCountTokensAskTheTiersVendor(t *testing.T) {
	const body = `{"model":"sonnet","system":"Answer briefly.","messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`
	for _, vendor := range []string{"anthropic", "bedrock", "openai"} {
		t.Run(vendor, func(t *testing.T) {
			cfg := quickConfig()
			cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
			switch vendor {
			case "anthropic":
				onAnthropic(t, &cfg, "sonnet")
			case "bedrock":
				_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
				cfg = onBedrock(cfg, endpoint)
			case "openai":
				openaiUpstreamStreams(t, &cfg)
			}
			sc := newScenario(t, cfg)
			resp := postJSON(t, sc.srv.URL+"/v1/messages/count_tokens", body)
			var count struct {
				InputTokens int `json:"input_tokens"`
			}
			decodeBody(t, resp, &count)
			want := "vendor"
			if vendor == "openai" {
				want = "estimate"
			}
			if got := resp.Header.Get("x-fmgate-token-count"); got != want || count.InputTokens < 1000 {
				t.Fatalf("count_tokens: %d tokens, x-fmgate-token-count %q; want over 1,000 (fmgate's prompt included), %s", count.InputTokens, got, want)
			}
			if vendor == "openai" {
				return
			}
			msg := postJSON(t, sc.srv.URL+"/v1/messages", strings.Replace(body, `"model":"sonnet",`, `"model":"sonnet","max_tokens":200,`, 1))
			var answer struct {
				Usage struct {
					Input      int `json:"input_tokens"`
					CacheRead  int `json:"cache_read_input_tokens"`
					CacheWrite int `json:"cache_creation_input_tokens"`
				} `json:"usage"`
			}
			decodeBody(t, msg, &answer)
			if billed := answer.Usage.Input + answer.Usage.CacheRead + answer.Usage.CacheWrite; billed != count.InputTokens {
				t.Fatalf("%s counted %d input tokens; the same request was billed %d", vendor, count.InputTokens, billed)
			}
		})
	}
}

func postJSON(t *testing.T, url, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "counter")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decodeBody(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", resp.Request.URL.Path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %s: %v", resp.Request.URL.Path, b, err)
	}
}

// count_tokens honours the key's model list as the turn does: a key that
// may not use the tier its request names, or that may use no chat tier,
// gets the very refusal /v1/messages gives it (status, Anthropic error
// type and message), and the Bedrock door's CountTokens that of Converse;
// a tier it may use is counted.
func TestCountTokensRefusesATierTheKeyMayNotUse(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	sc := newScenario(t, cfg)
	base := sc.srv.URL
	haikuOnly := createKey(t, base, `{"name":"haiku only","models":["haiku"]}`)
	embedOnly := createKey(t, base, `{"name":"embeddings only","models":["titan-embed"]}`)
	// count_tokens takes a Messages request without max_tokens.
	counted := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`
	}
	messages := func(model string) string {
		return strings.Replace(counted(model), `"messages"`, `"max_tokens":100,"messages"`, 1)
	}
	type refusal struct {
		status int
		body   string
	}
	for _, tt := range []struct {
		name, key, model string
	}{
		{"a tier the key may not use", haikuOnly.Secret, "sonnet"},
		{"a tier by its model id", haikuOnly.Secret, cfg.Models[0].ModelID},
		{"a key with no chat tier", embedOnly.Secret, "haiku"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var turn, count refusal
			turn.status, turn.body = keyPost(t, base, tt.key, "/v1/messages", messages(tt.model))
			count.status, count.body = keyPost(t, base, tt.key, "/v1/messages/count_tokens", counted(tt.model))
			if turn.status != http.StatusForbidden || !strings.Contains(turn.body, `"type":"permission_error"`) {
				t.Fatalf("/v1/messages: %d %s, want 403 permission_error", turn.status, turn.body)
			}
			if count != turn {
				t.Fatalf("count_tokens: %d %s\n/v1/messages: %d %s\nwant the same refusal", count.status, count.body, turn.status, turn.body)
			}
			converse := `{"messages":[{"role":"user","content":[{"text":"Recommend a fantasy manga"}]}]}`
			var conv, bcount refusal
			conv.status, conv.body = keyPost(t, base, tt.key, "/model/"+tt.model+"/converse", converse)
			bcount.status, bcount.body = keyPost(t, base, tt.key, "/model/"+tt.model+"/count-tokens", `{"input":{"converse":`+converse+`}}`)
			if conv.status != http.StatusForbidden || bcount != conv {
				t.Fatalf("Bedrock CountTokens: %d %s\nConverse: %d %s\nwant the same 403", bcount.status, bcount.body, conv.status, conv.body)
			}
		})
	}
	for _, model := range []string{"haiku", "a-model-no-tier-answers-to"} {
		status, body := keyPost(t, base, haikuOnly.Secret, "/v1/messages/count_tokens", counted(model))
		var n struct {
			InputTokens int `json:"input_tokens"`
		}
		if err := json.Unmarshal([]byte(body), &n); status != http.StatusOK || err != nil || n.InputTokens <= 0 {
			t.Fatalf("count_tokens for %s with the haiku key: %d %s", model, status, body)
		}
	}
}
