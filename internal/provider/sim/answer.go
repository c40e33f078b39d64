package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/catalog"
	lang "github.com/fmgate/fmgate/internal/language"
	"github.com/fmgate/fmgate/internal/provider"
)

// Answers are kept between these many output tokens, so usage looks like a
// store assistant's: long enough to be useful, short enough for chat. At the
// default Sonnet pace (600 ms to the first token, then 60 tokens a second)
// 130 tokens are whole within 3 s, so a client that takes its answer in one
// JSON body has a useful answer in the time the store promises.
const (
	minAnswerTokens = 60
	maxAnswerTokens = 130
)

type language int

const (
	english language = iota
	japanese
)

// detectLanguage is the turn's language decision (language.Of): the
// simulated model answers in the language the message is written in.
func detectLanguage(text, locale string) language {
	if lang.Of(text, locale) == lang.JA {
		return japanese
	}
	return english
}

// title is one series of the built-in catalogue. Volume counts are the
// store's simulated stock, not a bibliography.
type title struct {
	ja, en           string
	aliases          []string // lower-case substrings that name it
	genreJA, genreEN string
	volumes          int
	complete         bool
	pitchJA, pitchEN string
}

var catalogue = []title{
	{
		ja: "ワンピース", en: "One Piece", aliases: []string{"one piece", "onepiece", "ワンピース", "ルフィ", "luffy"},
		genreJA: "少年・冒険", genreEN: "shonen adventure", volumes: 110,
		pitchJA: "海賊王を目指すルフィと仲間たちの壮大な冒険です。",
		pitchEN: "Luffy and his crew sail the Grand Line in search of the legendary treasure.",
	},
	{
		ja: "呪術廻戦", en: "Jujutsu Kaisen", aliases: []string{"jujutsu", "jjk", "呪術"},
		genreJA: "ダークファンタジー・バトル", genreEN: "dark fantasy action", volumes: 30, complete: true,
		pitchJA: "呪いと戦う呪術師たちを描いた、迫力のあるバトル作品です。",
		pitchEN: "Yuji Itadori joins a school of sorcerers who fight deadly curses.",
	},
	{
		ja: "SPY×FAMILY", en: "SPY×FAMILY", aliases: []string{"spy×family", "spy x family", "spy family", "spyxfamily", "スパイファミリー"},
		genreJA: "ホームコメディ・アクション", genreEN: "action comedy", volumes: 15,
		pitchJA: "スパイ、殺し屋、超能力者が正体を隠して家族になる、笑って温まる物語です。",
		pitchEN: "A spy, an assassin and a telepathic girl form a fake family, each hiding a secret.",
	},
	{
		ja: "チェンソーマン", en: "Chainsaw Man", aliases: []string{"chainsaw", "チェンソー", "デンジ"},
		genreJA: "ダークアクション", genreEN: "dark action", volumes: 20,
		pitchJA: "悪魔の力を宿したデンジが暴れまわる、勢いのあるダークアクションです。",
		pitchEN: "Denji, part devil and part chainsaw, hunts devils in a wild and darkly funny story.",
	},
	{
		ja: "鬼滅の刃", en: "Demon Slayer", aliases: []string{"demon slayer", "kimetsu", "鬼滅", "炭治郎"},
		genreJA: "時代劇アクション", genreEN: "historical action", volumes: 23, complete: true,
		pitchJA: "家族を奪われた炭治郎が、鬼になった妹を人間に戻すために戦う物語です。",
		pitchEN: "Tanjiro fights demons to turn his sister, now a demon herself, back into a human.",
	},
	{
		ja: "葬送のフリーレン", en: "Frieren: Beyond Journey's End", aliases: []string{"frieren", "フリーレン", "葬送"},
		genreJA: "ファンタジー", genreEN: "fantasy", volumes: 14,
		pitchJA: "魔王を倒した後のエルフの魔法使いが、人を知るために旅をする静かなファンタジーです。",
		pitchEN: "An elf mage retraces her old party's journey after the hero's quest is over.",
	},
	{
		ja: "薬屋のひとりごと", en: "The Apothecary Diaries", aliases: []string{"apothecary", "薬屋", "猫猫", "maomao"},
		genreJA: "宮廷ミステリー", genreEN: "court mystery", volumes: 13,
		pitchJA: "後宮で働く薬師の猫猫が、毒や病の知識で事件を解き明かすミステリーです。",
		pitchEN: "Maomao, a palace apothecary, solves court mysteries with her knowledge of poisons.",
	},
	{
		ja: "進撃の巨人", en: "Attack on Titan", aliases: []string{"attack on titan", "shingeki", "進撃", "巨人"},
		genreJA: "ダークファンタジー", genreEN: "dark fantasy", volumes: 34, complete: true,
		pitchJA: "壁の外の巨人と人類の戦いを描き、世界の謎に迫る大作です。",
		pitchEN: "Humanity fights the Titans from behind its walls while the world's secrets unfold.",
	},
}

