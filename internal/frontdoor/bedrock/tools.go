package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

// maxToolUseIDBytes bounds a toolUseId, as Bedrock does.
const maxToolUseIDBytes = 64

type wireToolConfig struct {
	Tools      []json.RawMessage `json:"tools"`
	ToolChoice json.RawMessage   `json:"toolChoice"`
}

type wireToolSpec struct {
	Name        string  `json:"name"`
	Description *string `json:"description"`
	InputSchema *struct {
		JSON json.RawMessage `json:"json"`
	} `json:"inputSchema"`
	Strict *bool `json:"strict"`
}

// decodeToolConfig reads toolConfig: toolSpec tools and a toolChoice of
// auto, any or a named tool.
func decodeToolConfig(raw json.RawMessage, req *Request) error {
	var tc wireToolConfig
	if err := strictUnmarshal(raw, &tc); err != nil {
		return invalidf("toolConfig must be {\"tools\": [{\"toolSpec\": {…}}], \"toolChoice\": {…}}: %s", jsonProblem(err))
	}
	switch {
	case len(tc.Tools) == 0:
		return invalidf("toolConfig.tools must hold at least one tool")
	case len(tc.Tools) > provider.MaxTools:
		return invalidf("toolConfig.tools holds %d tools; the limit is %d", len(tc.Tools), provider.MaxTools)
	}
	req.Tools = make([]provider.Tool, 0, len(tc.Tools))
	for i, item := range tc.Tools {
		t, err := decodeTool(item, fmt.Sprintf("toolConfig.tools[%d]", i))
		if err != nil {
			return err
		}
		req.Tools = append(req.Tools, t)
	}
	if err := provider.CheckTools(req.Tools, provider.ToolChoice{}); err != nil {
		return invalidf("toolConfig.%v", err)
	}
	choice, err := decodeToolChoice(tc.ToolChoice)
	if err != nil {
		return err
	}
	if err := provider.CheckTools(req.Tools, choice); err != nil {
		return invalidf("toolConfig.toolChoice: %v", err)
	}
	req.ToolChoice = choice
	return nil
}

// decodeTool reads one entry of toolConfig.tools, which must be a toolSpec.
func decodeTool(raw json.RawMessage, where string) (provider.Tool, error) {
	kind, body, err := oneMember(raw, where, `{"toolSpec": {"name", "description", "inputSchema": {"json": {…}}}}`)
	if err != nil {
		return provider.Tool{}, err
	}
	if kind != "toolSpec" {
		return provider.Tool{}, invalidf("%s: %s entries in tools are not supported by this endpoint yet; send toolSpec entries only", where, truncate(kind, 40))
	}
	where += ".toolSpec"
	var spec wireToolSpec
	if err := strictUnmarshal(body, &spec); err != nil {
		return provider.Tool{}, invalidf("%s must be {\"name\", \"description\", \"inputSchema\": {\"json\": {…}}}: %s", where, jsonProblem(err))
	}
	if err := provider.CheckToolName(spec.Name); err != nil {
		return provider.Tool{}, invalidf("%s.name: %v", where, err)
	}
	if spec.Strict != nil && *spec.Strict {
		return provider.Tool{}, invalidf("%s.strict is not supported by this endpoint yet; remove it (the input is still checked to be a JSON object)", where)
	}
	if spec.InputSchema == nil || !provider.IsJSONObject(spec.InputSchema.JSON) {
		return provider.Tool{}, invalidf("%s.inputSchema.json must be a JSON Schema object", where)
	}
	t := provider.Tool{Name: spec.Name, Schema: spec.InputSchema.JSON}
	if spec.Description != nil {
		t.Description = *spec.Description
	}
	return t, nil
}

