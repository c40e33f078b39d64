package fallback

import (
	"strings"
	"testing"
	"unicode"
)

func TestGraceful(t *testing.T) {
	tests := []struct {
		locale   string
		japanese bool
	}{
		{"en", false}, {"en-US", false}, {"", false}, {"fr", false},
		{"ja", true}, {"ja-JP", true}, {"JA_jp", true},
	}
	for _, tt := range tests {
		seen := map[string]bool{}
		for seed := range uint64(3) {
			msg := Graceful(tt.locale, seed)
			seen[msg] = true
			if !strings.Contains(msg, "support@mangaassist.jp") {
				t.Errorf("Graceful(%q, %d) has no escalation hint: %q", tt.locale, seed, msg)
			}
			if hasKana(msg) != tt.japanese {
				t.Errorf("Graceful(%q, %d) = %q: wrong language", tt.locale, seed, msg)
			}
			if Graceful(tt.locale, seed+3) != msg {
				t.Errorf("Graceful(%q) is not a function of the seed", tt.locale)
			}
		}
		if len(seen) != 3 {
			t.Errorf("Graceful(%q) offers %d messages, want 3", tt.locale, len(seen))
		}
	}
}

func TestRedirect(t *testing.T) {
	tests := []struct{ got, want string }{
		{Redirect("en"), "I cannot help with that request. Try searching manga, checking orders, or asking for recommendations."},
		{Redirect("ja-JP"), "そのリクエストにはお応えできません。漫画の検索、注文確認、またはおすすめをお試しください。"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestLang(t *testing.T) {
	tests := []struct{ locale, text, want string }{
		// The message's language wins over the locale; the locale breaks ties.
		{"ja-JP", "hello", "en"}, {"EN_us", "送料", "ja"}, {"", "送料はいくら", "ja"},
		{"", "ワンピース", "ja"}, {"", "how much", "en"}, {"ja-JP", "123", "ja"}, {"fr", "", "en"},
	}
	for _, tt := range tests {
		if got := Lang(tt.locale, tt.text); got != tt.want {
			t.Errorf("Lang(%q, %q) = %q, want %q", tt.locale, tt.text, got, tt.want)
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
