package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/structured"
)

// checkToolCalls reports an answer whose tool calls the client could not
// run: a call of a tool not offered, a call the choice forbids, or a forced
// call that did not come. It is the tier's failure (the cascade goes on),
// since the client's code would break on it.
func checkToolCalls(t *Turn, model string, r *provider.Response) error {
	if len(r.ToolCalls) == 0 {
		if t.ToolChoice.Forced() && r.StopReason != "max_tokens" {
			return badCalls(model, errors.New("the model answered in text although a tool call was required"))
		}
		return nil
	}
	if t.ToolChoice.Mode == provider.ToolNone {
		return badCalls(model, errors.New("the model called a tool although tool_choice was none"))
	}
	for _, c := range r.ToolCalls {
		offered := false
		for _, tool := range t.Tools {
			offered = offered || tool.Name == c.Name
		}
		switch {
		case !offered:
			return badCalls(model, fmt.Errorf("the model called %q, which is not among the tools offered", c.Name))
		case t.ToolChoice.Mode == provider.ToolNamed && c.Name != t.ToolChoice.Name:
			return badCalls(model, fmt.Errorf("the model called %q although %q was required", c.Name, t.ToolChoice.Name))
		case !provider.IsJSONObject(c.Input):
			return badCalls(model, fmt.Errorf("the arguments of the model's call of %q are not a JSON object", c.Name))
		}
	}
	if t.ToolChoice.Sequential && len(r.ToolCalls) > 1 {
		return badCalls(model, fmt.Errorf("the model made %d tool calls although parallel calls were off", len(r.ToolCalls)))
	}
	return nil
}

// toolNames are the names of calls, in order.
func toolNames(calls []provider.ToolCall) []string {
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.Name
	}
	return names
}

func badCalls(model string, err error) error {
	return &provider.Error{Kind: provider.KindUnknown, Model: model, Code: CodeInvalidToolCall, Err: err}
}

// Codes of a model's answer the gateway refused (provider.Error.Code, and
// a model attempt span's vendor_code).
const (
	CodeInvalidToolCall   = "invalid_tool_call"   // a tool call the client could not run
	CodeInvalidJSONAnswer = "invalid_json_answer" // JSON that does not match the client's schema
)

// RejectedAnswer reports whether err is the gateway's refusal of a model's
// answer: the model is up and answered, but not in the form the client
// asked for. The next tier answers; the tier's health is not in question.
func RejectedAnswer(err error) bool {
	pe, ok := errors.AsType[*provider.Error](err)
	return ok && pe.Kind == provider.KindUnknown && (pe.Code == CodeInvalidToolCall || pe.Code == CodeInvalidJSONAnswer)
}

// answerTool is the tool a tier without a native JSON mode is asked to
// call with its answer as the input, when the client asked for JSON.
const answerTool = "json_answer"

// shapes are the compiled schemas a turn's answers are checked against.
type shapes struct {
	format *structured.Schema // the answer's; nil for json_object (any object)
	// wrapped is set when the answer tool's input wraps the answer in
	// {"value": …}: Anthropic's and Bedrock's tool inputs are objects,
	// and the client's schema is not.
	wrapped bool
	strict  map[string]*structured.Schema // strict tools' inputs, by name
}

// compileShapes compiles what t's answers must match: its response format
// and its strict tools' input schemas. A schema that does not compile is
// the client's error.
func compileShapes(t *Turn) error {
	if t.Format.Kind == provider.FormatText && !anyStrict(t.Tools) {
		return nil
	}
	sh := &shapes{}
	switch t.Format.Kind {
	case provider.FormatText, provider.FormatJSONObject:
	case provider.FormatJSONSchema:
		s, err := structured.Compile(t.Format.Schema)
		if err != nil {
			return invalid("response_format.json_schema.schema: %v", err)
		}
		sh.format = s
		sh.wrapped = !isObjectSchema(t.Format.Schema)
	default:
		return invalid("response_format %q is not one of text, json_object, json_schema", t.Format.Kind)
	}
	for _, tool := range t.Tools {
		if t.Format.Kind != provider.FormatText && tool.Name == answerTool {
			return invalid("a tool may not be named %q when the answer's format is set", answerTool)
		}
		if !tool.Strict {
			continue
		}
		s, err := structured.Compile(tool.Schema)
		if err != nil {
			return invalid("the schema of tool %q: %v", tool.Name, err)
		}
		if sh.strict == nil {
			sh.strict = map[string]*structured.Schema{}
		}
		sh.strict[tool.Name] = s
	}
	t.shapes = sh
	return nil
}

