package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	anth "github.com/anthropics/anthropic-sdk-go"
	anthoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	brtypes "github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// ask is one request of a conversation through a door, in no vendor's
// terms: the user's message (with the cover picture when image is set) or
// the results of the last answer's tool calls, and what the request asks
// for.
type ask struct {
	text    string
	image   bool
	results map[string]string // call id → result
	tools   bool              // offer get_weather and get_time
	force   string            // a tool the model must call
	schema  bool              // the answer must match mangaSchema
	stop    []string
}

// reply is an answer as a test reads it off any door: the door's own stop
// reason, and the tier that served it (x-fmgate-tier).
type reply struct {
	text    string
	calls   []toolCall
	stop    string
	stopSeq string // the stop sequence that ended it, where the door says
	tier    string
}

// conversation is a client of one door, in the door's official Go SDK,
// that keeps its conversation in the SDK's own types.
type conversation interface {
	send(t *testing.T, a ask) (reply, error)
}

// doorStops are each door's stop reasons: after tool calls, at the end of
// an answer, and at a stop sequence.
var doorStops = map[string]struct{ tools, end, sequence string }{
	"openai":    {"tool_calls", "stop", "stop"},
	"anthropic": {"tool_use", "end_turn", "stop_sequence"},
	"bedrock":   {"tool_use", "end_turn", "stop_sequence"},
}

// TestTranslationMatrix: every door (OpenAI Chat Completions, Anthropic
// Messages, Bedrock Converse, each through its vendor's Go SDK, JSON and
// streamed) in front of every provider (the in-process simulator, and the
// openai, anthropic and bedrock adapters against the simulator on their
// vendors' wires). Through each: a tool round trip (a call with the
// message's 東京 in its arguments, then an answer quoting the result), a
// forced tool, two parallel calls with distinct ids answered from both
// results, a JSON-schema answer,
// an image question and a stop sequence — each answered by Sonnet, the
// tier asked for, never a fallback, with the door's own stop reasons.
func TestTranslationMatrix(t *testing.T) {
	upstreams := map[string]func(t *testing.T, cfg *config.Config){
		"sim":       func(*testing.T, *config.Config) {},
		"openai":    func(t *testing.T, cfg *config.Config) { openaiUpstream(t, cfg) },
		"anthropic": func(t *testing.T, cfg *config.Config) { onAnthropic(t, cfg, "sonnet") },
		"bedrock": func(t *testing.T, cfg *config.Config) {
			_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
			*cfg = onBedrock(*cfg, endpoint)
		},
	}
	doors := map[string]func(url string, stream bool) conversation{
		"openai": func(url string, stream bool) conversation {
			return &openAIConversation{url: url, stream: stream, user: toolUser()}
		},
		"anthropic": func(url string, stream bool) conversation {
			return &anthropicConversation{url: url, stream: stream, user: toolUser()}
		},
		"bedrock": func(url string, stream bool) conversation { return newBedrockConversation(url, stream) },
	}
	for _, up := range []string{"sim", "openai", "anthropic", "bedrock"} {
		t.Run(up, func(t *testing.T) {
			cfg := quickConfig()
			upstreams[up](t, &cfg)
			sc := newScenario(t, cfg)
			for _, door := range []string{"openai", "anthropic", "bedrock"} {
				for _, stream := range []bool{false, true} {
					t.Run(door+map[bool]string{false: "/json", true: "/stream"}[stream], func(t *testing.T) {
						t.Parallel() // each conversation is a user of its own
						matrixCell(t, door, func() conversation { return doors[door](sc.srv.URL, stream) })
					})
				}
			}
		})
	}
}

