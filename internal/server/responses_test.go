package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
)

var responsesUsers atomic.Int64

// responsesUser is a user of its own for each test's conversations,
// under the per-user rate limit.
func responsesUser() string { return fmt.Sprintf("resp-user-%d", responsesUsers.Add(1)) }

// responsesClient is the openai-go client of user (the demo profile's
// trusted X-User-Id) against the gateway at url.
func responsesClient(url, user string) oai.Client {
	return oai.NewClient(oaioption.WithBaseURL(url+"/v1/"), oaioption.WithAPIKey("sk-any"),
		oaioption.WithHeader("X-User-Id", user), oaioption.WithMaxRetries(0))
}

// respond sends p with client.Responses.New, or NewStreaming with stream,
// and returns the response the SDK read. Streamed, the events are checked
// as a client relies on them: numbered from 0 in order, opened by
// response.created and response.in_progress, closed by the final event
// with the whole response, whose text and arguments are what the deltas
// added up to.
func respond(t *testing.T, c oai.Client, p responses.ResponseNewParams, stream bool) (*responses.Response, error) {
	t.Helper()
	if !stream {
		return c.Responses.New(context.Background(), p)
	}
	s := c.Responses.NewStreaming(context.Background(), p)
	var types []string
	var text strings.Builder
	args := map[string]string{} // by item id
	var final *responses.Response
	for s.Next() {
		ev := s.Current()
		if ev.SequenceNumber != int64(len(types)) {
			t.Fatalf("event %d (%s) has sequence_number %d", len(types), ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.function_call_arguments.delta":
			args[ev.ItemID] += ev.Delta
		case "response.completed", "response.incomplete", "response.failed":
			r := ev.Response
			final = &r
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" || final == nil ||
		!strings.HasPrefix(types[len(types)-1], "response.") {
		t.Fatalf("events %v: want response.created, response.in_progress … and a final event with the response", types)
	}
	if got := final.OutputText(); got != text.String() {
		t.Fatalf("the final response's text %q is not what the deltas added up to, %q", got, text.String())
	}
	for _, item := range final.Output {
		if item.Type == "function_call" && args[item.ID] != item.Arguments.OfString {
			t.Fatalf("call %s: arguments %q, deltas %q", item.ID, item.Arguments.OfString, args[item.ID])
		}
	}
	return final, nil
}

func textInput(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: oai.String(s)}
}

func functionTools() []responses.ToolUnionParam {
	return []responses.ToolUnionParam{
		{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Description: oai.String("The weather in a city"), Parameters: weatherSchema, Strict: oai.Bool(false)}},
		{OfFunction: &responses.FunctionToolParam{Name: "get_time", Description: oai.String("The local time"), Parameters: timeSchema, Strict: oai.Bool(false)}},
	}
}

func callOutput(callID, output string) responses.ResponseInputItemUnionParam {
	return responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
		CallID: oai.String(callID), Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: oai.String(output)}}}
}

func calls(r *responses.Response) []responses.ResponseOutputItemUnion {
	var out []responses.ResponseOutputItemUnion
	for _, item := range r.Output {
		if item.Type == "function_call" {
			out = append(out, item)
		}
	}
	return out
}

func apiError(t *testing.T, err error, status int, code string) {
	t.Helper()
	var e *oai.Error
	if !errors.As(err, &e) || e.StatusCode != status || (code != "" && e.Code != code) {
		t.Fatalf("error %v; want an API error %d %s", err, status, code)
	}
}

