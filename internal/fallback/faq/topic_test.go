package faq

import "testing"

func TestSharesTopic(t *testing.T) {
	tests := []struct {
		question, text string
		want           bool
	}{
		{"How do I cancel an order?", "You can cancel an order from My Orders until it ships.", true},
		{"How do I cancel an order?", "Hi, I'm MangaAssist! I can help with manga recommendations, new releases, shipping, returns and payment.", false},
		{"Is shipping free?", "Orders over ¥3,500 ship free.", true},
		{"注文をキャンセルしたい", "ご注文は発送前であれば「注文履歴」からキャンセルできます。", true},
		{"注文をキャンセルしたい", "こんにちは！MangaAssistです。作品のおすすめ、新刊情報、配送や返品、お支払い方法などについてお手伝いできます。", false},
		{"hello", "Hi, I'm MangaAssist!", true},
		{"ありがとう", "どういたしまして！", true},
	}
	for _, tt := range tests {
		if got := SharesTopic(tt.question, tt.text); got != tt.want {
			t.Errorf("SharesTopic(%q, %q) = %v, want %v", tt.question, tt.text, got, tt.want)
		}
	}
}