func matrixCell(t *testing.T, door string, open func() conversation) {
	stops := doorStops[door]
	send := func(c conversation, what string, a ask) reply {
		t.Helper()
		r, err := c.send(t, a)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if r.tier != "sonnet" {
			t.Fatalf("%s: answered by %q, want sonnet (a fallback means the request did not translate): %+v", what, r.tier, r)
		}
		return r
	}

	// A tool round trip.
	c := open()
	r := send(c, "tool call", ask{text: "What's the weather in 東京 today?", tools: true})
	if len(r.calls) != 1 || r.calls[0].name != "get_weather" || r.calls[0].id == "" || r.stop != stops.tools {
		t.Fatalf("tool call: %+v; want one get_weather call, stop reason %q", r, stops.tools)
	}
	var args struct {
		City string `json:"city"`
	}
	if err := json.Unmarshal([]byte(r.calls[0].args), &args); err != nil || !strings.Contains(args.City, "東京") {
		t.Fatalf("tool call arguments %q: want a JSON object whose city holds 東京 (%v)", r.calls[0].args, err)
	}
	r = send(c, "tool result", ask{results: map[string]string{r.calls[0].id: "晴れ、最高気温18度"}, tools: true})
	if len(r.calls) != 0 || !strings.Contains(r.text, "晴れ、最高気温18度") || r.stop != stops.end {
		t.Fatalf("answer to the tool result: %+v; want text quoting it, stop reason %q", r, stops.end)
	}

	// A forced tool, whatever the message says.
	r = send(open(), "forced tool", ask{text: "Hello!", tools: true, force: "get_time"})
	if len(r.calls) != 1 || r.calls[0].name != "get_time" || r.calls[0].args != `{"zone":"Asia/Tokyo"}` || r.stop != stops.tools {
		t.Fatalf("forced tool: %+v; want the get_time call with its enum's first zone", r)
	}

	// Two tools named: two calls at once, with distinct ids, and an answer
	// from both results: an agent loop with two tools.
	c = open()
	r = send(c, "parallel tools", ask{text: "What's the weather and the local time in Osaka?", tools: true})
	names := []string{}
	for _, call := range r.calls {
		names = append(names, call.name)
	}
	if !slices.Equal(names, []string{"get_weather", "get_time"}) || r.calls[0].id == r.calls[1].id || r.stop != stops.tools {
		t.Fatalf("parallel tools: %+v; want get_weather and get_time with distinct ids", r)
	}
	r = send(c, "both results", ask{results: map[string]string{r.calls[0].id: "くもり", r.calls[1].id: "14:05"}, tools: true})
	if len(r.calls) != 0 || !strings.Contains(r.text, "くもり") || !strings.Contains(r.text, "14:05") || r.stop != stops.end {
		t.Fatalf("answer to both results: %+v; want text quoting each", r)
	}

	// A JSON-schema answer: the schema's JSON and nothing else.
	r = send(open(), "json schema", ask{text: "Give me one manga to start with, as JSON.", schema: true})
	var m struct {
		Title   string `json:"title"`
		Volumes int    `json:"volumes"`
		Genre   string `json:"genre"`
	}
	dec := json.NewDecoder(strings.NewReader(r.text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || m.Title == "" || m.Volumes < 1 || m.Genre != "shonen" || dec.More() || r.stop != stops.end {
		t.Fatalf("json schema: %+v (%v); want the schema's JSON alone", r, err)
	}

	// An image question.
	r = send(open(), "image", ask{text: imageQuestion(), image: true})
	if !strings.HasSuffix(r.text, coverSeen) {
		t.Fatalf("image: %q; want the model saying %q", r.text, coverSeen)
	}

	// A stop sequence: the answer's first line, ended by it.
	r = send(open(), "stop sequence", ask{text: "What manga do you recommend?", stop: []string{"\n"}})
	if r.text == "" || strings.Contains(r.text, "\n") || r.stop != stops.sequence {
		t.Fatalf("stop sequence: %+v; want the first line, stop reason %q", r, stops.sequence)
	}
	if door == "anthropic" && r.stopSeq != "\n" {
		t.Fatalf("stop sequence: stop_sequence %q, want the newline", r.stopSeq)
	}
}

// openAIConversation is a client of the OpenAI door on openai-go.
type openAIConversation struct {
	url, user string
	model     string // the request's model; empty: gpt-4o, no tier's name
	stream    bool
	msgs      []oai.ChatCompletionMessageParamUnion
}

func (c *openAIConversation) send(t *testing.T, a ask) (reply, error) {
	t.Helper()
	client := oai.NewClient(oaioption.WithBaseURL(c.url+"/v1/"), oaioption.WithAPIKey("sk-any"),
		oaioption.WithHeader("X-User-Id", c.user), oaioption.WithMaxRetries(0))
	for _, id := range slices.Sorted(mapKeys(a.results)) {
		c.msgs = append(c.msgs, oai.ToolMessage(a.results[id], id))
	}
	if a.text != "" {
		parts := []oai.ChatCompletionContentPartUnionParam{oai.TextContentPart(a.text)}
		if a.image {
			parts = append([]oai.ChatCompletionContentPartUnionParam{oai.ImageContentPart(oai.ChatCompletionContentPartImageImageURLParam{
				URL: visiontest.DataURL("image/png", coverPNG)})}, parts...)
		}
		c.msgs = append(c.msgs, oai.UserMessage(parts))
	}
	model := c.model
	if model == "" {
		model = "gpt-4o" // no tier's name: the turn starts at the first tier, Sonnet
	}
	p := oai.ChatCompletionNewParams{Model: model, Messages: c.msgs, MaxCompletionTokens: oai.Int(1000)}
	if a.tools {
		p.Tools = []oai.ChatCompletionToolUnionParam{
			oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{Name: "get_weather", Description: oai.String("The weather in a city"), Parameters: weatherSchema}),
			oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{Name: "get_time", Description: oai.String("The local time"), Parameters: timeSchema}),
		}
	}
	if a.force != "" {
		p.ToolChoice = oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: a.force})
	}
	if a.schema {
		p.ResponseFormat = schemaFormat()
	}
	if len(a.stop) > 0 {
		p.Stop = oai.ChatCompletionNewParamsStopUnion{OfStringArray: a.stop}
	}
	var raw *http.Response
	var msg oai.ChatCompletionMessage
	var r reply
	if c.stream {
		s := client.Chat.Completions.NewStreaming(context.Background(), p, oaioption.WithResponseInto(&raw))
		acc := oai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			return r, err
		}
		if len(acc.Choices) == 0 {
			t.Fatal("the stream held no choice")
		}
		msg, r.stop = acc.Choices[0].Message, acc.Choices[0].FinishReason
	} else {
		res, err := client.Chat.Completions.New(context.Background(), p, oaioption.WithResponseInto(&raw))
		if err != nil {
			return r, err
		}
		msg, r.stop = res.Choices[0].Message, res.Choices[0].FinishReason
	}
	r.text, r.tier = msg.Content, raw.Header.Get("X-Fmgate-Tier")
	for _, call := range msg.ToolCalls {
		r.calls = append(r.calls, toolCall{id: call.ID, name: call.Function.Name, args: call.Function.Arguments})
	}
	c.msgs = append(c.msgs, msg.ToParam())
	return r, nil
}

