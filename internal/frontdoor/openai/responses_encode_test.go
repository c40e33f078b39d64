package openai

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3/responses"

	"github.com/fmgate/fmgate/internal/provider"
)

func sampleRequest() *Responses {
	instr, temp := "Be brief.", 0.4
	return &Responses{Model: "sonnet", Instructions: &instr, Temperature: &temp, Store: true, MaxOutputTokens: 300,
		PreviousResponseID: "resp_prev", Metadata: json.RawMessage(`{ "app": "store" }`),
		Tools: []provider.Tool{{Name: "get_weather", Description: "Weather", Schema: json.RawMessage(`{"type": "object",
			"properties": {"city": {"type": "string"}}}`), Strict: true}},
		ToolChoice: provider.ToolChoice{Mode: provider.ToolNamed, Name: "get_weather", Sequential: true},
		Format:     provider.Format{Kind: provider.FormatJSONSchema, Name: "manga", Schema: json.RawMessage(`{"type":"object"}`), Strict: true}}
}

func TestResponseObjectParsesInTheSDK(t *testing.T) {
	r := &Response{ID: "resp_abc", CreatedAt: 1700000000, CompletedAt: 1700000002, Model: "claude-sonnet", Stored: true,
		Text: "晴れ \"です\"\n", ToolCalls: []provider.ToolCall{{ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"東京"}`)}},
		Usage: &Usage{PromptTokens: 10, CompletionTokens: 5, CachedTokens: 4, CostUSD: 0.001}, Request: sampleRequest()}
	r.Finish(FinishToolCalls)
	b := r.AppendJSON(nil)
	if !json.Valid(b) {
		t.Fatalf("invalid JSON: %s", b)
	}
	var got responses.Response
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "resp_abc" || got.Object != "response" || got.Status != "completed" || got.Model != "claude-sonnet" || got.CreatedAt != 1700000000 {
		t.Errorf("head %s %s %s %s %v", got.ID, got.Object, got.Status, got.Model, got.CreatedAt)
	}
	if got.OutputText() != r.Text {
		t.Errorf("output text %q, want %q", got.OutputText(), r.Text)
	}
	if len(got.Output) != 2 || got.Output[0].Type != "message" || got.Output[0].ID != "msg_abc" ||
		got.Output[1].Type != "function_call" || got.Output[1].CallID != "call_1" || got.Output[1].Name != "get_weather" ||
		got.Output[1].Arguments.OfString != `{"city":"東京"}` || got.Output[1].ID != "fc_abc_0" {
		t.Errorf("output %s", b)
	}
	u := got.Usage
	if u.InputTokens != 10 || u.OutputTokens != 5 || u.TotalTokens != 15 || u.InputTokensDetails.CachedTokens != 4 {
		t.Errorf("usage %+v", u)
	}
	if got.Instructions.OfString != "Be brief." || got.PreviousResponseID != "resp_prev" || got.MaxOutputTokens != 300 ||
		got.Temperature != 0.4 || got.ParallelToolCalls || got.Metadata["app"] != "store" || !strings.Contains(string(b), `"store":true`) {
		t.Errorf("echoed request: %s", b)
	}
	if got.ToolChoice.Name != "get_weather" || len(got.Tools) != 1 || got.Tools[0].Name != "get_weather" || !got.Tools[0].Strict ||
		got.Text.Format.Type != "json_schema" || got.Text.Format.Name != "manga" {
		t.Errorf("tools and format: %s", b)
	}
	if strings.Contains(string(b), `"output_text"`+":") {
		t.Errorf("output_text is an SDK convenience, not a member of the object: %s", b)
	}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(b, &top)
	if _, ok := top["output_text"]; ok {
		t.Errorf("the object carries output_text")
	}

	cut := &Response{ID: "resp_x", Text: "Here are", Request: &Responses{}}
	cut.Finish(FinishLength)
	if err := json.Unmarshal(cut.AppendJSON(nil), &got); err != nil || got.Status != "incomplete" ||
		got.IncompleteDetails.Reason != "max_output_tokens" || got.Output[0].Status != "incomplete" {
		t.Errorf("cut by the length limit: %+v (%v)", got, err)
	}
}

// sseEvent is one server-sent event as a client reads it.
type sseEvent struct {
	name string
	data map[string]any
	raw  string
}

func parseEvents(t *testing.T, stream string) []sseEvent {
	t.Helper()
	var evs []sseEvent
	for _, block := range strings.Split(strings.TrimSuffix(stream, "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(block, "\ndata: ")
		name, ok2 := strings.CutPrefix(name, "event: ")
		if !ok || !ok2 {
			t.Fatalf("malformed event %q", block)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event %s: %v\n%s", name, err, data)
		}
		evs = append(evs, sseEvent{name: name, data: m, raw: data})
	}
	return evs
}

func TestResponseStreamOrderAndSequence(t *testing.T) {
	s := &ResponseStream{R: &Response{ID: "resp_s", Model: "m", Request: sampleRequest()}}
	b := s.Begin(nil)
	b = s.Delta(b, "晴れ")
	b = s.Delta(b, "")
	b = s.Delta(b, "です")
	s.R.ToolCalls = []provider.ToolCall{{ID: "call_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Tokyo"}`)}}
	s.R.Usage = &Usage{PromptTokens: 3, CompletionTokens: 2}
	s.R.Finish(FinishToolCalls)
	b = s.End(b)
	evs := parseEvents(t, string(b))
	want := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done", "response.output_item.done",
		"response.completed"}
	var names []string
	for i, ev := range evs {
		names = append(names, ev.name)
		if ev.data["type"] != ev.name {
			t.Errorf("event %s carries type %v", ev.name, ev.data["type"])
		}
		if seq, _ := ev.data["sequence_number"].(float64); int(seq) != i {
			t.Errorf("event %d (%s) has sequence_number %v", i, ev.name, ev.data["sequence_number"])
		}
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("events\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	if evs[0].data["response"].(map[string]any)["status"] != "in_progress" || evs[0].data["response"].(map[string]any)["usage"] != nil {
		t.Errorf("response.created: %s", evs[0].raw)
	}
	if evs[4].data["item_id"] != "msg_s" || evs[4].data["delta"] != "晴れ" || evs[6].data["text"] != "晴れです" {
		t.Errorf("text events: %s / %s", evs[4].raw, evs[6].raw)
	}
	if evs[9].data["output_index"] != 1.0 || evs[11].data["arguments"] != `{"city":"Tokyo"}` || evs[11].data["item_id"] != "fc_s_0" {
		t.Errorf("call events: %s / %s", evs[9].raw, evs[11].raw)
	}
	var final responses.Response
	if err := json.Unmarshal([]byte(evs[len(evs)-1].raw), &struct {
		Response *responses.Response `json:"response"`
	}{&final}); err != nil {
		t.Fatal(err)
	}
	if final.Status != "completed" || final.OutputText() != "晴れです" || len(final.Output) != 2 || final.Usage.TotalTokens != 5 {
		t.Errorf("response.completed: %s", evs[len(evs)-1].raw)
	}
}

