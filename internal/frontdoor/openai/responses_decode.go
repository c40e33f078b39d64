package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
)

// Limits of a Responses request, as OpenAI documents them.
const (
	// MinOutputTokens is the least max_output_tokens a request may ask for.
	MinOutputTokens = 16
	// MaxResponseIDBytes bounds a response id a request names.
	MaxResponseIDBytes = 128
)

// Responses is a decoded Responses API request (POST /v1/responses).
type Responses struct {
	// Model is the request's model, as sent.
	Model string
	// Instructions is the request's system message, nil when absent. A
	// response that continues another does not inherit its instructions.
	Instructions *string
	Stream       bool
	// Store keeps the response, for previous_response_id and GET (default
	// true).
	Store bool
	// PreviousResponseID names the stored response this one continues.
	PreviousResponseID string
	// MaxOutputTokens is max_output_tokens; 0 when not set.
	MaxOutputTokens int
	Temperature     *float64
	TopP            *float64
	User            string
	PromptCacheKey  string
	// Metadata is the metadata object as sent; nil when absent.
	Metadata json.RawMessage
	// Tools are the functions offered, ToolChoice tool_choice and
	// parallel_tool_calls (default true).
	Tools      []provider.Tool
	ToolChoice provider.ToolChoice
	// Format is text.format: text, json_object or json_schema.
	Format provider.Format
	// Items are the input items as sent, a string input being one user
	// message: a stored response keeps them for the next request.
	Items []json.RawMessage

	input  []inputItem
	images *vision.Reader
}

// Conversation is the request's conversation, continuing prior (the items
// of the response it continues, as stored; nil for none): the client's
// system text (instructions, then the system and developer items in
// order), the history, and the last user message.
func (q *Responses) Conversation(prior []json.RawMessage) (system string, history []provider.Message, last provider.Message, e *Error) {
	earlier, e := decodeItems(prior, "previous_response_id", q.images)
	if e != nil {
		return "", nil, provider.Message{}, e
	}
	var conv conversation
	if q.Instructions != nil && *q.Instructions != "" {
		conv.addSystem(*q.Instructions)
	}
	for _, it := range earlier {
		it.addTo(&conv)
	}
	for _, it := range q.input {
		it.addTo(&conv)
	}
	history, last, e = conv.split("input", "The last input item must be a user message or a function_call_output: fmgate answers a user's message.")
	return conv.systemPrompt(), history, last, e
}

// responsesRequest is the JSON body. Fields fmgate refuses whenever they
// carry a value are raw, so that an explicit null is accepted like an
// absent field.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Stream             *bool           `json:"stream"`
	StreamOptions      *streamOptions  `json:"stream_options"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	User               *string         `json:"user"`
	PromptCacheKey     *string         `json:"prompt_cache_key"`
	Metadata           json.RawMessage `json:"metadata"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               *struct {
		Format    json.RawMessage `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"`
	} `json:"text"`
	// Accepted as "auto", which is what fmgate does.
	Truncation *string `json:"truncation"`

	// Refused when they carry a value.
	Background           json.RawMessage `json:"background"`
	Conversation         json.RawMessage `json:"conversation"`
	Include              json.RawMessage `json:"include"`
	MaxToolCalls         json.RawMessage `json:"max_tool_calls"`
	Prompt               json.RawMessage `json:"prompt"`
	PromptCacheRetention json.RawMessage `json:"prompt_cache_retention"`
	PromptCacheOptions   json.RawMessage `json:"prompt_cache_options"`
	Reasoning            json.RawMessage `json:"reasoning"`
	ServiceTier          json.RawMessage `json:"service_tier"`
	SafetyIdentifier     json.RawMessage `json:"safety_identifier"`
	TopLogprobs          json.RawMessage `json:"top_logprobs"`
	ContextManagement    json.RawMessage `json:"context_management"`
	Moderation           json.RawMessage `json:"moderation"`
	AccessPrograms       json.RawMessage `json:"access_programs"`
}

// readResponses reads and decodes a Responses request body of at most
// limit bytes (0: DefaultMaxBodyBytes), into buf's memory (see readBody),
// its images bounded by images. Every error is an *Error in OpenAI's
// shape.
func readResponses(r *http.Request, limit int64, images vision.Limits, buf *[]byte) (Responses, *Error) {
	data, e := readBody(r, limit, buf)
	if e != nil {
		return Responses{}, e
	}
	return DecodeResponses(data, images)
}