// TestResponsesAPIOnTheGoSDK: openai-go's client.Responses.New and
// NewStreaming through the Responses door, served by the simulator: a text
// answer with its usage; a function tool's round trip, the result sent
// with previous_response_id and the answer built from it; a json_schema
// answer that parses; and the stored responses' ownership — another
// user's previous_response_id, a response stored with store:false and a
// deleted one are 404s, and GET and DELETE serve the owner.
func TestResponsesAPIOnTheGoSDK(t *testing.T) {
	sc := newScenario(t, quickConfig())
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "stream"}[stream], func(t *testing.T) {
			c := responsesClient(sc.srv.URL, responsesUser())
			r, err := respond(t, c, responses.ResponseNewParams{Model: "sonnet", Instructions: oai.String("Answer briefly."),
				Input: textInput("Recommend a fantasy manga series"), MaxOutputTokens: oai.Int(400)}, stream)
			if err != nil {
				t.Fatal(err)
			}
			u := r.Usage
			if !strings.HasPrefix(r.ID, "resp_") || r.Status != "completed" || r.OutputText() == "" || !strings.Contains(r.Model, "sonnet") ||
				u.InputTokens == 0 || u.OutputTokens == 0 || u.TotalTokens != u.InputTokens+u.OutputTokens || r.Instructions.OfString != "Answer briefly." {
				t.Fatalf("text answer: %s", r.RawJSON())
			}

			// A function tool's round trip.
			r, err = respond(t, c, responses.ResponseNewParams{Model: "sonnet", Tools: functionTools(),
				Input: textInput("What's the weather in 東京 today?")}, stream)
			if err != nil {
				t.Fatal(err)
			}
			cs := calls(r)
			if len(cs) != 1 || cs[0].Name != "get_weather" || cs[0].CallID == "" {
				t.Fatalf("answer %s: want one get_weather call", r.RawJSON())
			}
			var args struct {
				City string `json:"city"`
			}
			if err := json.Unmarshal([]byte(cs[0].Arguments.OfString), &args); err != nil || !strings.Contains(args.City, "東京") {
				t.Fatalf("arguments %q: want a JSON object whose city holds 東京 (%v)", cs[0].Arguments.OfString, err)
			}
			r, err = respond(t, c, responses.ResponseNewParams{Model: "sonnet", Tools: functionTools(), PreviousResponseID: oai.String(r.ID),
				Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{callOutput(cs[0].CallID, "晴れ、最高気温18度")}}}, stream)
			if err != nil {
				t.Fatal(err)
			}
			if len(calls(r)) != 0 || !strings.Contains(r.OutputText(), "晴れ、最高気温18度") || r.PreviousResponseID == "" {
				t.Fatalf("answer to the result: %s; want text quoting the tool's result", r.RawJSON())
			}

			// A json_schema answer.
			r, err = respond(t, c, responses.ResponseNewParams{Model: "sonnet", Input: textInput("Give me one manga to start with, as JSON."),
				Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{
					Name: "manga", Schema: mangaSchema, Strict: oai.Bool(true)}}}}, stream)
			if err != nil {
				t.Fatal(err)
			}
			var manga struct {
				Title   string `json:"title"`
				Volumes int    `json:"volumes"`
				Genre   string `json:"genre"`
			}
			dec := json.NewDecoder(strings.NewReader(r.OutputText()))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&manga); err != nil || manga.Title == "" || manga.Volumes < 1 || !strings.Contains("shonen seinen shojo", manga.Genre) || manga.Genre == "" {
				t.Fatalf("json_schema answer %q: %+v (%v)", r.OutputText(), manga, err)
			}
			if r.Text.Format.Type != "json_schema" || r.Text.Format.Name != "manga" {
				t.Fatalf("the response echoes text.format %+v", r.Text.Format)
			}
		})
	}

	t.Run("stored responses belong to their owner", func(t *testing.T) {
		owner, other := responsesClient(sc.srv.URL, responsesUser()), responsesClient(sc.srv.URL, responsesUser())
		ctx := context.Background()
		first, err := owner.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("ワンピースの最新刊は？")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = other.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("その次の巻は？"), PreviousResponseID: oai.String(first.ID)})
		apiError(t, err, http.StatusNotFound, "previous_response_not_found")
		_, err = other.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
		apiError(t, err, http.StatusNotFound, "")
		apiError(t, other.Responses.Delete(ctx, first.ID), http.StatusNotFound, "")

		got, err := owner.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
		if err != nil || got.ID != first.ID || got.OutputText() != first.OutputText() || got.Status != "completed" {
			t.Fatalf("GET by the owner: %v, %v", got, err)
		}
		next, err := owner.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("その次の巻は？"), PreviousResponseID: oai.String(first.ID)})
		if err != nil || next.PreviousResponseID != first.ID {
			t.Fatalf("the owner continues: %v, %v", next, err)
		}

		if err := owner.Responses.Delete(ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		_, err = owner.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
		apiError(t, err, http.StatusNotFound, "")
		_, err = owner.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("hi"), PreviousResponseID: oai.String(first.ID)})
		apiError(t, err, http.StatusNotFound, "previous_response_not_found")

		unstored, err := owner.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("hello"), Store: oai.Bool(false)})
		if err != nil || !strings.Contains(unstored.RawJSON(), `"store":false`) {
			t.Fatalf("store:false: %v, %v", unstored, err)
		}
		_, err = owner.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("hi"), PreviousResponseID: oai.String(unstored.ID)})
		apiError(t, err, http.StatusNotFound, "previous_response_not_found")
		_, err = owner.Responses.Get(ctx, unstored.ID, responses.ResponseGetParams{})
		apiError(t, err, http.StatusNotFound, "")
	})

	t.Run("refusals", func(t *testing.T) {
		c := responsesClient(sc.srv.URL, responsesUser())
		_, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "sonnet", Input: textInput("news today?"),
			Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}})
		var e *oai.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || e.Param != "tools[0].type" || !strings.Contains(e.Message, "web_search") {
			t.Fatalf("a web_search tool: %v; want a 400 naming tools[0].type", err)
		}
	})

	// A turn that forces a tool cannot be answered by the tiers below the
	// models: with every model down, it is a 503 the SDK raises.
	t.Run("forced tool with every model down", func(t *testing.T) {
		for _, m := range []string{"sonnet", "haiku"} {
			st, _ := sc.s.Sim.Settings(m)
			st.Outage = true
			if err := sc.s.Sim.SetSettings(m, st); err != nil {
				t.Fatal(err)
			}
		}
		c := responsesClient(sc.srv.URL, responsesUser())
		for _, stream := range []bool{false, true} {
			_, err := respond(t, c, responses.ResponseNewParams{Model: "sonnet", Input: textInput("Hello"), Tools: functionTools(),
				ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: oai.Opt(responses.ToolChoiceOptionsRequired)}}, stream)
			apiError(t, err, http.StatusServiceUnavailable, "")
		}
	})
}

