package bedrock

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	smithydocument "github.com/aws/smithy-go/document"

	"github.com/fmgate/fmgate/internal/provider"
)

// toolConfig is the request's tools and tool choice as Converse's
// toolConfig; nil when the request offers none.
//
// Bedrock has no "none" choice: a request that forbids tool calls offers
// no tools instead, unless its conversation holds toolUse or toolResult
// blocks, which Bedrock refuses without a toolConfig. The tools then go
// out with "auto", and the gateway fails a tier whose model calls one
// anyway. Nor has Bedrock a switch for parallel calls: the gateway fails a
// tier that makes several when the choice is sequential.
func toolConfig(req *provider.Request) (*types.ToolConfiguration, error) {
	if len(req.Tools) == 0 || req.ToolChoice.Mode == provider.ToolNone && !hasToolBlocks(req.Messages) {
		return nil, nil
	}
	tc := &types.ToolConfiguration{Tools: make([]types.Tool, 0, len(req.Tools))}
	for _, t := range req.Tools {
		schema, err := jsonDocument(t.Schema)
		if err != nil {
			return nil, fmt.Errorf("the input schema of tool %q: %w", t.Name, err)
		}
		spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: schema}}
		if t.Description != "" {
			spec.Description = aws.String(t.Description)
		}
		tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
	}
	switch req.ToolChoice.Mode {
	case provider.ToolAny:
		tc.ToolChoice = &types.ToolChoiceMemberAny{}
	case provider.ToolNamed:
		tc.ToolChoice = &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String(req.ToolChoice.Name)}}
	default:
		tc.ToolChoice = &types.ToolChoiceMemberAuto{}
	}
	return tc, nil
}

func hasToolBlocks(msgs []provider.Message) bool {
	return slices.ContainsFunc(msgs, func(m provider.Message) bool { return len(m.ToolCalls)+len(m.ToolResults) > 0 })
}

// content is a message's blocks: an assistant's reasoning, its tool
// results, its images, its text cut at its cache marks, its tool calls. A message of tool or image
// blocks alone has no text block (Bedrock refuses an empty one); its cache
// mark, if any, becomes a cachePoint after the other blocks.
func content(m provider.Message) ([]types.ContentBlock, error) {
	blocks, err := reasoningBlocks(m.Thinking)
	if err != nil {
		return nil, err
	}
	for _, r := range m.ToolResults {
		blocks = append(blocks, toolResult(r))
	}
	for _, im := range m.Images {
		blocks = append(blocks, &types.ContentBlockMemberImage{Value: types.ImageBlock{
			Format: types.ImageFormat(im.Format()), Source: &types.ImageSourceMemberBytes{Value: im.Data}}})
	}
	tools := len(m.ToolResults) + len(m.ToolCalls) + len(m.Images) + len(m.Thinking)
	if m.Content != "" || tools == 0 {
		for _, seg := range provider.Segments(m.Content, m.Cache) {
			blocks = append(blocks, &types.ContentBlockMemberText{Value: seg.Text})
			if seg.Mark != nil {
				blocks = append(blocks, &types.ContentBlockMemberCachePoint{Value: cachePoint(*seg.Mark)})
			}
		}
	}
	for _, c := range m.ToolCalls {
		input, err := jsonDocument(c.Input)
		if err != nil {
			return nil, fmt.Errorf("the input of tool call %q: %w", c.ID, err)
		}
		blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
			ToolUseId: aws.String(provider.ToolID(c.ID, provider.MaxToolIDClaude)), Name: aws.String(c.Name), Input: input}})
	}
	if m.Content == "" && tools > 0 && len(m.Cache) > 0 {
		blocks = append(blocks, &types.ContentBlockMemberCachePoint{Value: cachePoint(longest(m.Cache))})
	}
	return blocks, nil
}

func toolResult(r provider.ToolResult) types.ContentBlock {
	b := types.ToolResultBlock{ToolUseId: aws.String(provider.ToolID(r.CallID, provider.MaxToolIDClaude)),
		Content: []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: r.Content}}}
	if r.IsError {
		b.Status = types.ToolResultStatusError
	}
	return &types.ContentBlockMemberToolResult{Value: b}
}

