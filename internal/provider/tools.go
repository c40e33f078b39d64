package provider

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool is a function the client offers the model to call. The model
// answers with ToolCalls instead of (or after) text; the client runs them
// and sends their results in its next message.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the tool's input, a JSON object.
	Schema json.RawMessage
	// Strict asks that the input match Schema exactly: passed to a vendor
	// that enforces it, and checked by the gateway on every answer.
	Strict bool
}

// ToolMode says whether and how the model must call a tool.
type ToolMode string

// Tool modes, after Anthropic's and Bedrock's tool_choice. The zero value
// is ToolAuto.
const (
	ToolAuto  ToolMode = ""     // the model decides
	ToolNone  ToolMode = "none" // the model may not call a tool
	ToolAny   ToolMode = "any"  // the model must call one of the tools
	ToolNamed ToolMode = "tool" // the model must call the tool named
)

// ToolChoice is the request's tool_choice.
type ToolChoice struct {
	Mode ToolMode
	// Name is the tool a ToolNamed choice forces.
	Name string
	// Sequential asks for at most one tool call per answer (OpenAI's
	// parallel_tool_calls: false, Anthropic's disable_parallel_tool_use).
	Sequential bool
}

// Forced reports whether the model must call a tool: its answer is then a
// tool call, never prose.
func (c ToolChoice) Forced() bool { return c.Mode == ToolAny || c.Mode == ToolNamed }

// ToolCall is a model's call of a tool: Input is a JSON object, the
// arguments.
type ToolCall struct {
	ID    string
	Name  string
	Input json.RawMessage
}

// ToolResult is the client's answer to a tool call, in a user message.
type ToolResult struct {
	CallID  string
	Content string
	IsError bool
}

// Longest tool call ids the vendors take: Anthropic and Bedrock ids are
// 1–64 of a–z, A–Z, 0–9, _ and -, and OpenAI's at most 40 characters.
const (
	MaxToolIDClaude = 64
	MaxToolIDOpenAI = 40
)

// ToolID is id as a vendor whose ids are at most max of a–z, A–Z, 0–9, _
// and - takes it: id itself when it is one, else its allowed characters
// (others become _) cut short, with a hash of the whole id after them. A
// conversation's calls can come from another vendor (an OpenAI-compatible
// server's "functions.get_weather:0", a client's long UUID), and the vendor
// of the tier refuses an id it would not have made. The same id always
// maps the same way, so a call and its result still pair; the model's new
// calls carry its vendor's own ids.
func ToolID(id string, max int) string {
	ok := id != "" && len(id) <= max
	for i := 0; ok && i < len(id); i++ {
		ok = toolIDByte(id[i])
	}
	if ok {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	suffix := "_" + hex.EncodeToString(sum[:6])
	b := make([]byte, 0, max)
	for i := 0; i < len(id) && len(b) < max-len(suffix); i++ {
		if toolIDByte(id[i]) {
			b = append(b, id[i])
		} else if len(b) == 0 || b[len(b)-1] != '_' {
			b = append(b, '_')
		}
	}
	return string(b) + suffix
}

// CheckToolIDs reports the first tool call id of msgs a vendor whose ids
// are at most max of a–z, A–Z, 0–9, _ and - would refuse, as it refuses
// it; the simulator's vendor wires check it so that an adapter that passes
// another vendor's id on fails its tests.
func CheckToolIDs(msgs []Message, max int) error {
	for i, m := range msgs {
		for _, c := range m.ToolCalls {
			if ToolID(c.ID, max) != c.ID {
				return fmt.Errorf("message %d: tool call id %q must be 1 to %d of a-z, A-Z, 0-9, _ and -", i, c.ID, max)
			}
		}
		for _, r := range m.ToolResults {
			if ToolID(r.CallID, max) != r.CallID {
				return fmt.Errorf("message %d: tool result id %q must be 1 to %d of a-z, A-Z, 0-9, _ and -", i, r.CallID, max)
			}
		}
	}
	return nil
}

func toolIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// StopToolUse is the stop reason of an answer that ends in tool calls.
const StopToolUse = "tool_use"

// Limits of what a request may carry about tools.
const (
	MaxTools          = 128
	MaxToolNameBytes  = 64
	MaxToolCallsTurn  = 128
	maxToolSchemaSize = 64 << 10
)

// CheckToolName reports why name is not a tool name the three vendors
// all accept (1–64 of a–z, A–Z, 0–9, _ and -), or nil.
func CheckToolName(name string) error {
	if name == "" || len(name) > MaxToolNameBytes {
		return fmt.Errorf("a tool name must be 1 to %d characters", MaxToolNameBytes)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Errorf("tool name %q may hold only letters, digits, _ and -", name)
		}
	}
	return nil
}

