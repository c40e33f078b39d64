package server

import (
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
	oai "github.com/openai/openai-go/v3"

	"github.com/fmgate/fmgate/internal/provider/sim"
)

// The tools of the agent loops below: the simulator calls get_weather for
// a message that says "weather", get_time for one that says "time".
var weatherSchema = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}
var timeSchema = map[string]any{"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string", "enum": []string{"Asia/Tokyo", "UTC"}}}, "required": []string{"zone"}}

// toolCall is a tool call as a test reads it off any door.
type toolCall struct{ id, name, args string }

// TestToolLoopSurvivesThePrimaryGoingDown: Sonnet on Bedrock and Haiku on
// Anthropic (each the simulator on its vendor's wire). Through every door,
// streamed: Sonnet calls the tool, then goes down; Haiku finishes each
// loop from the tool's result. With every model down, a turn that forces a
// tool gets the door's retryable error, never the graceful tier's prose; a
// turn that only offers tools gets the graceful text, never the cache's
// answer to the same words asked without tools.
func TestToolLoopSurvivesThePrimaryGoingDown(t *testing.T) {
	cfg := quickConfig()
	haikuUp := onAnthropic(t, &cfg, "haiku")
	sonnetUp, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	sc := newScenario(t, onBedrock(cfg, endpoint))
	doors := []string{"openai", "anthropic", "bedrock"}
	open := func(door string, stream bool) conversation {
		switch door {
		case "openai":
			return &openAIConversation{url: sc.srv.URL, stream: stream, user: toolUser()}
		case "anthropic":
			return &anthropicConversation{url: sc.srv.URL, stream: stream, user: toolUser()}
		}
		return newBedrockConversation(sc.srv.URL, stream)
	}
	const plain = "Which comedy manga is the funniest?"
	if a := sc.chat("plain-asker", plain, "en"); a.Tier != "sonnet" {
		t.Fatalf("the plain question: %+v; want Sonnet's answer, for the cache", a)
	}
	convs, ids := map[string]conversation{}, map[string]string{}
	for _, door := range doors {
		convs[door] = open(door, true)
		r, err := convs[door].send(t, ask{text: "What's the weather in Kyoto?", tools: true})
		if err != nil || len(r.calls) != 1 || r.tier != "sonnet" {
			t.Fatalf("%s door, first answer %+v (%v): want Sonnet's get_weather call", door, r, err)
		}
		ids[door] = r.calls[0].id
	}
	setUpstream(t, sonnetUp, "sonnet", func(st *sim.Settings) { st.Outage = true })
	for _, door := range doors {
		r, err := convs[door].send(t, ask{results: map[string]string{ids[door]: "cloudy, 12°C"}, tools: true})
		if err != nil || !strings.Contains(r.text, "cloudy, 12°C") || r.tier != "haiku" || len(r.calls) != 0 {
			t.Fatalf("%s door, after Sonnet went down: %+v (%v); want Haiku quoting the result", door, r, err)
		}
	}
	if haikuUp.Usage("haiku").OutputTokens == 0 {
		t.Fatal("the Anthropic upstream billed nothing: Haiku did not answer through it")
	}

	setUpstream(t, haikuUp, "haiku", func(st *sim.Settings) { st.Outage = true })
	if a := sc.chat("plain-asker-2", plain, "en"); a.Tier != "cache" {
		t.Fatalf("the plain question with every model down: %+v; want the cache's answer (else the test below proves nothing)", a)
	}
	for _, door := range doors {
		_, err := open(door, false).send(t, ask{text: "Hello", tools: true, force: "get_time"})
		if want := retryableStatus[door]; statusOf(err) != want {
			t.Fatalf("%s door, forced tool with every model down: %v; want a %d", door, err, want)
		}
		// Offered, not forced: the graceful tier's text is a valid answer,
		// and the cache's answer to the question without tools is not.
		r, err := open(door, false).send(t, ask{text: plain, tools: true})
		if err != nil || r.text == "" || len(r.calls) != 0 || r.tier != "graceful" {
			t.Fatalf("%s door, tools offered with every model down: %+v (%v); want the graceful text", door, r, err)
		}
	}
}

// retryableStatus is the status each door answers a turn no tier could
// serve in the form it asked for: what its SDK retries.
var retryableStatus = map[string]int{"openai": http.StatusServiceUnavailable, "anthropic": 529, "bedrock": http.StatusServiceUnavailable}

// statusOf is the HTTP status of an error any door's SDK raised; 0 for
// none.
func statusOf(err error) int {
	var o *oai.Error
	var a *anth.Error
	var aws interface{ HTTPStatusCode() int }
	switch {
	case errors.As(err, &o):
		return o.StatusCode
	case errors.As(err, &a):
		return a.StatusCode
	case errors.As(err, &aws):
		return aws.HTTPStatusCode()
	}
	return 0
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
	c := &openAIConversation{url: sc.srv.URL, user: toolUser()}
	got, err := c.send(t, ask{text: "What's the weather and the local time in Sapporo?", tools: true})
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
