package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A stop sequence a client sends is honoured, on every door, by the default
// profile's models: the answer ends before it, and the stop reason says so.
func TestStopSequencesAreHonouredOnEveryDoor(t *testing.T) {
	sc := newScenario(t, quickConfig())
	post := func(path, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-Id", "stopper")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	const ask = "What manga do you recommend?"
	// The simulated answer opens with one line, then a list: "\n" stops it
	// after the first line.
	a := post("/v1/messages", `{"model":"sonnet","max_tokens":400,"stop_sequences":["\n"],"messages":[{"role":"user","content":"`+ask+`"}]}`)
	text := a["content"].([]any)[0].(map[string]any)["text"].(string)
	if a["stop_reason"] != "stop_sequence" || a["stop_sequence"] != "\n" || strings.Contains(text, "\n") || text == "" {
		t.Fatalf("anthropic door: stop_reason %v, stop_sequence %q, text %q; want the first line, ended by the stop sequence", a["stop_reason"], a["stop_sequence"], text)
	}
	o := post("/v1/chat/completions", `{"model":"sonnet","stop":["\n"],"messages":[{"role":"user","content":"`+ask+`"}]}`)
	choice := o["choices"].([]any)[0].(map[string]any)
	content := choice["message"].(map[string]any)["content"].(string)
	if choice["finish_reason"] != "stop" || strings.Contains(content, "\n") || content == "" {
		t.Fatalf("openai door: finish_reason %v, content %q; want the first line", choice["finish_reason"], content)
	}
	b := post("/model/sonnet/converse", `{"inferenceConfig":{"stopSequences":["\n"]},"messages":[{"role":"user","content":[{"text":"`+ask+`"}]}]}`)
	out := b["output"].(map[string]any)["message"].(map[string]any)["content"].([]any)[0].(map[string]any)["text"].(string)
	if b["stopReason"] != "stop_sequence" || strings.Contains(out, "\n") || out == "" {
		t.Fatalf("bedrock door: stopReason %v, text %q; want the first line, ended by the stop sequence", b["stopReason"], out)
	}
}

// The response cache keeps a model's whole answer to the bare question
// only: an answer cut by a client's stop sequence, or shaped by its own
// system prompt, is not served to the next caller asking the same words.
func TestTheCacheKeepsOnlyWholeAnswersToTheBareQuestion(t *testing.T) {
	sc := newScenario(t, quickConfig())
	door := func(body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-Id", "shaper")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("anthropic door: %d", resp.StatusCode)
		}
	}
	const cut, shaped, plain = "Which manga is good for a long trip?", "Which fantasy manga should I read next?", "Which comedy manga is the funniest?"
	door(`{"model":"sonnet","max_tokens":400,"stop_sequences":["\n"],"messages":[{"role":"user","content":"` + cut + `"}]}`)
	door(`{"model":"sonnet","max_tokens":400,"system":"Answer in one word.","messages":[{"role":"user","content":"` + shaped + `"}]}`)
	if a := sc.chat("plain-asker", plain, "en"); a.Status != 200 || a.Tier != "sonnet" {
		t.Fatalf("plain question: %+v", a)
	}
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	adminPut(t, sc.srv, "/admin/sim/haiku", `{"outage":true}`)
	if a := sc.chat("next-asker", plain, "en"); a.Tier != "cache" {
		t.Fatalf("the plain question's answer was not cached: %+v (the test proves nothing)", a)
	}
	for _, q := range []string{cut, shaped} {
		if a := sc.chat("next-asker", q, "en"); a.Tier == "cache" {
			t.Errorf("%q was answered from the cache with another client's shaped answer: %q", q, a.Text)
		}
	}
}

