package bedrock_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	providerbedrock "github.com/fmgate/fmgate/internal/provider/bedrock"
)

func toolSpec(name, schema string) types.Tool {
	var s map[string]any
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		panic(err)
	}
	return &types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String(name), Description: aws.String("The " + name + " tool."),
		InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(s)}}}
}

// weatherTools are what the tests offer: the simulated model calls the
// ones whose name's words the message holds.
func weatherTools(choice types.ToolChoice) *types.ToolConfiguration {
	return &types.ToolConfiguration{ToolChoice: choice, Tools: []types.Tool{
		toolSpec("get_weather", `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
		toolSpec("get_time", `{"type":"object","properties":{"city":{"type":"string"},"utc":{"type":"boolean"}},"required":["city","utc"]}`),
		toolSpec("search_catalog", `{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`),
	}}
}

// toolAnswer is what a client saw of an answer: its text, its tool calls
// (input as JSON) and stop reason; for a stream, the events in order and
// the input fragments.
type toolAnswer struct {
	text      string
	calls     []provider.ToolCall
	stop      types.StopReason
	events    []string
	fragments []string
}

func converseTools(t *testing.T, c *bedrockruntime.Client, msgs []types.Message, tc *types.ToolConfiguration) toolAnswer {
	t.Helper()
	out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(sonnetModelID), Messages: msgs, ToolConfig: tc})
	if err != nil {
		t.Fatal(err)
	}
	a := toolAnswer{stop: out.StopReason}
	for _, b := range out.Output.(*types.ConverseOutputMemberMessage).Value.Content {
		switch v := b.(type) {
		case *types.ContentBlockMemberText:
			a.text += v.Value
			a.events = append(a.events, "text")
		case *types.ContentBlockMemberToolUse:
			input, err := v.Value.Input.MarshalSmithyDocument()
			if err != nil {
				t.Fatal(err)
			}
			a.calls = append(a.calls, provider.ToolCall{ID: aws.ToString(v.Value.ToolUseId), Name: aws.ToString(v.Value.Name), Input: input})
			a.events = append(a.events, "toolUse")
		}
	}
	return a
}

func converseStreamTools(t *testing.T, c *bedrockruntime.Client, msgs []types.Message, tc *types.ToolConfiguration) toolAnswer {
	t.Helper()
	out, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(sonnetModelID), Messages: msgs, ToolConfig: tc})
	if err != nil {
		t.Fatal(err)
	}
	es := out.GetStream()
	defer es.Close()
	var a toolAnswer
	inputs := map[int32]*strings.Builder{}
	for ev := range es.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
			a.events = append(a.events, "messageStart")
		case *types.ConverseStreamOutputMemberContentBlockStart:
			u := v.Value.Start.(*types.ContentBlockStartMemberToolUse).Value
			i := aws.ToInt32(v.Value.ContentBlockIndex)
			a.events = append(a.events, "start "+itoa(i))
			a.calls = append(a.calls, provider.ToolCall{ID: aws.ToString(u.ToolUseId), Name: aws.ToString(u.Name)})
			inputs[i] = &strings.Builder{}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			i := aws.ToInt32(v.Value.ContentBlockIndex)
			switch d := v.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				a.text += d.Value
				if last := a.events[len(a.events)-1]; last != "text "+itoa(i) {
					a.events = append(a.events, "text "+itoa(i))
				}
			case *types.ContentBlockDeltaMemberToolUse:
				inputs[i].WriteString(aws.ToString(d.Value.Input))
				a.fragments = append(a.fragments, aws.ToString(d.Value.Input))
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
			a.events = append(a.events, "stop "+itoa(aws.ToInt32(v.Value.ContentBlockIndex)))
		case *types.ConverseStreamOutputMemberMessageStop:
			a.events = append(a.events, "messageStop")
			a.stop = v.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			a.events = append(a.events, "metadata")
		}
	}
	if err := es.Err(); err != nil {
		t.Fatal(err)
	}
	first := int32(len(a.events)) // the tool blocks' indexes follow the text's, if any
	for i := range inputs {
		first = min(first, i)
	}
	for k := range a.calls {
		a.calls[k].Input = json.RawMessage(inputs[first+int32(k)].String())
	}
	return a
}

func itoa(i int32) string { return string(rune('0' + i)) }

func asked(text string) []types.Message { return userMessage(text) }

// answered is msgs followed by the assistant's tool calls and the user's
// results of them, each result its call's name and input.
func answered(msgs []types.Message, calls []provider.ToolCall, extra ...types.ContentBlock) []types.Message {
	var uses, results []types.ContentBlock
	for _, c := range calls {
		var in map[string]any
		_ = json.Unmarshal(c.Input, &in)
		uses = append(uses, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String(c.ID), Name: aws.String(c.Name), Input: document.NewLazyDocument(in)}})
		results = append(results, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{ToolUseId: aws.String(c.ID),
			Content: []types.ToolResultContentBlock{
				&types.ToolResultContentBlockMemberText{Value: c.Name + " says"},
				&types.ToolResultContentBlockMemberJson{Value: document.NewLazyDocument(map[string]any{"sky": "晴れ"})},
			}}})
	}
	return append(msgs,
		types.Message{Role: types.ConversationRoleAssistant, Content: uses},
		types.Message{Role: types.ConversationRoleUser, Content: append(results, extra...)})
}

func TestGoSDKToolRoundTrip(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "converse", true: "stream"}[stream], func(t *testing.T) {
			call := converseTools
			if stream {
				call = converseStreamTools
			}
			msgs := asked("What is the weather in Tokyo?")
			a := call(t, c, msgs, weatherTools(nil))
			if a.stop != types.StopReasonToolUse || len(a.calls) != 1 || a.calls[0].Name != "get_weather" || a.text != "" {
				t.Fatalf("stop %q text %q calls %+v; want one get_weather call", a.stop, a.text, a.calls)
			}
			if in := string(a.calls[0].Input); in != `{"city":"What is the weather in Tokyo?"}` {
				t.Fatalf("input %s", in)
			}
			if want := []string{"toolUse"}; !stream && !reflect.DeepEqual(a.events, want) {
				t.Fatalf("content %v, want %v (no empty text block)", a.events, want)
			}
			if want := []string{"messageStart", "start 0", "stop 0", "messageStop", "metadata"}; stream && !reflect.DeepEqual(a.events, want) {
				t.Fatalf("events %v, want %v", a.events, want)
			}

			a = call(t, c, answered(msgs, a.calls), weatherTools(nil))
			if want := `From get_weather: get_weather says` + "\n" + `{"sky":"晴れ"}`; a.text != want || a.stop != types.StopReasonEndTurn || len(a.calls) != 0 {
				t.Fatalf("answer %q stop %q calls %+v; want %q", a.text, a.stop, a.calls, want)
			}
		})
	}
}

func TestGoSDKToolChoices(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	tests := []struct {
		name   string
		msg    string
		choice types.ToolChoice
		want   []string
	}{
		{"named", "Recommend a fantasy manga", &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String("search_catalog")}}, []string{"search_catalog"}},
		{"any", "Recommend a fantasy manga", &types.ToolChoiceMemberAny{Value: types.AnyToolChoice{}}, []string{"get_weather"}},
		{"parallel", "What are the weather and the time in Osaka?", &types.ToolChoiceMemberAuto{Value: types.AutoToolChoice{}}, []string{"get_weather", "get_time"}},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: " converse", true: " stream"}[stream], func(t *testing.T) {
				call := converseTools
				if stream {
					call = converseStreamTools
				}
				a := call(t, c, asked(tt.msg), weatherTools(tt.choice))
				var names []string
				for _, call := range a.calls {
					names = append(names, call.Name)
					if !provider.IsJSONObject(call.Input) {
						t.Fatalf("input %q of %s is not a JSON object", call.Input, call.Name)
					}
				}
				if !reflect.DeepEqual(names, tt.want) || a.stop != types.StopReasonToolUse {
					t.Fatalf("calls %v stop %q; want %v tool_use", names, a.stop, tt.want)
				}
				if stream && len(tt.want) == 2 {
					want := []string{"messageStart", "start 0", "stop 0", "start 1", "stop 1", "messageStop", "metadata"}
					if !reflect.DeepEqual(a.events, want) {
						t.Fatalf("events %v, want %v", a.events, want)
					}
				}
			})
		}
	}
}

// TestGoSDKToolInputInPieces: a long Japanese input streams in pieces of
// at most 48 bytes, each whole UTF-8, that join into the input.
func TestGoSDKToolInputInPieces(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	msg := "東京の天気（weather）を教えてください。週末は晴れますか？傘が必要か知りたいです。"
	a := converseStreamTools(t, c, asked(msg), weatherTools(nil))
	if len(a.calls) != 1 || len(a.fragments) < 3 {
		t.Fatalf("calls %+v in %d fragments; want one call in several", a.calls, len(a.fragments))
	}
	for _, f := range a.fragments {
		if len(f) > 48 || !utf8.ValidString(f) {
			t.Fatalf("fragment %q: %d bytes, valid UTF-8 %v", f, len(f), utf8.ValidString(f))
		}
	}
	var in struct{ City string }
	if err := json.Unmarshal(a.calls[0].Input, &in); err != nil || in.City != msg {
		t.Fatalf("input %s (%v); want the city %q", a.calls[0].Input, err, msg)
	}
	if j := converseTools(t, c, asked(msg), weatherTools(nil)); !reflect.DeepEqual(j.calls, a.calls) {
		t.Fatalf("Converse calls %+v, ConverseStream calls %+v", j.calls, a.calls)
	}
}

// TestToolRequestsAreRefused: malformed tool configurations and tool
// blocks get a ValidationException naming the field, through the real SDK.
func TestToolRequestsAreRefused(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	call := []provider.ToolCall{{ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo"}`)}}
	withTools := func(tools ...types.Tool) *types.ToolConfiguration { return &types.ToolConfiguration{Tools: tools} }
	weather := toolSpec("get_weather", `{"type":"object"}`)
	tests := []struct {
		name  string
		msgs  []types.Message
		tools *types.ToolConfiguration
		want  string
	}{
		{"cachePoint among tools", asked("hi"), withTools(weather, &types.ToolMemberCachePoint{Value: types.CachePointBlock{Type: types.CachePointTypeDefault}}),
			"toolConfig.tools[1]: cachePoint entries in tools are not supported"},
		{"schema not an object", asked("hi"), withTools(&types.ToolMemberToolSpec{Value: types.ToolSpecification{Name: aws.String("get_weather"),
			InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument("a string")}}}), "toolConfig.tools[0].toolSpec.inputSchema.json"},
		{"tool name with a space", asked("hi"), withTools(toolSpec("get weather", `{"type":"object"}`)), "toolConfig.tools[0].toolSpec.name"},
		{"tool offered twice", asked("hi"), withTools(weather, weather), "offered twice"},
		{"choice of a tool not offered", asked("hi"), &types.ToolConfiguration{Tools: []types.Tool{weather},
			ToolChoice: &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String("get_time")}}}, "toolConfig.toolChoice"},
		{"toolResult without its toolUse", []types.Message{
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "weather?"}}},
			{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "Let me see."}}},
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
				ToolUseId: aws.String("toolu_1"), Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "rain"}}}}}},
		}, withTools(weather), "message 2 holds tool results, but the message before it calls no tools"},
		{"toolResult of another toolUse", answered(asked("weather?"), call, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
			ToolUseId: aws.String("toolu_2"), Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: "rain"}}}}),
			withTools(weather), `answers tool call "toolu_2"`},
		{"toolUse without toolConfig", answered(asked("weather?"), call), nil, "toolConfig must be defined"},
		{"toolUse in a user message", []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberToolUse{
			Value: types.ToolUseBlock{ToolUseId: aws.String("toolu_1"), Name: aws.String("get_weather"), Input: document.NewLazyDocument(map[string]any{})}}}}},
			withTools(weather), "messages[0].content[0]: toolUse blocks belong in assistant messages"},
		{"image in a toolResult", answered(asked("weather?"), call, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
			ToolUseId: aws.String("toolu_1"), Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberImage{Value: types.ImageBlock{
				Format: types.ImageFormatPng, Source: &types.ImageSourceMemberBytes{Value: []byte{1}}}}}}}),
			withTools(weather), "toolResult.content[0]: image items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: tt.msgs, ToolConfig: tt.tools})
			wantAPIError(t, err, "ValidationException", 400)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v does not mention %q", err, tt.want)
			}
		})
	}
}