// anthropicConversation is a client of the Anthropic door on
// anthropic-sdk-go.
type anthropicConversation struct {
	url, user string
	stream    bool
	msgs      []anth.MessageParam
}

func (c *anthropicConversation) send(t *testing.T, a ask) (reply, error) {
	t.Helper()
	client := anth.NewClient(anthoption.WithBaseURL(c.url), anthoption.WithAPIKey("sk-any"),
		anthoption.WithHeader("X-User-Id", c.user), anthoption.WithMaxRetries(0))
	var blocks []anth.ContentBlockParamUnion
	for _, id := range slices.Sorted(mapKeys(a.results)) {
		blocks = append(blocks, anth.NewToolResultBlock(id, a.results[id], false))
	}
	if a.image {
		blocks = append(blocks, anth.NewImageBlockBase64("image/png", visiontest.Base64(coverPNG)))
	}
	if a.text != "" {
		blocks = append(blocks, anth.NewTextBlock(a.text))
	}
	c.msgs = append(c.msgs, anth.NewUserMessage(blocks...))
	// The model's own id on Bedrock is one of Sonnet's aliases.
	p := anth.MessageNewParams{Model: "claude-3-5-sonnet-latest", MaxTokens: 1000, Messages: c.msgs, StopSequences: a.stop}
	if a.tools {
		schema := func(m map[string]any) anth.ToolInputSchemaParam {
			return anth.ToolInputSchemaParam{Properties: m["properties"], Required: m["required"].([]string)}
		}
		p.Tools = []anth.ToolUnionParam{
			{OfTool: &anth.ToolParam{Name: "get_weather", Description: anth.String("The weather in a city"), InputSchema: schema(weatherSchema)}},
			{OfTool: &anth.ToolParam{Name: "get_time", Description: anth.String("The local time"), InputSchema: schema(timeSchema)}},
		}
	}
	if a.force != "" {
		p.ToolChoice = anth.ToolChoiceParamOfTool(a.force)
	}
	if a.schema {
		p.OutputConfig = anth.OutputConfigParam{Format: anth.JSONOutputFormatParam{Schema: mangaSchema}}
	}
	var raw *http.Response
	var msg anth.Message
	if c.stream {
		s := client.Messages.NewStreaming(context.Background(), p, anthoption.WithResponseInto(&raw))
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			return reply{}, err
		}
	} else {
		res, err := client.Messages.New(context.Background(), p, anthoption.WithResponseInto(&raw))
		if err != nil {
			return reply{}, err
		}
		msg = *res
	}
	r := reply{stop: string(msg.StopReason), stopSeq: msg.StopSequence, tier: raw.Header.Get("X-Fmgate-Tier")}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			r.text += b.Text
		case "tool_use":
			r.calls = append(r.calls, toolCall{id: b.ID, name: b.Name, args: string(b.Input)})
		}
	}
	c.msgs = append(c.msgs, msg.ToParam())
	return r, nil
}

