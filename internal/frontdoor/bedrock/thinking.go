package bedrock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"

	"github.com/fmgate/fmgate/internal/provider"
)

// decodeAdditional reads additionalModelRequestFields: Claude's thinking
// object, {"thinking": {"type": "enabled", "budget_tokens": N}} or
// {"type": "disabled"}, and nothing else (each other field is refused by
// name). It is checked once the rest of the request is read
// (checkThinking).
func decodeAdditional(raw json.RawMessage, req *Request) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return invalidf("additionalModelRequestFields must be an object")
	}
	for k := range fields {
		if k != "thinking" {
			return invalidf("additionalModelRequestFields.%s is not supported by this endpoint (thinking is); remove it from the request", truncate(k, 40))
		}
	}
	var th struct {
		Type         string `json:"type"`
		BudgetTokens *int   `json:"budget_tokens"`
	}
	dec := json.NewDecoder(bytes.NewReader(fields["thinking"]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&th); err != nil {
		return invalidf("additionalModelRequestFields.thinking must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}")
	}
	switch th.Type {
	case "disabled":
		if th.BudgetTokens != nil {
			return invalidf("additionalModelRequestFields.thinking.budget_tokens is not allowed with type disabled")
		}
		return nil
	case "enabled":
	default:
		return invalidf("additionalModelRequestFields.thinking.type must be \"enabled\" or \"disabled\", not %q", truncate(th.Type, 20))
	}
	if th.BudgetTokens == nil {
		return invalidf("additionalModelRequestFields.thinking.budget_tokens is required when thinking is enabled")
	}
	req.Thinking = &provider.Thinking{BudgetTokens: *th.BudgetTokens}
	return nil
}

// checkThinking refuses what Claude refuses of a request that thinks: a
// budget under provider.MinThinkingBudget, a maxTokens not above it, a
// forced tool, a prefill, a temperature other than 1, a topP under 0.95.
func checkThinking(req *Request) error {
	th := req.Thinking
	if th == nil {
		return nil
	}
	switch {
	case th.BudgetTokens < provider.MinThinkingBudget:
		return invalidf("additionalModelRequestFields.thinking.budget_tokens must be at least %d", provider.MinThinkingBudget)
	case req.MaxTokens <= th.BudgetTokens:
		return invalidf("inferenceConfig.maxTokens must be set and greater than additionalModelRequestFields.thinking.budget_tokens (%d)", th.BudgetTokens)
	case req.ToolChoice.Forced():
		return invalidf("toolConfig.toolChoice: thinking may not be enabled when the tool choice forces tool use (use auto)")
	case req.Prefill != "":
		return invalidf("a final assistant message (a prefill) cannot be used when thinking is enabled")
	case req.Temperature != nil && *req.Temperature != 1:
		return invalidf("inferenceConfig.temperature may only be 1 when thinking is enabled")
	case req.TopP != nil && *req.TopP < 0.95:
		return invalidf("inferenceConfig.topP must be at least 0.95, or unset, when thinking is enabled")
	}
	return nil
}

// decodeReasoning reads an assistant's reasoningContent block:
// {"reasoningText": {"text", "signature"}} or {"redactedContent":
// "<base64>"}, to be sent back to the model unchanged.
func decodeReasoning(raw json.RawMessage, where string) (provider.ThinkingBlock, error) {
	var rc struct {
		ReasoningText *struct {
			Text      *string `json:"text"`
			Signature *string `json:"signature"`
		} `json:"reasoningText"`
		RedactedContent *string `json:"redactedContent"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil || (rc.ReasoningText == nil) == (rc.RedactedContent == nil) {
		return provider.ThinkingBlock{}, invalidf("%s must be {\"reasoningText\": {\"text\", \"signature\"}} or {\"redactedContent\": \"<base64>\"}", where)
	}
	if rc.RedactedContent != nil {
		if _, err := base64.StdEncoding.DecodeString(*rc.RedactedContent); err != nil || *rc.RedactedContent == "" {
			return provider.ThinkingBlock{}, invalidf("%s.redactedContent must be base64", where)
		}
		return provider.ThinkingBlock{Redacted: *rc.RedactedContent}, nil
	}
	rt := rc.ReasoningText
	if rt.Text == nil || rt.Signature == nil || *rt.Signature == "" {
		return provider.ThinkingBlock{}, invalidf("%s.reasoningText must hold its text and signature, as the model returned them", where)
	}
	return provider.ThinkingBlock{Text: *rt.Text, Signature: *rt.Signature}, nil
}

// reasoningJSON is a reasoningContent block of an answer.
type reasoningJSON struct {
	ReasoningText *struct {
		Text      string `json:"text"`
		Signature string `json:"signature"`
	} `json:"reasoningText,omitempty"`
	RedactedContent string `json:"redactedContent,omitempty"`
}

func reasoningOf(th provider.ThinkingBlock) *reasoningJSON {
	if th.Redacted != "" {
		return &reasoningJSON{RedactedContent: th.Redacted}
	}
	r := &reasoningJSON{ReasoningText: &struct {
		Text      string `json:"text"`
		Signature string `json:"signature"`
	}{th.Text, th.Signature}}
	return r
}

// reasoningDelta is the delta of a reasoningContent block in a stream.
type reasoningDelta struct {
	Text            string `json:"text,omitempty"`
	Signature       string `json:"signature,omitempty"`
	RedactedContent string `json:"redactedContent,omitempty"`
}

// Reasoning sends a piece of the model's reasoning as a contentBlockDelta
// of a reasoningContent block: its text, its signature, or a redacted
// block's data. A new block (d.Block) ends the one before.
func (e *EventWriter) Reasoning(d provider.ThinkingDelta) error {
	if err := e.Start(); err != nil {
		return err
	}
	if e.reasoning && d.Block != e.thought {
		if err := e.stopReasoning(); err != nil {
			return err
		}
	}
	e.reasoning, e.thought = true, d.Block
	return e.event("contentBlockDelta", struct {
		Index int `json:"contentBlockIndex"`
		Delta struct {
			ReasoningContent reasoningDelta `json:"reasoningContent"`
		} `json:"delta"`
	}{Index: e.block, Delta: struct {
		ReasoningContent reasoningDelta `json:"reasoningContent"`
	}{reasoningDelta{Text: d.Text, Signature: d.Signature, RedactedContent: d.Redacted}}})
}

// stopReasoning sends the contentBlockStop of an open reasoning block.
func (e *EventWriter) stopReasoning() error {
	if !e.reasoning {
		return nil
	}
	e.reasoning = false
	e.block++
	return e.event("contentBlockStop", map[string]int{"contentBlockIndex": e.block - 1})
}