func TestResponseStreamEndings(t *testing.T) {
	t.Run("calls alone have no message", func(t *testing.T) {
		s := &ResponseStream{R: &Response{ID: "resp_c", Request: &Responses{}}}
		b := s.Begin(nil)
		s.R.ToolCalls = []provider.ToolCall{{ID: "c1", Name: "f", Input: json.RawMessage(`{}`)}, {ID: "c2", Name: "g", Input: json.RawMessage(`{}`)}}
		s.R.Finish(FinishToolCalls)
		evs := parseEvents(t, string(s.End(b)))
		if evs[2].name != "response.output_item.added" || evs[2].data["item"].(map[string]any)["type"] != "function_call" ||
			evs[2].data["output_index"] != 0.0 || evs[7].data["output_index"] != 1.0 {
			t.Fatalf("events %v", evs)
		}
	})
	t.Run("cut by the length limit", func(t *testing.T) {
		s := &ResponseStream{R: &Response{ID: "resp_l", Request: &Responses{}}}
		b := s.Delta(s.Begin(nil), "Here are")
		s.R.Finish(FinishLength)
		evs := parseEvents(t, string(s.End(b)))
		last := evs[len(evs)-1]
		r := last.data["response"].(map[string]any)
		if last.name != "response.incomplete" || r["status"] != "incomplete" || r["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
			t.Fatalf("last event %s", last.raw)
		}
	})
	t.Run("a failure mid-answer", func(t *testing.T) {
		s := &ResponseStream{R: &Response{ID: "resp_f", Request: &Responses{}}}
		b := s.Delta(s.Begin(nil), "Here are")
		evs := parseEvents(t, string(s.Fail(b, &Error{Code: "upstream_failed", Message: "The model failed mid-answer."})))
		n := len(evs)
		if evs[n-2].name != "error" || evs[n-2].data["code"] != "upstream_failed" || evs[n-2].data["message"] != "The model failed mid-answer." {
			t.Fatalf("error event %s", evs[n-2].raw)
		}
		r := evs[n-1].data["response"].(map[string]any)
		if evs[n-1].name != "response.failed" || r["status"] != "failed" || r["error"].(map[string]any)["code"] != "upstream_failed" {
			t.Fatalf("last event %s", evs[n-1].raw)
		}
		for i, ev := range evs {
			if ev.data["sequence_number"] != float64(i) {
				t.Fatalf("event %d numbered %v", i, ev.data["sequence_number"])
			}
		}
	})
}

// The arguments go out in pieces of argumentsPiece bytes; where a piece
// would end inside a character it ends after it, so every delta is valid
// UTF-8 and the pieces add up to the arguments.
func TestResponseStreamArgumentsKeepUTF8Whole(t *testing.T) {
	for _, pad := range []int{argumentsPiece - 11, argumentsPiece - 12, argumentsPiece - 13} {
		args := `{"city":"` + strings.Repeat("a", pad) + `東京都渋谷区","note":"🍣🍣🍣` + strings.Repeat("é", 40) + `"}`
		if !json.Valid([]byte(args)) {
			t.Fatal("test arguments are not JSON")
		}
		s := &ResponseStream{R: &Response{ID: "resp_u", Request: &Responses{}}}
		s.R.ToolCalls = []provider.ToolCall{{ID: "c1", Name: "f", Input: json.RawMessage(args)}}
		s.R.Finish(FinishToolCalls)
		var joined strings.Builder
		deltas := 0
		split := false
		for _, ev := range parseEvents(t, string(s.End(s.Begin(nil)))) {
			if ev.name != "response.function_call_arguments.delta" {
				continue
			}
			d := ev.data["delta"].(string)
			// The wire form, before JSON decoding, must be whole UTF-8 too.
			if !utf8.ValidString(ev.raw) || strings.ContainsRune(d, utf8.RuneError) {
				t.Fatalf("delta %q is not whole UTF-8", d)
			}
			if deltas == 0 && len(d) > argumentsPiece {
				split = true // the first piece ran past the boundary to finish a character
			}
			deltas++
			joined.WriteString(d)
		}
		if joined.String() != args || deltas < 3 {
			t.Fatalf("pad %d: %d deltas joined to %q, want %q", pad, deltas, joined.String(), args)
		}
		if pad == argumentsPiece-11 && !split {
			t.Fatalf("pad %d: the first piece did not cross a character boundary; the test checks nothing", pad)
		}
	}
}
