package fallback

import "testing"

func TestCacheKey(t *testing.T) {
	base := Question{Text: "How long does shipping take?", Locale: "en", PromptVersion: "v1"}
	tests := []struct {
		name string
		give Question
		same bool
	}{
		{"identical", base, true},
		{"case", Question{Text: "HOW LONG DOES SHIPPING TAKE?", Locale: "en", PromptVersion: "v1"}, true},
		{"full-width", Question{Text: "Ｈｏｗ ｌｏｎｇ ｄｏｅｓ ｓｈｉｐｐｉｎｇ ｔａｋｅ？", Locale: "en", PromptVersion: "v1"}, true},
		{"white space", Question{Text: "  How long\tdoes  shipping\ntake ", Locale: "en", PromptVersion: "v1"}, true},
		{"trailing punctuation", Question{Text: "How long does shipping take?!!", Locale: "en", PromptVersion: "v1"}, true},
		{"region of the locale", Question{Text: "How long does shipping take?", Locale: "en-GB", PromptVersion: "v1"}, true},
		{"locale guessed from text", Question{Text: "How long does shipping take?", PromptVersion: "v1"}, true},
		{"other words", Question{Text: "How long does delivery take?", Locale: "en", PromptVersion: "v1"}, false},
		// The answer is in the message's language whatever the locale field.
		{"locale field disagreeing with the message", Question{Text: "How long does shipping take?", Locale: "ja", PromptVersion: "v1"}, true},
		{"other language", Question{Text: "配送にはどれくらいかかりますか", Locale: "en", PromptVersion: "v1"}, false},
		{"other prompt version", Question{Text: "How long does shipping take?", Locale: "en", PromptVersion: "v2"}, false},
	}
	want := CacheKey(base)
	if len(want) != 32 {
		t.Fatalf("key %q: want 32 hex digits", want)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CacheKey(tt.give) == want; got != tt.same {
				t.Errorf("CacheKey(%+v) equal = %v, want %v", tt.give, got, tt.same)
			}
		})
	}
	ja := []string{"送料はいくらですか", "送料はいくらですか？", "送料は　いくらですか。", "送料はいくらですか?"}
	for _, s := range ja[1:] {
		if CacheKey(Question{Text: s, Locale: "ja"}) != CacheKey(Question{Text: ja[0], Locale: "ja"}) {
			t.Errorf("%q and %q have different keys", s, ja[0])
		}
	}
}
