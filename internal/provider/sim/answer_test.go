package sim

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/fmgate/fmgate/internal/provider"
)

func TestDetectLanguage(t *testing.T) {
	tests := []struct {
		give   string
		locale string
		want   language
	}{
		{"おすすめの漫画を教えてください", "", japanese},
		{"What do you recommend?", "ja", english},
		{"One Pieceの最新刊はいつ出ますか？", "", japanese},
		{"Tell me about ワンピース volumes", "", english},
		{"SPY×FAMILYおすすめ", "", japanese},
		{"進撃の巨人", "en", japanese},
		{"", "ja-JP", japanese},
		{"👍", "ja", japanese},
		{"👍", "", english},
		{"", "", english},
	}
	for _, tt := range tests {
		if got := detectLanguage(tt.give, tt.locale); got != tt.want {
			t.Errorf("detectLanguage(%q, %q) = %v, want %v", tt.give, tt.locale, got, tt.want)
		}
	}
}

func hasKana(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana) {
			return true
		}
	}
	return false
}

func TestAnswersMatchLanguageAndTopic(t *testing.T) {
	tests := []struct {
		name     string
		msg      string
		wantJA   bool
		wantText []string // every one must appear
	}{
		{"ja recommendation", "おすすめの漫画を教えてください", true, []string{"おすすめ", "『"}},
		{"ja recommendation by genre", "面白いファンタジー漫画はありますか？", true, []string{"ファンタジー"}},
		{"ja new releases", "今月の新刊は何がありますか？", true, []string{"発売中"}},
		{"ja shipping", "配送にはどのくらいかかりますか？", true, []string{"3〜5営業日"}},
		{"ja returns", "未開封の本は返品できますか？", true, []string{"30日以内"}},
		{"ja payment", "PayPayで支払いできますか？", true, []string{"PayPay", "JCB", "コンビニ"}},
		{"ja tracking", "注文した本がまだ届かないのですが", true, []string{"注文履歴"}},
		{"ja membership", "会員になるとポイントは貯まりますか？", true, []string{"ポイント"}},
		{"ja title", "呪術廻戦は何巻まで出ていますか", true, []string{"呪術廻戦", "全30巻完結"}},
		{"ja greeting", "こんにちは", true, []string{"MangaAssist"}},
		{"en recommendation", "Can you recommend a good manga?", false, []string{"volumes"}},
		{"en recommendation similar", "What should I read if I like Chainsaw Man?", false, []string{"Chainsaw Man"}},
		{"en new releases", "Any new releases this month?", false, []string{"out now"}},
		{"en shipping", "How long does shipping take?", false, []string{"3-5 business days"}},
		{"en returns", "Can I get a refund for an unopened book?", false, []string{"30 days"}},
		{"en payment", "Can I pay with a credit card?", false, []string{"Visa", "JCB", "PayPay", "LINE Pay"}},
		{"en tracking", "Where is my order? I want to track it", false, []string{"My Orders"}},
		{"en membership", "How does membership work?", false, []string{"points"}},
		{"en title", "Tell me about One Piece", false, []string{"One Piece", "110 volumes"}},
		{"en recommendation by genre alone", "Which fantasy manga should I read next?", false, []string{"fantasy", "volumes"}},
		{"en cancellation", "How do I cancel an order?", false, []string{"My Orders", "refund"}},
		{"ja cancellation", "注文をキャンセルしたい", true, []string{"キャンセル", "注文履歴"}},
		{"en title in japanese script", "Tell me about ワンピース please", false, []string{"One Piece"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 17, map[string]Settings{"m": instant})
			resp, err := s.Complete(context.Background(), userRequest("m", tt.msg))
			if err != nil {
				t.Fatal(err)
			}
			if hasKana(resp.Text) != tt.wantJA {
				t.Errorf("answer in the wrong language (Japanese: %v):\n%s", tt.wantJA, resp.Text)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(resp.Text, w) {
					t.Errorf("answer lacks %q:\n%s", w, resp.Text)
				}
			}
		})
	}
}