// bedrockConversation is a client of the Bedrock door on aws-sdk-go-v2.
// With no auth.keys (the demo profile) the door takes the caller from
// X-User-Id and does not check signatures.
type bedrockConversation struct {
	client *bedrockruntime.Client
	stream bool
	msgs   []brtypes.Message
}

func newBedrockConversation(url string, stream bool) *bedrockConversation {
	user := toolUser()
	return &bedrockConversation{stream: stream, client: bedrockruntime.New(bedrockruntime.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(url), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDANYONE", "any-secret", ""),
		APIOptions:  []func(*middleware.Stack) error{smithyhttp.AddHeaderValue("X-User-Id", user)},
	})}
}

func bedrockTool(name, description string, schema map[string]any) brtypes.Tool {
	return &brtypes.ToolMemberToolSpec{Value: brtypes.ToolSpecification{Name: aws.String(name), Description: aws.String(description),
		InputSchema: &brtypes.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}}
}

func (c *bedrockConversation) send(t *testing.T, a ask) (reply, error) {
	t.Helper()
	var blocks []brtypes.ContentBlock
	for _, id := range slices.Sorted(mapKeys(a.results)) {
		blocks = append(blocks, &brtypes.ContentBlockMemberToolResult{Value: brtypes.ToolResultBlock{ToolUseId: aws.String(id),
			Content: []brtypes.ToolResultContentBlock{&brtypes.ToolResultContentBlockMemberText{Value: a.results[id]}}}})
	}
	if a.image {
		blocks = append(blocks, &brtypes.ContentBlockMemberImage{Value: brtypes.ImageBlock{Format: brtypes.ImageFormatPng,
			Source: &brtypes.ImageSourceMemberBytes{Value: coverPNG}}})
	}
	if a.text != "" {
		blocks = append(blocks, &brtypes.ContentBlockMemberText{Value: a.text})
	}
	c.msgs = append(c.msgs, brtypes.Message{Role: brtypes.ConversationRoleUser, Content: blocks})
	var tc *brtypes.ToolConfiguration
	if a.tools {
		tc = &brtypes.ToolConfiguration{Tools: []brtypes.Tool{
			bedrockTool("get_weather", "The weather in a city", weatherSchema),
			bedrockTool("get_time", "The local time", timeSchema),
		}}
		if a.force != "" {
			tc.ToolChoice = &brtypes.ToolChoiceMemberTool{Value: brtypes.SpecificToolChoice{Name: aws.String(a.force)}}
		}
	}
	var oc *brtypes.OutputConfig
	if a.schema {
		schema, _ := json.Marshal(mangaSchema)
		oc = &brtypes.OutputConfig{TextFormat: &brtypes.OutputFormat{Type: brtypes.OutputFormatTypeJsonSchema,
			Structure: &brtypes.OutputFormatStructureMemberJsonSchema{Value: brtypes.JsonSchemaDefinition{Name: aws.String("manga"), Schema: aws.String(string(schema))}}}}
	}
	inf := &brtypes.InferenceConfiguration{MaxTokens: aws.Int32(1000), StopSequences: a.stop}
	// An inference profile of Sonnet's alias, as Bedrock apps name models.
	const model = "us.anthropic.claude-3-5-sonnet-20241022-v2:0"
	var r reply
	var md middleware.Metadata
	var text strings.Builder
	if !c.stream {
		out, err := c.client.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(model), Messages: c.msgs,
			ToolConfig: tc, OutputConfig: oc, InferenceConfig: inf})
		if err != nil {
			return r, err
		}
		md, r.stop = out.ResultMetadata, string(out.StopReason)
		for _, b := range out.Output.(*brtypes.ConverseOutputMemberMessage).Value.Content {
			switch v := b.(type) {
			case *brtypes.ContentBlockMemberText:
				text.WriteString(v.Value)
			case *brtypes.ContentBlockMemberToolUse:
				input, err := v.Value.Input.MarshalSmithyDocument()
				if err != nil {
					t.Fatal(err)
				}
				r.calls = append(r.calls, toolCall{id: aws.ToString(v.Value.ToolUseId), name: aws.ToString(v.Value.Name), args: string(input)})
			}
		}
	} else {
		out, err := c.client.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(model), Messages: c.msgs,
			ToolConfig: tc, OutputConfig: oc, InferenceConfig: inf})
		if err != nil {
			return r, err
		}
		md = out.ResultMetadata
		es := out.GetStream()
		inputs := map[int32]*strings.Builder{}
		var order []int32
		for ev := range es.Events() {
			switch v := ev.(type) {
			case *brtypes.ConverseStreamOutputMemberContentBlockStart:
				u, ok := v.Value.Start.(*brtypes.ContentBlockStartMemberToolUse)
				if !ok {
					continue
				}
				i := aws.ToInt32(v.Value.ContentBlockIndex)
				r.calls = append(r.calls, toolCall{id: aws.ToString(u.Value.ToolUseId), name: aws.ToString(u.Value.Name)})
				inputs[i], order = &strings.Builder{}, append(order, i)
			case *brtypes.ConverseStreamOutputMemberContentBlockDelta:
				switch d := v.Value.Delta.(type) {
				case *brtypes.ContentBlockDeltaMemberText:
					text.WriteString(d.Value)
				case *brtypes.ContentBlockDeltaMemberToolUse:
					b := inputs[aws.ToInt32(v.Value.ContentBlockIndex)]
					if b == nil {
						t.Fatalf("a toolUse delta for block %d, which did not start as a tool call", aws.ToInt32(v.Value.ContentBlockIndex))
					}
					b.WriteString(aws.ToString(d.Value.Input))
				}
			case *brtypes.ConverseStreamOutputMemberMessageStop:
				r.stop = string(v.Value.StopReason)
			}
		}
		es.Close()
		if err := es.Err(); err != nil {
			return r, err
		}
		for k, i := range order {
			r.calls[k].args = inputs[i].String()
		}
	}
	r.text = text.String()
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok {
		r.tier = resp.Header.Get("X-Fmgate-Tier")
	}
	// The answer goes back in the conversation as the SDK's blocks.
	var content []brtypes.ContentBlock
	if r.text != "" {
		content = append(content, &brtypes.ContentBlockMemberText{Value: r.text})
	}
	for _, call := range r.calls {
		var in map[string]any
		if err := json.Unmarshal([]byte(call.args), &in); err != nil {
			return r, fmt.Errorf("tool call %s: input %q is not a JSON object: %w", call.name, call.args, err)
		}
		content = append(content, &brtypes.ContentBlockMemberToolUse{Value: brtypes.ToolUseBlock{ToolUseId: aws.String(call.id), Name: aws.String(call.name),
			Input: document.NewLazyDocument(in)}})
	}
	c.msgs = append(c.msgs, brtypes.Message{Role: brtypes.ConversationRoleAssistant, Content: content})
	return r, nil
}

