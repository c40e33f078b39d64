package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/fmgate/fmgate/internal/provider"
)

// RedactedThinkingTrigger is Anthropic's test string: a request holding it
// gets a redacted_thinking block, here as from Claude, so that an app can
// test how it handles one.
const RedactedThinkingTrigger = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E193C177646C7398A98432ECCCE4C1253D5E2D82641AC0E52CC2876CB"

// signingKey makes the simulator's signatures its own: a block another
// model signed, or one whose text was changed, does not verify.
const signingKey = "fmgate-sim-thinking\x00"

// Thinking is the simulator's reasoning for req, which asked for it: one
// short block naming the question and the language of the answer, signed
// (ThinkingSignature), after a redacted block when the question holds
// RedactedThinkingTrigger. It is the same for the same question, so tests
// can expect it exactly.
func Thinking(req *provider.Request) []provider.ThinkingBlock {
	q := strings.TrimSpace(questionText(req))
	lang := "English"
	if detectLanguage(q, req.Locale) == japanese {
		lang = "Japanese"
	}
	text := fmt.Sprintf("The customer asks: %q. I will answer briefly, in %s.", excerpt(q, 60), lang)
	var out []provider.ThinkingBlock
	if strings.Contains(q, RedactedThinkingTrigger) {
		out = append(out, provider.ThinkingBlock{Redacted: redactedData(q)})
	}
	return append(out, provider.ThinkingBlock{Text: text, Signature: ThinkingSignature(text)})
}

// ThinkingSignature is the simulator's signature of a thinking block's
// text, base64 as Anthropic's are.
func ThinkingSignature(text string) string {
	sum := sha256.Sum256([]byte(signingKey + text))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// redactedData is a redacted block's opaque data: a nonce drawn from the
// question and the simulator's seal over it.
func redactedData(question string) string {
	nonce := sha256.Sum256([]byte(question))
	return base64.StdEncoding.EncodeToString(append(nonce[:16:16], seal(nonce[:16])...))
}

func seal(nonce []byte) []byte {
	sum := sha256.Sum256(append([]byte(signingKey+"redacted\x00"), nonce...))
	return sum[:16]
}

// checkThinking refuses a conversation that sends back a thinking block
// the simulator did not write, or changed, as Anthropic refuses one whose
// signature does not match: the blocks must travel unchanged.
func checkThinking(req *provider.Request) error {
	for i, m := range req.Messages {
		for j, b := range m.Thinking {
			switch {
			case m.Role != provider.RoleAssistant:
				return fmt.Errorf("messages.%d: thinking blocks belong in assistant messages", i)
			case b.Redacted != "":
				raw, err := base64.StdEncoding.DecodeString(b.Redacted)
				if err != nil || len(raw) != 32 || !bytes.Equal(raw[16:], seal(raw[:16])) {
					return fmt.Errorf("messages.%d.content.%d: the redacted_thinking block's data is not one this model wrote", i, j)
				}
			case b.Signature != ThinkingSignature(b.Text):
				return fmt.Errorf("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
			}
		}
	}
	return nil
}

// checkRequest refuses what Anthropic refuses of a thinking request: a
// budget under provider.MinThinkingBudget or not below max_tokens, and
// thinking blocks sent back changed (checkThinking).
func checkRequest(req *provider.Request) error {
	if th := req.Thinking; th != nil {
		switch {
		case th.BudgetTokens < provider.MinThinkingBudget:
			return fmt.Errorf("thinking.enabled.budget_tokens: Input should be greater than or equal to %d", provider.MinThinkingBudget)
		case req.MaxTokens > 0 && req.MaxTokens <= th.BudgetTokens:
			return fmt.Errorf("`max_tokens` must be greater than `thinking.budget_tokens`")
		}
	}
	return checkThinking(req)
}

// think writes the reasoning of req's answer into resp, at the model's
// pace: each block's text a token at a time, then its signature, to the
// stream's thinking hook (provider.WithThinking). It returns the output
// tokens the reasoning took.
func (s *Sim) think(ctx context.Context, req *provider.Request, p plan, resp *provider.Response) (int, error) {
	blocks := Thinking(req)
	tokens := 0
	for i, b := range blocks {
		if b.Redacted != "" {
			tokens += CountTokens(b.Redacted)
			resp.Thinking = append(resp.Thinking, b)
			if err := provider.EmitThinking(ctx, provider.ThinkingDelta{Block: i, Redacted: b.Redacted}); err != nil {
				return tokens, err
			}
			continue
		}
		var joiner utf8Joiner
		for j, piece := range tokenPieces(b.Text) {
			if i+j > 0 {
				if err := s.wait(ctx, p.interval); err != nil {
					return tokens, ctxError(req.Model, err)
				}
			}
			tokens++
			if delta := joiner.add(piece); delta != "" {
				if err := provider.EmitThinking(ctx, provider.ThinkingDelta{Block: i, Text: delta}); err != nil {
					return tokens, err
				}
			}
		}
		resp.Thinking = append(resp.Thinking, b)
		if err := provider.EmitThinking(ctx, provider.ThinkingDelta{Block: i, Signature: b.Signature}); err != nil {
			return tokens, err
		}
	}
	return tokens, nil
}