// TestFmgateFrontsFmgateWithTools: fmgate's own bedrock provider, pointed
// at another gateway's door, calls tools and reads their results' answer,
// streamed and whole.
func TestFmgateFrontsFmgateWithTools(t *testing.T) {
	_, upstream := startGateway(t, gatewayConfig(t))
	p, err := providerbedrock.New(context.Background(), config.Model{
		Name: "upstream", Provider: "bedrock", ModelID: sonnetModelID, Region: "us-east-1", Endpoint: upstream.URL,
	}, providerbedrock.Options{Credentials: credentials.NewStaticCredentialsProvider(testKeyID, testSecret, "")})
	if err != nil {
		t.Fatal(err)
	}
	tools := []provider.Tool{
		{Name: "get_weather", Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		{Name: "get_time", Schema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
	}
	for _, stream := range []bool{false, true} {
		req := &provider.Request{Model: "upstream", MaxTokens: 400, Tools: tools,
			Messages: []provider.Message{{Role: provider.RoleUser, Content: "大阪の weather と time は？"}}}
		answer := func() *provider.Response {
			t.Helper()
			resp, err := p.Complete(context.Background(), req)
			if stream {
				resp, err = p.Stream(context.Background(), req, nil)
			}
			if err != nil {
				t.Fatalf("stream %v: %v", stream, err)
			}
			return resp
		}
		resp := answer()
		if len(resp.ToolCalls) != 2 || resp.StopReason != provider.StopToolUse || string(resp.ToolCalls[0].Input) != `{"city":"大阪の weather と time は？"}` {
			t.Fatalf("stream %v: calls %+v stop %q", stream, resp.ToolCalls, resp.StopReason)
		}
		results := make([]provider.ToolResult, 0, 2)
		for _, c := range resp.ToolCalls {
			results = append(results, provider.ToolResult{CallID: c.ID, Content: c.Name + " ok"})
		}
		req.Messages = append(req.Messages, provider.Message{Role: provider.RoleAssistant, ToolCalls: resp.ToolCalls},
			provider.Message{Role: provider.RoleUser, ToolResults: results})
		if resp = answer(); resp.Text != "get_weatherの結果: get_weather ok\nget_timeの結果: get_time ok" || len(resp.ToolCalls) != 0 {
			t.Fatalf("stream %v: answer %q calls %+v", stream, resp.Text, resp.ToolCalls)
		}
	}
}
