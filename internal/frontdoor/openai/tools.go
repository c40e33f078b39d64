package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

// emptySchema is a tool's input schema when the client gives none.
var emptySchema = json.RawMessage(`{"type":"object","properties":{}}`)

type toolJSON struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// decodeTools reads tools: functions only.
func decodeTools(raw json.RawMessage) ([]provider.Tool, *Error) {
	if !isSet(raw) {
		return nil, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidRequest("tools", "Invalid 'tools': expected an array of tools.")
	}
	if len(list) > provider.MaxTools {
		return nil, invalidRequest("tools", "Invalid 'tools': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", provider.MaxTools, len(list))
	}
	tools := make([]provider.Tool, 0, len(list))
	for i, item := range list {
		param := fmt.Sprintf("tools[%d]", i)
		var t toolJSON
		dec := json.NewDecoder(bytes.NewReader(item))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&t); err != nil {
			return nil, invalidRequest(param, "Invalid '%s': expected {\"type\":\"function\",\"function\":{\"name\",\"description\",\"parameters\"}} (%v).", param, err)
		}
		if t.Type != "function" {
			return nil, invalidRequest(param+".type", "fmgate supports tools of type 'function' only, not %q.", truncate(t.Type, 40))
		}
		if t.Function == nil {
			return nil, invalidRequest(param+".function", "Missing required parameter: '%s.function'.", param)
		}
		f := t.Function
		tool, e := functionTool(param+".function", f.Name, f.Description, f.Parameters, f.Strict != nil && *f.Strict)
		if e != nil {
			return nil, e
		}
		tools = append(tools, tool)
	}
	return checkToolList(tools)
}

// functionTool is a function tool the client offers; param names its
// object in errors.
func functionTool(param, name string, description *string, parameters json.RawMessage, strict bool) (provider.Tool, *Error) {
	if err := provider.CheckToolName(name); err != nil {
		return provider.Tool{}, invalidRequest(param+".name", "Invalid '%s.name': %v.", param, err)
	}
	tool := provider.Tool{Name: name, Schema: emptySchema, Strict: strict}
	if description != nil {
		tool.Description = *description
	}
	if isSet(parameters) {
		if !provider.IsJSONObject(parameters) {
			return provider.Tool{}, invalidRequest(param+".parameters", "Invalid '%s.parameters': expected a JSON Schema object.", param)
		}
		tool.Schema = parameters
	}
	return tool, nil
}

// checkToolList checks the tools together (distinct names, their count).
func checkToolList(tools []provider.Tool) ([]provider.Tool, *Error) {
	if err := provider.CheckTools(tools, provider.ToolChoice{}); err != nil {
		return nil, invalidRequest("tools", "Invalid 'tools': %v.", err)
	}
	return tools, nil
}

// decodeFormat reads response_format: text, json_object, or json_schema
// with a name, a schema and strict.
func decodeFormat(rf *responseFormat) (provider.Format, *Error) {
	var f provider.Format
	if rf == nil {
		return f, nil
	}
	switch rf.Type {
	case "text":
		return f, nil
	case "json_object":
		f.Kind = provider.FormatJSONObject
		return f, nil
	case "json_schema":
	default:
		return f, invalidRequest("response_format.type", "Invalid 'response_format.type': %q is not one of text, json_object, json_schema.", truncate(rf.Type, 40))
	}
	var js struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	}
	dec := json.NewDecoder(bytes.NewReader(rf.JSONSchema))
	dec.DisallowUnknownFields()
	if !isSet(rf.JSONSchema) || dec.Decode(&js) != nil {
		return f, invalidRequest("response_format.json_schema", "Invalid 'response_format.json_schema': expected {\"name\",\"schema\",\"strict\"}.")
	}
	return schemaFormat("response_format.json_schema", js.Name, js.Description, js.Schema, js.Strict != nil && *js.Strict)
}

// schemaFormat is a json_schema answer format; param names its object in
// errors.
func schemaFormat(param, name, description string, schema json.RawMessage, strict bool) (provider.Format, *Error) {
	if err := provider.CheckToolName(name); err != nil {
		return provider.Format{}, invalidRequest(param+".name", "Invalid '%s.name': %v.", param, err)
	}
	if !provider.IsJSONObject(schema) {
		return provider.Format{}, invalidRequest(param+".schema", "Invalid '%s.schema': expected a JSON Schema object.", param)
	}
	return provider.Format{Kind: provider.FormatJSONSchema, Name: name, Description: description, Schema: schema, Strict: strict}, nil
}

// decodeToolChoice reads tool_choice: none, auto, required or a named
// function.
func decodeToolChoice(raw json.RawMessage, tools []provider.Tool) (provider.ToolChoice, *Error) {
	var c provider.ToolChoice
	if !isSet(raw) {
		return c, nil
	}
	var mode string
	if err := json.Unmarshal(raw, &mode); err == nil {
		var e *Error
		if c, e = toolMode(mode); e != nil {
			return c, e
		}
	} else {
		var named struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &named); err != nil || named.Type != "function" {
			return c, invalidRequest("tool_choice", `Invalid 'tool_choice': expected "none", "auto", "required" or {"type":"function","function":{"name":…}}.`)
		}
		c = provider.ToolChoice{Mode: provider.ToolNamed, Name: named.Function.Name}
	}
	return checkToolChoice(c, tools)
}