// TestForeignToolIDsReachEveryProvider: a conversation whose tool calls
// carry ids another vendor made — an OpenAI-compatible server's
// "functions.get_weather:0", a client's 50-character id — is answered by
// Sonnet on every provider, each of which refuses ids it would not have
// made (as the simulator's vendor wires do): fmgate sends them in a form
// the tier's vendor takes, the call and its result still paired.
func TestForeignToolIDsReachEveryProvider(t *testing.T) {
	ids := []string{"functions.get_weather:0", "call_" + strings.Repeat("a1b2c3d4e5", 4) + "xyz12"}
	for _, up := range []string{"openai", "anthropic", "bedrock"} {
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
			for _, id := range ids {
				c := &openAIConversation{url: sc.srv.URL, user: toolUser(), msgs: []oai.ChatCompletionMessageParamUnion{
					oai.UserMessage("What's the weather in Kobe?"),
					{OfAssistant: &oai.ChatCompletionAssistantMessageParam{ToolCalls: []oai.ChatCompletionMessageToolCallUnionParam{{
						OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{ID: id,
							Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city":"Kobe"}`}}}}}},
				}}
				r, err := c.send(t, ask{results: map[string]string{id: "小雨"}, tools: true})
				if err != nil || r.tier != "sonnet" || !strings.Contains(r.text, "小雨") {
					t.Fatalf("result of call %q: %+v (%v); want Sonnet quoting it", id, r, err)
				}
			}
		})
	}
}

// TestBedrockClientsGetIDsBedrockTakes: Sonnet on an OpenAI-compatible
// server that names its calls as some do ("functions.get_weather:0"); a
// Bedrock client gets a toolUseId Bedrock's pattern allows, and sends it
// back with the result, which reaches the server paired with its call.
func TestBedrockClientsGetIDsBedrockTakes(t *testing.T) {
	var sawResult atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream   bool `json:"stream"`
			Messages []struct {
				Role       string `json:"role"`
				ToolCallID string `json:"tool_call_id"`
				ToolCalls  []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		answer := `"message":{"role":"assistant","content":null,"tool_calls":[{"id":"functions.get_weather:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Kobe\"}"}}]},"finish_reason":"tool_calls"`
		for i, m := range req.Messages {
			if m.Role == "tool" && i > 0 && len(req.Messages[i-1].ToolCalls) == 1 && req.Messages[i-1].ToolCalls[0].ID == m.ToolCallID {
				sawResult.Store(true)
				answer = `"message":{"role":"assistant","content":"It rains in Kobe."},"finish_reason":"stop"`
			}
		}
		if req.Stream {
			delta := strings.Replace(strings.Replace(answer, `"message":`, `"delta":`, 1), `"function":{"name"`, `"index":0,"function":{"name"`, 1)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,`+delta+`}]}`+"\n\n")
			_, _ = io.WriteString(w, `data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17}}`+"\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,`+answer+`}],"usage":{"prompt_tokens":10,"completion_tokens":7,"total_tokens":17}}`)
	}))
	t.Cleanup(up.Close)
	cfg := quickConfig()
	cfg.Models[0].Provider, cfg.Models[0].Endpoint = "openai", up.URL+"/v1"
	sc := newScenario(t, cfg)
	for _, stream := range []bool{false, true} {
		sawResult.Store(false)
		c := newBedrockConversation(sc.srv.URL, stream)
		r, err := c.send(t, ask{text: "What's the weather in Kobe?", tools: true})
		if err != nil || len(r.calls) != 1 || r.tier != "sonnet" || provider.ToolID(r.calls[0].id, 64) != r.calls[0].id {
			t.Fatalf("stream %v: %+v (%v); want Sonnet's call with an id Bedrock takes", stream, r, err)
		}
		r, err = c.send(t, ask{results: map[string]string{r.calls[0].id: "rain"}, tools: true})
		if err != nil || r.tier != "sonnet" || r.text != "It rains in Kobe." || !sawResult.Load() {
			t.Fatalf("stream %v, the result: %+v (%v); want Sonnet's answer to its paired result", stream, r, err)
		}
	}
}

