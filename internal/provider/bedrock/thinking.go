package bedrock

import (
	"encoding/base64"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/fmgate/fmgate/internal/provider"
)

// thinkingConfig is Claude's thinking object as Bedrock takes it in
// additionalModelRequestFields: Anthropic's own shape.
func thinkingConfig(th *provider.Thinking) map[string]any {
	return map[string]any{"type": "enabled", "budget_tokens": th.BudgetTokens}
}

// reasoningBlocks are an assistant's thinking blocks as Converse's
// reasoningContent blocks, unchanged: a redacted block's data is the
// base64 Anthropic sends, Converse's redactedContent its bytes.
func reasoningBlocks(thinking []provider.ThinkingBlock) ([]types.ContentBlock, error) {
	out := make([]types.ContentBlock, 0, len(thinking))
	for i, th := range thinking {
		if th.Redacted != "" {
			data, err := base64.StdEncoding.DecodeString(th.Redacted)
			if err != nil {
				return nil, fmt.Errorf("redacted thinking block %d: its data is not base64", i)
			}
			out = append(out, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberRedactedContent{Value: data}})
			continue
		}
		out = append(out, &types.ContentBlockMemberReasoningContent{Value: &types.ReasoningContentBlockMemberReasoningText{
			Value: types.ReasoningTextBlock{Text: aws.String(th.Text), Signature: aws.String(th.Signature)}}})
	}
	return out, nil
}

// thinkingOf is the reasoningContent blocks of an answer.
func thinkingOf(blocks []types.ContentBlock) []provider.ThinkingBlock {
	var out []provider.ThinkingBlock
	for _, b := range blocks {
		rc, ok := b.(*types.ContentBlockMemberReasoningContent)
		if !ok {
			continue
		}
		switch v := rc.Value.(type) {
		case *types.ReasoningContentBlockMemberReasoningText:
			out = append(out, provider.ThinkingBlock{Text: aws.ToString(v.Value.Text), Signature: aws.ToString(v.Value.Signature)})
		case *types.ReasoningContentBlockMemberRedactedContent:
			out = append(out, provider.ThinkingBlock{Redacted: base64.StdEncoding.EncodeToString(v.Value)})
		}
	}
	return out
}

// thinkingStream gathers the reasoningContent deltas of a ConverseStream
// answer into its thinking blocks, numbering them in order.
type thinkingStream struct {
	blocks []provider.ThinkingBlock
	index  map[int32]int // content block index → position in blocks
	// redacted is the data of the redacted block being received, sent
	// whole at its contentBlockStop.
	redacted []byte
}

// delta adds d, of content block index, and returns it as the piece of a
// thinking block the stream's hook gets.
func (s *thinkingStream) delta(index int32, d types.ReasoningContentBlockDelta) (provider.ThinkingDelta, bool) {
	if s.index == nil {
		s.index = map[int32]int{}
	}
	n, ok := s.index[index]
	if !ok {
		n = len(s.blocks)
		s.index[index] = n
		s.blocks = append(s.blocks, provider.ThinkingBlock{})
	}
	b := &s.blocks[n]
	switch v := d.(type) {
	case *types.ReasoningContentBlockDeltaMemberText:
		b.Text += v.Value
		return provider.ThinkingDelta{Block: n, Text: v.Value}, true
	case *types.ReasoningContentBlockDeltaMemberSignature:
		b.Signature += v.Value
		return provider.ThinkingDelta{Block: n, Signature: v.Value}, true
	case *types.ReasoningContentBlockDeltaMemberRedactedContent:
		s.redacted = append(s.redacted, v.Value...)
		b.Redacted = base64.StdEncoding.EncodeToString(s.redacted)
	}
	return provider.ThinkingDelta{}, false
}

// stop ends content block index: a redacted block goes whole to the
// stream's hook.
func (s *thinkingStream) stop(index int32) (provider.ThinkingDelta, bool) {
	n, ok := s.index[index]
	if !ok || s.blocks[n].Redacted == "" {
		return provider.ThinkingDelta{}, false
	}
	s.redacted = nil
	return provider.ThinkingDelta{Block: n, Redacted: s.blocks[n].Redacted}, true
}

// text is the reasoning received, for the estimate of the output tokens.
func (s *thinkingStream) text() string {
	var out string
	for _, b := range s.blocks {
		out += b.Text
	}
	return out
}
