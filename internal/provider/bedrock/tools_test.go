package bedrock_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/frontdoor/bedrock"
	"github.com/fmgate/fmgate/internal/provider"
)

var (
	weather = provider.Tool{Name: "get_weather", Description: "The weather in a city.",
		Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1}},"required":["city","days"]}`)}
	clock = provider.Tool{Name: "get_time", Description: "The local time in a city.",
		Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}
	search = provider.Tool{Name: "search_catalog", Description: "Search the manga catalog.",
		Schema: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)}
)

// call answers req with Complete, or with Stream, checking that a tool
// answer emits no text.
func call(t *testing.T, p interface {
	Complete(context.Context, *provider.Request) (*provider.Response, error)
	Stream(context.Context, *provider.Request, func(string) error) (*provider.Response, error)
}, req *provider.Request, stream bool) *provider.Response {
	t.Helper()
	if !stream {
		resp, err := p.Complete(context.Background(), req)
		if err != nil {
			t.Fatalf("converse: %v", err)
		}
		return resp
	}
	var emitted strings.Builder
	resp, err := p.Stream(context.Background(), req, func(d string) error { emitted.WriteString(d); return nil })
	if err != nil {
		t.Fatalf("converse-stream: %v", err)
	}
	if emitted.String() != resp.Text {
		t.Fatalf("emitted %q, answer text %q", emitted.String(), resp.Text)
	}
	return resp
}

func object(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("input %s is not a JSON object: %v", raw, err)
	}
	return m
}

func TestToolRoundTrip(t *testing.T) {
	s, srv := startSim(t)
	p := newProvider(t, srv.URL)
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "converse", true: "stream"}[stream], func(t *testing.T) {
			req := request("What is the weather in Tokyo?")
			req.Tools = []provider.Tool{search, weather}
			before := s.Usage("sonnet")
			resp := call(t, p, req, stream)
			if resp.StopReason != provider.StopToolUse || len(resp.ToolCalls) != 1 {
				t.Fatalf("stop %q, calls %+v; want one tool_use call", resp.StopReason, resp.ToolCalls)
			}
			c := resp.ToolCalls[0]
			in := object(t, c.Input)
			if c.Name != "get_weather" || c.ID == "" || in["city"] != "What is the weather in Tokyo?" || in["days"] != 1.0 {
				t.Fatalf("call %s %s %s; want get_weather with the city and days 1", c.ID, c.Name, c.Input)
			}
			after := s.Usage("sonnet")
			if want := after.OutputTokens - before.OutputTokens; resp.Usage.OutputTokens != want || resp.Usage.Estimated {
				t.Fatalf("usage %+v; the simulator billed %d output tokens", resp.Usage, want)
			}

			req.Messages = append(req.Messages,
				provider.Message{Role: provider.RoleAssistant, ToolCalls: resp.ToolCalls},
				provider.Message{Role: provider.RoleUser, ToolResults: []provider.ToolResult{{CallID: c.ID, Content: `{"forecast":"sunny, 24°C"}`}}})
			resp = call(t, p, req, stream)
			if resp.StopReason != "end_turn" || len(resp.ToolCalls) != 0 {
				t.Fatalf("stop %q, calls %+v; want a text answer", resp.StopReason, resp.ToolCalls)
			}
			if want := `From get_weather: {"forecast":"sunny, 24°C"}`; resp.Text != want {
				t.Fatalf("answer %q, want %q", resp.Text, want)
			}
		})
	}
}

func TestToolErrorResult(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	req := request("What is the weather in Tokyo?")
	req.Tools = []provider.Tool{weather}
	req.Messages = append(req.Messages,
		provider.Message{Role: provider.RoleAssistant, Content: "Let me look.", ToolCalls: []provider.ToolCall{{ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo","days":1}`)}}},
		provider.Message{Role: provider.RoleUser, ToolResults: []provider.ToolResult{{CallID: "toolu_1", Content: "the weather service is down", IsError: true}}})
	resp := call(t, p, req, false)
	if want := "The get_weather tool failed: the weather service is down"; resp.Text != want {
		t.Fatalf("answer %q, want %q", resp.Text, want)
	}
}