// longest is the mark of marks with the longest lifetime.
func longest(marks []provider.CacheMark) provider.CacheMark {
	return slices.MaxFunc(marks, func(a, b provider.CacheMark) int { return cmp.Compare(a.TTL, b.TTL) })
}

// jsonDocument is a JSON object as a document the SDK sends as is.
// Numbers stay the literals they were (document.Number), not float64s.
func jsonDocument(raw json.RawMessage) (document.Interface, error) {
	if !provider.IsJSONObject(raw) {
		return nil, errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return document.NewLazyDocument(exactNumbers(v)), nil
}

// exactNumbers replaces the json.Numbers in v, which the SDK's document
// encoder would send as strings, by document.Numbers.
func exactNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return smithydocument.Number(x)
	case map[string]any:
		for k, e := range x {
			x[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = exactNumbers(e)
		}
	}
	return v
}

// toolCallsOf are the toolUse blocks of a Converse answer.
func toolCallsOf(blocks []types.ContentBlock) ([]provider.ToolCall, error) {
	var calls []provider.ToolCall
	for _, b := range blocks {
		u, ok := b.(*types.ContentBlockMemberToolUse)
		if !ok {
			continue
		}
		input := json.RawMessage("{}")
		if u.Value.Input != nil {
			b, err := u.Value.Input.MarshalSmithyDocument()
			if err != nil {
				return nil, fmt.Errorf("the input of tool call %q: %w", aws.ToString(u.Value.ToolUseId), err)
			}
			input = b
		}
		calls = append(calls, provider.ToolCall{ID: aws.ToString(u.Value.ToolUseId), Name: aws.ToString(u.Value.Name), Input: input})
	}
	return calls, nil
}

// toolStream gathers the tool calls of a ConverseStream answer: each
// starts with its id and name (contentBlockStart) and its input arrives as
// string fragments (contentBlockDelta) of the same content block index.
type toolStream struct {
	calls []*partialCall
}

type partialCall struct {
	index    int32
	id, name string
	input    strings.Builder
}

func (s *toolStream) start(index int32, u types.ToolUseBlockStart) {
	s.calls = append(s.calls, &partialCall{index: index, id: aws.ToString(u.ToolUseId), name: aws.ToString(u.Name)})
}

func (s *toolStream) delta(index int32, fragment string) error {
	for _, c := range s.calls {
		if c.index == index {
			c.input.WriteString(fragment)
			return nil
		}
	}
	return fmt.Errorf("a toolUse input fragment for content block %d, which started no tool call", index)
}

// text is what the calls so far read as, for estimates: names and inputs.
func (s *toolStream) text() string {
	var b strings.Builder
	for _, c := range s.calls {
		b.WriteString(c.name)
		b.WriteByte(' ')
		b.WriteString(c.input.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// done is the calls, each input whole; an input that is not a JSON object
// is an error (a call the client could not run).
func (s *toolStream) done() ([]provider.ToolCall, error) {
	if len(s.calls) == 0 {
		return nil, nil
	}
	calls := make([]provider.ToolCall, 0, len(s.calls))
	for _, c := range s.calls {
		input := json.RawMessage(c.input.String())
		if len(bytes.TrimSpace(input)) == 0 {
			input = json.RawMessage("{}")
		}
		switch {
		case c.id == "" || c.name == "":
			return nil, fmt.Errorf("the tool call of content block %d has no toolUseId or name", c.index)
		case !provider.IsJSONObject(input):
			return nil, fmt.Errorf("the input of tool call %q (%s) is not a JSON object", c.id, c.name)
		}
		calls = append(calls, provider.ToolCall{ID: c.id, Name: c.name, Input: input})
	}
	return calls, nil
}

// callsText is what calls read as, for estimates and their calibration.
func callsText(calls []provider.ToolCall) string {
	m := provider.Message{ToolCalls: calls}
	return m.ToolText()
}
