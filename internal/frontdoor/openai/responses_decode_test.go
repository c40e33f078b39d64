package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// turnOf is what a decoded Responses request hands the turn.
type turnOf struct {
	System      string
	History     []provider.Message
	Message     string
	ToolResults []provider.ToolResult
	Images      []string
	Tools       []provider.Tool
	ToolChoice  provider.ToolChoice
	Format      provider.Format
	Stream      bool
	Store       bool
	MaxOutput   int
	Previous    string
}

func responsesTurn(t *testing.T, q Responses, prior []json.RawMessage) (turnOf, *Error) {
	t.Helper()
	system, history, last, e := q.Conversation(prior)
	if e != nil {
		return turnOf{}, e
	}
	got := turnOf{System: system, History: history, Message: last.Content, ToolResults: last.ToolResults, Tools: q.Tools,
		ToolChoice: q.ToolChoice, Format: q.Format, Stream: q.Stream, Store: q.Store, MaxOutput: q.MaxOutputTokens, Previous: q.PreviousResponseID}
	for _, im := range last.Images {
		got.Images = append(got.Images, im.String())
	}
	return got, nil
}

func TestDecodeResponses(t *testing.T) {
	jpeg := visiontest.DataURL("image/jpeg", visiontest.JPEG(40, 30))
	weather := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	tests := []struct {
		name string
		give string
		want turnOf
	}{
		{
			name: "a string input",
			give: `{"model":"sonnet","input":"Recommend a manga","instructions":"Be brief.","max_output_tokens":200}`,
			want: turnOf{System: "Be brief.", History: []provider.Message{}, Message: "Recommend a manga", Store: true, MaxOutput: 200},
		},
		{
			name: "messages in every form",
			give: `{"model":"m","instructions":"Be brief.","stream":true,"store":false,"input":[` +
				`{"role":"developer","content":"Use English."},` +
				`{"role":"user","content":"hi"},` +
				`{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[],"logprobs":[]}]},` +
				`{"type":"message","role":"system","content":[{"type":"input_text","text":"Answer in one line."}]},` +
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"What is "},{"type":"input_image","image_url":"` + jpeg + `","detail":"low"},{"type":"input_text","text":"this?"}]}]}`,
			want: turnOf{System: "Be brief.\n\nUse English.\n\nAnswer in one line.", Stream: true,
				History: []provider.Message{{Role: provider.RoleUser, Content: "hi"}, {Role: provider.RoleAssistant, Content: "Hello"}},
				Message: "What is this?", Images: []string{"40×30 jpeg"}},
		},
		{
			name: "a function call round trip",
			give: `{"model":"m","input":[{"role":"user","content":"Weather in Tokyo and 大阪?"},` +
				`{"type":"function_call","id":"fc_1","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Tokyo\"}","status":"completed"},` +
				`{"type":"function_call","call_id":"c2","name":"get_weather","arguments":"{\"city\":\"大阪\"}"},` +
				`{"type":"function_call_output","call_id":"c1","output":"晴れ"},` +
				`{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"rain"}]}],` +
				`"tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":` + weather + `}],` +
				`"tool_choice":"auto","parallel_tool_calls":false}`,
			want: turnOf{Store: true,
				History: []provider.Message{{Role: provider.RoleUser, Content: "Weather in Tokyo and 大阪?"},
					{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo"}`)},
						{ID: "c2", Name: "get_weather", Input: json.RawMessage(`{"city":"大阪"}`)}}}},
				ToolResults: []provider.ToolResult{{CallID: "c1", Content: "晴れ"}, {CallID: "c2", Content: "rain"}},
				Tools:       []provider.Tool{{Name: "get_weather", Description: "Weather", Schema: json.RawMessage(weather), Strict: true}},
				ToolChoice:  provider.ToolChoice{Sequential: true}},
		},
		{
			name: "text after a call joins the assistant message",
			give: `{"model":"m","input":[{"role":"user","content":"x"},{"role":"assistant","content":"Let me look."},` +
				`{"type":"function_call","call_id":"c1","name":"f","arguments":""},{"type":"function_call_output","call_id":"c1","output":"r"},{"role":"user","content":"and?"}],` +
				`"tools":[{"type":"function","name":"f","strict":false}],"tool_choice":{"type":"function","name":"f"}}`,
			want: turnOf{Store: true,
				History: []provider.Message{{Role: provider.RoleUser, Content: "x"},
					{Role: provider.RoleAssistant, Content: "Let me look.", ToolCalls: []provider.ToolCall{{ID: "c1", Name: "f", Input: json.RawMessage(`{}`)}}}},
				Message: "and?", ToolResults: []provider.ToolResult{{CallID: "c1", Content: "r"}},
				Tools:      []provider.Tool{{Name: "f", Schema: emptySchema}},
				ToolChoice: provider.ToolChoice{Mode: provider.ToolNamed, Name: "f"}},
		},
		{
			name: "json schema",
			give: `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"manga","description":"One manga","schema":{"type":"object"},"strict":true}},"metadata":{"app":"store"}}`,
			want: turnOf{Store: true, History: []provider.Message{}, Message: "x",
				Format: provider.Format{Kind: provider.FormatJSONSchema, Name: "manga", Description: "One manga", Schema: json.RawMessage(`{"type":"object"}`), Strict: true}},
		},
		{
			name: "json object, and what is accepted at the value that changes nothing",
			give: `{"model":"m","input":"x","text":{"format":{"type":"json_object"}},"background":false,"include":[],"reasoning":null,"truncation":"auto","top_logprobs":0,"previous_response_id":"resp_1","user":"u1"}`,
			want: turnOf{Store: true, History: []provider.Message{}, Message: "x", Format: provider.Format{Kind: provider.FormatJSONObject}, Previous: "resp_1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, e := DecodeResponses([]byte(tt.give), vision.Limits{})
			if e != nil {
				t.Fatal(e)
			}
			got, e := responsesTurn(t, q, nil)
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

func TestDecodeResponsesRefuses(t *testing.T) {
	tests := []struct {
		name, give, wantParam string
	}{
		{"unknown field", `{"model":"m","input":"x","seed":1}`, "seed"},
		{"web search tool", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, "tools[0].type"},
		{"file search tool", `{"model":"m","input":"x","tools":[{"type":"file_search","vector_store_ids":["vs"]}]}`, "tools[0].type"},
		{"chat-shaped tool", `{"model":"m","input":"x","tools":[{"type":"function","function":{"name":"f"}}]}`, "tools[0].function"},
		{"deferred tool", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","defer_loading":true}]}`, "tools[0].defer_loading"},
		{"bad tool name", `{"model":"m","input":"x","tools":[{"type":"function","name":"a b"}]}`, "tools[0].name"},
		{"hosted tool choice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"web_search_preview"}}`, "tool_choice.type"},
		{"allowed tools choice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[]}}`, "tool_choice.type"},
		{"choice names no tool", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, "tool_choice"},
		{"required without tools", `{"model":"m","input":"x","tool_choice":"required"}`, "tool_choice"},
		{"background", `{"model":"m","input":"x","background":true}`, "background"},
		{"reasoning", `{"model":"m","input":"x","reasoning":{"effort":"high"}}`, "reasoning"},
		{"include", `{"model":"m","input":"x","include":["message.output_text.logprobs"]}`, "include"},
		{"conversation", `{"model":"m","input":"x","conversation":"conv_1"}`, "conversation"},
		{"prompt", `{"model":"m","input":"x","prompt":{"id":"pmpt_1"}}`, "prompt"},
		{"service tier", `{"model":"m","input":"x","service_tier":"flex"}`, "service_tier"},
		{"truncation disabled", `{"model":"m","input":"x","truncation":"disabled"}`, "truncation"},
		{"verbosity", `{"model":"m","input":"x","text":{"verbosity":"low"}}`, "text.verbosity"},
		{"unknown format", `{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`, "text.format.type"},
		{"chat-shaped schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","json_schema":{"name":"a","schema":{}}}}}`, "text.format.json_schema"},
		{"schema without name", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","schema":{"type":"object"}}}}`, "text.format.name"},
		{"few output tokens", `{"model":"m","input":"x","max_output_tokens":8}`, "max_output_tokens"},
		{"hot temperature", `{"model":"m","input":"x","temperature":2.5}`, "temperature"},
		{"stream options without stream", `{"model":"m","input":"x","stream_options":{"include_obfuscation":false}}`, "stream_options"},
		{"no model", `{"input":"x"}`, "model"},
		{"no input", `{"model":"m"}`, "input"},
		{"empty input", `{"model":"m","input":[]}`, "input"},
		{"empty previous response id", `{"model":"m","input":"x","previous_response_id":""}`, "previous_response_id"},
		{"reasoning item", `{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]},{"role":"user","content":"x"}]}`, "input[0].type"},
		{"item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, "input[0].type"},
		{"web search call item", `{"model":"m","input":[{"type":"web_search_call","id":"ws_1","status":"completed"}]}`, "input[0].type"},
		{"file part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file_1"}]}]}`, "input[0].content[0].type"},
		{"image by file id", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1","detail":"auto"}]}]}`, "input[0].content[0].file_id"},
		{"remote image", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png","detail":"auto"}]}]}`, "input[0].content[0].image_url"},
		{"image from the assistant", `{"model":"m","input":[{"role":"assistant","content":[{"type":"input_image","image_url":"data:image/png;base64,AA=="}]},{"role":"user","content":"x"}]}`, "input[0].content[0].type"},
		{"unknown role", `{"model":"m","input":[{"role":"tool","content":"x"}]}`, "input[0].role"},
		{"unknown message member", `{"model":"m","input":[{"role":"user","content":"x","name":"aiko"}]}`, "input[0].name"},
		{"unknown part member", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x","cache_control":{}}]}]}`, "input[0].content[0].cache_control"},
		{"call without id", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"}]}`, "input[1].call_id"},
		{"arguments not an object", `{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"},{"type":"function_call_output","call_id":"c","output":"r"}]}`, "input[1].arguments"},
		{"output without call id", `{"model":"m","input":[{"type":"function_call_output","output":"r"}]}`, "input[0].call_id"},
		{"image in an output", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"data:image/png;base64,AA=="}]}]}`, "input[0].output[0].type"},
		{"not json", `input=x`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := DecodeResponses([]byte(tt.give), vision.Limits{})
			if e == nil || e.Status != 400 || e.Type != "invalid_request_error" || e.Param != tt.wantParam || e.Message == "" {
				t.Fatalf("error %+v; want a 400 naming %q", e, tt.wantParam)
			}
		})
	}
}

// The conversation is checked whole: what the request's input says must
// follow from the stored conversation it continues.
func TestResponsesConversationRefuses(t *testing.T) {
	prior := []json.RawMessage{
		json.RawMessage(`{"role":"user","content":"Weather in Tokyo?"}`),
		json.RawMessage(`{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"city\":\"Tokyo\"}","call_id":"c1","name":"get_weather"}`),
	}
	tests := []struct{ name, give string }{
		{"last item from the assistant", `{"model":"m","input":[{"role":"user","content":"x"},{"role":"assistant","content":"y"}]}`},
		{"a result for no call", `{"model":"m","input":[{"type":"function_call_output","call_id":"c9","output":"r"}]}`},
		{"a call left unanswered", `{"model":"m","input":"And Osaka?"}`},
		{"an empty message", `{"model":"m","input":"  "}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, e := DecodeResponses([]byte(tt.give), vision.Limits{})
			if e != nil {
				t.Fatal(e)
			}
			p := prior
			if tt.name == "last item from the assistant" || tt.name == "an empty message" {
				p = nil
			}
			if _, e := responsesTurn(t, q, p); e == nil || e.Status != 400 || e.Param != "input" {
				t.Fatalf("error %+v; want a 400 naming input", e)
			}
		})
	}
	q, e := DecodeResponses([]byte(`{"model":"m","instructions":"Be brief.","input":[{"type":"function_call_output","call_id":"c1","output":"晴れ"}]}`), vision.Limits{})
	if e != nil {
		t.Fatal(e)
	}
	got, e := responsesTurn(t, q, prior)
	if e != nil {
		t.Fatal(e)
	}
	if got.System != "Be brief." || len(got.History) != 2 || got.History[1].ToolCalls[0].ID != "c1" || got.ToolResults[0].Content != "晴れ" {
		t.Fatalf("continued conversation %+v; want the stored call answered by the input's result", got)
	}
}