// TestResponsesContinueOnAnotherInstance: in fleet mode the stored
// responses live in Redis, so a conversation stored by one instance is
// continued through another: the second instance's model is sent the
// first exchange before the new message, and serves GET to the owner only.
func TestResponsesContinueOnAnotherInstance(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	a, _ := instance(t, cfg)
	b, seenByB := instance(t, cfg)
	user := responsesUser()
	ctx := context.Background()
	ca := responsesClient(a.srv.URL, user)
	first, err := ca.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("ワンピースの最新刊は？")})
	if err != nil {
		t.Fatal(err)
	}
	cb := responsesClient(b.srv.URL, user)
	next, err := cb.Responses.New(ctx, responses.ResponseNewParams{Model: "sonnet", Input: textInput("その次の巻はいつ？"), PreviousResponseID: oai.String(first.ID)})
	if err != nil {
		t.Fatal(err)
	}
	msgs := seenByB()
	if len(msgs) != 3 || msgs[0].Content != "ワンピースの最新刊は？" || msgs[1].Role != provider.RoleAssistant || msgs[1].Content != first.OutputText() ||
		msgs[2].Content != "その次の巻はいつ？" || next.OutputText() == "" {
		t.Fatalf("instance b sent its model %d messages %+v; want the exchange stored by instance a, then the new message", len(msgs), msgs)
	}
	if got, err := cb.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != first.OutputText() {
		t.Fatalf("GET on instance b: %v, %v", got, err)
	}
	stranger := responsesClient(b.srv.URL, responsesUser())
	_, err = stranger.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	apiError(t, err, http.StatusNotFound, "")
}

