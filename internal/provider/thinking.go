package provider

import (
	"context"
	"strings"
)

// Thinking asks the model to reason before it answers: Anthropic's
// extended thinking, which Claude on Bedrock takes in the same shape. Only
// tiers with the thinking capability are sent a request that sets it.
type Thinking struct {
	// BudgetTokens bounds the reasoning, at least MinThinkingBudget. The
	// reasoning is output: it counts within the request's MaxTokens, which
	// must be larger.
	BudgetTokens int
}

// MinThinkingBudget is the smallest thinking budget Anthropic accepts.
const MinThinkingBudget = 1024

// ThinkingBlock is a block of the model's reasoning before its answer:
// its text and the vendor's signature over it, or, when the vendor
// redacted the reasoning, its opaque Redacted data alone. A later request
// of the conversation must send it back unchanged, since the vendor
// checks the signature (Anthropic requires it while a tool loop runs).
type ThinkingBlock struct {
	Text      string
	Signature string
	Redacted  string
}

// ThinkingDelta is a piece of a streamed thinking block. Block is the
// block's index among the answer's thinking blocks; Text is a piece of its
// text, Signature its signature (sent once, at its end), Redacted a whole
// redacted block.
type ThinkingDelta struct {
	Block     int
	Text      string
	Signature string
	Redacted  string
}

type thinkingKey struct{}

// WithThinking returns ctx carrying emit, which a provider's Stream calls
// with each piece of the answer's thinking, in order and before the
// answer's text: the reasoning streams as it comes, through whatever wraps
// the provider (a pool of deployments), as net/http/httptrace carries its
// hooks. An error from emit stops the stream as one from the text's emit
// does. The blocks arrive whole in Response.Thinking either way.
func WithThinking(ctx context.Context, emit func(ThinkingDelta) error) context.Context {
	return context.WithValue(ctx, thinkingKey{}, emit)
}

// EmitThinking sends d to the function ctx carries (WithThinking); without
// one it does nothing.
func EmitThinking(ctx context.Context, d ThinkingDelta) error {
	if emit, ok := ctx.Value(thinkingKey{}).(func(ThinkingDelta) error); ok && emit != nil {
		return emit(d)
	}
	return nil
}

// ThinkingText is what the thinking blocks of m read as, for token
// estimates: their text, and their signatures and redacted data, which the
// vendor reads too.
func (m *Message) ThinkingText() string {
	if len(m.Thinking) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range m.Thinking {
		b.WriteString(t.Text)
		b.WriteString(t.Signature)
		b.WriteString(t.Redacted)
		b.WriteByte('\n')
	}
	return b.String()
}
