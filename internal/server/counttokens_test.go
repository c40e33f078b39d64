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