// TestResponsesOnTheJavaScriptSDK: an app on the official openai npm
// client uses client.responses.create and client.responses.stream with a
// function tool: the SDK parses the call fmgate sends, the app answers it
// with previous_response_id, and the final answer (the SDK's output_text)
// is built from the tool's result; streamed, the SDK's own accumulator
// sees the events in order — the call's arguments in
// response.function_call_arguments.delta events — and its finalResponse
// holds the call.
func TestResponsesOnTheJavaScriptSDK(t *testing.T) {
	cfg := quickConfig()
	const key = "sk-responses-app"
	cfg.Auth.Keys = map[string]config.Caller{key: {UserID: "responses-app", Tier: "standard", Priority: "P0"}}
	cfg.Auth.TrustUserHeader = false
	sc := newScenario(t, cfg)

	type loop struct {
		Call struct {
			Name   string         `json:"name"`
			Args   map[string]any `json:"args"`
			CallID string         `json:"call_id"`
		} `json:"call"`
		FirstID  string   `json:"firstId"`
		Previous string   `json:"previous"`
		Text     string   `json:"text"`
		Status   string   `json:"status"`
		Events   []string `json:"events"`
		Deltas   string   `json:"deltas"`
		// The streamed call: its events, argument deltas and arguments.
		CallEvents []string `json:"callEvents"`
		ArgDeltas  string   `json:"argDeltas"`
		CallArgs   string   `json:"callArgs"`
	}
	var out struct {
		Create, Stream loop
		Missing        struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
		} `json:"missing"`
	}
	runAgent(t, sc, key, "openai_responses.cjs", &out)
	for name, l := range map[string]loop{"create": out.Create, "stream": out.Stream} {
		if city, _ := l.Call.Args["city"].(string); l.Call.Name != "get_weather" || !strings.Contains(city, "東京") || l.Call.CallID == "" {
			t.Fatalf("%s: call %+v; want get_weather for 東京", name, l.Call)
		}
		if l.Previous != l.FirstID || l.Status != "completed" || !strings.Contains(l.Text, "晴れ、最高気温18度") {
			t.Fatalf("%s: answer %+v; want the tool's result, continuing the first response", name, l)
		}
	}
	ev := strings.Join(out.Stream.Events, " ")
	if !strings.HasPrefix(ev, "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta") ||
		!strings.HasSuffix(ev, "response.output_text.done response.content_part.done response.output_item.done response.completed") {
		t.Fatalf("the SDK saw events %s", ev)
	}
	cev := strings.Join(out.Stream.CallEvents, " ")
	if !strings.Contains(cev, "response.output_item.added response.function_call_arguments.delta") ||
		!strings.Contains(cev, "response.function_call_arguments.done response.output_item.done response.completed") ||
		out.Stream.ArgDeltas == "" || out.Stream.ArgDeltas != out.Stream.CallArgs {
		t.Fatalf("the streamed tool call: events %s, argument deltas %q, arguments %q; want the call's arguments in "+
			"response.function_call_arguments.delta events before response.completed", cev, out.Stream.ArgDeltas, out.Stream.CallArgs)
	}
	if out.Stream.Deltas != out.Stream.Text {
		t.Fatalf("the deltas the SDK handed out %q; its output_text %q", out.Stream.Deltas, out.Stream.Text)
	}
	if out.Missing.Status != http.StatusNotFound || out.Missing.Code != "previous_response_not_found" {
		t.Fatalf("an unknown previous_response_id: %+v; want the SDK's NotFoundError", out.Missing)
	}
}

// TestResponsesStoredBeforeTheFinalEvent: a streamed response is stored
// before its response.completed event goes out, so a client that reads
// that event and at once (its stream still open) reads or continues the
// response finds it.
func TestResponsesStoredBeforeTheFinalEvent(t *testing.T) {
	sc := newScenario(t, quickConfig())
	user := responsesUser()
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/responses",
		strings.NewReader(`{"model":"sonnet","input":"おすすめの漫画は？","stream":true}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc2 := bufio.NewScanner(resp.Body)
	sc2.Buffer(make([]byte, 1<<20), 1<<20)
	id := ""
	for sc2.Scan() {
		data, ok := strings.CutPrefix(sc2.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type     string `json:"type"`
			Response struct {
				ID string `json:"id"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if ev.Type == "response.completed" {
			id = ev.Response.ID
			break // the stream stays open: the handler may not have returned
		}
	}
	if id == "" {
		t.Fatalf("no response.completed event (%v)", sc2.Err())
	}
	c := responsesClient(sc.srv.URL, user)
	got, err := c.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
	if err != nil || got.ID != id || got.Status != "completed" {
		t.Fatalf("GET %s right after response.completed: %v, %v; want the stored response", id, got, err)
	}
}