func TestAnswerFollowsLastUserMessage(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": instant})
	req := &provider.Request{Model: "m", Locale: "ja", Messages: []provider.Message{
		{Role: provider.RoleUser, Content: "おすすめは？"},
		{Role: provider.RoleAssistant, Content: "『ワンピース』はいかがでしょう。"},
		{Role: provider.RoleUser, Content: "How long does shipping take?"},
	}}
	resp, err := s.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if hasKana(resp.Text) || !strings.Contains(resp.Text, "business days") {
		t.Errorf("want an English shipping answer to the last message, got:\n%s", resp.Text)
	}
}

func TestLocaleBreaksTies(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": instant})
	req := userRequest("m", "👍")
	req.Locale = "ja"
	resp, err := s.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !hasKana(resp.Text) {
		t.Errorf("locale ja with no language signal: want Japanese, got:\n%s", resp.Text)
	}
}

func TestAnswerLengthIsPlausible(t *testing.T) {
	msgs := []string{
		"hello", "こんにちは", "おすすめの漫画を教えてください", "What do you recommend?",
		"Can I pay with PayPay?", "新刊はいつ発売？", "Tell me about Frieren", "薬屋のひとりごとについて教えて",
		"返品できますか", "where is my order", "ポイント", "mystery manga recommendations",
	}
	for seed := range uint64(20) {
		s, _ := newSim(t, seed, map[string]Settings{"m": instant})
		for _, msg := range msgs {
			resp, err := s.Complete(context.Background(), userRequest("m", msg))
			if err != nil {
				t.Fatal(err)
			}
			if n := resp.Usage.OutputTokens; n < minAnswerTokens-5 || n > maxAnswerTokens {
				t.Errorf("seed %d, %q: %d output tokens, want roughly %d–%d:\n%s", seed, msg, n, minAnswerTokens, maxAnswerTokens, resp.Text)
			}
		}
	}
}

func TestCutAtStop(t *testing.T) {
	tests := []struct {
		name, answer string
		stops        []string
		want, which  string
	}{
		{"none given", "a. b. c", nil, "a. b. c", ""},
		{"none found", "a. b. c", []string{"!"}, "a. b. c", ""},
		{"the earliest wins", "one, two. three", []string{".", ","}, "one", ","},
		{"at the start", "Stop here", []string{"Stop"}, "", "Stop"},
		{"multi-byte", "ワンピース。最新刊", []string{"。"}, "ワンピース", "。"},
	}
	for _, tt := range tests {
		got, which := cutAtStop(tt.answer, tt.stops)
		if got != tt.want || which != tt.which {
			t.Errorf("%s: cutAtStop = %q, %q; want %q, %q", tt.name, got, which, tt.want, tt.which)
		}
	}
}

// "Which of those are complete?" is answered about the titles the last
// answer named; when none of them is, the answer says so and names a
// complete one instead.
func TestCompleteFollowsTheTitlesJustListed(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": instant})
	ask := func(listed string) string {
		t.Helper()
		resp, err := s.Complete(context.Background(), &provider.Request{Model: "m", Locale: "en", Messages: []provider.Message{
			{Role: provider.RoleUser, Content: "What do you recommend?"},
			{Role: provider.RoleAssistant, Content: listed},
			{Role: provider.RoleUser, Content: "Which of those are complete?"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Text
	}
	if got := ask("Try One Piece or Attack on Titan."); !strings.Contains(got, "Attack on Titan (complete in 34 volumes)") || !strings.Contains(got, "these are complete") {
		t.Errorf("with a complete title listed:\n%s", got)
	}
	if got := ask("Try One Piece or Frieren."); !strings.Contains(got, "still running") || !strings.Contains(got, "For a finished story") {
		t.Errorf("with only running titles listed:\n%s", got)
	}
}

// TestTheLongestAnswerIsWholeWithinThreeSeconds: a client that takes its
// answer in one JSON body waits for the whole of it; at the default Sonnet
// pace the longest answer the simulator writes must still be whole within
// the store's 3 s.
func TestTheLongestAnswerIsWholeWithinThreeSeconds(t *testing.T) {
	s := DefaultConfig().Models["sonnet"]
	whole := time.Duration(s.TTFTMs)*time.Millisecond + time.Duration(float64(maxAnswerTokens)/s.TokensPerSecond*float64(time.Second))
	if whole >= 3*time.Second {
		t.Errorf("%d tokens at %v tok/s after %d ms: whole after %v, want under 3 s", maxAnswerTokens, s.TokensPerSecond, s.TTFTMs, whole)
	}
}
