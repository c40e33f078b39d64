package language

import "testing"

func TestOf(t *testing.T) {
	tests := []struct {
		name, text, hint, want string
	}{
		{"japanese message, english locale", "支払いの方法を教えて", "en", JA},
		{"english message, japanese locale", "I want to cancel my order", "ja", EN},
		{"a japanese title in an english sentence", "Do you have 呪術廻戦 volume 3?", "ja", EN},
		{"english title in a japanese sentence", "ONE PIECEの最新刊はありますか", "en", JA},
		{"no letters: the locale decides", "？？ 123", "ja-JP", JA},
		{"no letters, no locale", "123", "", EN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Of(tt.text, tt.hint); got != tt.want {
				t.Errorf("Of(%q, %q) = %q, want %q", tt.text, tt.hint, got, tt.want)
			}
		})
	}
}
