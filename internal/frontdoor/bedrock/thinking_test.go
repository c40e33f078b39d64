package bedrock_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// TestConverseThinking: Claude's thinking in additionalModelRequestFields,
// through Converse and ConverseStream with the AWS SDK: the answer opens
// with the model's reasoning as a reasoningContent block, signed, before
// its text; sent back in the next turn's conversation, the simulated
// model, which checks the signature, answers it.
func TestConverseThinking(t *testing.T) {
	cfg := gatewayConfig(t)
	cfg.Budget.RequestOutput = 4096
	for i := range cfg.Models {
		cfg.Models[i].MaxOutputTokens = 4096
	}
	_, srv := startGateway(t, cfg)
	c := client(srv.URL, testKeyID, testSecret)
	const q = "Which fantasy manga should I read first?"
	want := sim.Thinking(&provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Content: q}}})[0]
	thinking := document.NewLazyDocument(map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}})
	ic := &types.InferenceConfiguration{MaxTokens: aws.Int32(2000)}

	out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"),
		Messages: userMessage(q), InferenceConfig: ic, AdditionalModelRequestFields: thinking})
	if err != nil {
		t.Fatal(err)
	}
	msg := out.Output.(*types.ConverseOutputMemberMessage).Value
	rc, ok := msg.Content[0].(*types.ContentBlockMemberReasoningContent)
	if !ok || len(msg.Content) != 2 {
		t.Fatalf("content %#v: want a reasoningContent block, then the text", msg.Content)
	}
	rt := rc.Value.(*types.ReasoningContentBlockMemberReasoningText).Value
	if aws.ToString(rt.Text) != want.Text || aws.ToString(rt.Signature) != want.Signature {
		t.Fatalf("reasoning %q signed %q; want %q signed %q", aws.ToString(rt.Text), aws.ToString(rt.Signature), want.Text, want.Signature)
	}
	if txt, ok := msg.Content[1].(*types.ContentBlockMemberText); !ok || txt.Value == "" {
		t.Fatalf("second block %#v: want the answer's text", msg.Content[1])
	}

	// The next turn sends the reasoning back; streamed, it comes as
	// reasoningContent deltas before the text.
	next := append(userMessage(q), msg, userMessage("And after that?")[0])
	st, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String("sonnet"),
		Messages: next, InferenceConfig: ic, AdditionalModelRequestFields: thinking})
	if err != nil {
		t.Fatal(err)
	}
	es := st.GetStream()
	defer es.Close()
	var reasoning, signature, text string
	reasoningAt, textAt := int32(-1), int32(-1)
	for ev := range es.Events() {
		d, ok := ev.(*types.ConverseStreamOutputMemberContentBlockDelta)
		if !ok {
			continue
		}
		switch v := d.Value.Delta.(type) {
		case *types.ContentBlockDeltaMemberReasoningContent:
			reasoningAt = aws.ToInt32(d.Value.ContentBlockIndex)
			switch r := v.Value.(type) {
			case *types.ReasoningContentBlockDeltaMemberText:
				reasoning += r.Value
			case *types.ReasoningContentBlockDeltaMemberSignature:
				signature += r.Value
			}
		case *types.ContentBlockDeltaMemberText:
			textAt = aws.ToInt32(d.Value.ContentBlockIndex)
			text += v.Value
		}
	}
	if err := es.Err(); err != nil {
		t.Fatal(err)
	}
	wantNext := sim.Thinking(&provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Content: "And after that?"}}})[0]
	if reasoning != wantNext.Text || signature != wantNext.Signature || reasoningAt != 0 || textAt != 1 || text == "" {
		t.Fatalf("reasoning %q signed %q at %d, text %q at %d; want %q signed %q at 0, then text at 1",
			reasoning, signature, reasoningAt, text, textAt, wantNext.Text, wantNext.Signature)
	}
}
