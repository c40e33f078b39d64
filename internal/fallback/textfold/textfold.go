// Package textfold folds the width and case variants of user text, so that
// "Shipping？", "ｓｈｉｐｐｉｎｇ?" and "shipping" compare equal in the response
// cache key and the FAQ matcher. It approximates NFKC for the characters a
// Japanese keyboard produces (full-width ASCII, the ideographic space,
// half-width katakana) using the standard library only.
package textfold

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// halfKana maps U+FF61..U+FF9F to their full-width forms.
var halfKana = []rune("。「」、・ヲァィゥェォャュョッーアイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワン゛゜")

// Fold lower-cases s and maps full-width ASCII to ASCII, U+3000 to a space
// and half-width katakana to full-width (composing a following voiced or
// semi-voiced mark). Invalid UTF-8 becomes U+FFFD.
func Fold(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	rs := []rune(strings.ToValidUTF8(s, "\uFFFD"))
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r >= 0xFF01 && r <= 0xFF5E:
			r -= 0xFEE0
		case r == 0x3000:
			r = ' '
		case r >= 0xFF61 && r <= 0xFF9F:
			r = halfKana[r-0xFF61]
			if i+1 < len(rs) {
				if v, ok := voice(r, rs[i+1]); ok {
					r = v
					i++
				}
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// voice composes a katakana with a half-width (semi-)voiced mark.
func voice(base, mark rune) (rune, bool) {
	switch mark {
	case 0xFF9E: // ﾞ
		switch {
		case base == 'ウ':
			return 'ヴ', true
		case strings.ContainsRune("カキクケコサシスセソタチツテトハヒフヘホ", base):
			return base + 1, true
		}
	case 0xFF9F: // ﾟ
		if strings.ContainsRune("ハヒフヘホ", base) {
			return base + 2, true
		}
	}
	return 0, false
}

// trailing is the punctuation a question may end with that does not change
// what is asked.
const trailing = "?!.,;:。、．，！？…‥・~〜 \t\r\n"

// Question folds s, collapses runs of white space into one space (none
// between two Japanese characters, where a space is only layout) and strips
// leading white space and trailing punctuation: the normal form of a question
// for the response cache key.
func Question(s string) string {
	fields := strings.Fields(Fold(s))
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			prev, _ := utf8.DecodeLastRuneInString(fields[i-1])
			next, _ := utf8.DecodeRuneInString(f)
			if !japanese(prev) || !japanese(next) {
				b.WriteByte(' ')
			}
		}
		b.WriteString(f)
	}
	return strings.TrimRight(b.String(), trailing)
}

func japanese(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana) || r == 'ー' ||
		(r >= 0x3000 && r <= 0x303F) // CJK punctuation: 。、「」
}
