package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

var mangaSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"title":   map[string]any{"type": "string"},
		"volumes": map[string]any{"type": "integer", "minimum": 1},
		"genre":   map[string]any{"type": "string", "enum": []string{"shonen", "seinen", "shojo"}},
	},
	"required":             []string{"title", "volumes", "genre"},
	"additionalProperties": false,
}

// jsonAnswer asks the OpenAI door for an answer in format, JSON or
// streamed, and returns its text and the tier that gave it.
func jsonAnswer(t *testing.T, url string, stream bool, format oai.ChatCompletionNewParamsResponseFormatUnion) (text, tier string, err error) {
	t.Helper()
	c := oai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-any"), option.WithHeader("X-User-Id", toolUser()), option.WithMaxRetries(0))
	p := oai.ChatCompletionNewParams{Model: "sonnet", ResponseFormat: format,
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Give me one manga to start with, as JSON.")}}
	var raw *http.Response
	if stream {
		s := c.Chat.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&raw))
		var b strings.Builder
		for s.Next() {
			if ch := s.Current(); len(ch.Choices) > 0 {
				b.WriteString(ch.Choices[0].Delta.Content)
			}
		}
		if err := s.Err(); err != nil {
			return "", "", err
		}
		return b.String(), raw.Header.Get("X-Fmgate-Tier"), nil
	}
	res, err := c.Chat.Completions.New(context.Background(), p, option.WithResponseInto(&raw))
	if err != nil {
		return "", "", err
	}
	return res.Choices[0].Message.Content, raw.Header.Get("X-Fmgate-Tier"), nil
}

func schemaFormat() oai.ChatCompletionNewParamsResponseFormatUnion {
	return oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &oai.ResponseFormatJSONSchemaParam{
		JSONSchema: oai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "manga", Schema: mangaSchema, Strict: oai.Bool(true)}}}
}

// TestJSONAnswersOnEveryProvider: response_format json_schema and
// json_object through the OpenAI door, served by the simulator, by an
// OpenAI-compatible tier (which takes response_format itself) and by an
// Anthropic or Bedrock tier (asked through a tool whose input is the
// answer), JSON
// and streamed: the answer is the JSON the schema describes, nothing else.
func TestJSONAnswersOnEveryProvider(t *testing.T) {
	for _, up := range []string{"sim", "openai", "anthropic", "bedrock"} {
		t.Run(up, func(t *testing.T) {
			cfg := quickConfig()
			switch up {
			case "openai":
				openaiUpstream(t, &cfg)
			case "anthropic":
				onAnthropic(t, &cfg, "sonnet")
			case "bedrock":
				_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
				cfg = onBedrock(cfg, endpoint)
			}
			sc := newScenario(t, cfg)
			for _, stream := range []bool{false, true} {
				text, tier, err := jsonAnswer(t, sc.srv.URL, stream, schemaFormat())
				var m struct {
					Title   string `json:"title"`
					Volumes int    `json:"volumes"`
					Genre   string `json:"genre"`
				}
				dec := json.NewDecoder(strings.NewReader(text))
				dec.DisallowUnknownFields()
				if err != nil || dec.Decode(&m) != nil || m.Title == "" || m.Volumes < 1 || m.Genre != "shonen" || tier != "sonnet" {
					t.Fatalf("stream %v: answer %q from %q (%v); want the schema's JSON from sonnet", stream, text, tier, err)
				}
				text, _, err = jsonAnswer(t, sc.srv.URL, stream, oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &oai.ResponseFormatJSONObjectParam{}})
				var obj map[string]any
				if err != nil || json.Unmarshal([]byte(text), &obj) != nil {
					t.Fatalf("json_object, stream %v: answer %q (%v); want a JSON object", stream, text, err)
				}
			}
		})
	}
}

