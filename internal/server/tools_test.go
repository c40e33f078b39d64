package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	anth "github.com/anthropics/anthropic-sdk-go"
	anthoption "github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"

	"github.com/fmgate/fmgate/internal/provider/sim"
)

// The tools of the agent loops below: the simulator calls get_weather for
// a message that says "weather", get_time for one that says "time".
var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}
var timeSchema = map[string]any{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string", "enum": []string{"Asia/Tokyo", "UTC"}}}, "required": []string{"zone"}}

// toolCall is a tool call as a test reads it off any door.
type toolCall struct{ id, name, args string }

// toolAnswer is one answer of an agent loop, as any door gave it.
type toolAnswer struct {
	text  string
	calls []toolCall
	stop  string // the door's own stop reason
	model string
}

// agent is a client of one door that offers the two tools and keeps the
// conversation, in the door's own SDK.
type agent interface {
	// ask sends the user's message (or, with results, the results of the
	// last answer's calls), with choice "" (auto) or a tool name to force.
	ask(t *testing.T, message string, results map[string]string, choice string) (toolAnswer, error)
}

// TestToolLoopSurvivesThePrimaryGoingDown: mid-loop, Sonnet (on the
// anthropic provider) goes down; Haiku finishes the loop from the tool's
// result. A turn that forces a tool while every model is down gets a 503
// the SDK raises, never the graceful tier's prose.
func TestToolLoopSurvivesThePrimaryGoingDown(t *testing.T) {
	cfg := quickConfig()
	up := onAnthropic(t, &cfg, "sonnet")
	sc := newScenario(t, cfg)
	a := newOpenAIAgent(sc.srv.URL, true)
	got, err := a.ask(t, "What's the weather in Kyoto?", nil, "")
	if err != nil || len(got.calls) != 1 || got.model != "claude-sonnet" && !strings.Contains(got.model, "sonnet") {
		t.Fatalf("first answer %+v (%v): want Sonnet's get_weather call", got, err)
	}
	setUpstream(t, up, "sonnet", func(st *sim.Settings) { st.Outage = true })
	got, err = a.ask(t, "", map[string]string{got.calls[0].id: "cloudy"}, "")
	if err != nil || !strings.Contains(got.text, "cloudy") || !strings.Contains(got.model, "haiku") {
		t.Fatalf("answer after Sonnet went down %+v (%v): want Haiku quoting the result", got, err)
	}

	st, _ := sc.s.Sim.Settings("haiku")
	st.Outage = true
	if err := sc.s.Sim.SetSettings("haiku", st); err != nil {
		t.Fatal(err)
	}
	_, err = newOpenAIAgent(sc.srv.URL, false).ask(t, "Hello", nil, "get_time")
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("forced tool with every model down: %v; want a 503", err)
	}
	// Offered, not forced: the graceful tier's text is a valid answer.
	got, err = newOpenAIAgent(sc.srv.URL, false).ask(t, "What's the weather in Nara?", nil, "")
	if err != nil || got.text == "" || len(got.calls) != 0 {
		t.Fatalf("tools offered with every model down: %+v (%v); want the graceful text", got, err)
	}
}

// openAIAgent drives the OpenAI door with the openai-go SDK.
type openAIAgent struct {
	c      oai.Client
	stream bool
	msgs   []oai.ChatCompletionMessageParamUnion
}

func newOpenAIAgent(url string, stream bool) *openAIAgent {
	return &openAIAgent{stream: stream, c: oai.NewClient(oaioption.WithBaseURL(url+"/v1/"), oaioption.WithAPIKey("sk-any"),
		oaioption.WithHeader("X-User-Id", toolUser()), oaioption.WithMaxRetries(0))}
}

func (a *openAIAgent) ask(t *testing.T, message string, results map[string]string, choice string) (toolAnswer, error) {
	t.Helper()
	if message != "" {
		a.msgs = append(a.msgs, oai.UserMessage(message))
	}
	for _, id := range slices.Sorted(mapKeys(results)) {
		a.msgs = append(a.msgs, oai.ToolMessage(results[id], id))
	}
	p := oai.ChatCompletionNewParams{Model: "sonnet", Messages: a.msgs, Tools: []oai.ChatCompletionToolUnionParam{
		oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{Name: "get_weather", Description: oai.String("The weather in a city"), Parameters: weatherSchema}),
		oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{Name: "get_time", Description: oai.String("The local time"), Parameters: timeSchema}),
	}}
	if choice != "" {
		p.ToolChoice = oai.ToolChoiceOptionFunctionToolChoice(oai.ChatCompletionNamedToolChoiceFunctionParam{Name: choice})
	}
	var msg oai.ChatCompletionMessage
	var ans toolAnswer
	if a.stream {
		s := a.c.Chat.Completions.NewStreaming(context.Background(), p)
		acc := oai.ChatCompletionAccumulator{}
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			return ans, err
		}
		if len(acc.Choices) == 0 {
			t.Fatal("the stream held no choice")
		}
		msg, ans.stop, ans.model = acc.Choices[0].Message, acc.Choices[0].FinishReason, acc.Model
	} else {
		res, err := a.c.Chat.Completions.New(context.Background(), p)
		if err != nil {
			return ans, err
		}
		msg, ans.stop, ans.model = res.Choices[0].Message, res.Choices[0].FinishReason, res.Model
	}
	ans.text = msg.Content
	for _, c := range msg.ToolCalls {
		ans.calls = append(ans.calls, toolCall{id: c.ID, name: c.Function.Name, args: c.Function.Arguments})
	}
	if len(ans.calls) > 0 && ans.stop != "tool_calls" {
		t.Errorf("finish_reason %q with tool calls, want tool_calls", ans.stop)
	}
	a.msgs = append(a.msgs, msg.ToParam())
	return ans, nil
}

