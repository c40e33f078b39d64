package gateway

import (
	"testing"

	"github.com/fmgate/fmgate/internal/config"
)

// Every turn, answered or refused, is counted in the language it is (or
// would have been) answered in, as far as what it sent tells: its message's,
// else the locale it sent; with neither, the language is unknown.
func TestDecideLocale(t *testing.T) {
	g, err := New(config.Default(), Deps{Providers: both(&scriptProvider{})}) // locales ja, en
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		message, give string
		want          string
	}{
		{"the message's language wins", "Which manga should I read next?", "ja", "en"},
		{"the message's language without a locale", "おすすめの少年漫画は？", "", "ja"},
		{"a tie goes to the locale sent", "12345", "en", "en"},
		{"a tie without a locale goes to the first locale", "12345", "", "ja"},
		{"a locale not answered in: the message's language", "Which manga should I read next?", "fr", "en"},
		{"no message: the locale sent", " ", "en", "en"},
		{"text that is not UTF-8: the locale sent", "\xff\xfe", "en", "en"},
		{"no message and a locale not answered in", "", "fr", ""},
		{"neither message nor locale", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := &Turn{Message: tt.message, Locale: tt.give}
			g.decideLocale(turn)
			if turn.Locale != tt.want {
				t.Fatalf("locale %q, want %q", turn.Locale, tt.want)
			}
		})
	}
}