// TestInvokeModelStructuredOutput: Claude's Messages body on Bedrock's
// InvokeModel takes output_config.format as the Messages door does, served
// by Sonnet on the bedrock provider: the answer's text is the schema's JSON.
func TestInvokeModelStructuredOutput(t *testing.T) {
	cfg := quickConfig()
	_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	sc := newScenario(t, onBedrock(cfg, endpoint))
	schema, _ := json.Marshal(mangaSchema)
	body := `{"anthropic_version":"bedrock-2023-05-31","max_tokens":400,"output_config":{"format":{"type":"json_schema","schema":` + string(schema) +
		`}},"messages":[{"role":"user","content":"Give me one manga to start with, as JSON."}]}`
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/invoke", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", toolUser())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msg struct {
		Content []struct{ Type, Text string } `json:"content"`
	}
	raw, _ := io.ReadAll(resp.Body)
	var m struct {
		Title   string `json:"title"`
		Volumes int    `json:"volumes"`
		Genre   string `json:"genre"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &msg) != nil || len(msg.Content) != 1 || json.Unmarshal([]byte(msg.Content[0].Text), &m) != nil ||
		m.Title == "" || m.Genre != "shonen" || resp.Header.Get("X-Fmgate-Tier") != "sonnet" {
		t.Fatalf("%d %s from %q; want Sonnet's JSON", resp.StatusCode, raw, resp.Header.Get("X-Fmgate-Tier"))
	}
}