func (t title) volumesJA() string {
	if t.complete {
		return fmt.Sprintf("全%d巻完結", t.volumes)
	}
	return fmt.Sprintf("既刊%d巻", t.volumes)
}

func (t title) volumesEN() string {
	if t.complete {
		return fmt.Sprintf("complete in %d volumes", t.volumes)
	}
	return fmt.Sprintf("%d volumes so far", t.volumes)
}

type topic int

const (
	topicGeneral topic = iota
	topicRecommend
	topicNewReleases
	topicShipping
	topicReturns
	topicPayment
	topicTracking
	topicMembership
	topicTitle
	topicCancel
	topicComplete
)

// topicKeywords are matched as lower-case substrings in either language, so
// "PayPay使えますか" and "can I pay with PayPay" land on the same topic. The
// topic with most hits wins; ties go to the earlier entry.
var topicKeywords = []struct {
	topic    topic
	keywords []string
}{
	{topicCancel, []string{"cancel", "キャンセル", "取り消", "取消"}},
	{topicComplete, []string{"complete", "completed", "finished", "ended", "完結", "終わって", "最終巻"}},
	{topicReturns, []string{"return", "refund", "exchange", "damaged", "返品", "返金", "交換", "破損", "落丁"}},
	{topicTracking, []string{"track", "where is my order", "order status", "my order", "hasn't arrived", "追跡", "注文状況", "届かない", "注文した", "注文番号", "まだ届"}},
	{topicShipping, []string{"shipping", "ships", "shipped", "ship to", "deliver", "arrive", "送料", "配送", "発送", "届く", "お届け", "配達"}},
	{topicPayment, []string{"pay", "credit", "card", "jcb", "visa", "mastercard", "konbini", "convenience store", "支払", "決済", "カード", "コンビニ", "ペイペイ"}},
	{topicMembership, []string{"member", "point", "loyalty", "sign up", "会員", "ポイント", "メンバー", "登録"}},
	{topicNewReleases, []string{"new release", "latest", "upcoming", "coming out", "release date", "new volume", "pre-order", "preorder", "新刊", "最新刊", "発売", "新作", "予約", "最新巻"}},
	{topicRecommend, []string{"recommend", "suggest", "popular", "trending", "what should i read", "should i read", "read next", "which manga", "any manga", "good for", "similar", "good manga", "best", "おすすめ", "オススメ", "お勧め", "お薦め", "人気", "面白い", "似た", "ランキング", "読みたい", "読むべき", "次に読む"}},
}

// genreHints map words a reader uses to the catalogue's genres.
var genreHints = []struct {
	words []string
	genre string // substring of genreEN
}{
	{[]string{"fantasy", "ファンタジー"}, "fantasy"},
	{[]string{"comedy", "funny", "コメディ", "笑え", "ギャグ"}, "comedy"},
	{[]string{"mystery", "ミステリー", "推理", "謎"}, "mystery"},
	{[]string{"action", "battle", "fight", "アクション", "バトル"}, "action"},
	{[]string{"adventure", "冒険"}, "adventure"},
}

