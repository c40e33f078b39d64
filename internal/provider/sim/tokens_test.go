package sim

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

func TestCountTokensIsCL100K(t *testing.T) {
	tests := []struct {
		give string
		want int
	}{
		{"", 0},
		{"hello world", 2},
		{"tiktoken is great!", 6}, // OpenAI's cookbook example for cl100k_base
		{"<|endoftext|>", 7},      // typed by a user, not the special token
	}
	for _, tt := range tests {
		if got := CountTokens(tt.give); got != tt.want {
			t.Errorf("CountTokens(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestCountTokensConcurrent(t *testing.T) {
	want := CountTokens("葬送のフリーレンの最新刊")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if got := CountTokens("葬送のフリーレンの最新刊"); got != want {
				t.Errorf("concurrent CountTokens = %d, want %d", got, want)
			}
		})
	}
	wg.Wait()
}

func TestInputTokens(t *testing.T) {
	req := &provider.Request{
		System: "You are MangaAssist.",
		Messages: []provider.Message{
			{Role: provider.RoleUser, Content: "おすすめは？"},
			{Role: provider.RoleAssistant, Content: "ワンピースです。"},
			{Role: provider.RoleUser, Content: ""},
		},
	}
	want := CountTokens("You are MangaAssist.") + CountTokens("おすすめは？") + CountTokens("ワンピースです。") + 4*MessageOverheadTokens
	if got := InputTokens(req); got != want {
		t.Errorf("InputTokens = %d, want %d", got, want)
	}
	if got := InputTokens(&provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Content: "hi"}}}); got != 1+MessageOverheadTokens {
		t.Errorf("no system prompt: InputTokens = %d, want %d", got, 1+MessageOverheadTokens)
	}
}

func TestJapaneseTokensSplitCharactersAndAreRejoined(t *testing.T) {
	text := "鬼滅の刃と薬屋のひとりごと、葬送のフリーレンは全巻在庫がございます。"
	pieces := tokenPieces(text)
	split := 0
	for _, p := range pieces {
		if !utf8.ValidString(p) {
			split++
		}
	}
	if split == 0 {
		t.Fatalf("no token of %q splits a character; the test no longer exercises rejoining", text)
	}
	var j utf8Joiner
	var out strings.Builder
	for _, p := range pieces {
		d := j.add(p)
		if !utf8.ValidString(d) {
			t.Fatalf("released %q, not valid UTF-8", d)
		}
		out.WriteString(d)
	}
	if out.String() != text {
		t.Errorf("rejoined %q, want %q", out.String(), text)
	}
}

func TestUTF8Joiner(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{"ascii", []string{"a", "bc"}, []string{"a", "bc"}},
		{"split 3-byte char", []string{"\xe8\x96", "\xac"}, []string{"", "薬"}},
		{"complete then partial", []string{"の\xe8", "\x96\xac屋"}, []string{"の", "薬屋"}},
		{"split 4-byte emoji", []string{"\xf0\x9f", "\x91", "\x8d!"}, []string{"", "", "👍!"}},
		{"stray continuation passes", []string{"\x96a"}, []string{"\x96a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var j utf8Joiner
			for i, p := range tt.give {
				if got := j.add(p); got != tt.want[i] {
					t.Errorf("add(%q) = %q, want %q", p, got, tt.want[i])
				}
			}
		})
	}
}

func FuzzUTF8Joiner(f *testing.F) {
	f.Add([]byte("鬼滅の刃"), uint8(2))
	f.Add([]byte("\xf0\x9f\x91\x8d"), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		if !utf8.Valid(b) {
			return
		}
		n := int(step%5) + 1
		var j utf8Joiner
		var out strings.Builder
		for i := 0; i < len(b); i += n {
			d := j.add(string(b[i:min(i+n, len(b))]))
			if !utf8.ValidString(d) {
				t.Fatalf("released invalid %q", d)
			}
			out.WriteString(d)
		}
		if out.String() != string(b) {
			t.Fatalf("rejoined %q, want %q", out.String(), b)
		}
	})
}