// CheckTools reports what is wrong with the tools and the choice of one
// request, in words a client can act on, or nil.
func CheckTools(tools []Tool, choice ToolChoice) error {
	if len(tools) > MaxTools {
		return fmt.Errorf("at most %d tools may be offered, not %d", MaxTools, len(tools))
	}
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		if err := CheckToolName(t.Name); err != nil {
			return fmt.Errorf("tools[%d]: %w", i, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("tools[%d]: tool %q is offered twice", i, t.Name)
		}
		seen[t.Name] = true
		if len(t.Schema) > maxToolSchemaSize {
			return fmt.Errorf("tools[%d]: the input schema is larger than %d bytes", i, maxToolSchemaSize)
		}
		if !IsJSONObject(t.Schema) {
			return fmt.Errorf("tools[%d]: the input schema must be a JSON object", i)
		}
	}
	switch choice.Mode {
	case ToolAny, ToolNone, ToolAuto:
		if choice.Mode == ToolAny && len(tools) == 0 {
			return fmt.Errorf("a tool call is required but no tools are offered")
		}
	case ToolNamed:
		if !seen[choice.Name] {
			return fmt.Errorf("the tool choice names %q, which is not among the tools offered", choice.Name)
		}
	default:
		return fmt.Errorf("unknown tool choice %q", choice.Mode)
	}
	return nil
}

// IsJSONObject reports whether raw is one JSON object.
func IsJSONObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) >= 2 && raw[0] == '{' && json.Valid(raw)
}

// ToolsText is the tools as the model reads them, for token estimates:
// each one's name, description and schema.
func ToolsText(tools []Tool) string {
	if len(tools) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range tools {
		b.WriteString(t.Name)
		b.WriteByte('\n')
		b.WriteString(t.Description)
		b.WriteByte('\n')
		b.Write(t.Schema)
		b.WriteByte('\n')
	}
	return b.String()
}

// ToolText is what the tool calls and results of m read as, for token
// estimates.
func (m *Message) ToolText() string {
	if len(m.ToolCalls) == 0 && len(m.ToolResults) == 0 {
		return ""
	}
	var b strings.Builder
	for _, c := range m.ToolCalls {
		b.WriteString(c.Name)
		b.WriteByte(' ')
		b.Write(c.Input)
		b.WriteByte('\n')
	}
	for _, r := range m.ToolResults {
		b.WriteString(r.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

// CheckToolPairing reports a conversation whose tool calls and results do
// not match, as every vendor refuses it: each message of tool results must
// follow an assistant message with tool calls and answer only those calls,
// and each assistant message with tool calls must be followed by the
// results of all of them (the last message excepted, a call still open).
func CheckToolPairing(msgs []Message) error {
	for i, m := range msgs {
		if len(m.ToolResults) > 0 {
			if i == 0 || len(msgs[i-1].ToolCalls) == 0 {
				return fmt.Errorf("message %d holds tool results, but the message before it calls no tools", i)
			}
			calls := msgs[i-1].ToolCalls
			for _, r := range m.ToolResults {
				if !hasCall(calls, r.CallID) {
					return fmt.Errorf("message %d answers tool call %q, which the message before it did not make", i, r.CallID)
				}
			}
		}
		if len(m.ToolCalls) > 0 && i+1 < len(msgs) {
			for _, c := range m.ToolCalls {
				if !hasResult(msgs[i+1].ToolResults, c.ID) {
					return fmt.Errorf("tool call %q of message %d has no result in the message after it", c.ID, i)
				}
			}
		}
	}
	return nil
}

func hasCall(calls []ToolCall, id string) bool {
	for _, c := range calls {
		if c.ID == id {
			return true
		}
	}
	return false
}

func hasResult(results []ToolResult, id string) bool {
	for _, r := range results {
		if r.CallID == id {
			return true
		}
	}
	return false
}

// FormatKind is what shape of answer a client asked for.
type FormatKind string

// Answer formats. The zero value is free text.
const (
	FormatText       FormatKind = ""
	FormatJSONObject FormatKind = "json_object" // any JSON object
	FormatJSONSchema FormatKind = "json_schema" // a JSON value matching Schema
)

// Format is the answer's required shape (OpenAI's response_format). A
// provider whose vendor has it natively (OpenAI) passes it on; for the
// others the gateway offers the model a tool whose input is the answer,
// and checks every answer against it.
type Format struct {
	Kind FormatKind
	// Name, Description and Schema are a json_schema format's; Strict is
	// passed to a vendor that enforces the schema itself.
	Name        string
	Description string
	Schema      json.RawMessage
	Strict      bool
}