// anthropicAgent drives the Anthropic door with anthropic-sdk-go.
type anthropicAgent struct {
	c      anth.Client
	stream bool
	msgs   []anth.MessageParam
}

func newAnthropicAgent(url string, stream bool) *anthropicAgent {
	return &anthropicAgent{stream: stream, c: anth.NewClient(anthoption.WithBaseURL(url), anthoption.WithAPIKey("sk-any"),
		anthoption.WithHeader("X-User-Id", toolUser()), anthoption.WithMaxRetries(0))}
}

func (a *anthropicAgent) ask(t *testing.T, message string, results map[string]string, choice string) (toolAnswer, error) {
	t.Helper()
	var blocks []anth.ContentBlockParamUnion
	for _, id := range slices.Sorted(mapKeys(results)) {
		blocks = append(blocks, anth.NewToolResultBlock(id, results[id], false))
	}
	if message != "" {
		blocks = append(blocks, anth.NewTextBlock(message))
	}
	a.msgs = append(a.msgs, anth.NewUserMessage(blocks...))
	schema := func(m map[string]any) anth.ToolInputSchemaParam {
		return anth.ToolInputSchemaParam{Properties: m["properties"], Required: m["required"].([]string)}
	}
	p := anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 400, Messages: a.msgs, Tools: []anth.ToolUnionParam{
		{OfTool: &anth.ToolParam{Name: "get_weather", Description: anth.String("The weather in a city"), InputSchema: schema(weatherSchema)}},
		{OfTool: &anth.ToolParam{Name: "get_time", Description: anth.String("The local time"), InputSchema: schema(timeSchema)}},
	}}
	if choice != "" {
		p.ToolChoice = anth.ToolChoiceParamOfTool(choice)
	}
	var msg anth.Message
	if a.stream {
		s := a.c.Messages.NewStreaming(context.Background(), p)
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			return toolAnswer{}, err
		}
	} else {
		res, err := a.c.Messages.New(context.Background(), p)
		if err != nil {
			return toolAnswer{}, err
		}
		msg = *res
	}
	ans := toolAnswer{stop: string(msg.StopReason), model: string(msg.Model)}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			ans.text += b.Text
		case "tool_use":
			ans.calls = append(ans.calls, toolCall{id: b.ID, name: b.Name, args: string(b.Input)})
		}
	}
	if len(ans.calls) > 0 && ans.stop != "tool_use" {
		t.Errorf("stop_reason %q with tool calls, want tool_use", ans.stop)
	}
	a.msgs = append(a.msgs, msg.ToParam())
	return ans, nil
}

var toolUsers atomic.Int64

// toolUser is a user of its own for each agent, under the per-user rate
// limit.
func toolUser() string { return fmt.Sprintf("tool-user-%d", toolUsers.Add(1)) }

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestToolCallsAreInTheEvents: the model attempt that called tools says
// how many and which, never with what arguments.
func TestToolCallsAreInTheEvents(t *testing.T) {
	cfg := quickConfig()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false // every span reaches the log
	sc := newScenario(t, cfg)
	got, err := newOpenAIAgent(sc.srv.URL, false).ask(t, "What's the weather and the local time in Sapporo?", nil, "")
	if err != nil || len(got.calls) != 2 {
		t.Fatalf("answer %+v (%v): want two tool calls", got, err)
	}
	sc.s.Close() // flush the emitter
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "Sapporo") && strings.Contains(string(raw), `"city"`) {
		t.Fatal("the events hold the tool call's arguments")
	}
	for _, e := range readSpans(t, path) {
		if e.Name == "model_attempt" && e.Resource.ToolCalls > 0 {
			if e.Resource.ToolCalls != 2 || !slices.Equal(e.Resource.ToolNames, []string{"get_weather", "get_time"}) {
				t.Fatalf("model_attempt resource %+v: want 2 calls, get_weather and get_time", e.Resource)
			}
			return
		}
	}
	t.Fatal("no model_attempt span counts the tool calls")
}