// An assistant prefill on the Anthropic door is continued, not answered
// anew: by the simulator, by a tier on the anthropic provider (the
// simulator on Anthropic's wire), and never by a tier on the openai
// provider, whose API cannot continue an answer — such a turn starts at
// the next tier that can. top_k, which OpenAI's API lacks, routes the same.
func TestPrefillAndTopKReachOnlyTiersThatHonourThem(t *testing.T) {
	const prefill = "My top pick is"
	body := `{"model":"sonnet","max_tokens":300,"messages":[{"role":"user","content":"Which manga should I read next?"},{"role":"assistant","content":"` + prefill + `"}]}`
	ask := func(sc *scenario, body string) (text, tier string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-User-Id", toolUser())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || len(m.Content) == 0 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return m.Content[0].Text, resp.Header.Get("X-Fmgate-Tier")
	}
	for _, up := range []string{"sim", "anthropic"} {
		cfg := quickConfig()
		if up == "anthropic" {
			onAnthropic(t, &cfg, "sonnet")
		}
		text, tier := ask(newScenario(t, cfg), body)
		if tier != "sonnet" || text == "" || strings.HasPrefix(text, prefill) {
			t.Fatalf("%s: %q from %q; want Sonnet's continuation of the prefill, without it", up, text, tier)
		}
	}
	// The same prefill on the Bedrock door's Converse, with Sonnet on the
	// bedrock provider: continued there too.
	cfg := quickConfig()
	_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	sc := newScenario(t, onBedrock(cfg, endpoint))
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/model/sonnet/converse", strings.NewReader(
		`{"messages":[{"role":"user","content":[{"text":"Which manga should I read next?"}]},{"role":"assistant","content":[{"text":"`+prefill+`"}]}]}`))
	req.Header.Set("X-User-Id", toolUser())
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var conv struct {
		Output struct {
			Message struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"message"`
		} `json:"output"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || json.Unmarshal(b, &conv) != nil || len(conv.Output.Message.Content) == 0 ||
		strings.HasPrefix(conv.Output.Message.Content[0].Text, prefill) || resp.Header.Get("X-Fmgate-Tier") != "sonnet" {
		t.Fatalf("bedrock door prefill: %d %s; want Sonnet's continuation", resp.StatusCode, b)
	}

	cfg = quickConfig()
	openaiUpstream(t, &cfg)
	sc = newScenario(t, cfg)
	if _, tier := ask(sc, body); tier != "haiku" {
		t.Fatalf("prefill with Sonnet on the openai provider: answered by %q, want haiku", tier)
	}
	if _, tier := ask(sc, `{"model":"sonnet","max_tokens":300,"top_k":5,"messages":[{"role":"user","content":"Hi"}]}`); tier != "haiku" {
		t.Fatalf("top_k with Sonnet on the openai provider: answered by %q, want haiku", tier)
	}
	if _, tier := ask(sc, `{"model":"sonnet","max_tokens":300,"top_p":0.9,"messages":[{"role":"user","content":"Hi"}]}`); tier != "sonnet" {
		t.Fatalf("top_p with Sonnet on the openai provider: answered by %q, want sonnet", tier)
	}
}

// A seed repeats an answer: the same seed gives the same words, served by
// a tier whose vendor has seeds (the simulator, an OpenAI-compatible
// server); a tier on the anthropic provider, whose API has none, is
// skipped for it.
func TestSeedRepeatsAnAnswerOnTiersThatHaveIt(t *testing.T) {
	ask := func(sc *scenario, seed int) (text, tier string) {
		t.Helper()
		body := fmt.Sprintf(`{"model":"sonnet","seed":%d,"messages":[{"role":"user","content":"Which manga should I read next?"}]}`, seed)
		req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-User-Id", toolUser())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(b, &c) != nil || len(c.Choices) == 0 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		return c.Choices[0].Message.Content, resp.Header.Get("X-Fmgate-Tier")
	}
	sc := newScenario(t, quickConfig())
	a, _ := ask(sc, 7)
	b, tier := ask(sc, 7)
	if a != b || tier != "sonnet" {
		t.Fatalf("seed 7 twice: %q then %q (from %s); want the same answer from sonnet", a, b, tier)
	}
	differ := false
	for seed := 8; seed < 14 && !differ; seed++ {
		c, _ := ask(sc, seed)
		differ = c != a
	}
	if !differ {
		t.Fatal("six other seeds all gave seed 7's answer: the seed does not reach the model")
	}
	cfg := quickConfig()
	onAnthropic(t, &cfg, "sonnet")
	if _, tier := ask(newScenario(t, cfg), 7); tier != "haiku" {
		t.Fatalf("seed with Sonnet on the anthropic provider: answered by %q, want haiku", tier)
	}
}

// With every model down, the client's stop sequence still ends the
// answer it gets from a fallback tier, and the stop reason says so.
func TestStopSequencesEndTheFallbackTiersText(t *testing.T) {
	sc := newScenario(t, quickConfig())
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	adminPut(t, sc.srv, "/admin/sim/haiku", `{"outage":true}`)
	for _, stream := range []bool{false, true} {
		r, err := (&anthropicConversation{url: sc.srv.URL, stream: stream, user: toolUser()}).send(t, ask{text: "Which manga should I read next?", stop: []string{","}})
		if err != nil || r.tier == "sonnet" || r.tier == "haiku" || r.text == "" || strings.Contains(r.text, ",") || r.stop != "stop_sequence" || r.stopSeq != "," {
			t.Fatalf("stream %v: %+v (%v); want a fallback tier's text up to its first comma, ended by the stop sequence", stream, r, err)
		}
	}
}