// DecodeResponses decodes a Responses request body, its images bounded by
// images. Every error is an *Error with status 400 in OpenAI's shape,
// naming the offending parameter.
func DecodeResponses(data []byte, images vision.Limits) (Responses, *Error) {
	q := Responses{Store: true}
	var req responsesRequest
	if e := decodeBody(data, &req); e != nil {
		return q, e
	}
	if e := req.refusals(); e != nil {
		return q, e
	}
	if req.Model == "" {
		return q, invalidRequest("model", "Missing required parameter: 'model'.")
	}
	q.Model, q.Instructions = req.Model, req.Instructions
	if req.Stream != nil {
		q.Stream = *req.Stream
	}
	if req.StreamOptions != nil && !q.Stream {
		return q, invalidRequest("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
	}
	if req.Store != nil {
		q.Store = *req.Store
	}
	if id := req.PreviousResponseID; id != nil {
		if *id == "" || len(*id) > MaxResponseIDBytes {
			return q, invalidRequest("previous_response_id", "Invalid 'previous_response_id': expected a response id of 1 to %d characters.", MaxResponseIDBytes)
		}
		q.PreviousResponseID = *id
	}
	if n := req.MaxOutputTokens; n != nil {
		if *n < MinOutputTokens {
			return q, invalidRequest("max_output_tokens", "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= %d, but got %d instead.", MinOutputTokens, *n)
		}
		q.MaxOutputTokens = *n
	}
	var e *Error
	if q.Temperature, q.TopP, e = checkSampling(req.Temperature, req.TopP); e != nil {
		return q, e
	}
	if q.User, e = checkUser(req.User); e != nil {
		return q, e
	}
	if q.PromptCacheKey, e = checkPromptCacheKey(req.PromptCacheKey); e != nil {
		return q, e
	}
	if e := checkMetadata(req.Metadata); e != nil {
		return q, e
	}
	if isSet(req.Metadata) {
		q.Metadata = req.Metadata
	}
	if req.Text != nil {
		if isSet(req.Text.Verbosity) {
			return q, invalidRequest("text.verbosity", "fmgate does not support 'text.verbosity' (the model tier decides); remove it from the request.")
		}
		if q.Format, e = decodeTextFormat(req.Text.Format); e != nil {
			return q, e
		}
	}
	if q.Tools, e = decodeResponsesTools(req.Tools); e != nil {
		return q, e
	}
	if q.ToolChoice, e = decodeResponsesToolChoice(req.ToolChoice, q.Tools); e != nil {
		return q, e
	}
	if p := req.ParallelToolCalls; p != nil {
		q.ToolChoice.Sequential = !*p
	}
	if q.Items, e = inputItems(req.Input); e != nil {
		return q, e
	}
	q.images = vision.NewReader(images)
	if q.input, e = decodeItems(q.Items, "input", q.images); e != nil {
		return q, e
	}
	return q, nil
}

// refusals names the first field set to a value fmgate cannot honour.
func (req *responsesRequest) refusals() *Error {
	unsupported := func(param, what string) *Error {
		return invalidRequest(param, "fmgate does not support '%s' (%s); remove it from the request.", param, what)
	}
	if t := req.Truncation; t != nil && *t != "auto" {
		if *t == "disabled" {
			return unsupported("truncation", "fmgate drops the oldest turns of a conversation over its input budget, as 'auto' does; send 'auto' or nothing")
		}
		return invalidRequest("truncation", "Invalid 'truncation': %q is not one of auto, disabled.", truncate(*t, 40))
	}
	for _, f := range []struct {
		param, what string
		v           json.RawMessage
	}{
		{"background", "every response is answered while the request waits", req.Background},
		{"conversation", "continue a conversation with 'previous_response_id'", req.Conversation},
		{"include", "there is nothing extra to include", req.Include},
		{"max_tool_calls", "fmgate runs no built-in tools", req.MaxToolCalls},
		{"prompt", "prompt templates are not available", req.Prompt},
		{"prompt_cache_retention", "the answering tier's vendor decides", req.PromptCacheRetention},
		{"prompt_cache_options", "the answering tier's vendor decides", req.PromptCacheOptions},
		{"reasoning", "the model tier decides", req.Reasoning},
		{"service_tier", "fmgate's priority classes come from the API key", req.ServiceTier},
		{"safety_identifier", "send the end user's id in 'user'", req.SafetyIdentifier},
		{"top_logprobs", "log probabilities are not available", req.TopLogprobs},
		{"context_management", "fmgate does not compact conversations", req.ContextManagement},
		{"moderation", "fmgate's own guardrails apply", req.Moderation},
		{"access_programs", "not available", req.AccessPrograms},
	} {
		if carries(f.v) {
			return unsupported(f.param, f.what)
		}
	}
	return nil
}

// carries reports whether v asks for something: set, and not false, zero
// or empty.
func carries(v json.RawMessage) bool {
	if !isSet(v) {
		return false
	}
	switch string(bytes.TrimSpace(v)) {
	case "false", "0", "[]", "{}", `""`:
		return false
	}
	return true
}

// inputItems reads input: a string (one user message) or an array of
// items.
func inputItems(raw json.RawMessage) ([]json.RawMessage, *Error) {
	if !isSet(raw) {
		return nil, invalidRequest("input", "Missing required parameter: 'input'.")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalidRequest("input", "Invalid 'input': expected a string or an array of input items.")
		}
		item := appendString([]byte(`{"role":"user","content":`), s)
		return []json.RawMessage{append(item, '}')}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidRequest("input", "Invalid 'input': expected a string or an array of input items.")
	}
	if len(items) == 0 {
		return nil, invalidRequest("input", "Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	return items, nil
}

// inputItem is one decoded input item: a system text, a message, a tool
// call or a tool's result.
type inputItem struct {
	system bool
	role   provider.Role
	text   string
	images []provider.Image
	call   *provider.ToolCall
	result *provider.ToolResult
}

func (it inputItem) addTo(c *conversation) {
	switch {
	case it.system:
		c.addSystem(it.text)
	case it.call != nil:
		c.addCall(*it.call)
	case it.result != nil:
		c.addResult(*it.result)
	default:
		c.add(it.role, it.text, it.images)
	}
}

// decodeItems decodes input items; param names the list in errors, and
// rd reads the images of user messages.
func decodeItems(items []json.RawMessage, param string, rd *vision.Reader) ([]inputItem, *Error) {
	out := make([]inputItem, 0, len(items))
	for i, item := range items {
		pp := fmt.Sprintf("%s[%d]", param, i)
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(item, &head); err != nil {
			return nil, invalidRequest(pp, "Invalid '%s': expected an input item object.", pp)
		}
		var it inputItem
		var e *Error
		switch head.Type {
		case "", "message":
			it, e = decodeMessageItem(item, pp, rd)
		case "function_call":
			it, e = decodeFunctionCall(item, pp)
		case "function_call_output":
			it, e = decodeFunctionCallOutput(item, pp)
		case "item_reference":
			e = invalidRequest(pp+".type", "fmgate does not support item references; continue a stored response with 'previous_response_id', or send the items themselves.")
		default:
			e = invalidRequest(pp+".type", "fmgate does not support input items of type %q; send messages, function_call and function_call_output items.", truncate(head.Type, 40))
		}
		if e != nil {
			return nil, e
		}
		out = append(out, it)
	}
	return out, nil
}

// decodeMessageItem reads a message item: a role, and content as a string
// or an array of parts.
func decodeMessageItem(item json.RawMessage, pp string, rd *vision.Reader) (inputItem, *Error) {
	if e := onlyMembers(item, pp, "message", "type", "role", "content", "id", "status", "phase"); e != nil {
		return inputItem{}, e
	}
	var m struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(item, &m); err != nil {
		return inputItem{}, invalidRequest(pp, "Invalid '%s': expected a message with a role and content.", pp)
	}
	var it inputItem
	switch m.Role {
	case "system", "developer":
		it.system = true
	case "user":
		it.role = provider.RoleUser
	case "assistant":
		it.role = provider.RoleAssistant
	case "":
		return it, invalidRequest(pp+".role", "Missing required parameter: '%s.role'.", pp)
	default:
		return it, invalidRequest(pp+".role", "Invalid '%s.role': %q is not one of user, assistant, system, developer.", pp, truncate(m.Role, 40))
	}
	if m.Role != "user" {
		rd = nil
	}
	var e *Error
	it.text, it.images, e = itemContent(m.Content, pp+".content", rd)
	return it, e
}

// itemContent reads a message item's content: a string, or text parts
// (input_text, output_text, refusal), joined, and input_image parts when
// rd reads images (a user message's).
func itemContent(raw json.RawMessage, param string, rd *vision.Reader) (string, []provider.Image, *Error) {
	if !isSet(raw) {
		return "", nil, invalidRequest(param, "Missing required parameter: '%s'.", param)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, invalidRequest(param, "Invalid '%s': expected a string or an array of content parts.", param)
		}
		return s, nil, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, invalidRequest(param, "Invalid '%s': expected a string or an array of content parts.", param)
	}
	var b strings.Builder
	var images []provider.Image
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var part struct {
			Type     string  `json:"type"`
			Text     *string `json:"text"`
			Refusal  *string `json:"refusal"`
			ImageURL string  `json:"image_url"`
			Detail   string  `json:"detail"`
		}
		if err := json.Unmarshal(p, &part); err != nil {
			return "", nil, invalidRequest(pp, "Invalid '%s': expected a content part with a type.", pp)
		}
		var e *Error
		switch part.Type {
		case "input_text":
			e = onlyMembers(p, pp, "input_text part", "type", "text")
		case "output_text":
			// Annotations and log probabilities describe an earlier answer;
			// the model reads its text.
			e = onlyMembers(p, pp, "output_text part", "type", "text", "annotations", "logprobs")
		case "refusal":
			if e = onlyMembers(p, pp, "refusal part", "type", "refusal"); e == nil && part.Refusal == nil {
				e = invalidRequest(pp+".refusal", "Missing required parameter: '%s.refusal'.", pp)
			}
			if e != nil {
				return "", nil, e
			}
			b.WriteString(*part.Refusal)
			continue
		case "input_image":
			if rd == nil {
				return "", nil, invalidRequest(pp+".type", "Only user messages may carry images.")
			}
			if e := onlyMembers(p, pp, "input_image part", "type", "image_url", "detail"); e != nil {
				return "", nil, e
			}
			if part.ImageURL == "" {
				return "", nil, invalidRequest(pp+".image_url", "Missing required parameter: '%s.image_url' (a data: or https URL).", pp)
			}
			im, e := imageOf(part.ImageURL, part.Detail, pp+".image_url", pp+".detail", rd)
			if e != nil {
				return "", nil, e
			}
			images = append(images, im)
			continue
		default:
			return "", nil, invalidRequest(pp+".type", "fmgate does not support content parts of type %q; send input_text, output_text and input_image parts.", truncate(part.Type, 40))
		}
		if e != nil {
			return "", nil, e
		}
		if part.Text == nil {
			return "", nil, invalidRequest(pp+".text", "Missing required parameter: '%s.text'.", pp)
		}
		b.WriteString(*part.Text)
	}
	return b.String(), images, nil
}

