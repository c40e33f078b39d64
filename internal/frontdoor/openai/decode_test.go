package openai

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

func TestDecodeChat(t *testing.T) {
	half := 0.5
	tests := []struct {
		name      string
		give      string
		want      Chat
		wantParam string // the 400's param, when refused
		wantErr   bool
	}{
		{
			name: "conversation",
			give: `{"model":"sonnet","messages":[{"role":"system","content":"Be brief."},{"role":"developer","content":"Use English."},` +
				`{"role":"user","content":"hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":[{"type":"text","text":"Recommend "},{"type":"text","text":"a manga"}]}],` +
				`"stream":true,"stream_options":{"include_usage":true},"max_tokens":200,"max_completion_tokens":100,"temperature":0.5,"stop":"END","user":"u1","n":1,"logprobs":false,"tools":null,` +
				`"prompt_cache_key":"mangaassist-ja"}`,
			want: Chat{Model: "sonnet", System: "Be brief.\n\nUse English.", Message: "Recommend a manga", Stream: true, IncludeUsage: true,
				MaxTokens: 100, Temperature: &half, Stop: []string{"END"}, User: "u1", PromptCacheKey: "mangaassist-ja",
				History: []provider.Message{{Role: provider.RoleUser, Content: "hi"}, {Role: provider.RoleAssistant, Content: "Hello"}}},
		},
		{
			name: "consecutive user messages are joined",
			give: `{"model":"m","messages":[{"role":"user","content":"one"},{"role":"user","content":"two"}],"stop":["a","b"]}`,
			want: Chat{Model: "m", Message: "one\n\ntwo", Stop: []string{"a", "b"}, History: []provider.Message{}},
		},
		{
			name: "tool round trip",
			give: `{"model":"m","messages":[{"role":"user","content":"Weather in Tokyo and Osaka?","name":"aiko"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Tokyo\"}"}},` +
				`{"id":"c2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"大阪\"}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"晴れ"},{"role":"tool","tool_call_id":"c2","content":[{"type":"text","text":"rain"}]}],` +
				`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],` +
				`"tool_choice":"auto","parallel_tool_calls":false}`,
			want: Chat{Model: "m",
				History: []provider.Message{{Role: provider.RoleUser, Content: "Weather in Tokyo and Osaka?"},
					{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo"}`)},
						{ID: "c2", Name: "get_weather", Input: json.RawMessage(`{"city":"大阪"}`)}}}},
				ToolResults: []provider.ToolResult{{CallID: "c1", Content: "晴れ"}, {CallID: "c2", Content: "rain"}},
				Tools: []provider.Tool{{Name: "get_weather", Description: "Weather",
					Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}},
				ToolChoice: provider.ToolChoice{Sequential: true}},
		},
		{name: "tool without function", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, wantParam: "tools[0].function", wantErr: true},
		{name: "custom tool", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"custom","custom":{"name":"x"}}]}`, wantParam: "tools[0]", wantErr: true},
		{name: "bad tool name", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, wantParam: "tools[0].function.name", wantErr: true},
		{name: "choice names no tool", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"b"}}}`, wantParam: "tool_choice", wantErr: true},
		{name: "required without tools", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, wantParam: "tool_choice", wantErr: true},
		{name: "arguments not an object", give: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"[1]"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`, wantParam: "messages[1].tool_calls[0].function.arguments", wantErr: true},
		{name: "result for no call", give: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"{}"}}]},{"role":"tool","tool_call_id":"d","content":"r"}]}`, wantParam: "messages", wantErr: true},
		{name: "call without result", give: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"a","arguments":"{}"}}]},{"role":"user","content":"y"}]}`, wantParam: "messages", wantErr: true},
		{name: "n", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"n":2}`, wantParam: "n", wantErr: true},
		{name: "logprobs", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true}`, wantParam: "logprobs", wantErr: true},
		{name: "json mode", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`,
			want: Chat{Model: "m", Message: "x", History: []provider.Message{}, Format: provider.Format{Kind: provider.FormatJSONObject}}},
		{name: "schema without name", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object"}}}}`, wantParam: "response_format.json_schema.name", wantErr: true},
		{name: "unknown format", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}`, wantParam: "response_format.type", wantErr: true},
		{name: "image part not a data URL", give: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, wantParam: "messages[0].content[0].image_url.url", wantErr: true},
		{name: "image part in a system message", give: `{"model":"m","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"x"}}]},{"role":"user","content":"hi"}]}`, wantParam: "messages[0].content[0].type", wantErr: true},
		{name: "tool message first", give: `{"model":"m","messages":[{"role":"tool","content":"x","tool_call_id":"c"}]}`, wantParam: "messages", wantErr: true},
		{name: "tool message without id", give: `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, wantParam: "messages[0].tool_call_id", wantErr: true},
		{name: "unknown field", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"frobnicate":1}`, wantParam: "frobnicate", wantErr: true},
		{name: "long prompt cache key", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"prompt_cache_key":"` + strings.Repeat("k", MaxPromptCacheKeyBytes+1) + `"}`, wantParam: "prompt_cache_key", wantErr: true},
		{name: "no model", give: `{"messages":[{"role":"user","content":"x"}]}`, wantParam: "model", wantErr: true},
		{name: "no messages", give: `{"model":"m","messages":[]}`, wantParam: "messages", wantErr: true},
		{name: "last from assistant", give: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`, wantParam: "messages", wantErr: true},
		{name: "five stops", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","b","c","d","e"]}`, wantParam: "stop", wantErr: true},
		{name: "hot temperature", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3}`, wantParam: "temperature", wantErr: true},
		{name: "zero max tokens", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}`, wantParam: "max_tokens", wantErr: true},
		{name: "usage without stream", give: `{"model":"m","messages":[{"role":"user","content":"x"}],"stream_options":{"include_usage":true}}`, wantParam: "stream_options", wantErr: true},
		{name: "wrong type", give: `{"model":5,"messages":[]}`, wantParam: "model", wantErr: true},
		{name: "not json", give: `model=m`, wantErr: true},
		{name: "trailing data", give: `{"model":"m","messages":[{"role":"user","content":"x"}]} {}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, e := DecodeChat([]byte(tt.give), vision.Limits{})
			if tt.wantErr {
				if e == nil || e.Status != 400 || e.Type != "invalid_request_error" || e.Param != tt.wantParam || e.Message == "" {
					t.Fatalf("error %+v; want a 400 naming %q", e, tt.wantParam)
				}
				return
			}
			if e != nil {
				t.Fatal(e)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Fatalf("got  %s\nwant %s", gotJSON, wantJSON)
			}
		})
	}
}

func TestEncodersWriteValidJSON(t *testing.T) {
	meta := chunkMeta{id: "chatcmpl-1", created: 1, model: "m\"odel", includeUsage: true}
	text := "改行\n\"quote\" \\ \x01 \u2028 \xff end"
	for _, b := range [][]byte{
		Completion{ID: "x", Model: "m", Text: text, FinishReason: FinishStop, Usage: Usage{PromptTokens: 3, CompletionTokens: 4, CostUSD: 1e-6}}.AppendJSON(nil),
		(&Error{Status: 400, Type: "invalid_request_error", Message: text}).AppendJSON(nil),
	} {
		if !json.Valid(b) {
			t.Fatalf("invalid JSON: %s", b)
		}
	}
	events := string(meta.appendFinish(meta.appendDelta(nil, text, true), FinishLength, "\n", Usage{PromptTokens: 1}, false))
	for _, ev := range strings.Split(strings.TrimSuffix(events, "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || (data != "[DONE]" && !json.Valid([]byte(data))) {
			t.Fatalf("bad event %q", ev)
		}
	}
	var chunk struct {
		Choices []struct {
			Delta struct{ Content string } `json:"delta"`
		} `json:"choices"`
	}
	first, _ := strings.CutPrefix(strings.SplitN(events, "\n\n", 2)[0], "data: ")
	if err := json.Unmarshal([]byte(first), &chunk); err != nil || chunk.Choices[0].Delta.Content != strings.ToValidUTF8(text, "\uFFFD") {
		t.Fatalf("delta %q (%v), want %q", chunk.Choices[0].Delta.Content, err, text)
	}
}

// FuzzDecodeChat: any body gets a decoded chat or a 400/413 in OpenAI's
// shape, never a panic; a decoded chat always has a user message to answer.
func FuzzDecodeChat(f *testing.F) {
	for _, seed := range []string{
		`{"model":"sonnet","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true,"stream_options":{"include_usage":true},"stop":["x"]}`,
		`{"model":"m","messages":[{"role":"user","content":null}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}],"temperature":"hot"}`,
		`[]`, `null`, `{"model":"m","messages":[{}]}`, "{\"model\":\"\xff\"}",
		`{"model":"m","messages":[{"role":"user","content":"w"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"東京\"}"}}]},{"role":"tool","tool_call_id":"c","content":"晴れ"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"},"strict":true}}],"tool_choice":"required","parallel_tool_calls":false}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"object"},"strict":true}},"top_p":0.5,"metadata":{"k":"v"}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,!!"}}]}]}`,
	} {
		f.Add([]byte(seed))
	}
	for _, im := range []string{visiontest.DataURL("image/png", visiontest.PNG(3, 2)), visiontest.DataURL("image/jpeg", visiontest.PNG(3, 2))} {
		f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + im + `","detail":"low"}},{"type":"text","text":"what is this?"}]}]}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, e := DecodeChat(data, vision.Limits{})
		if e != nil {
			if e.Status != 400 || e.Type == "" || e.Message == "" || !json.Valid(e.AppendJSON(nil)) {
				t.Fatalf("error %+v", e)
			}
			return
		}
		if strings.TrimSpace(c.Message) == "" && len(c.ToolResults) == 0 && len(c.Images) == 0 || c.Model == "" || len(c.Stop) > MaxStop {
			t.Fatalf("decoded %+v", c)
		}
		for i := 1; i < len(c.History); i++ {
			if c.History[i].Role == c.History[i-1].Role {
				t.Fatalf("history repeats a role: %+v", c.History)
			}
		}
	})
}

// imageChat is a chat whose one user message carries parts, a JSON array's
// elements.
func imageChat(parts ...string) []byte {
	return []byte(`{"model":"m","messages":[{"role":"user","content":[` + strings.Join(parts, ",") + `]}]}`)
}

func imagePart(url, detail string) string {
	b, _ := json.Marshal(map[string]any{"type": "image_url", "image_url": map[string]string{"url": url, "detail": detail}})
	return string(b)
}

func TestDecodeChatImages(t *testing.T) {
	pngURL := visiontest.DataURL("image/png", visiontest.PNG(800, 600))
	jpegURL := visiontest.DataURL("image/jpeg", visiontest.JPEG(40, 30))
	text := `{"type":"text","text":"What is on the cover?"}`
	tests := []struct {
		name      string
		lim       vision.Limits
		give      []byte
		want      []string // the images, as provider.Image.String
		wantParam string
		wantMsg   string
	}{
		{name: "png and jpeg", give: imageChat(imagePart(pngURL, "high"), text, imagePart(jpegURL, "")), want: []string{"800×600 png", "40×30 jpeg"}},
		{name: "image alone", give: imageChat(imagePart(pngURL, "auto")), want: []string{"800×600 png"}},
		{name: "too large", lim: vision.Limits{MaxBytes: 1000}, give: imageChat(imagePart(pngURL, ""), text),
			wantParam: "messages[0].content[0].image_url.url", wantMsg: "the limit is 1000 bytes"},
		{name: "too many", lim: vision.Limits{MaxPerRequest: 1}, give: imageChat(imagePart(jpegURL, ""), imagePart(jpegURL, ""), text),
			wantParam: "messages[0].content[1].image_url.url", wantMsg: "at most 1 images"},
		{name: "too many pixels", lim: vision.Limits{MaxSide: 500}, give: imageChat(imagePart(pngURL, ""), text),
			wantParam: "messages[0].content[0].image_url.url", wantMsg: "the limit is 500 on each side"},
		{name: "lying media type", give: imageChat(imagePart(strings.Replace(pngURL, "image/png", "image/jpeg", 1), ""), text),
			wantParam: "messages[0].content[0].image_url.url", wantMsg: "a png image, not image/jpeg"},
		{name: "remote URL", give: imageChat(imagePart("https://example.com/cover.png", ""), text),
			wantParam: "messages[0].content[0].image_url.url", wantMsg: "remote image URLs are off"},
		{name: "bad base64", give: imageChat(imagePart("data:image/png;base64,%%%%", ""), text),
			wantParam: "messages[0].content[0].image_url.url", wantMsg: "not valid base64"},
		{name: "unknown detail", give: imageChat(imagePart(jpegURL, "ultra"), text),
			wantParam: "messages[0].content[0].image_url.detail"},
		{name: "unknown member", give: imageChat(`{"type":"image_url","image_url":{"url":"`+jpegURL+`","crop":1}}`, text),
			wantParam: "messages[0].content[0].image_url.crop"},
		{name: "image in a tool message", give: []byte(`{"model":"m","messages":[{"role":"user","content":"weather?"},` +
			`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":[` + imagePart(jpegURL, "") + `]}],"tools":[{"type":"function","function":{"name":"w"}}]}`),
			wantParam: "messages[2].content[0].type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, e := DecodeChat(tt.give, tt.lim)
			if tt.wantParam != "" {
				if e == nil || e.Status != 400 || e.Param != tt.wantParam || !strings.Contains(e.Message, tt.wantMsg) {
					t.Fatalf("error %+v; want a 400 naming %q and saying %q", e, tt.wantParam, tt.wantMsg)
				}
				return
			}
			if e != nil {
				t.Fatal(e)
			}
			var got []string
			for _, im := range c.Images {
				got = append(got, im.String())
			}
			if strings.Join(got, "; ") != strings.Join(tt.want, "; ") {
				t.Fatalf("images %q, want %q", got, tt.want)
			}
			if msgs := c.Messages(); len(msgs[len(msgs)-1].Images) != len(tt.want) {
				t.Fatalf("the provider's last message carries %d images, want %d", len(msgs[len(msgs)-1].Images), len(tt.want))
			}
		})
	}
}

func TestDecodeChatImagesInHistoryCountTowardsTheLimit(t *testing.T) {
	jpegURL := visiontest.DataURL("image/jpeg", visiontest.JPEG(8, 8))
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[` + imagePart(jpegURL, "") + `]},` +
		`{"role":"assistant","content":"A cat."},{"role":"user","content":[` + imagePart(jpegURL, "low") + `,{"type":"text","text":"And this?"}]}]}`)
	c, e := DecodeChat(body, vision.Limits{})
	if e != nil {
		t.Fatal(e)
	}
	if len(c.History[0].Images) != 1 || len(c.Images) != 1 || c.Images[0].Detail != "low" || c.Message != "And this?" {
		t.Fatalf("history %+v, images %v, message %q", c.History, c.Images, c.Message)
	}
	if _, e := DecodeChat(body, vision.Limits{MaxPerRequest: 1}); e == nil || e.Param != "messages[2].content[0].image_url.url" {
		t.Fatalf("error %+v; want the second image refused", e)
	}
}

// TestDecodeRemoteImages: on a host the operator allows, an image_url with
// an https URL (Chat Completions) or an input_image's image_url
// (Responses) is a pending image, its detail kept, counted against the
// request's images; elsewhere it is refused naming the field.
func TestDecodeRemoteImages(t *testing.T) {
	lim := vision.Limits{MaxPerRequest: 2, Hosts: vision.Hosts{"*.example.com"}}
	const url = "https://img.example.com/cover.png"
	c, e := DecodeChat(imageChat(imagePart(url, "low"), `{"type":"text","text":"What is this?"}`), lim)
	if e != nil {
		t.Fatal(e)
	}
	if len(c.Images) != 1 || !c.Images[0].Pending() || c.Images[0].URL != url || c.Images[0].Detail != "low" || c.Images[0].Data != nil {
		t.Fatalf("images %+v; want the pending %s at detail low", c.Images, url)
	}
	q, e := DecodeResponses([]byte(`{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"`+url+`","detail":"high"},{"type":"input_text","text":"x"}]}]}`), lim)
	if e != nil {
		t.Fatal(e)
	}
	if _, _, last, e := q.Conversation(nil); e != nil || len(last.Images) != 1 || last.Images[0].URL != url || last.Images[0].Detail != "high" {
		t.Fatalf("responses images %+v (%v); want the pending %s at detail high", last.Images, e, url)
	}
	tests := []struct {
		name, give, wantParam, wantMsg string
	}{
		{"host not allowed", imagePart("https://example.com/cover.png", ""), "messages[0].content[0].image_url.url", "server.images.allowedHosts"},
		{"plain http", imagePart("http://img.example.com/cover.png", ""), "messages[0].content[0].image_url.url", "https only"},
		{"another scheme", imagePart("ftp://img.example.com/cover.png", ""), "messages[0].content[0].image_url.url", "data URL"},
		{"too many", imagePart(url, "") + "," + imagePart(url, "") + "," + imagePart(url, ""), "messages[0].content[2].image_url.url", "at most 2 images"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := DecodeChat(imageChat(tt.give), lim)
			if e == nil || e.Status != 400 || e.Param != tt.wantParam || !strings.Contains(e.Message, tt.wantMsg) {
				t.Fatalf("error %+v; want a 400 naming %q and saying %q", e, tt.wantParam, tt.wantMsg)
			}
		})
	}
}

// servedBy sets its headers without canonicalizing their names: they must
// be canonical already, or Header.Get would not find them.
func TestServedBy(t *testing.T) {
	for _, h := range []string{HeaderTier, HeaderDegraded, HeaderTraceID} {
		if c := http.CanonicalHeaderKey(h); c != h {
			t.Errorf("%s is not canonical (%s)", h, c)
		}
	}
	h := http.Header{}
	servedBy(h, "haiku", true, "")
	if h.Get(HeaderTier) != "haiku" || h.Get(HeaderDegraded) != "true" || h.Values(HeaderTraceID) != nil {
		t.Fatalf("headers %v", h)
	}
	h.Add(HeaderTier, "second")
	if h.Get(HeaderDegraded) != "true" {
		t.Fatalf("adding to one header changed another: %v", h)
	}
	servedBy(h, "sonnet", false, "0af7651916cd43dd8448eb211c80319c")
	if h.Get(HeaderTier) != "sonnet" || h.Get(HeaderDegraded) != "false" || h.Get(HeaderTraceID) != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("headers %v", h)
	}
}
