package anthropic

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

func TestDecodeRequest(t *testing.T) {
	body := `{"model":"haiku","max_tokens":100,"temperature":0.3,"stop_sequences":["END"],"metadata":{"user_id":"u-7"},
		"system":[{"type":"text","text":"Be brief."},{"type":"text","text":"Be kind.","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":"hi"},{"role":"user","content":[{"type":"text","text":"there"}]},
		{"role":"assistant","content":"Hello!"},{"role":"user","content":"Recommend a manga"}]}`
	r, err := DecodeRequest(strings.NewReader(body), 0, vision.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "haiku" || r.MaxTokens != 100 || *r.Temperature != 0.3 || r.StopSequences[0] != "END" || r.UserID != "u-7" || r.Stream {
		t.Errorf("decoded %+v", r)
	}
	if r.System != "Be brief.\n\nBe kind." {
		t.Errorf("system %q", r.System)
	}
	if len(r.Messages) != 3 || r.Messages[0].Content != "hi\n\nthere" || r.Messages[2].Content != "Recommend a manga" {
		t.Errorf("messages %+v: consecutive user messages should be joined", r.Messages)
	}
}

func TestDecodeRequestRefusals(t *testing.T) {
	tests := []struct {
		name, body, want string
		status           int
	}{
		{"empty", ``, "JSON object", 400},
		{"array", `[]`, "JSON object", 400},
		{"null", `null`, "JSON object", 400},
		{"no model", `{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, "model: Field required", 400},
		{"zero max_tokens", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens", 400},
		{"temperature", `{"model":"m","max_tokens":1,"temperature":3,"messages":[{"role":"user","content":"x"}]}`, "temperature", 400},
		{"top_p out of range", `{"model":"m","max_tokens":1,"top_p":1.5,"messages":[{"role":"user","content":"x"}]}`, "top_p", 400},
		{"top_k zero", `{"model":"m","max_tokens":1,"top_k":0,"messages":[{"role":"user","content":"x"}]}`, "top_k", 400},
		{"prefill with trailing space", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"Sure "}]}`, "trailing whitespace", 400},
		{"prefill alone", `{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":"Sure"}]}`, "user", 400},
		{"tool_choice", `{"model":"m","max_tokens":1,"tool_choice":{},"messages":[{"role":"user","content":"x"}]}`, "tool_choice", 400},
		{"no messages", `{"model":"m","max_tokens":1}`, "messages: Field required", 400},
		{"empty messages", `{"model":"m","max_tokens":1,"messages":[]}`, "at least one", 400},
		{"bad role", `{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "role", 400},
		{"document", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"document"}]}]}`, "document", 400},
		{"tool_result without id", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, "tool_use_id", 400},
		{"tool_result without tool_use", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}]}`, "tool_use", 400},
		{"tool_use from the user", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]}]}`, "assistant", 400},
		{"tool_use not answered", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]},{"role":"user","content":"next"}]}`, "tool_result", 400},
		{"server tool", `{"model":"m","max_tokens":1,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"x"}]}`, "web_search_20250305", 400},
		{"tool without schema", `{"model":"m","max_tokens":1,"tools":[{"name":"a"}],"messages":[{"role":"user","content":"x"}]}`, "input_schema", 400},
		{"tool choice names no tool", `{"model":"m","max_tokens":1,"tools":[{"name":"a","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"b"},"messages":[{"role":"user","content":"x"}]}`, "tool_choice", 400},
		{"citations", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x","citations":[{"type":"char_location"}]}]}]}`, "citations", 400},
		{"metadata extra", `{"model":"m","max_tokens":1,"metadata":{"x":1},"messages":[{"role":"user","content":"x"}]}`, "metadata.x", 400},
		{"blank last", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"  "}]}`, "empty", 400},
		{"too large", `{"model":"` + strings.Repeat("m", 300) + `"}`, "exceeds", 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest(strings.NewReader(tt.body), 256, vision.Limits{})
			if err == nil || err.Status != tt.status || !strings.Contains(err.Message, tt.want) {
				t.Fatalf("error %v, want %d mentioning %q", err, tt.status, tt.want)
			}
			wantType := ErrInvalidRequest
			if tt.status == http.StatusRequestEntityTooLarge {
				wantType = ErrRequestTooLarge
			}
			if err.Type != wantType {
				t.Fatalf("type %q, want %q", err.Type, wantType)
			}
		})
	}
}

// FuzzDecodeRequest: any bytes decode or are refused in Anthropic's 400/413
// shape; nothing panics.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"sonnet","max_tokens":10,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"日本"}]}],"stream":true}`))
	f.Add([]byte(`{"model":"m","max_tokens":1e400,"messages":null}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","content":[{"type":"text","text":"\ud800"}]}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":9,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"w"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"get_weather","input":{"city":"東京"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"晴れ"}],"cache_control":{"type":"ephemeral"}}]}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":9,"top_k":3,"top_p":0.5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"Well,"}]}`))
	f.Add(imageRequest(imageBlock("image/png", visiontest.Base64(visiontest.PNG(3, 2))), `{"type":"text","text":"what is it?"}`))
	f.Add(imageRequest(imageBlock("image/gif", visiontest.Base64(visiontest.PNG(3, 2)))))
	f.Add(imageRequest(`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`))
	f.Add([]byte(`{"model":"m","max_tokens":9,"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"$ref":"#/$defs/b"}},"$defs":{"b":{"type":"integer"}}}}},"tools":[{"name":"t","strict":true,"input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":9,"output_format":{"type":"json_schema","schema":{"$ref":"file:///etc/passwd"}},"messages":[{"role":"user","content":"q"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRequest(bytes.NewReader(body), 1<<16, vision.Limits{})
		if err != nil {
			if (err.Status != 400 || err.Type != ErrInvalidRequest) && (err.Status != 413 || err.Type != ErrRequestTooLarge) {
				t.Fatalf("refusal %+v is not Anthropic's 400/413 shape", err)
			}
			if err.Message == "" {
				t.Fatal("refusal without a message")
			}
			return
		}
		if r.Model == "" || r.MaxTokens < 1 || len(r.Messages) == 0 || r.Messages[len(r.Messages)-1].Role != "user" {
			t.Fatalf("accepted an invalid request: %+v", r)
		}
	})
}

func TestEventsWireForm(t *testing.T) {
	rec := httptest.NewRecorder()
	ev := NewEvents(rec)
	_ = ev.TextDelta(0, "日本<b>")
	_ = ev.MessageDelta(StopEndTurn, nil, Usage{InputTokens: 3, OutputTokens: 5})
	_ = ev.Error(ErrOverloaded, "Overloaded")
	want := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"日本<b>\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}," +
		"\"usage\":{\"input_tokens\":3,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":5}}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("wire form\n%s\nwant\n%s", got, want)
	}
	if rec.Header().Get("Content-Type") != "text/event-stream; charset=utf-8" {
		t.Fatalf("content type %q", rec.Header().Get("Content-Type"))
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(`{"model":"sonnet","max_tokens":1024,"system":"Be brief.","stream":true,"messages":[` +
		strings.Repeat(`{"role":"user","content":"おすすめの漫画を教えてください"},{"role":"assistant","content":"Which genre do you like?"},`, 5) +
		`{"role":"user","content":[{"type":"text","text":"Fantasy, please"}]}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(bytes.NewReader(body), 0, vision.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCacheControlBecomesCacheMarks(t *testing.T) {
	body := `{"model":"sonnet","max_tokens":100,
		"system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Use the catalog."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Shared context.","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"Hi"}]},
			{"role":"user","content":[{"type":"text","text":"More","cache_control":{"type":"ephemeral"}}]}]}`
	req, err := DecodeRequest(strings.NewReader(body), 0, vision.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.SystemCache) != 1 || req.SystemCache[0].At != len("Be brief.") || req.SystemCache[0].TTL != provider.CacheTTL {
		t.Errorf("system marks %+v", req.SystemCache)
	}
	// The two user messages are joined; the second one's mark moves with it.
	m := req.Messages[0]
	want := []provider.CacheMark{{At: len("Shared context."), TTL: provider.CacheTTLLong}, {At: len(m.Content), TTL: provider.CacheTTL}}
	if len(m.Cache) != 2 || m.Cache[0] != want[0] || m.Cache[1] != want[1] || m.Content[:m.Cache[0].At] != "Shared context." {
		t.Errorf("message %q marks %+v, want %+v", m.Content, m.Cache, want)
	}
	if n := req.ProviderRequest("sonnet").CacheMarks(); n != 3 {
		t.Errorf("the model call carries %d marks, want 3", n)
	}

	for _, bad := range []struct{ body, want string }{
		{`{"model":"s","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"2h"}}]}]}`, "ttl"},
		{`{"model":"s","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"persistent"}}]}]}`, "ephemeral"},
		{`{"model":"s","max_tokens":1,"messages":[{"role":"user","content":[` + strings.Repeat(`{"type":"text","text":"x","cache_control":{"type":"ephemeral"}},`, 4) + `{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}]}`, "maximum of 4"},
	} {
		if _, err := DecodeRequest(strings.NewReader(bad.body), 0, vision.Limits{}); err == nil || err.Status != 400 || !strings.Contains(err.Message, bad.want) {
			t.Errorf("%s: %v, want a 400 naming %q", bad.body, err, bad.want)
		}
	}
}

// A message thread is refused with the details the SDKs read to send the
// whole conversation again, unthreaded.
func TestThreadIsRefusedInTheFormTheSDKsRetryWithout(t *testing.T) {
	_, err := DecodeRequest(strings.NewReader(`{"model":"m","max_tokens":1,"thread":{"type":"create"},"messages":[{"role":"user","content":"x"}]}`), 0, vision.Limits{})
	if err == nil || err.Status != 400 || err.Details["error_code"] != "thread_unsupported_request" {
		t.Fatalf("error %+v; want a 400 with error_code thread_unsupported_request", err)
	}
	rec := httptest.NewRecorder()
	WriteError(rec, err)
	if !strings.Contains(rec.Body.String(), `"details":{"error_code":"thread_unsupported_request","unsupported":["thread"]}`) {
		t.Fatalf("body %s", rec.Body)
	}
}

// imageRequest is a Messages body whose one user message holds blocks.
func imageRequest(blocks ...string) []byte {
	return []byte(`{"model":"sonnet","max_tokens":100,"messages":[{"role":"user","content":[` + strings.Join(blocks, ",") + `]}]}`)
}

func imageBlock(mediaType, data string) string {
	return `{"type":"image","source":{"type":"base64","media_type":"` + mediaType + `","data":"` + data + `"}}`
}

func TestDecodeImages(t *testing.T) {
	pngData := visiontest.Base64(visiontest.PNG(800, 600))
	jpegData := visiontest.Base64(visiontest.JPEG(40, 30))
	text := `{"type":"text","text":"What is on the cover?"}`
	tests := []struct {
		name   string
		lim    vision.Limits
		give   []byte
		want   []string // the last message's images, as provider.Image.String
		wantIn string   // a piece of the refusal
	}{
		{name: "png and jpeg", give: imageRequest(imageBlock("image/png", pngData), imageBlock("image/jpeg", jpegData), text), want: []string{"800×600 png", "40×30 jpeg"}},
		{name: "image alone", give: imageRequest(imageBlock("image/jpeg", jpegData)), want: []string{"40×30 jpeg"}},
		{name: "too large", lim: vision.Limits{MaxBytes: 1000}, give: imageRequest(imageBlock("image/png", pngData), text),
			wantIn: "messages.0.content.0.source: the image is"},
		{name: "too many", lim: vision.Limits{MaxPerRequest: 1}, give: imageRequest(imageBlock("image/jpeg", jpegData), imageBlock("image/jpeg", jpegData), text),
			wantIn: "messages.0.content.1.source: a request may carry at most 1 images"},
		{name: "lying media type", give: imageRequest(imageBlock("image/webp", pngData), text), wantIn: "a png image, not image/webp"},
		{name: "bad base64", give: imageRequest(imageBlock("image/png", "@@@@"), text), wantIn: "not valid base64"},
		{name: "remote URL", give: imageRequest(`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`, text),
			wantIn: "messages.0.content.0.source.type: remote image URLs are off"},
		{name: "file", give: imageRequest(`{"type":"image","source":{"type":"file","file_id":"file_1"}}`, text), wantIn: "file sources are not supported"},
		{name: "in the system prompt", give: []byte(`{"model":"m","max_tokens":9,"system":[` + imageBlock("image/jpeg", jpegData) + `],"messages":[{"role":"user","content":"hi"}]}`),
			wantIn: "system.0: image blocks are supported in user messages only"},
		{name: "in a tool result", give: []byte(`{"model":"m","max_tokens":9,"tools":[{"name":"w","input_schema":{"type":"object"}}],"messages":[` +
			`{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"w","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[` + imageBlock("image/jpeg", jpegData) + `]}]}]}`),
			wantIn: "messages.2.content.0.content.0: image blocks are supported in user messages only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRequest(bytes.NewReader(tt.give), 0, tt.lim)
			if tt.wantIn != "" {
				if err == nil || err.Status != 400 || !strings.Contains(err.Message, tt.wantIn) {
					t.Fatalf("refusal %+v; want a 400 saying %q", err, tt.wantIn)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, im := range r.Messages[len(r.Messages)-1].Images {
				got = append(got, im.String())
			}
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Fatalf("images %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecodeThinking(t *testing.T) {
	const user = `{"role":"user","content":"Which manga next?"}`
	body := func(fields, msgs string) string {
		return `{"model":"m","max_tokens":2048,` + fields + `"messages":[` + msgs + `]}`
	}
	tests := []struct {
		name string
		give string
		want *provider.Thinking
	}{
		{"enabled", body(`"thinking":{"type":"enabled","budget_tokens":1024},`, user), &provider.Thinking{BudgetTokens: 1024}},
		{"just below max_tokens", body(`"thinking":{"type":"enabled","budget_tokens":2047},`, user), &provider.Thinking{BudgetTokens: 2047}},
		{"disabled", body(`"thinking":{"type":"disabled"},`, user), nil},
		{"null", body(`"thinking":null,`, user), nil},
		{"absent", body(``, user), nil},
		{"temperature 1 and top_p 0.95", body(`"thinking":{"type":"enabled","budget_tokens":1024},"temperature":1,"top_p":0.95,`, user), &provider.Thinking{BudgetTokens: 1024}},
		{"auto tool choice", body(`"thinking":{"type":"enabled","budget_tokens":1024},"tools":[{"name":"a","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"},`, user), &provider.Thinking{BudgetTokens: 1024}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRequest(strings.NewReader(tt.give), 0, vision.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if (r.Thinking == nil) != (tt.want == nil) || r.Thinking != nil && *r.Thinking != *tt.want {
				t.Fatalf("thinking %+v, want %+v", r.Thinking, tt.want)
			}
			if got := r.ProviderRequest("sonnet").Thinking; got != r.Thinking {
				t.Fatalf("the provider request's thinking %+v, want the request's %+v", got, r.Thinking)
			}
		})
	}
}

// TestDecodeThinkingRefusals: what Anthropic refuses of thinking is a 400
// invalid_request_error naming the field.
func TestDecodeThinkingRefusals(t *testing.T) {
	const user = `{"role":"user","content":"Which manga next?"}`
	body := func(fields, msgs string) string {
		return `{"model":"m","max_tokens":2048,` + fields + `"messages":[` + msgs + `]}`
	}
	on := `"thinking":{"type":"enabled","budget_tokens":1024},`
	tests := []struct{ name, give, want string }{
		{"budget under 1024", body(`"thinking":{"type":"enabled","budget_tokens":1023},`, user), "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"},
		{"budget equal to max_tokens", body(`"thinking":{"type":"enabled","budget_tokens":2048},`, user), "max_tokens: must be greater than thinking.budget_tokens"},
		{"budget missing", body(`"thinking":{"type":"enabled"},`, user), "thinking.enabled.budget_tokens: Field required"},
		{"budget not a number", body(`"thinking":{"type":"enabled","budget_tokens":"lots"},`, user), "thinking.enabled.budget_tokens"},
		{"no type", body(`"thinking":{"budget_tokens":1024},`, user), "thinking.type: Field required"},
		{"adaptive", body(`"thinking":{"type":"adaptive"},`, user), `thinking.type: "adaptive" is not supported`},
		{"display", body(`"thinking":{"type":"enabled","budget_tokens":1024,"display":"omitted"},`, user), "thinking.display"},
		{"not an object", body(`"thinking":true,`, user), "thinking: must be an object"},
		{"temperature", body(on+`"temperature":0.5,`, user), "temperature: may only be set to 1"},
		{"top_p", body(on+`"top_p":0.9,`, user), "top_p: must be at least 0.95"},
		{"top_k", body(on+`"top_k":5,`, user), "top_k: is not compatible with thinking"},
		{"forced tool", body(on+`"tools":[{"name":"a","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},`, user), "tool_choice: Thinking may not be enabled"},
		{"prefill", body(on, user+`,{"role":"assistant","content":"Start with"}`), "prefill"},
		{"thinking block from the user", body(``, `{"role":"user","content":[{"type":"thinking","thinking":"x","signature":"s"}]}`), "messages.0.content.0: thinking blocks belong in assistant messages"},
		{"thinking block without signature", body(``, user+`,{"role":"assistant","content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"Hi"}]},`+user), "messages.1.content.0.signature: Field required"},
		{"redacted block without data", body(``, user+`,{"role":"assistant","content":[{"type":"redacted_thinking"},{"type":"text","text":"Hi"}]},`+user), "messages.1.content.0.data: Field required"},
		{"thinking block with cache_control", body(``, user+`,{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Hi"}]},`+user), "messages.1.content.0.cache_control: not supported"},
		{"thinking in a prefill", body(``, user+`,{"role":"assistant","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"Start"}]}`), "cannot contain thinking"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest(strings.NewReader(tt.give), 0, vision.Limits{})
			if err == nil || err.Status != http.StatusBadRequest || err.Type != ErrInvalidRequest || !strings.Contains(err.Message, tt.want) {
				t.Fatalf("error %v, want a 400 invalid_request_error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestDecodeThinkingHistory: an assistant's thinking and redacted_thinking
// blocks are kept, in order and unchanged, to be sent back to the model.
func TestDecodeThinkingHistory(t *testing.T) {
	body := `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[
		{"role":"user","content":"What is the weather?"},
		{"role":"assistant","content":[{"type":"redacted_thinking","data":"ZW5jcnlwdGVk"},
			{"type":"thinking","thinking":"I should call the tool.","signature":"c2lnbmVk"},
			{"type":"tool_use","id":"t1","name":"get_weather","input":{"city":"Tokyo"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"Sunny"}]}]}`
	r, err := DecodeRequest(strings.NewReader(body), 0, vision.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []provider.ThinkingBlock{{Redacted: "ZW5jcnlwdGVk"}, {Text: "I should call the tool.", Signature: "c2lnbmVk"}}
	got := r.Messages[1].Thinking
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("thinking %+v, want %+v", got, want)
	}
	if len(r.Messages[1].ToolCalls) != 1 || r.Messages[1].Content != "" {
		t.Fatalf("assistant message %+v: want its tool call and no text", r.Messages[1])
	}
}

// TestThinkingBlocksEncode: an answer's thinking blocks come before its
// text, in Anthropic's JSON.
func TestThinkingBlocksEncode(t *testing.T) {
	blocks := Blocks([]provider.ThinkingBlock{{Redacted: "ZW5j"}, {Text: "Hmm.", Signature: "c2ln"}}, "Read Frieren.", nil)
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(blocks); err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"redacted_thinking","data":"ZW5j"},{"type":"thinking","thinking":"Hmm.","signature":"c2ln"},{"type":"text","text":"Read Frieren."}]`
	if got := strings.TrimSpace(buf.String()); got != want {
		t.Fatalf("blocks %s\nwant %s", got, want)
	}
}

// TestDecodeImageURL: on a host the operator allows, a url source is a
// pending image, in Messages and in InvokeModel's Messages body alike;
// otherwise it is refused naming the field.
func TestDecodeImageURL(t *testing.T) {
	lim := vision.Limits{Hosts: vision.Hosts{"img.example.com"}}
	const url = "https://img.example.com/a.png"
	block := `{"type":"image","source":{"type":"url","url":"` + url + `"}}`
	r, err := DecodeRequest(bytes.NewReader(imageRequest(block, `{"type":"text","text":"x"}`)), 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if im := r.Messages[0].Images; len(im) != 1 || !im[0].Pending() || im[0].URL != url {
		t.Fatalf("images %+v; want the pending %s", im, url)
	}
	invoke := `{"anthropic_version":"bedrock-2023-05-31","max_tokens":9,"messages":[{"role":"user","content":[` + block + `]}]}`
	r, err = DecodeInvokeBody(strings.NewReader(invoke), 0, lim)
	if err != nil {
		t.Fatal(err)
	}
	if im := r.Messages[0].Images; len(im) != 1 || im[0].URL != url {
		t.Fatalf("InvokeModel images %+v; want the pending %s", im, url)
	}
	tests := []struct{ name, give, wantIn string }{
		{"host not allowed", `{"type":"image","source":{"type":"url","url":"https://evil.test/a.png"}}`, "messages.0.content.0.source.url: the host evil.test is not one fmgate fetches images from"},
		{"no url", `{"type":"image","source":{"type":"url"}}`, "messages.0.content.0.source.url: Field required"},
		{"extra member", `{"type":"image","source":{"type":"url","url":"` + url + `","media_type":"image/png"}}`, "messages.0.content.0.source.media_type: not supported"},
		{"data URL", `{"type":"image","source":{"type":"url","url":"data:image/png;base64,AA=="}}`, "as a base64 source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest(bytes.NewReader(imageRequest(tt.give, `{"type":"text","text":"x"}`)), 0, lim)
			if err == nil || err.Status != 400 || !strings.Contains(err.Message, tt.wantIn) {
				t.Fatalf("refusal %+v; want a 400 saying %q", err, tt.wantIn)
			}
		})
	}
}

// TestDecodeOutputFormat: structured outputs, in output_config.format or
// the beta's output_format, become the answer's JSON schema; a strict tool
// keeps its strictness; what cannot be honoured is refused by name.
func TestDecodeOutputFormat(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	const schema = `{"type":"object","properties":{"title":{"type":"string"}},"required":["title"]}`
	for _, body := range []string{
		`{"model":"m","max_tokens":9,"output_config":{"format":{"type":"json_schema","schema":` + schema + `}},` + msgs + `}`,
		`{"model":"m","max_tokens":9,"output_format":{"type":"json_schema","schema":` + schema + `},` + msgs + `}`,
	} {
		r, err := DecodeRequest(strings.NewReader(body), 0, vision.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Format.Kind != provider.FormatJSONSchema || string(r.Format.Schema) != schema || r.ProviderRequest("m").Format.Kind != provider.FormatJSONSchema {
			t.Fatalf("%s: format %+v, want the json_schema", body, r.Format)
		}
	}
	r, err := DecodeRequest(strings.NewReader(`{"model":"m","max_tokens":9,"tools":[{"name":"a","strict":true,"input_schema":`+schema+`}],`+msgs+`}`), 0, vision.Limits{})
	if err != nil || !r.Tools[0].Strict {
		t.Fatalf("strict tool: %+v (%v)", r, err)
	}

	tests := []struct{ name, fields, want string }{
		{"effort", `"output_config":{"effort":"low"}`, "output_config.effort"},
		{"format type", `"output_config":{"format":{"type":"json_object","schema":{}}}`, "output_config.format.type"},
		{"no schema", `"output_config":{"format":{"type":"json_schema"}}`, "output_config.format.schema"},
		{"schema does not compile", `"output_format":{"type":"json_schema","schema":{"type":"objekt"}}`, "output_format.schema"},
		{"outside reference", `"output_format":{"type":"json_schema","schema":{"$ref":"https://example.com/s.json"}}`, "output_format.schema"},
		{"both", `"output_format":{"type":"json_schema","schema":{}},"output_config":{"format":{"type":"json_schema","schema":{}}}`, "not both"},
		{"extra member", `"output_config":{"format":{"type":"json_schema","schema":{},"name":"x"}}`, "output_config.format.name"},
		{"with thinking", `"max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":1024},"output_config":{"format":{"type":"json_schema","schema":{}}}`, "thinking"},
		{"strict not a bool", `"tools":[{"name":"a","strict":"yes","input_schema":{"type":"object"}}]`, "tools.0.strict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","max_tokens":9,` + tt.fields + `,` + msgs + `}`
			if strings.Contains(tt.fields, `"max_tokens"`) {
				body = `{"model":"m",` + tt.fields + `,` + msgs + `}`
			}
			_, err := DecodeRequest(strings.NewReader(body), 0, vision.Limits{})
			if err == nil || err.Status != 400 || err.Type != ErrInvalidRequest || !strings.Contains(err.Message, tt.want) {
				t.Fatalf("error %v, want a 400 naming %q", err, tt.want)
			}
		})
	}
}