// decodeFunctionCall reads a function_call item: a call an earlier
// answer made.
func decodeFunctionCall(item json.RawMessage, pp string) (inputItem, *Error) {
	if e := onlyMembers(item, pp, "function_call item", "type", "call_id", "name", "arguments", "id", "status"); e != nil {
		return inputItem{}, e
	}
	var fc struct {
		CallID    string `json:"call_id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	if err := json.Unmarshal(item, &fc); err != nil {
		return inputItem{}, invalidRequest(pp, "Invalid '%s': expected a function_call with call_id, name and arguments (a string).", pp)
	}
	c, e := toolCallOf(fc.CallID, fc.Name, fc.Arguments, pp+".call_id", pp)
	if e != nil {
		return inputItem{}, e
	}
	return inputItem{call: &c}, nil
}

// decodeFunctionCallOutput reads a function_call_output item: the
// result of a call, as a string or text parts.
func decodeFunctionCallOutput(item json.RawMessage, pp string) (inputItem, *Error) {
	if e := onlyMembers(item, pp, "function_call_output item", "type", "call_id", "output", "id", "status"); e != nil {
		return inputItem{}, e
	}
	var fo struct {
		CallID json.RawMessage `json:"call_id"`
		Output json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(item, &fo); err != nil {
		return inputItem{}, invalidRequest(pp, "Invalid '%s': expected a function_call_output with call_id and output.", pp)
	}
	text, _, e := itemContent(fo.Output, pp+".output", nil)
	if e != nil {
		return inputItem{}, e
	}
	if !isSet(fo.CallID) {
		return inputItem{}, invalidRequest(pp+".call_id", "Missing required parameter: '%s.call_id'.", pp)
	}
	var id string
	if err := json.Unmarshal(fo.CallID, &id); err != nil || id == "" {
		return inputItem{}, invalidRequest(pp+".call_id", "Invalid '%s.call_id': expected the call_id of a function_call.", pp)
	}
	return inputItem{result: &provider.ToolResult{CallID: id, Content: text}}, nil
}

// decodeResponsesTools reads tools: functions only, each
// {"type":"function","name","description","parameters","strict"};
// strict is true unless set false, as OpenAI has it.
func decodeResponsesTools(raw json.RawMessage) ([]provider.Tool, *Error) {
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
		var t struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description *string         `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}
		if err := json.Unmarshal(item, &t); err != nil {
			return nil, invalidRequest(param, "Invalid '%s': expected {\"type\":\"function\",\"name\",\"description\",\"parameters\",\"strict\"}.", param)
		}
		if t.Type != "function" {
			return nil, invalidRequest(param+".type", "fmgate does not support tools of type %q: it runs no built-in tools; offer functions (type 'function') only.", truncate(t.Type, 40))
		}
		if e := onlyMembers(item, param, "function tool", "type", "name", "description", "parameters", "strict"); e != nil {
			return nil, e
		}
		tool, e := functionTool(param, t.Name, t.Description, t.Parameters, t.Strict == nil || *t.Strict)
		if e != nil {
			return nil, e
		}
		tools = append(tools, tool)
	}
	return checkToolList(tools)
}

