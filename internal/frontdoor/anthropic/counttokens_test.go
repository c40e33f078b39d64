package anthropic_test

import (
	"context"
	"net/http"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/fmgate/fmgate/internal/frontdoor/anthropic"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// TestCountTokensWithTheSDK: the SDK's count_tokens gets the input tokens
// the same request is then billed (fmgate's system prompt included), from
// the tier's own count (the simulator counts as it bills); for a tier whose
// vendor cannot count, fmgate's estimate, said in a header.
func TestCountTokensWithTheSDK(t *testing.T) {
	cfg := testConfig(t)
	cfg.Catalog.Enabled = false // a turn's retrieved context is not the request's: keep it out of the comparison
	s, base := gatewayServer(t, cfg)
	var counted *http.Response
	client := sdk.NewClient(option.WithBaseURL(base), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx := context.Background()
	messages := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Recommend a manga")),
		sdk.NewAssistantMessage(sdk.NewTextBlock("Which genre?")), sdk.NewUserMessage(sdk.NewTextBlock("ファンタジーがいいです"))}
	system := []sdk.TextBlockParam{{Text: "Answer in the user's language."}}
	n, err := client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: "claude-3-5-sonnet-latest", Messages: messages,
		System: sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: system}}, option.WithResponseInto(&counted))
	if err != nil {
		t.Fatal(err)
	}
	if got := counted.Header.Get(anthropic.HeaderTokenCount); got != "vendor" {
		t.Errorf("%s: %q, want vendor (the simulator counts)", anthropic.HeaderTokenCount, got)
	}
	msg, err := client.Messages.New(ctx, sdk.MessageNewParams{Model: "claude-3-5-sonnet-latest", MaxTokens: 200, Messages: messages, System: system})
	if err != nil {
		t.Fatal(err)
	}
	u := msg.Usage
	if billed := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens; n.InputTokens != billed {
		t.Fatalf("count_tokens said %d, the same request was billed %d input tokens", n.InputTokens, billed)
	}

	// The vendor down: fmgate's estimate, said so.
	setSim(t, s, "sonnet", func(st *sim.Settings) { st.Outage = true })
	est, err := client.Messages.CountTokens(ctx, sdk.MessageCountTokensParams{Model: "claude-3-5-sonnet-latest", Messages: messages,
		System: sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: system}}, option.WithResponseInto(&counted))
	if err != nil {
		t.Fatal(err)
	}
	if got := counted.Header.Get(anthropic.HeaderTokenCount); got != "estimate" || est.InputTokens == 0 {
		t.Fatalf("with the vendor down: %d tokens, %s %q; want an estimate, said so", est.InputTokens, anthropic.HeaderTokenCount, got)
	}
	t.Logf("the vendor's count %d, fmgate's estimate %d", n.InputTokens, est.InputTokens)
}