func TestForcedAndParallelToolCalls(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	tests := []struct {
		name   string
		msg    string
		choice provider.ToolChoice
		want   []string
	}{
		{"named", "Recommend a fantasy manga", provider.ToolChoice{Mode: provider.ToolNamed, Name: "search_catalog"}, []string{"search_catalog"}},
		{"any", "Recommend a fantasy manga", provider.ToolChoice{Mode: provider.ToolAny}, []string{"get_weather"}},
		{"parallel", "What are the weather and the time in Osaka?", provider.ToolChoice{}, []string{"get_weather", "get_time"}},
		{"none sends no tools", "What is the weather in Tokyo?", provider.ToolChoice{Mode: provider.ToolNone}, nil},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: " converse", true: " stream"}[stream], func(t *testing.T) {
				req := request(tt.msg)
				req.Tools, req.ToolChoice = []provider.Tool{weather, clock, search}, tt.choice
				resp := call(t, p, req, stream)
				var names []string
				ids := map[string]bool{}
				for _, c := range resp.ToolCalls {
					names = append(names, c.Name)
					ids[c.ID] = true
					object(t, c.Input)
				}
				if !reflect.DeepEqual(names, tt.want) || len(ids) != len(names) {
					t.Fatalf("calls %+v; want %v with distinct ids", resp.ToolCalls, tt.want)
				}
				if wantStop := map[bool]string{true: provider.StopToolUse, false: "end_turn"}[len(tt.want) > 0]; resp.StopReason != wantStop {
					t.Fatalf("stop %q, want %q", resp.StopReason, wantStop)
				}
			})
		}
	}
}

// TestToolArgumentsKeepTheirUTF8: Japanese arguments survive the input
// document (JSON) and the streamed fragments (cut into pieces) whole.
func TestToolArgumentsKeepTheirUTF8(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	msg := "東京の天気（weather）を教えてください。週末は晴れますか？それとも雨でしょうか？傘が必要か知りたいです。"
	for _, stream := range []bool{false, true} {
		req := request(msg)
		req.Tools = []provider.Tool{weather}
		resp := call(t, p, req, stream)
		if len(resp.ToolCalls) != 1 {
			t.Fatalf("stream %v: calls %+v", stream, resp.ToolCalls)
		}
		if got := object(t, resp.ToolCalls[0].Input)["city"]; got != msg {
			t.Fatalf("stream %v: city %q, want %q", stream, got, msg)
		}
	}
}

// TestToolChoiceNoneWithToolHistory: under "none", a conversation that
// already holds tool blocks still sends the tools (Bedrock refuses tool
// blocks without a toolConfig), and the answer quotes the result.
func TestToolChoiceNoneWithToolHistory(t *testing.T) {
	_, srv := startSim(t)
	p := newProvider(t, srv.URL)
	req := request("What is the weather in Tokyo?")
	req.Tools, req.ToolChoice = []provider.Tool{weather}, provider.ToolChoice{Mode: provider.ToolNone}
	req.Messages = append(req.Messages,
		provider.Message{Role: provider.RoleAssistant, ToolCalls: []provider.ToolCall{{ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo","days":1}`)}}},
		provider.Message{Role: provider.RoleUser, Content: "Summarise it.", ToolResults: []provider.ToolResult{{CallID: "toolu_1", Content: "rain"}},
			Cache: []provider.CacheMark{{At: len("Summarise it."), TTL: provider.CacheTTL}}})
	if resp := call(t, p, req, true); resp.Text != "From get_weather: rain" {
		t.Fatalf("answer %q", resp.Text)
	}
}

// TestToolCallBlocksOnTheWire: what the provider sends for a conversation
// with tool blocks: results before text, calls after text, a cache mark of
// a message of tool blocks alone after them (no empty text block), the
// input schema and call input as JSON objects, and the tool choice.
func TestToolCallBlocksOnTheWire(t *testing.T) {
	var body map[string]any
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dec := json.NewDecoder(r.Body)
		dec.UseNumber() // the input's big number must arrive exact
		if err := dec.Decode(&body); err != nil {
			t.Error(err)
		}
		bedrock.WriteConverse(w, nil, "ok", nil, "end_turn", provider.Usage{InputTokens: 1, OutputTokens: 1}, 0, nil)
	}))
	p := newProvider(t, srv.URL)
	req := request("What is the weather in Tokyo?")
	req.Tools, req.ToolChoice = []provider.Tool{weather}, provider.ToolChoice{Mode: provider.ToolNamed, Name: "get_weather"}
	req.Messages = append(req.Messages,
		provider.Message{Role: provider.RoleAssistant, Content: "Looking.", ToolCalls: []provider.ToolCall{{ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"東京","days":12345678901234567}`)}}},
		provider.Message{Role: provider.RoleUser, ToolResults: []provider.ToolResult{{CallID: "toolu_1", Content: "rain", IsError: true}},
			Cache: []provider.CacheMark{{At: 0, TTL: provider.CacheTTLLong}}})
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(body["messages"].([]any)[1:])
	want := `[{"content":[{"text":"Looking."},{"toolUse":{"input":{"city":"東京","days":12345678901234567},"name":"get_weather","toolUseId":"toolu_1"}}],"role":"assistant"},` +
		`{"content":[{"toolResult":{"content":[{"text":"rain"}],"status":"error","toolUseId":"toolu_1"}},{"cachePoint":{"ttl":"1h","type":"default"}}],"role":"user"}]`
	if string(got) != want {
		t.Fatalf("messages\n got %s\nwant %s", got, want)
	}
	tc, _ := json.Marshal(body["toolConfig"])
	wantTC := `{"toolChoice":{"tool":{"name":"get_weather"}},"tools":[{"toolSpec":{"description":"The weather in a city.","inputSchema":{"json":{"properties":{"city":{"type":"string"},"days":{"minimum":1,"type":"integer"}},"required":["city","days"],"type":"object"}},"name":"get_weather"}}]}`
	if string(tc) != wantTC {
		t.Fatalf("toolConfig\n got %s\nwant %s", tc, wantTC)
	}
}

// TestMalformedStreamedToolInput: streamed input fragments that do not
// join into a JSON object fail the call as unavailable, naming the call.
func TestMalformedStreamedToolInput(t *testing.T) {
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ew := bedrock.NewEventWriter(w)
		_ = ew.ToolCalls([]provider.ToolCall{{ID: "toolu_bad", Name: "get_weather", Input: json.RawMessage(`{"city": "Tok`)}})
		_ = ew.Stop("tool_use", provider.Usage{InputTokens: 10, OutputTokens: 5}, 0, nil)
	}))
	p := newProvider(t, srv.URL)
	req := request("What is the weather in Tokyo?")
	req.Tools = []provider.Tool{weather}
	resp, err := p.Stream(context.Background(), req, nil)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Kind != provider.KindUnavailable || !strings.Contains(err.Error(), `"toolu_bad"`) || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("err = %v; want unavailable naming toolu_bad's input", err)
	}
	if resp == nil || resp.Usage.OutputTokens != 5 {
		t.Fatalf("response %+v; want the reported usage kept for billing", resp)
	}
}