// decodeResponsesToolChoice reads tool_choice: none, auto, required or
// {"type":"function","name"}.
func decodeResponsesToolChoice(raw json.RawMessage, tools []provider.Tool) (provider.ToolChoice, *Error) {
	if !isSet(raw) {
		return provider.ToolChoice{}, nil
	}
	var mode string
	if err := json.Unmarshal(raw, &mode); err == nil {
		c, e := toolMode(mode)
		if e != nil {
			return c, e
		}
		return checkToolChoice(c, tools)
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return provider.ToolChoice{}, invalidRequest("tool_choice", `Invalid 'tool_choice': expected "none", "auto", "required" or {"type":"function","name":…}.`)
	}
	if named.Type != "function" {
		return provider.ToolChoice{}, invalidRequest("tool_choice.type", "fmgate does not support a tool_choice of type %q; name a function ({\"type\":\"function\",\"name\":…}) or send none, auto or required.", truncate(named.Type, 40))
	}
	if e := onlyMembers(raw, "tool_choice", "tool_choice", "type", "name"); e != nil {
		return provider.ToolChoice{}, e
	}
	return checkToolChoice(provider.ToolChoice{Mode: provider.ToolNamed, Name: named.Name}, tools)
}

// decodeTextFormat reads text.format: text, json_object, or json_schema
// with a name, a schema, a description and strict (default false).
func decodeTextFormat(raw json.RawMessage) (provider.Format, *Error) {
	if !isSet(raw) {
		return provider.Format{}, nil
	}
	var f struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return provider.Format{}, invalidRequest("text.format", "Invalid 'text.format': expected an object with a type.")
	}
	switch f.Type {
	case "text":
		return provider.Format{}, onlyMembers(raw, "text.format", "text format", "type")
	case "json_object":
		return provider.Format{Kind: provider.FormatJSONObject}, onlyMembers(raw, "text.format", "json_object format", "type")
	case "json_schema":
		if e := onlyMembers(raw, "text.format", "json_schema format", "type", "name", "description", "schema", "strict"); e != nil {
			return provider.Format{}, e
		}
		return schemaFormat("text.format", f.Name, f.Description, f.Schema, f.Strict != nil && *f.Strict)
	}
	return provider.Format{}, invalidRequest("text.format.type", "Invalid 'text.format.type': %q is not one of text, json_object, json_schema.", truncate(f.Type, 40))
}
