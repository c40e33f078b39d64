// Package language decides which language a turn is answered in, once, for
// every tier: the models, the response cache key, the FAQ and the graceful
// messages all follow the same decision.
//
// The message's own language wins over the locale the client sent: a
// shopper whose app says "en" but who writes 「支払いの方法を教えて」 is
// answered in Japanese, by a model and by the FAQ alike.
package language

import (
	"strings"
	"unicode"
)

// The languages fmgate answers in.
const (
	JA = "ja"
	EN = "en"
)

// Of returns the language text is written in, JA or EN. Hiragana counts
// double, because particles (の, は, を) mark Japanese grammar, while katakana
// or kanji alone may be a title quoted in an English sentence; each Latin
// word counts three. A tie (text with neither, or as much of each) goes to
// hint, a locale such as "ja-JP" or "en" (EN when hint is neither).
func Of(text, hint string) string {
	ja, words := 0, 0
	inWord := false
	for _, r := range text {
		switch {
		case unicode.Is(unicode.Hiragana, r):
			ja += 2
		case unicode.Is(unicode.Katakana, r), unicode.Is(unicode.Han, r):
			ja++
		}
		latin := r < unicode.MaxASCII && unicode.IsLetter(r)
		if latin && !inWord {
			words++
		}
		inWord = latin
	}
	switch en := 3 * words; {
	case ja > en:
		return JA
	case en > ja:
		return EN
	}
	return Base(hint)
}

// Base reduces a locale ("ja-JP", "en_US", "JA") to JA or EN; anything
// else, the empty locale included, is EN.
func Base(locale string) string {
	if strings.HasPrefix(strings.ToLower(locale), JA) {
		return JA
	}
	return EN
}