// TestCutToolCallIsEstimated: a stream cut while the model writes its tool
// call fails as unavailable with no call, billed an estimate that counts
// the tools offered.
func TestCutToolCallIsEstimated(t *testing.T) {
	s, srv := startSim(t)
	st, _ := s.Settings("sonnet")
	st.CutAfterTokens = 2
	if err := s.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, srv.URL)
	bare := request("What is the weather in Tokyo?")
	bareResp, _ := p.Stream(context.Background(), bare, nil)
	req := request("What is the weather in Tokyo?")
	req.Tools = []provider.Tool{weather, clock, search}
	resp, err := p.Stream(context.Background(), req, nil)
	if provider.KindOf(err) != provider.KindUnavailable || len(resp.ToolCalls) != 0 {
		t.Fatalf("err %v, calls %+v; want unavailable and no call", err, resp.ToolCalls)
	}
	if !resp.Usage.Estimated || resp.Usage.InputTokens <= bareResp.Usage.InputTokens {
		t.Fatalf("usage %+v (without tools %+v); want an estimate counting the tools", resp.Usage, bareResp.Usage)
	}
}

// TestRequestMetadataOnTheWire: a request's metadata reaches Converse as
// requestMetadata, and none is sent without it.
func TestRequestMetadataOnTheWire(t *testing.T) {
	var bodies []map[string]any
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Error(err)
		}
		bodies = append(bodies, body)
		bedrock.WriteConverse(w, nil, "ok", nil, "end_turn", provider.Usage{InputTokens: 1, OutputTokens: 1}, 0, nil)
	}))
	p := newProvider(t, srv.URL)
	req := request("Hello")
	req.Metadata = map[string]string{"tenant": "storefront", "feature": "chat"}
	for _, r := range []*provider.Request{req, request("Hello")} {
		if _, err := p.Complete(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := json.Marshal(bodies[0]["requestMetadata"])
	if string(got) != `{"feature":"chat","tenant":"storefront"}` {
		t.Fatalf("requestMetadata %s", got)
	}
	if _, ok := bodies[1]["requestMetadata"]; ok {
		t.Fatalf("a request without metadata sent %v", bodies[1]["requestMetadata"])
	}
}