// decodeToolChoice reads {"auto": {}}, {"any": {}} or {"tool": {"name"}};
// none given is auto.
func decodeToolChoice(raw json.RawMessage) (provider.ToolChoice, error) {
	var c provider.ToolChoice
	if !isSet(raw) {
		return c, nil
	}
	const shape = `{"auto": {}}, {"any": {}} or {"tool": {"name": "…"}}`
	kind, body, err := oneMember(raw, "toolConfig.toolChoice", shape)
	if err != nil {
		return c, err
	}
	switch kind {
	case "auto", "any":
		var empty struct{}
		if err := strictUnmarshal(body, &empty); err != nil {
			return c, invalidf("toolConfig.toolChoice.%s must be {}", kind)
		}
		if kind == "any" {
			c.Mode = provider.ToolAny
		}
	case "tool":
		var named struct {
			Name string `json:"name"`
		}
		if err := strictUnmarshal(body, &named); err != nil || named.Name == "" {
			return c, invalidf("toolConfig.toolChoice.tool must be {\"name\": \"…\"}, naming one of the tools")
		}
		c = provider.ToolChoice{Mode: provider.ToolNamed, Name: named.Name}
	default:
		return c, invalidf("toolConfig.toolChoice must be %s, not %s", shape, truncate(kind, 40))
	}
	return c, nil
}

type wireToolUse struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// decodeToolUse reads an assistant message's toolUse block.
func decodeToolUse(raw json.RawMessage, where string) (provider.ToolCall, error) {
	var u wireToolUse
	if err := strictUnmarshal(raw, &u); err != nil {
		return provider.ToolCall{}, invalidf("%s must be {\"toolUseId\", \"name\", \"input\": {…}}: %s", where, jsonProblem(err))
	}
	if err := checkToolUseID(u.ToolUseID); err != nil {
		return provider.ToolCall{}, invalidf("%s.toolUseId: %v", where, err)
	}
	if err := provider.CheckToolName(u.Name); err != nil {
		return provider.ToolCall{}, invalidf("%s.name: %v", where, err)
	}
	if !provider.IsJSONObject(u.Input) {
		return provider.ToolCall{}, invalidf("%s.input must be a JSON object", where)
	}
	return provider.ToolCall{ID: u.ToolUseID, Name: u.Name, Input: compact(u.Input)}, nil
}

type wireToolResult struct {
	ToolUseID string            `json:"toolUseId"`
	Content   []json.RawMessage `json:"content"`
	Status    string            `json:"status"`
}

// decodeToolResult reads a user message's toolResult block: its text and
// json items joined by newlines, a json item as its JSON text.
func decodeToolResult(raw json.RawMessage, where string) (provider.ToolResult, error) {
	var r wireToolResult
	if err := strictUnmarshal(raw, &r); err != nil {
		return provider.ToolResult{}, invalidf("%s must be {\"toolUseId\", \"content\": [{\"text\": \"…\"} or {\"json\": {…}}], \"status\"}: %s", where, jsonProblem(err))
	}
	if err := checkToolUseID(r.ToolUseID); err != nil {
		return provider.ToolResult{}, invalidf("%s.toolUseId: %v", where, err)
	}
	res := provider.ToolResult{CallID: r.ToolUseID}
	switch r.Status {
	case "", "success":
	case "error":
		res.IsError = true
	default:
		return res, invalidf("%s.status must be \"success\" or \"error\"", where)
	}
	parts := make([]string, 0, len(r.Content))
	for j, item := range r.Content {
		p, err := toolResultItem(item, fmt.Sprintf("%s.content[%d]", where, j))
		if err != nil {
			return res, err
		}
		parts = append(parts, p)
	}
	res.Content = strings.Join(parts, "\n")
	return res, nil
}

// toolResultItem is the text of one item of a toolResult's content.
func toolResultItem(raw json.RawMessage, where string) (string, error) {
	kind, body, err := oneMember(raw, where, `{"text": "…"} or {"json": {…}}`)
	if err != nil {
		return "", err
	}
	switch kind {
	case "text":
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return "", invalidf("%s.text must be a string", where)
		}
		return s, nil
	case "json":
		if !json.Valid(body) || string(body) == "null" {
			return "", invalidf("%s.json must be a JSON value", where)
		}
		return string(compact(body)), nil
	}
	return "", invalidf("%s: %s items in a toolResult are not supported by this endpoint; send text and json items only", where, truncate(kind, 40))
}

