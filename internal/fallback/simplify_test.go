package fallback

import (
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
)

func TestSimplified(t *testing.T) {
	r, err := New(DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	long := []provider.Message{
		{Role: provider.RoleUser, Content: "hi"},
		{Role: provider.RoleAssistant, Content: "hello"},
		{Role: provider.RoleUser, Content: "recommend a manga"},
		{Role: provider.RoleAssistant, Content: "Try Frieren."},
		{Role: provider.RoleUser, Content: "something darker?"},
	}
	tests := []struct {
		name      string
		give      provider.Request
		wantMax   int
		wantMsgs  []string
		wantBrief string
	}{
		{"caps tokens and history", provider.Request{Model: "sonnet", System: "You are MangaAssist.", MaxTokens: 1024, Messages: long, Locale: "en"},
			256, []string{"recommend a manga", "Try Frieren.", "something darker?"}, briefEN},
		{"history never starts with the assistant", provider.Request{Model: "sonnet", MaxTokens: 1024, Messages: long[:4]},
			256, []string{"recommend a manga", "Try Frieren."}, briefEN},
		{"keeps a smaller cap", provider.Request{Model: "sonnet", MaxTokens: 100, Messages: long[4:]},
			100, []string{"something darker?"}, briefEN},
		{"japanese instruction", provider.Request{Model: "sonnet", Messages: []provider.Message{{Role: provider.RoleUser, Content: "おすすめの漫画は？"}}},
			256, []string{"おすすめの漫画は？"}, briefJA},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.give.Messages)
			got := r.Simplified(&tt.give, "haiku")
			if got.Model != "haiku" || got.MaxTokens != tt.wantMax {
				t.Errorf("model %s max %d, want haiku %d", got.Model, got.MaxTokens, tt.wantMax)
			}
			var msgs []string
			for _, m := range got.Messages {
				msgs = append(msgs, m.Content)
			}
			if strings.Join(msgs, "|") != strings.Join(tt.wantMsgs, "|") {
				t.Errorf("messages %q, want %q", msgs, tt.wantMsgs)
			}
			if !strings.HasSuffix(got.System, tt.wantBrief) || !strings.HasPrefix(got.System, tt.give.System) {
				t.Errorf("system %q lacks the original prompt or the brevity instruction", got.System)
			}
			if tt.give.Model != "sonnet" || len(tt.give.Messages) != before {
				t.Error("Simplified modified the original request")
			}
		})
	}
}