// toolMode reads tool_choice given as a string: none, auto or required.
func toolMode(mode string) (provider.ToolChoice, *Error) {
	switch mode {
	case "auto":
		return provider.ToolChoice{}, nil
	case "none":
		return provider.ToolChoice{Mode: provider.ToolNone}, nil
	case "required":
		return provider.ToolChoice{Mode: provider.ToolAny}, nil
	}
	return provider.ToolChoice{}, invalidRequest("tool_choice", "Invalid 'tool_choice': %q is not one of none, auto, required.", truncate(mode, 40))
}

// checkToolChoice checks that the tools offered can honour c.
func checkToolChoice(c provider.ToolChoice, tools []provider.Tool) (provider.ToolChoice, *Error) {
	if c.Mode != provider.ToolAuto && c.Mode != provider.ToolNone && len(tools) == 0 {
		return c, invalidRequest("tool_choice", "Invalid 'tool_choice': a tool is required but 'tools' is empty.")
	}
	if err := provider.CheckTools(tools, c); err != nil {
		return c, invalidRequest("tool_choice", "Invalid 'tool_choice': %v.", err)
	}
	return c, nil
}

// decodeToolCalls reads an assistant message's tool_calls.
func decodeToolCalls(raw json.RawMessage, param string) ([]provider.ToolCall, *Error) {
	if !isSet(raw) {
		return nil, nil
	}
	param += ".tool_calls"
	var list []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, invalidRequest(param, "Invalid '%s': expected an array of tool calls.", param)
	}
	if len(list) > provider.MaxToolCallsTurn {
		return nil, invalidRequest(param, "Invalid '%s': at most %d tool calls per message.", param, provider.MaxToolCallsTurn)
	}
	calls := make([]provider.ToolCall, 0, len(list))
	for j, tc := range list {
		p := fmt.Sprintf("%s[%d]", param, j)
		if tc.Type != "function" {
			return nil, invalidRequest(p+".type", "Invalid '%s.type': expected 'function'.", p)
		}
		c, e := toolCallOf(tc.ID, tc.Function.Name, tc.Function.Arguments, p+".id", p+".function")
		if e != nil {
			return nil, e
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// toolCallOf is a tool call the conversation carries: its id (named
// idParam in errors), and the name and JSON arguments in fn.
func toolCallOf(id, name, arguments, idParam, fn string) (provider.ToolCall, *Error) {
	if id == "" || len(id) > 256 {
		return provider.ToolCall{}, invalidRequest(idParam, "Invalid '%s': expected the tool call's id, 1 to 256 characters.", idParam)
	}
	if err := provider.CheckToolName(name); err != nil {
		return provider.ToolCall{}, invalidRequest(fn+".name", "Invalid '%s.name': %v.", fn, err)
	}
	args := json.RawMessage(arguments)
	if arguments == "" {
		args = json.RawMessage("{}")
	}
	if !provider.IsJSONObject(args) {
		return provider.ToolCall{}, invalidRequest(fn+".arguments", "Invalid '%s.arguments': expected a JSON object encoded as a string.", fn)
	}
	return provider.ToolCall{ID: id, Name: name, Input: args}, nil
}

// decodeToolResult is a tool message's result.
func decodeToolResult(rawID json.RawMessage, content, param string) (provider.ToolResult, *Error) {
	var id string
	if !isSet(rawID) {
		return provider.ToolResult{}, invalidRequest(param+".tool_call_id", "Missing required parameter: '%s.tool_call_id'.", param)
	}
	if err := json.Unmarshal(rawID, &id); err != nil || id == "" {
		return provider.ToolResult{}, invalidRequest(param+".tool_call_id", "Invalid '%s.tool_call_id': expected the id of a tool call.", param)
	}
	return provider.ToolResult{CallID: id, Content: content}, nil
}

// checkMetadata accepts metadata as OpenAI does (at most 16 string pairs,
// keys up to 64 characters, values up to 512). OpenAI keeps it with a
// stored completion only, and fmgate stores none (store: true is
// refused), so it changes nothing about the answer.
func checkMetadata(raw json.RawMessage) *Error {
	if !isSet(raw) {
		return nil
	}
	var md map[string]string
	if err := json.Unmarshal(raw, &md); err != nil {
		return invalidRequest("metadata", "Invalid 'metadata': expected an object of strings.")
	}
	if len(md) > 16 {
		return invalidRequest("metadata", "Invalid 'metadata': at most 16 keys.")
	}
	for k, v := range md {
		if len(k) > 64 || len(v) > 512 {
			return invalidRequest("metadata", "Invalid 'metadata': keys are at most 64 characters and values at most 512.")
		}
	}
	return nil
}

// checkName accepts a message's name: a participant's name, which only
// OpenAI's own models read; fmgate checks it as OpenAI does.
func checkName(raw json.RawMessage, param string) *Error {
	if !isSet(raw) {
		return nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil || name == "" || len(name) > 64 || !utf8.ValidString(name) {
		return invalidRequest(param+".name", "Invalid '%s.name': expected a string of 1 to 64 characters.", param)
	}
	return nil
}

// appendToolCalls appends a message's tool_calls array.
func appendToolCalls(dst []byte, calls []provider.ToolCall) []byte {
	dst = append(dst, `"tool_calls":[`...)
	for i, c := range calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"id":`...)
		dst = appendString(dst, c.ID)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendString(dst, c.Name)
		dst = append(dst, `,"arguments":`...)
		dst = appendString(dst, string(c.Input))
		dst = append(dst, "}}"...)
	}
	return append(dst, ']')
}