func anyStrict(tools []provider.Tool) bool {
	for _, t := range tools {
		if t.Strict {
			return true
		}
	}
	return false
}

// isObjectSchema reports whether schema describes objects only.
func isObjectSchema(schema json.RawMessage) bool {
	var s struct {
		Type json.RawMessage `json:"type"`
	}
	return json.Unmarshal(schema, &s) == nil && string(s.Type) == `"object"`
}

// nativeFormat reports whether the tier's provider takes the answer's
// format itself (OpenAI's response_format; the simulator answers it too).
func nativeFormat(m config.Model) bool {
	return m.Provider == "openai" || m.Provider == "" || m.Provider == "sim"
}

// shapeRequest asks req's model for the answer's format: passed on to a
// tier that has it, else as a tool the model must call with the answer.
func shapeRequest(t *Turn, m config.Model, req *provider.Request) {
	if t.Format.Kind == provider.FormatText {
		return
	}
	if nativeFormat(m) {
		req.Format = t.Format
		return
	}
	schema := json.RawMessage(`{"type":"object"}`)
	switch {
	case t.shapes.wrapped:
		schema = json.RawMessage(`{"type":"object","properties":{"value":` + string(t.Format.Schema) + `},"required":["value"]}`)
	case t.Format.Kind == provider.FormatJSONSchema:
		schema = t.Format.Schema
	}
	desc := "Give your whole answer as this tool's input, which must match its schema."
	if t.Format.Description != "" {
		desc += " " + t.Format.Description
	}
	tools := make([]provider.Tool, 0, len(req.Tools)+1)
	req.Tools = append(append(tools, req.Tools...), provider.Tool{Name: answerTool, Description: desc, Schema: schema})
	switch req.ToolChoice.Mode {
	case provider.ToolAuto:
		if len(t.Tools) > 0 {
			req.ToolChoice.Mode = provider.ToolAny // a client tool, or the answer
			break
		}
		fallthrough
	case provider.ToolNone:
		req.ToolChoice = provider.ToolChoice{Mode: provider.ToolNamed, Name: answerTool}
	}
}

// settleShape makes r the answer the client asked for: the answer tool's
// input becomes its text, and the text, or the strict tools' inputs, must
// match their schemas. A mismatch is the tier's failure.
func settleShape(t *Turn, model string, r *provider.Response) error {
	if t.shapes == nil {
		return nil
	}
	if t.Format.Kind != provider.FormatText {
		for i, c := range r.ToolCalls {
			if c.Name != answerTool {
				continue
			}
			r.Text, r.ToolCalls, r.StopReason = string(c.Input), slices.Delete(slices.Clone(r.ToolCalls), i, i+1), "end_turn"
			if t.shapes.wrapped {
				var v struct {
					Value json.RawMessage `json:"value"`
				}
				if err := json.Unmarshal(c.Input, &v); err != nil || len(v.Value) == 0 {
					return badAnswer(model, errors.New("the answer tool's input has no value"))
				}
				r.Text = string(v.Value)
			}
			break
		}
		if len(r.ToolCalls) == 0 && r.StopReason != "max_tokens" {
			if err := t.shapes.format.Check(r.Text); err != nil {
				return badAnswer(model, err)
			}
		}
	}
	for _, c := range r.ToolCalls {
		if s := t.shapes.strict[c.Name]; s != nil {
			if err := s.Check(string(c.Input)); err != nil {
				return badCalls(model, fmt.Errorf("the input of the model's call of %q: %w", c.Name, err))
			}
		}
	}
	return nil
}

func badAnswer(model string, err error) error {
	return &provider.Error{Kind: provider.KindUnknown, Model: model, Code: CodeInvalidJSONAnswer, Err: err}
}

// heldOutput keeps a turn's text from the client until the whole answer
// is in and checked: a JSON answer that fails its schema never reaches
// the client half-sent. The deltas are dropped; release sends the
// provider's whole text (or the answer tool's input) once checked.
type heldOutput struct{ Output }

func (h *heldOutput) Write(string) error { return nil }
func (h *heldOutput) Started() bool      { return false }
func (h *heldOutput) WholeAnswer() bool  { return true }

// release sends text, the checked answer.
func (h *heldOutput) release(text string) error { return h.Output.Write(text) }
