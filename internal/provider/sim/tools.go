package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

// The simulated model calls tools deterministically, so that tests of tool
// round trips through every front door and provider are exact:
//
//   - A forced choice calls the tool it names, or for "any" the tools the
//     message names (else the first tool).
//   - "auto" calls the tools whose name has a word (split at _ and -, three
//     letters or more) that the last user message holds, e.g. get_weather
//     for "What is the weather in Tokyo?"; with none named it answers in
//     text, as it would without tools.
//   - Several tools named are called in parallel, in the order offered,
//     unless the choice is sequential; then only the first.
//   - A message that carries tool results is answered in text that quotes
//     them, unless a tool call is forced.
//
// The arguments follow the tool's input schema: every required property
// (every property when none is required) gets its enum's first value, its
// const, its minimum, 1, true, or for a string the user's words.

// toolCalls are the calls the simulated model makes for req; none when it
// answers in text.
func toolCalls(req *provider.Request) []provider.ToolCall {
	c := req.ToolChoice
	if len(req.Tools) == 0 || c.Mode == provider.ToolNone {
		return nil
	}
	last := req.Messages[len(req.Messages)-1]
	if len(last.ToolResults) > 0 && !c.Forced() {
		return nil
	}
	question := questionText(req)
	words := strings.ToLower(question)
	var picked []provider.Tool
	switch c.Mode {
	case provider.ToolNamed:
		for _, t := range req.Tools {
			if t.Name == c.Name {
				picked = append(picked, t)
			}
		}
	default:
		for _, t := range req.Tools {
			if namedIn(t.Name, words) {
				picked = append(picked, t)
			}
		}
		if len(picked) == 0 && c.Mode == provider.ToolAny {
			picked = req.Tools[:1]
		}
	}
	if c.Sequential && len(picked) > 1 {
		picked = picked[:1]
	}
	calls := make([]provider.ToolCall, 0, len(picked))
	for i, t := range picked {
		input := argumentsFor(t.Schema, question)
		calls = append(calls, provider.ToolCall{ID: toolCallID(len(req.Messages), i, t.Name, input), Name: t.Name, Input: input})
	}
	return calls
}

// namedIn reports whether words (lower case) hold a word of the tool's name.
func namedIn(name, words string) bool {
	for w := range strings.FieldsFuncSeq(strings.ToLower(name), func(r rune) bool { return r == '_' || r == '-' }) {
		if len(w) >= 3 && strings.Contains(words, w) {
			return true
		}
	}
	return false
}

// questionText is the text of the last user message that has any: the
// question a tool loop is about.
func questionText(req *provider.Request) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == provider.RoleUser && strings.TrimSpace(m.Content) != "" {
			return m.Content
		}
	}
	return ""
}

func toolCallID(turn, i int, name string, input []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\xff%d\xff%s\xff", turn, i, name)
	h.Write(input)
	return "toolu_sim" + hex.EncodeToString(h.Sum(nil)[:10])
}

// argumentsFor is a JSON object that satisfies schema, drawn from text.
func argumentsFor(schema json.RawMessage, text string) json.RawMessage {
	var s map[string]any
	_ = json.Unmarshal(schema, &s)
	v := valueFor(s, text, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{}
	}
	b, err := json.Marshal(v) // map keys sorted: deterministic
	if err != nil {
		return json.RawMessage("{}")
	}
	return b
}

const maxSchemaDepth = 8

func valueFor(s map[string]any, text string, depth int) any {
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		return enum[0]
	}
	if c, ok := s["const"]; ok {
		return c
	}
	typ, _ := s["type"].(string)
	if types, ok := s["type"].([]any); ok {
		for _, t := range types {
			if t, ok := t.(string); ok && t != "null" {
				typ = t
				break
			}
		}
	}
	if typ == "" {
		if _, ok := s["properties"]; ok {
			typ = "object"
		}
	}
	switch typ {
	case "object":
		obj := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		if depth >= maxSchemaDepth {
			return obj
		}
		var names []string
		if req, ok := s["required"].([]any); ok && len(req) > 0 {
			for _, n := range req {
				if n, ok := n.(string); ok {
					names = append(names, n)
				}
			}
		} else {
			for n := range props {
				names = append(names, n)
			}
		}
		for _, n := range names {
			p, _ := props[n].(map[string]any)
			obj[n] = valueFor(p, text, depth+1)
		}
		return obj
	case "array":
		items, _ := s["items"].(map[string]any)
		if depth >= maxSchemaDepth {
			return []any{}
		}
		return []any{valueFor(items, text, depth+1)}
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		return 1
	case "boolean":
		return true
	case "null":
		return nil
	}
	return excerpt(strings.TrimSpace(text), 80)
}

// excerpt is s cut to at most n runes.
func excerpt(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}

// answerFromResults is the reply to a message carrying tool results: each
// result quoted after the tool's name.
func answerFromResults(req *provider.Request) (string, bool) {
	last := req.Messages[len(req.Messages)-1]
	if len(last.ToolResults) == 0 {
		return "", false
	}
	names := map[string]string{}
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			names[c.ID] = c.Name
		}
	}
	ja := detectLanguage(questionText(req), req.Locale) == japanese
	lines := make([]string, 0, len(last.ToolResults))
	for _, r := range last.ToolResults {
		name := names[r.CallID]
		if name == "" {
			name = r.CallID
		}
		content := excerpt(strings.TrimSpace(r.Content), 300)
		switch {
		case r.IsError && ja:
			lines = append(lines, fmt.Sprintf("%sでエラーが発生しました: %s", name, content))
		case r.IsError:
			lines = append(lines, fmt.Sprintf("The %s tool failed: %s", name, content))
		case ja:
			lines = append(lines, fmt.Sprintf("%sの結果: %s", name, content))
		default:
			lines = append(lines, fmt.Sprintf("From %s: %s", name, content))
		}
	}
	return strings.Join(lines, "\n"), true
}

// toolTokens are the input tokens of req's tools and of its messages'
// tool calls and results.
func toolTokens(req *provider.Request) int {
	n := 0
	if len(req.Tools) > 0 {
		n += CountTokens(provider.ToolsText(req.Tools))
	}
	for i := range req.Messages {
		if t := req.Messages[i].ToolText(); t != "" {
			n += CountTokens(t)
		}
	}
	return n
}

// callTokens are the output tokens of calls.
func callTokens(calls []provider.ToolCall) int {
	n := 0
	for _, c := range calls {
		n += CountTokens(c.Name) + CountTokens(string(c.Input))
	}
	return n
}

// formatAnswer is answer in the format req asks for: for json_object, the
// answer under "answer"; for json_schema, a value drawn from the schema as
// tool arguments are (the user's words in its strings).
func formatAnswer(req *provider.Request, answer string) string {
	switch req.Format.Kind {
	case provider.FormatJSONObject:
		b, _ := json.Marshal(map[string]string{"answer": answer})
		return string(b)
	case provider.FormatJSONSchema:
		var s map[string]any
		_ = json.Unmarshal(req.Format.Schema, &s)
		b, err := json.Marshal(valueFor(s, questionText(req), 0))
		if err != nil {
			return "{}"
		}
		return string(b)
	}
	return answer
}