// TestAnswerThatBreaksItsSchemaFallsToTheNextTier: the primary tier (an
// OpenAI-compatible server that ignores response_format) answers in prose;
// fmgate counts that as the tier's failure and Haiku answers with the
// schema's JSON, on the OpenAI door and for the Anthropic and Bedrock
// doors' structured outputs. Streamed, the client never sees the prose.
// With every model down, the turn gets the door's retryable error (503,
// Anthropic's 529), not the graceful tier's prose.
func TestAnswerThatBreaksItsSchemaFallsToTheNextTier(t *testing.T) {
	prose := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			// A call asked for its whole answer (a vendor door's JSON client).
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Sure! I recommend One Piece."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Sure! I recommend One Piece."},"finish_reason":null}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(prose.Close)
	cfg := quickConfig()
	cfg.Models[0].Provider, cfg.Models[0].Endpoint = "openai", prose.URL+"/v1"
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false // every span reaches the log
	sc := newScenario(t, cfg)
	for _, stream := range []bool{false, true} {
		text, tier, err := jsonAnswer(t, sc.srv.URL, stream, schemaFormat())
		if err != nil || tier != "haiku" || strings.Contains(text, "Sure") || !json.Valid([]byte(text)) {
			t.Fatalf("stream %v: answer %q from %q (%v); want Haiku's JSON and none of the prose", stream, text, tier, err)
		}
		// The Anthropic and Bedrock doors' structured outputs, the same way.
		for door, c := range map[string]conversation{
			"anthropic": &anthropicConversation{url: sc.srv.URL, stream: stream, user: toolUser()},
			"bedrock":   newBedrockConversation(sc.srv.URL, stream),
		} {
			r, err := c.send(t, ask{text: "Give me one manga to start with, as JSON.", schema: true})
			if err != nil || r.tier != "haiku" || strings.Contains(r.text, "Sure") || !json.Valid([]byte(r.text)) {
				t.Fatalf("%s door, stream %v: %+v (%v); want Haiku's JSON and none of the prose", door, stream, r, err)
			}
		}
	}
	st, _ := sc.s.Sim.Settings("haiku")
	st.Outage = true
	if err := sc.s.Sim.SetSettings("haiku", st); err != nil {
		t.Fatal(err)
	}
	_, _, err := jsonAnswer(t, sc.srv.URL, false, schemaFormat())
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("every model failing the schema: %v; want a 503", err)
	}
	for door, c := range map[string]conversation{
		"anthropic": &anthropicConversation{url: sc.srv.URL, user: toolUser()},
		"bedrock":   newBedrockConversation(sc.srv.URL, false),
	} {
		if _, err := c.send(t, ask{text: "Give me one manga to start with, as JSON.", schema: true}); statusOf(err) != retryableStatus[door] {
			t.Fatalf("%s door, every model failing the schema: %v; want a %d", door, err, retryableStatus[door])
		}
	}
	// Sonnet is up, only not fit for JSON: its breaker stays closed, and a
	// plain question is still its to answer.
	if a := sc.chat("plain-after-json", "Hello!", "en"); a.Status != 200 || a.Tier != "sonnet" {
		t.Fatalf("a plain question after nine prose answers to JSON questions: %+v; want Sonnet's answer", a)
	}
	// Each of Sonnet's prose answers is a failed attempt of its own tier,
	// saying why.
	sc.s.Close() // flush the emitter
	failed := 0
	for _, e := range readSpans(t, path) {
		if e.Name == "model_attempt" && e.Node.NodeID == "sonnet" {
			if e.Outcome.VendorCode == "" && e.Outcome.Status == "ok" {
				continue // the plain question's
			}
			if e.Outcome.Status != "failed" || e.Outcome.VendorCode != "invalid_json_answer" {
				t.Fatalf("sonnet's attempt: %+v; want a failure with vendor_code invalid_json_answer", e.Outcome)
			}
			failed++
		}
	}
	if failed != 9 {
		t.Fatalf("%d failed sonnet attempts in the events, want one per JSON question (9)", failed)
	}
}