// checkToolUseID checks a toolUseId as Bedrock does: 1 to 64 of a–z, A–Z,
// 0–9, _ and -.
func checkToolUseID(id string) error {
	if id == "" || len(id) > maxToolUseIDBytes {
		return fmt.Errorf("must be 1 to %d characters", maxToolUseIDBytes)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("%q may hold only letters, digits, _ and -", truncate(id, 64))
		}
	}
	return nil
}

// oneMember reads a union: an object with exactly one member, its name
// and value.
func oneMember(raw json.RawMessage, where, shape string) (string, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err == nil && len(m) == 1 {
		for k, v := range m {
			return k, v, nil
		}
	}
	return "", nil, invalidf("%s must be an object with one member, such as %s", where, shape)
}

// strictUnmarshal decodes raw into v, refusing fields v does not have.
func strictUnmarshal(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// compact is raw without insignificant space; raw must be valid JSON.
func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

// checkToolBlocks reports a conversation whose tool blocks Bedrock would
// refuse: tool blocks without a toolConfig, or calls and results that do
// not pair up.
func checkToolBlocks(req *Request) error {
	used := false
	for _, m := range req.Messages {
		used = used || len(m.ToolCalls)+len(m.ToolResults) > 0
	}
	if used && len(req.Tools) == 0 {
		return invalidf("toolConfig must be defined when the messages hold toolUse or toolResult blocks")
	}
	if err := provider.CheckToolPairing(req.Messages); err != nil {
		return invalidf("messages: %v", err)
	}
	return nil
}

// toolUseJSON is a toolUse block of an answer; Input is a JSON object.
type toolUseJSON struct {
	ToolUseID string          `json:"toolUseId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// toolInputPiece is the most bytes of a tool call's input one
// contentBlockDelta carries: the input arrives in pieces, as Bedrock sends it.
const toolInputPiece = 48

// ToolCalls sends each call as Bedrock streams a toolUse block: its
// contentBlockStart with the id and name, its input in pieces of whole
// UTF-8 characters, its contentBlockStop. A text block still open is
// stopped first.
func (e *EventWriter) ToolCalls(calls []provider.ToolCall) error {
	if err := e.Start(); err != nil {
		return err
	}
	if err := e.stopText(); err != nil {
		return err
	}
	e.tools = e.tools || len(calls) > 0
	for _, c := range calls {
		if err := e.toolCall(c); err != nil {
			return err
		}
	}
	return nil
}

func (e *EventWriter) toolCall(c provider.ToolCall) error {
	index := e.block
	e.block++
	start := struct {
		Index int `json:"contentBlockIndex"`
		Start struct {
			ToolUse struct {
				ToolUseID string `json:"toolUseId"`
				Name      string `json:"name"`
			} `json:"toolUse"`
		} `json:"start"`
	}{Index: index}
	start.Start.ToolUse.ToolUseID, start.Start.ToolUse.Name = c.ID, c.Name
	if err := e.event("contentBlockStart", start); err != nil {
		return err
	}
	for _, piece := range pieces(string(c.Input), toolInputPiece) {
		delta := struct {
			Index int `json:"contentBlockIndex"`
			Delta struct {
				ToolUse struct {
					Input string `json:"input"`
				} `json:"toolUse"`
			} `json:"delta"`
		}{Index: index}
		delta.Delta.ToolUse.Input = piece
		if err := e.event("contentBlockDelta", delta); err != nil {
			return err
		}
	}
	return e.event("contentBlockStop", map[string]int{"contentBlockIndex": index})
}

// pieces cuts s into pieces of at most n bytes, or one character more
// than n bytes where a character is longer, never inside a character.
func pieces(s string, n int) []string {
	var out []string
	for s != "" {
		i := min(n, len(s))
		for i < len(s) && i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		if i == 0 { // one character longer than n
			i = 1
			for i < len(s) && !utf8.RuneStart(s[i]) {
				i++
			}
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}
