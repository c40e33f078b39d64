package fallback

import (
	"strings"
	"unicode"
)

// Supported message languages; anything else is answered in English.
const (
	LangJA = "ja"
	LangEN = "en"
)

// Lang reduces a locale ("ja-JP", "en_US", "JA") to its language. An empty
// locale is guessed from text: Japanese if it holds kana or kanji, else
// English.
func Lang(locale, text string) string {
	l := strings.ToLower(locale)
	if i := strings.IndexAny(l, "-_"); i >= 0 {
		l = l[:i]
	}
	if l != "" {
		return l
	}
	for _, r := range text {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return LangJA
		}
	}
	return LangEN
}

// supportHint points every graceful message at a person.
const (
	supportHintEN = " If you need help from a person, contact our support team at support@mangaassist.jp."
	supportHintJA = "お急ぎの場合は、サポートチーム（support@mangaassist.jp）までお問い合わせください。"
)

var gracefulEN = [...]string{
	"I'm having a bit of trouble right now, but I'm still here! Could you try asking again in a moment? " +
		"In the meantime, you can browse our manga catalog directly." + supportHintEN,
	"I apologize for the wait! Our recommendation engine is taking a short break. " +
		"You can check out our trending manga section while I get back up to speed." + supportHintEN,
	"I'm experiencing some temporary difficulties. For immediate help, you can reach our support team " +
		"at support@mangaassist.jp or browse our FAQ section.",
}

var gracefulJA = [...]string{
	"ただいま少し問題が発生していますが、引き続きお手伝いします！少し時間をおいて、もう一度お尋ねいただけますか？" +
		"その間、漫画カタログを直接ご覧いただけます。" + supportHintJA,
	"お待たせして申し訳ありません！おすすめ機能はただいま少しお休みしています。" +
		"復旧するまでの間、話題の漫画コーナーをご覧ください。" + supportHintJA,
	"一時的な問題が発生しています。すぐにサポートが必要な場合は、サポートチーム（support@mangaassist.jp）に" +
		"ご連絡いただくか、よくある質問（FAQ）をご覧ください。",
}

// Graceful returns one of the three graceful-degradation messages in the
// locale's language (Japanese or English), chosen by seed so that the same
// question gets the same message. Every message names the support address.
func Graceful(locale string, seed uint64) string {
	msgs := gracefulEN
	if Lang(locale, "") == LangJA {
		msgs = gracefulJA
	}
	return msgs[seed%uint64(len(msgs))]
}

// Redirect returns the message for a request a guardrail blocked, steering
// the user to what the assistant can do.
func Redirect(locale string) string {
	if Lang(locale, "") == LangJA {
		return "そのリクエストにはお応えできません。漫画の検索、注文確認、またはおすすめをお試しください。"
	}
	return "I cannot help with that request. Try searching manga, checking orders, or asking for recommendations."
}

// Busy returns the message for a turn throttled while the queue is full.
func Busy(locale string) string {
	if Lang(locale, "") == LangJA {
		return "現在アクセスが集中しています。ご質問は受け付けましたので、まもなく回答いたします。"
	}
	return "We're experiencing high demand. Your question has been queued and we'll respond shortly."
}
