package server

import (
	"encoding/json"
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
