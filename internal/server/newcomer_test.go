package server

import (
	"strings"
	"testing"
)

// A newcomer's first questions to the default profile, in each language,
// in one conversation: store policies are answered with the policy, a
// follow-up about "those" or "it" is answered about what was just
// discussed, and nothing is answered with the greeting.
func TestANewcomersFirstQuestionsGetRelevantAnswers(t *testing.T) {
	sc := newScenario(t, withCatalog(quickConfig()))
	tests := []struct {
		locale string
		turns  []struct{ ask, want, not string }
	}{
		{"en", []struct{ ask, want, not string }{
			{"How do I cancel an order?", "My Orders", "I'm MangaAssist"},
			{"What manga do you recommend?", "", "I'm MangaAssist"},
			{"Which of those are complete?", "complete", "I'm MangaAssist"},
			{"Tell me about One Piece", "One Piece", ""},
			{"How much is it?", "One Piece", "I'm MangaAssist"},
			{"How much is shipping?", "shipping fee", "¥"},
		}},
		{"ja", []struct{ ask, want, not string }{
			{"注文をキャンセルしたい", "キャンセル", "MangaAssistです"},
			{"おすすめの漫画は？", "『", "MangaAssistです"},
			{"その中で完結しているのは？", "完結", "MangaAssistです"},
			{"ワンピースについて教えて", "ワンピース", ""},
			{"いくらですか？", "ワンピース", "MangaAssistです"},
			{"送料はいくら？", "送料", "円（税込）"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.locale, func(t *testing.T) {
			for i, turn := range tt.turns {
				a := sc.chatSession("newcomer-"+tt.locale, "first-hour-"+tt.locale, turn.ask, tt.locale)
				if a.Status != 200 || a.Tier != "sonnet" {
					t.Fatalf("turn %d %q: %+v", i+1, turn.ask, a)
				}
				if !strings.Contains(a.Text, turn.want) || (turn.not != "" && strings.Contains(a.Text, turn.not)) {
					t.Errorf("turn %d %q answered:\n%s\nwant it to say %q and not %q", i+1, turn.ask, a.Text, turn.want, turn.not)
				}
			}
		})
	}
}