// query is what the simulator understood of the last user message.
type query struct {
	lang      language
	topic     topic
	mentioned *title // first catalogue title named, nil if none
	genre     string
	// stock is set when the question asks for a title's latest volume,
	// price or stock, which only the store's catalog can answer.
	stock bool
	// found are the catalog items the gateway's retrieval step put in the
	// system prompt, best first; nil without catalog context.
	found []catalog.Entry
	lower string
	// listed are the titles the previous answer named, for a follow-up
	// about them ("which of those are complete?").
	listed []title
	// earlier is set when mentioned came from the conversation, not from
	// the last message ("how much is it?" after a title was discussed).
	earlier bool
}

// referring words point back into the conversation.
var referring = []string{"it", "its", "this one", "that one", "those", "these", "them", "the series",
	"その", "それ", "この", "あの", "これ", "そちら", "こちら"}

// policyTopics are answered from the store's policies, never from the
// catalog, whatever words they share with a stock question ("送料はいくら?").
var policyTopics = map[topic]bool{topicShipping: true, topicReturns: true, topicPayment: true,
	topicTracking: true, topicMembership: true, topicCancel: true}

// stockWords ask what only the store's catalog knows.
var stockWords = []string{"最新刊", "最新巻", "新刊", "在庫", "値段", "価格", "いくら", "セット", "予約",
	"latest", "newest", "in stock", "price", "how much", "box set", "pre-order", "preorder", "volume"}

func understand(req *provider.Request) query {
	text := lastUserMessage(req)
	lower := strings.ToLower(text)
	q := query{lang: detectLanguage(text, req.Locale), topic: topicGeneral}
	best := 0
	for _, tk := range topicKeywords {
		hits := 0
		for _, kw := range tk.keywords {
			if strings.Contains(lower, kw) {
				hits++
			}
		}
		if hits > best {
			best, q.topic = hits, tk.topic
		}
	}
	for i := range catalogue {
		if containsAny(lower, catalogue[i].aliases) {
			q.mentioned = &catalogue[i]
			break
		}
	}
	for _, g := range genreHints {
		if containsAny(lower, g.words) {
			q.genre = g.genre
			break
		}
	}
	q.listed = titlesIn(lastMessage(req, provider.RoleAssistant))
	if q.mentioned == nil && (q.topic == topicGeneral || containsAny(lower, stockWords)) && refersBack(lower) {
		// A follow-up about the title discussed last.
		for i := len(req.Messages) - 2; i >= 0 && q.mentioned == nil; i-- {
			if ts := titlesIn(req.Messages[i].Content); len(ts) > 0 {
				q.mentioned, q.earlier = &ts[0], true
			}
		}
	}
	if q.topic == topicGeneral && q.mentioned != nil {
		q.topic = topicTitle
	}
	if q.topic == topicGeneral && q.genre != "" {
		q.topic = topicRecommend // "a good fantasy series?"
	}
	q.lower = lower
	q.found = catalog.ParseContext(req.System)
	q.stock = !policyTopics[q.topic] && q.topic != topicComplete && containsAny(lower, stockWords) && (q.mentioned != nil || len(q.found) > 0)
	return q
}

// feeWords ask what something costs.
var feeWords = []string{"送料", "いくら", "料金", "how much", "cost", "fee", "price"}

// refersBack reports whether a message points back into the conversation:
// a referring word, or a question too short to stand on its own.
func refersBack(lower string) bool {
	words := " " + strings.Map(func(r rune) rune {
		if unicode.IsPunct(r) {
			return ' '
		}
		return r
	}, lower) + " "
	for _, w := range referring {
		if strings.Contains(words, " "+w+" ") || (w[0] >= utf8.RuneSelf && strings.Contains(lower, w)) {
			return true
		}
	}
	return len([]rune(strings.TrimSpace(lower))) <= 12
}

