package fallback

import "github.com/fmgate/fmgate/internal/language"

// Supported message languages; anything else is answered in English.
const (
	LangJA = language.JA
	LangEN = language.EN
)

// Lang is the language a fallback answer to text is given in, LangJA or
// LangEN: the language text is written in, or when that is unclear,
// locale's ("ja-JP", "en_US", "JA"). It is the same decision as the
// pipeline's and the models' (language.Of).
func Lang(locale, text string) string {
	return language.Of(text, locale)
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
