package textfold

import (
	"testing"
	"unicode/utf8"
)

func TestQuestion(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{"lower and trailing ?", "How long does Shipping take?", "how long does shipping take"},
		{"full-width ascii", "ＨＯＷ　ｌｏｎｇ　ｄｏｅｓ　ｓｈｉｐｐｉｎｇ　ｔａｋｅ？", "how long does shipping take"},
		{"collapse white space", "  how\tlong \n does   shipping take !! ", "how long does shipping take"},
		{"japanese full stop", "送料はいくらですか。", "送料はいくらですか"},
		{"japanese question marks", "送料はいくらですか？？", "送料はいくらですか"},
		{"ideographic space between japanese", "送料は　いくら", "送料はいくら"},
		{"space between japanese and latin kept", "ONE PIECE の 最新刊", "one piece の最新刊"},
		{"half-width katakana", "ﾎﾟｲﾝﾄｶｰﾄﾞ", "ポイントカード"},
		{"half-width voiced", "ｶﾞｲﾄﾞﾌﾞｯｸ", "ガイドブック"},
		{"half-width vu", "ｳﾞｧｲｵﾘﾝ", "ヴァイオリン"},
		{"inner punctuation kept", "what's new? really", "what's new? really"},
		{"only punctuation", "？！。", ""},
		{"invalid utf-8", "a\xffb?", "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Question(tt.give); got != tt.want {
				t.Errorf("Question(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

func FuzzQuestion(f *testing.F) {
	for _, s := range []string{"Ｓｈｉｐｐｉｎｇ？", "ｶﾞｲﾄﾞ", "送料は　いくら。", "\xff\xfe", "ﾞﾟ"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Question(s)
		if !utf8.ValidString(q) {
			t.Fatalf("Question(%q) = %q: invalid UTF-8", s, q)
		}
		if again := Question(q); again != q {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, q, again)
		}
	})
}