// titlesIn returns the catalogue titles text names, in catalogue order.
func titlesIn(text string) []title {
	lower := strings.ToLower(text)
	var ts []title
	for _, t := range catalogue {
		if strings.Contains(lower, strings.ToLower(t.ja)) || strings.Contains(lower, strings.ToLower(t.en)) || containsAny(lower, t.aliases) {
			ts = append(ts, t)
		}
	}
	return ts
}

func lastUserMessage(req *provider.Request) string { return lastMessage(req, provider.RoleUser) }

// lastMessage is the content of req's last message from role, "" if none.
func lastMessage(req *provider.Request, role provider.Role) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == role {
			return req.Messages[i].Content
		}
	}
	return ""
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// answerParts is an answer before it is fitted to length: the opener and
// body always appear, extras are added until the answer is long enough, and
// the closer is kept when it fits.
type answerParts struct {
	opener string
	body   []string
	extras []string
	closer string
}

// composeAnswer writes a store-assistant reply to req's last user message, in
// its language, between minAnswerTokens and maxAnswerTokens tokens. count
// returns the tokens of one line.
func composeAnswer(req *provider.Request, rng *rand.Rand, count func(string) int) string {
	if verdict, ok := judgeReply(req); ok {
		return verdict
	}
	if reply, ok := answerFromResults(req); ok {
		return reply
	}
	q := understand(req)
	var p answerParts
	switch {
	case q.stock && q.earlier && !q.foundMentioned():
		p = titleWithoutStock(q)
	case q.stock && len(q.found) > 0:
		p = answerFromCatalog(q)
	case q.stock:
		p = cannotCheckStock(q)
	case q.lang == japanese:
		p = answerJA(q, rng)
	default:
		p = answerEN(q, rng)
	}
	full := fit(p, count)
	if prefill := assistantPrefill(req); prefill != "" {
		return continueFrom(full, prefill, q.lang)
	}
	return full
}

// assistantPrefill is the text of a trailing assistant message: the start of
// an answer the model is asked to continue (a cut-off answer being finished
// by another model).
func assistantPrefill(req *provider.Request) string {
	if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == provider.RoleAssistant {
		return req.Messages[n-1].Content
	}
	return ""
}

// continueFrom returns the rest of full after as much text as prefill holds,
// so the continuation reads on from where the cut answer stopped; when full
// is no longer than prefill, a closing line.
func continueFrom(full, prefill string, lang language) string {
	if rest, ok := strings.CutPrefix(full, prefill); ok && rest != "" {
		return rest
	}
	runes, n := []rune(full), len([]rune(prefill))
	if n < len(runes) {
		return string(runes[n:])
	}
	if lang == japanese {
		return "\nほかにご不明な点があれば、お気軽にお聞きください。"
	}
	return "\nLet me know if there is anything else I can help with!"
}

// fit joins parts line by line, adding extras up to minAnswerTokens and
// dropping trailing lines above maxAnswerTokens. Counting each line apart is
// within a token or two of counting the whole, which is all "roughly" needs.
func fit(p answerParts, count func(string) int) string {
	lines := append([]string{p.opener}, p.body...)
	total := 0
	for _, l := range lines {
		total += count(l) + 1
	}
	closer := count(p.closer) + 1
	for _, e := range p.extras {
		if total+closer >= minAnswerTokens {
			break
		}
		lines = append(lines, e)
		total += count(e) + 1
	}
	for total > maxAnswerTokens && len(lines) > 1 {
		total -= count(lines[len(lines)-1]) + 1
		lines = lines[:len(lines)-1]
	}
	if p.closer != "" && total+closer <= maxAnswerTokens {
		lines = append(lines, p.closer)
	}
	return strings.Join(lines, "\n")
}

