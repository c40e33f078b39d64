package faq

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultMatches(t *testing.T) {
	x, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string
		want string // "" = no match
	}{
		// Japanese.
		{"送料はいくらですか", "shipping"},
		{"配送にどれくらいかかりますか", "shipping"},
		{"いつ届きますか？", "shipping"},
		{"届くまで何日かかる？", "shipping"},
		{"返品したい", "returns"},
		{"返金してほしい", "returns"},
		{"支払いにPayPayは使えますか", "payment"},
		{"カードの使い方", "payment"},
		{"注文はどこ？", "tracking"},
		{"おすすめの漫画ある？", "recommendations"},
		{"営業時間は？", "store_hours"},
		{"ﾎﾟｲﾝﾄは貯まりますか", "membership"},
		{"会員になりたい", "membership"},
		// English.
		{"can I get a refund?", "returns"},
		{"How long does shipping take", "shipping"},
		{"When does my manga arrive?", "shipping"},
		{"ＨＯＷ ＬＯＮＧ ＤＯＥＳ ＳＨＩＰＰＩＮＧ ＴＡＫＥ？", "shipping"},
		{"where is my package", "tracking"},
		{"Can I pay by card?", "payment"},
		{"what time do you open on sunday", "store_hours"},
		{"What are your opening hours?", "store_hours"},
		{"what should I read next", "recommendations"},
		{"How do I earn points?", "membership"},
		// Unrelated.
		{"tell me a joke about cats", ""},
		{"今日の天気は？", ""},
		{"今日の天気はどうですか", ""},
		{"明日は雨ですか", ""},
		{"天気予報を教えてください", ""},
		{"日本の首都はどこですか", ""},
		{"ナルトの最終巻はいつ発売ですか", ""},
		{"猫の話をして", ""},
		{"what is the capital of france", ""},
		{"write me a python script", ""},
		{"how to draw manga", ""},
		{"hello", ""},
		{"", ""},
		{"？？？", ""},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			h, ok := x.Match(tt.give, DefaultMinScore)
			if got := map[bool]string{true: h.ID}[ok]; got != tt.want {
				best, _ := x.Match(tt.give, 0)
				t.Errorf("Match(%q) = %q, want %q (best %q scores %.2f, threshold %.2f)",
					tt.give, got, tt.want, best.ID, best.Score, DefaultMinScore)
			}
		})
	}
}

func TestAnswerFollowsLocale(t *testing.T) {
	x, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	h, ok := x.Match("送料はいくらですか", DefaultMinScore)
	if !ok {
		t.Fatal("no match")
	}
	tests := []struct{ lang, want string }{
		{"ja", "国内の通常配送は3〜5営業日"},
		{"en", "Standard shipping takes 3-5 business days"},
		{"fr", "Standard shipping takes 3-5 business days"}, // English when the locale is missing
	}
	for _, tt := range tests {
		if got := h.Answer(tt.lang); !strings.HasPrefix(got, tt.want) {
			t.Errorf("Answer(%s) = %q, want prefix %q", tt.lang, got, tt.want)
		}
	}
}

func TestDefaultEntriesAreBilingual(t *testing.T) {
	x, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"shipping", "returns", "cancellation", "payment", "tracking", "recommendations", "store_hours", "membership"}
	if got := x.IDs(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("IDs = %v, want %v", got, want)
	}
	for _, e := range x.entries {
		if e.Answer["en"] == "" || e.Answer["ja"] == "" {
			t.Errorf("%s: missing an English or Japanese answer", e.ID)
		}
		if len(e.Questions["en"]) == 0 || len(e.Questions["ja"]) == 0 {
			t.Errorf("%s: missing English or Japanese examples", e.ID)
		}
	}
}

func TestLoadUserFile(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{"valid", `
entries:
  - id: gift
    answer: {en: "Gift wrapping is free.", ja: "ギフト包装は無料です。"}
    questions: {en: ["Do you offer gift wrapping?"], ja: ["ギフト包装はできますか"]}
`, ""},
		{"unknown field", "entries:\n  - id: a\n    answr: {en: x}\n", "answr"},
		{"no entries", "entries: []\n", "entries: must not be empty"},
		{"duplicate id", `
entries:
  - {id: a, answer: {en: x}, keywords: {en: [gift]}}
  - {id: a, answer: {en: y}, keywords: {en: [wrap]}}
`, `entries[1].id: duplicate "a"`},
		{"empty answer", "entries:\n  - {id: a, answer: {en: ''}, keywords: {en: [gift]}}\n", "entries[0].answer"},
		{"nothing to match", "entries:\n  - {id: a, answer: {en: x}, keywords: {en: [the, a]}}\n", "entries[0]: needs questions or keywords"},
		{"not yaml", "entries: [", "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "faq.yaml")
			if err := os.WriteFile(path, []byte(tt.give), 0o644); err != nil {
				t.Fatal(err)
			}
			x, err := Load(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load = %v, want error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// A one-entry file works at the default threshold.
			h, ok := x.Match("ギフト包装はできますか？", DefaultMinScore)
			if !ok || h.Answer("ja") != "ギフト包装は無料です。" {
				t.Errorf("Match = %+v, %v; want the gift entry in Japanese", h, ok)
			}
			if h, ok := x.Match("how long does shipping take", DefaultMinScore); ok {
				t.Errorf("unrelated question matched %q", h.ID)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

func TestStem(t *testing.T) {
	tests := []struct{ give, want string }{
		{"shipping", "ship"}, {"ships", "ship"}, {"shipped", "ship"}, {"ship", "ship"},
		{"arriving", "arriv"}, {"arrive", "arriv"}, {"arrives", "arriv"},
		{"deliveries", "delivery"}, {"returns", "return"}, {"refunded", "refund"},
		{"status", "status"}, {"address", "address"}, {"need", "need"},
	}
	for _, tt := range tests {
		if got := stem(tt.give); got != tt.want {
			t.Errorf("stem(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(defaultYAML)
	f.Add([]byte("entries:\n  - {id: a, answer: {en: x}, keywords: {en: [gift]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := Parse(data)
		if err != nil {
			return
		}
		if h, ok := x.Match(string(data), 0); ok && h.Answer("ja") == "" {
			t.Fatalf("matched %q with an empty answer", h.ID)
		}
	})
}

func FuzzMatch(f *testing.F) {
	x, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"送料はいくらですか", "can I get a refund?", "ｶﾞｲﾄﾞ\xff", "'''", "a's"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if h, ok := x.Match(s, DefaultMinScore); ok && h.Score < DefaultMinScore {
			t.Fatalf("Match(%q) returned score %.2f below the threshold", s, h.Score)
		}
	})
}

func BenchmarkMatch(b *testing.B) {
	x, err := Default()
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{"配送にどれくらいかかりますか", "can I get a refund?"} {
		b.Run(q, func(b *testing.B) {
			for b.Loop() {
				x.Match(q, DefaultMinScore)
			}
		})
	}
}
