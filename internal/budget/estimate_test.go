package budget

import (
	"os"
	"testing"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

func TestCount(t *testing.T) {
	tests := []struct {
		give string
		want ScriptCounts
	}{
		{"", ScriptCounts{}},
		{"One Piece 107", ScriptCounts{Latin: 8, Words: 2, Spaces: 2, Digits: 3}},
		{"おすすめのマンガ", ScriptCounts{Hiragana: 5, Katakana: 3}},
		{"漫画々推薦。", ScriptCounts{Kanji: 5, Punct: 1}},
		{"ﾏﾝｶﾞ！😀", ScriptCounts{Katakana: 4, Punct: 1, Other: 1}},
		{"Pokémon's", ScriptCounts{Latin: 8, Words: 2, Punct: 1}},
		{"ＡＢＣ１２", ScriptCounts{Other: 5}},
	}
	for _, tt := range tests {
		if got := Count(tt.give); got != tt.want {
			t.Errorf("Count(%q) = %+v, want %+v", tt.give, got, tt.want)
		}
	}
}

func TestLanguage(t *testing.T) {
	tests := []struct{ give, want string }{
		{"Do you ship to Canada?", "en"},
		{"鬼滅の刃の最新刊はいつ発売されますか？", "ja"},
		{"One Pieceの最新刊はいつ出ますか？", "mixed"},
		{"12345", "en"},
	}
	for _, tt := range tests {
		if got := Count(tt.give).Language(); got != tt.want {
			t.Errorf("Language(%q) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestTruncateKeepsConversationShape(t *testing.T) {
	u := Message{Role: provider.RoleUser, Content: "q"}
	a := Message{Role: provider.RoleAssistant, Content: "a"}
	tests := []struct {
		name        string
		hist        []Message
		excess      int
		wantDropped int
	}{
		{"nothing to drop", []Message{u, a, u, a}, 0, 0},
		{"drops the orphaned answer too", []Message{u, a, u, a, u, a}, 5, 2},
		{"keeps the latest exchange", []Message{u, a, u, a}, 1000, 2},
		{"two messages stay", []Message{u, a}, 1000, 0},
	}
	for _, tt := range tests {
		each := make([]int, len(tt.hist))
		for i := range each {
			each[i] = 10
		}
		keep, dropped := truncate(tt.hist, each, tt.excess)
		if dropped != tt.wantDropped || len(keep) != len(tt.hist)-dropped || (len(keep) > 0 && keep[0].Role != provider.RoleUser) {
			t.Errorf("%s: dropped %d, kept %v", tt.name, dropped, keep)
		}
	}
}

func TestObserveIgnoresNonsense(t *testing.T) {
	e := NewEstimator()
	c := Count("hello world")
	c.Messages = 1
	before := e.Tokens("m", c)
	e.Observe("m", c, 0)
	e.Observe("m", c, -5)
	if e.Tokens("m", c) != before || len(e.Accuracy()) != 0 {
		t.Fatal("non-positive usage changed the calibration")
	}
	// A wild outlier moves the ratios only within their bounds.
	for range 50 {
		e.Observe("m", c, 1_000_000)
	}
	x := c.vector()
	if got := e.Tokens("m", c); got > dot(&maxWeights, &x)+1e-9 {
		t.Fatalf("estimate %v beyond the bounds", got)
	}
}

func FuzzCount(f *testing.F) {
	f.Add("One Pieceの最新刊は？ 😀 ＡＢＣ")
	f.Add("\xff\xfe broken utf8")
	f.Fuzz(func(t *testing.T, s string) {
		c := Count(s)
		chars := c.Hiragana + c.Katakana + c.Kanji + c.Latin + c.Digits + c.Spaces + c.Punct + c.Other
		if chars != utf8.RuneCountInString(s) {
			t.Fatalf("classified %d characters of %d", chars, utf8.RuneCountInString(s))
		}
		if c.Words > c.Latin || c.Messages != 0 {
			t.Fatalf("bad counts %+v", c)
		}
		if est := NewEstimator().Tokens("m", c); est < 0 {
			t.Fatalf("negative estimate %v", est)
		}
	})
}

// BenchmarkEstimate estimates a typical MangaAssist request: system prompt,
// four history messages, retrieved context and a mixed JA/EN question.
func BenchmarkEstimate(b *testing.B) {
	ctx, err := os.ReadFile("testdata/corpus.tsv")
	if err != nil {
		b.Fatal(err)
	}
	p := Parts{
		System: systemEN,
		History: []Message{
			{Role: provider.RoleUser, Content: "おすすめの少年漫画を教えてください。"},
			{Role: provider.RoleAssistant, Content: "少年漫画でしたら、「ONE PIECE」「僕のヒーローアカデミア」「チェンソーマン」が特に人気です。冒険ものがお好きなら「ONE PIECE」をおすすめします。"},
			{Role: provider.RoleUser, Content: "Is Chainsaw Man finished?"},
			{Role: provider.RoleAssistant, Content: "Part 1 is complete in 11 volumes; part 2 is ongoing and starts with volume 12."},
		},
		Context: string(ctx[:1500]),
		User:    "Spy x Familyの12巻はもう買えますか？",
	}
	e := NewEstimator()
	b.SetBytes(int64(len(p.System) + len(p.Context) + len(p.User) + 400))
	b.ReportAllocs()
	for b.Loop() {
		_ = e.Estimate("sonnet", p)
	}
}

// TestEstimateFollowsThePromptInForce: the system prompt's counts are kept
// between requests, so a prompt switch (a rollout, a canary's candidate and
// back) must be estimated as the new prompt at once, like a fresh estimator
// would.
func TestEstimateFollowsThePromptInForce(t *testing.T) {
	prompts := []string{
		"You are MangaAssist. Recommend manga briefly.",
		"あなたはMangaAssistです。漫画を短くおすすめしてください。丁寧な日本語で答えてください。",
		"You are MangaAssist. Recommend manga briefly.",
		"",
	}
	e := NewEstimator()
	for i, sys := range prompts {
		p := Parts{System: sys, User: "Which fantasy manga should I read next?"}
		got, want := e.Estimate("sonnet", p), NewEstimator().Estimate("sonnet", p)
		if got.System != want.System || got.Total != want.Total || got.Counts != want.Counts {
			t.Errorf("request %d: estimate %+v, want %+v (as a fresh estimator)", i, got, want)
		}
	}
}