// pickTitles returns n distinct titles, preferring q's genre and leaving out
// the title the reader already named.
func pickTitles(q query, rng *rand.Rand, n int) []title {
	var preferred, others []title
	for _, t := range catalogue {
		if q.mentioned != nil && t.en == q.mentioned.en {
			continue
		}
		if q.genre != "" && strings.Contains(t.genreEN, q.genre) {
			preferred = append(preferred, t)
		} else {
			others = append(others, t)
		}
	}
	rng.Shuffle(len(preferred), func(i, j int) { preferred[i], preferred[j] = preferred[j], preferred[i] })
	rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	all := append(preferred, others...)
	return all[:min(n, len(all))]
}

func pickOngoing(rng *rand.Rand, n int) []title {
	var ongoing []title
	for _, t := range catalogue {
		if !t.complete {
			ongoing = append(ongoing, t)
		}
	}
	rng.Shuffle(len(ongoing), func(i, j int) { ongoing[i], ongoing[j] = ongoing[j], ongoing[i] })
	return ongoing[:min(n, len(ongoing))]
}

// completeAnswer says which of the titles the last answer named are
// complete (of the whole catalogue when it named none), in the question's
// language, and suggests complete ones when none of them is.
func completeAnswer(q query) answerParts {
	w := completeWords[q.lang]
	ts := q.listed
	if len(ts) == 0 {
		ts = catalogue
	}
	done, ongoing := splitComplete(ts)
	opener := w.all
	if len(q.listed) > 0 {
		opener = w.listed
	}
	var body, extras []string
	for _, t := range done {
		body = append(body, w.item(t))
	}
	if len(done) == 0 {
		opener = w.none
		for _, t := range splitDone(catalogue) {
			body = append(body, w.instead(t))
		}
	}
	for _, t := range ongoing {
		extras = append(extras, w.running(t))
	}
	return answerParts{opener: opener, body: body, extras: extras, closer: w.closer}
}

// completeText is completeAnswer's wording in one language.
type completeText struct {
	all, listed, none, closer string
	item, instead, running    func(title) string
}

var completeWords = map[language]completeText{
	japanese: {
		all: "完結している作品はこちらです。", listed: "ご紹介した中で完結している作品はこちらです。",
		none: "ご紹介した作品は、どれもまだ連載中です。", closer: "全巻セットもご用意していますので、お気軽にお尋ねください。",
		item: func(t title) string { return fmt.Sprintf("・『%s』（%s）：%s", t.ja, t.volumesJA(), t.pitchJA) },
		instead: func(t title) string {
			return fmt.Sprintf("完結作品なら『%s』（%s）がおすすめです。", t.ja, t.volumesJA())
		},
		running: func(t title) string { return fmt.Sprintf("『%s』は連載中で、%sです。", t.ja, t.volumesJA()) },
	},
	english: {
		all: "These series are complete:", listed: "Of the series I mentioned, these are complete:",
		none: "The series I mentioned are all still running.", closer: "Complete box sets are available too; just ask.",
		item:    func(t title) string { return fmt.Sprintf("- %s (%s): %s", t.en, t.volumesEN(), t.pitchEN) },
		instead: func(t title) string { return fmt.Sprintf("For a finished story, try %s (%s).", t.en, t.volumesEN()) },
		running: func(t title) string { return fmt.Sprintf("%s is still running, %s.", t.en, t.volumesEN()) },
	},
}

// splitComplete parts titles into the complete and the running ones.
func splitComplete(ts []title) (done, ongoing []title) {
	for _, t := range ts {
		if t.complete {
			done = append(done, t)
		} else {
			ongoing = append(ongoing, t)
		}
	}
	return done, ongoing
}

func splitDone(ts []title) []title {
	done, _ := splitComplete(ts)
	return done
}

func oneOf(rng *rand.Rand, s ...string) string { return s[rng.IntN(len(s))] }