func TestDecodeResponsesImagesCountWithTheStoredOnes(t *testing.T) {
	jpeg := visiontest.DataURL("image/jpeg", visiontest.JPEG(8, 8))
	part := `{"type":"input_image","image_url":"` + jpeg + `"}`
	prior := []json.RawMessage{json.RawMessage(`{"role":"user","content":[` + part + `]}`), json.RawMessage(`{"role":"assistant","content":"A cat."}`)}
	q, e := DecodeResponses([]byte(`{"model":"m","input":[{"role":"user","content":[`+part+`,{"type":"input_text","text":"And this?"}]}]}`), vision.Limits{MaxPerRequest: 1})
	if e != nil {
		t.Fatal(e)
	}
	if _, e := responsesTurn(t, q, prior); e == nil || e.Param != "previous_response_id[0].content[0].image_url" || !strings.Contains(e.Message, "at most 1") {
		t.Fatalf("error %+v; want the stored image over the limit of 1", e)
	}
}

// FuzzDecodeResponses: any body gets a decoded request or a 400/413 in
// OpenAI's shape, never a panic; a conversation that decodes always ends
// in a user message to answer.
func FuzzDecodeResponses(f *testing.F) {
	for _, seed := range []string{
		`{"model":"sonnet","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}],"stream":true,"instructions":"s"}`,
		`{"model":"m","input":[{"role":"user","content":"w"},{"type":"function_call","call_id":"c","name":"get_weather","arguments":"{\"city\":\"東京\"}"},{"type":"function_call_output","call_id":"c","output":"晴れ"}],"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"},"strict":true}],"tool_choice":"required","parallel_tool_calls":false}`,
		`{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"a","schema":{"type":"object"},"strict":true}},"top_p":0.5,"metadata":{"k":"v"},"previous_response_id":"resp_1","store":false}`,
		`{"model":"m","input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"x","annotations":[]}]}]}`,
		`[]`, `null`, `{"model":"m","input":[{}]}`, "{\"model\":\"\xff\"}", `{"model":"m","input":[null]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		q, e := DecodeResponses(data, vision.Limits{})
		if e != nil {
			if e.Status != 400 || e.Type == "" || e.Message == "" || !json.Valid(e.AppendJSON(nil)) {
				t.Fatalf("error %+v", e)
			}
			return
		}
		if q.Model == "" || len(q.Items) == 0 {
			t.Fatalf("decoded %+v", q)
		}
		for _, it := range q.Items {
			if !json.Valid(it) {
				t.Fatalf("stored item %q is not JSON", it)
			}
		}
		_, history, last, e := q.Conversation(nil)
		if e != nil {
			return
		}
		if last.Role != provider.RoleUser || strings.TrimSpace(last.Content) == "" && len(last.ToolResults) == 0 && len(last.Images) == 0 {
			t.Fatalf("last message %+v", last)
		}
		if err := provider.CheckToolPairing(append(history, last)); err != nil {
			t.Fatalf("history %+v: %v", history, err)
		}
	})
}