func answerJA(q query, rng *rand.Rand) answerParts {
	helpJA := []string{
		"作品名やお好きなジャンルを教えていただければ、ぴったりの一冊をお探しします。",
		"ほかにもご不明な点があれば、お気軽にお聞きください。",
	}
	switch q.topic {
	case topicRecommend:
		opener := oneOf(rng, "おすすめの作品をご紹介しますね！", "いま人気の作品からおすすめを選びました。", "お探しの方にぴったりの作品をご提案します。")
		if q.mentioned != nil {
			opener = fmt.Sprintf("『%s』がお好きなら、こちらの作品もきっと楽しめると思います。", q.mentioned.ja)
		}
		var body []string
		for _, t := range pickTitles(q, rng, 3) {
			body = append(body, fmt.Sprintf("・『%s』（%s、%s）：%s", t.ja, t.genreJA, t.volumesJA(), t.pitchJA))
		}
		return answerParts{
			opener: opener,
			body:   body,
			extras: []string{"どの作品も1巻から在庫がございますので、まずは1巻から試してみてください。"},
			closer: oneOf(rng, "気になる作品があれば、まとめ買いセットもご案内できます。", "ほかのジャンルのご希望もお気軽にどうぞ。"),
		}
	case topicNewReleases:
		var body []string
		for _, t := range pickOngoing(rng, 2) {
			body = append(body, fmt.Sprintf("・『%s』最新%d巻が発売中です。%s", t.ja, t.volumes, t.pitchJA))
		}
		return answerParts{
			opener: oneOf(rng, "新刊情報をお知らせします。", "今月注目の新刊はこちらです。"),
			body:   body,
			extras: []string{"予約注文をいただくと、発売日にお届けできるよう手配いたします。", "会員の方は新刊の先行予約もご利用いただけます。"},
			closer: helpJA[1],
		}
	case topicShipping:
		body := []string{"国内配送は、通常ご注文から3〜5営業日でお届けします。", "海外発送は一部の国に対応しており、7〜14営業日ほどかかります。"}
		if containsAny(q.lower, feeWords) {
			body = append([]string{"送料はお届け先とご注文内容によって変わり、ご注文確認画面で確定前にご確認いただけます。"}, body...)
		}
		return answerParts{
			opener: oneOf(rng, "配送についてご案内します。", "お届けまでの目安をご説明しますね。"),
			body:   body,
			extras: []string{"発送が完了すると、追跡番号をメールでお知らせします。", "予約商品は発売日に合わせて発送いたします。"},
			closer: helpJA[1],
		}
	case topicReturns:
		return answerParts{
			opener: oneOf(rng, "返品・交換についてご案内します。", "返品のお手続きについてご説明しますね。"),
			body:   []string{"未開封の商品は、購入から30日以内であれば返品・全額返金が可能です。", "開封済みの商品でも、破損や落丁があった場合は交換いたします。"},
			extras: []string{"お手続きはマイページの「注文履歴」から行えます。", "返金はお支払い方法に応じて、手続き完了後数日以内に行われます。"},
			closer: helpJA[1],
		}
	case topicPayment:
		return answerParts{
			opener: oneOf(rng, "お支払い方法についてご案内します。", "ご利用いただけるお支払い方法はこちらです。"),
			body:   []string{"クレジットカード（Visa、Mastercard、JCB）、PayPay、LINE Pay、コンビニ払いがご利用いただけます。"},
			extras: []string{"コンビニ払いの場合は、お支払いの確認後に発送いたします。", "お支払い方法はご注文確定前であれば変更できます。"},
			closer: helpJA[1],
		}
	case topicTracking:
		return answerParts{
			opener: oneOf(rng, "ご注文状況の確認方法をご案内します。", "ご注文の配送状況についてですね。"),
			body:   []string{"マイページの「注文履歴」から、ご注文の状況をご確認いただけます。", "発送済みの場合は、メールでお送りした追跡番号で現在の配送状況を確認できます。"},
			extras: []string{"注文番号を教えていただければ、こちらでも状況をお調べします。", "通常、国内配送は3〜5営業日でお届けします。"},
			closer: helpJA[1],
		}
	case topicMembership:
		return answerParts{
			opener: oneOf(rng, "会員プログラムについてご案内します。", "会員登録は無料です！"),
			body:   []string{"ご購入のたびにポイントが貯まり、次回のお買い物で1ポイント1円としてご利用いただけます。", "会員の方は新刊の先行予約や会員限定の割引もご利用いただけます。"},
			extras: []string{"登録はトップページの「会員登録」から1分ほどで完了します。"},
			closer: helpJA[1],
		}
	case topicCancel:
		return answerParts{
			opener: oneOf(rng, "ご注文のキャンセルについてご案内します。", "キャンセルのお手続きをご説明しますね。"),
			body:   []string{"発送前のご注文は、マイページの「注文履歴」からキャンセルでき、代金は全額返金されます。", "発送後のご注文はキャンセルできませんが、未開封であれば30日以内に返品いただけます。"},
			extras: []string{"予約商品も、発送前であれば同じ手順でキャンセルできます。", "返金はお支払い方法に応じて、手続き完了後数日以内に行われます。"},
			closer: helpJA[1],
		}
	case topicComplete:
		return completeAnswer(q)
	case topicTitle:
		t := q.mentioned
		similar := pickTitles(q, rng, 1)
		body := []string{fmt.Sprintf("『%s』は%sの作品で、%sです。%s", t.ja, t.genreJA, t.volumesJA(), t.pitchJA)}
		if len(similar) > 0 {
			body = append(body, fmt.Sprintf("似た雰囲気の作品なら『%s』もおすすめです。", similar[0].ja))
		}
		return answerParts{
			opener: oneOf(rng, fmt.Sprintf("『%s』についてご案内します。", t.ja), "お問い合わせの作品についてご紹介しますね。"),
			body:   body,
			extras: []string{"1巻から最新刊までのまとめ買いセットもございます。", "紙の単行本と電子版のどちらもお取り扱いしています。"},
			closer: helpJA[1],
		}
	}
	return answerParts{
		opener: oneOf(rng, "こんにちは！MangaAssistです。", "MangaAssistです。ご質問ありがとうございます。"),
		body:   []string{"作品のおすすめ、新刊情報、配送や返品、お支払い方法などについてお手伝いできます。"},
		extras: []string{helpJA[0], "いまは『ワンピース』や『葬送のフリーレン』が特に人気です。"},
		closer: helpJA[1],
	}
}

func answerEN(q query, rng *rand.Rand) answerParts {
	help := "Let me know if there is anything else I can help with!"
	switch q.topic {
	case topicRecommend:
		opener := oneOf(rng, "Here are a few series our readers love right now:", "Happy to help you find your next read! Some popular picks:", "Great question! Here is what I would recommend:")
		if q.mentioned != nil {
			opener = fmt.Sprintf("If you enjoy %s, you will probably like these too:", q.mentioned.en)
		}
		var body []string
		for _, t := range pickTitles(q, rng, 3) {
			body = append(body, fmt.Sprintf("- %s (%s, %s): %s", t.en, t.genreEN, t.volumesEN(), t.pitchEN))
		}
		return answerParts{
			opener: opener,
			body:   body,
			extras: []string{"All of them are in stock from volume 1, so it is easy to give one a try."},
			closer: oneOf(rng, "If one catches your eye, I can point you to a box set.", "Tell me a genre you like and I can narrow it down."),
		}
	case topicNewReleases:
		var body []string
		for _, t := range pickOngoing(rng, 2) {
			body = append(body, fmt.Sprintf("- %s volume %d is out now. %s", t.en, t.volumes, t.pitchEN))
		}
		return answerParts{
			opener: oneOf(rng, "Here are this month's new releases:", "Some new volumes just arrived:"),
			body:   body,
			extras: []string{"Pre-order upcoming volumes and we ship them to arrive on release day.", "Members get early access to pre-orders of new releases."},
			closer: help,
		}
	case topicShipping:
		body := []string{"Standard shipping takes 3-5 business days within Japan.", "International shipping is available to select countries and typically takes 7-14 business days."}
		if containsAny(q.lower, feeWords) {
			body = append([]string{"The shipping fee depends on where the order goes and what it holds; checkout shows it before you confirm."}, body...)
		}
		return answerParts{
			opener: oneOf(rng, "Here is how shipping works:", "Happy to explain our delivery times."),
			body:   body,
			extras: []string{"Once your order ships, we e-mail you a tracking number.", "Pre-ordered volumes ship in time for their release date."},
			closer: help,
		}
	case topicReturns:
		return answerParts{
			opener: oneOf(rng, "Here is our return policy:", "Sorry to hear something is not right with your order."),
			body:   []string{"You can return unopened manga within 30 days of purchase for a full refund.", "Opened items can be exchanged if they arrived damaged or with missing pages."},
			extras: []string{"Start a return from My Orders in your account.", "Refunds go back to your original payment method within a few days."},
			closer: help,
		}
	case topicPayment:
		return answerParts{
			opener: oneOf(rng, "Here are the payment methods we accept:", "You can pay in several ways:"),
			body:   []string{"Credit cards (Visa, Mastercard, JCB), PayPay, LINE Pay, and convenience store (konbini) payment."},
			extras: []string{"With konbini payment, your order ships once the payment is confirmed.", "You can change the payment method any time before the order is confirmed."},
			closer: help,
		}
	case topicTracking:
		return answerParts{
			opener: oneOf(rng, "Here is how to check on your order:", "Let me help you track your order."),
			body:   []string{"Open My Orders in your account to see the status of every order.", "Once it has shipped, the tracking number in your confirmation e-mail shows where the parcel is."},
			extras: []string{"If you share your order number, I can look it up for you.", "Orders within Japan usually arrive in 3-5 business days."},
			closer: help,
		}
	case topicMembership:
		return answerParts{
			opener: oneOf(rng, "Membership is free to join!", "Here is how our membership program works:"),
			body:   []string{"Members earn points on every purchase and can spend them on the next order, one point per yen.", "You also get early access to new releases and member-only discounts."},
			extras: []string{"Sign up from the top page; it takes about a minute."},
			closer: help,
		}
	case topicCancel:
		return answerParts{
			opener: oneOf(rng, "Here is how to cancel an order:", "Happy to help you cancel."),
			body:   []string{"An order that has not shipped yet can be cancelled from My Orders in your account, with a full refund.", "Once it has shipped it can no longer be cancelled, but you can return it unopened within 30 days."},
			extras: []string{"Pre-orders can be cancelled the same way any time before they ship.", "Refunds go back to your original payment method within a few days."},
			closer: help,
		}
	case topicComplete:
		return completeAnswer(q)
	case topicTitle:
		t := q.mentioned
		body := []string{fmt.Sprintf("%s is a %s series, %s. %s", t.en, t.genreEN, t.volumesEN(), t.pitchEN)}
		if similar := pickTitles(q, rng, 1); len(similar) > 0 {
			body = append(body, fmt.Sprintf("If you like it, %s is a good next read.", similar[0].en))
		}
		return answerParts{
			opener: oneOf(rng, "Here is what we have on "+t.en+":", "Good choice!"),
			body:   body,
			extras: []string{"We carry box sets from volume 1 to the latest.", "Both print volumes and e-books are available."},
			closer: help,
		}
	}
	return answerParts{
		opener: oneOf(rng, "Hi, I'm MangaAssist!", "Thanks for your question! This is MangaAssist."),
		body:   []string{"I can help with manga recommendations, new releases, shipping, returns and payment."},
		extras: []string{"Tell me a title or a genre you like and I will find your next read.", "One Piece and Frieren are especially popular right now."},
		closer: help,
	}
}
