package sim

import (
	"fmt"
	"strings"

	"github.com/fmgate/fmgate/internal/catalog"
)

// pick chooses the catalog item the question is about: among the items of
// the series the question names (or all, if it names none), the box set,
// pre-order or latest volume when it asks for one, else the best match.
func (q query) pick() catalog.Entry {
	items := q.found
	var named []catalog.Entry
	for _, e := range q.found {
		if (e.SeriesJA != "" && strings.Contains(q.lower, strings.ToLower(e.SeriesJA))) ||
			(e.Series != "" && strings.Contains(q.lower, strings.ToLower(e.Series))) || q.isMentioned(e) {
			named = append(named, e)
		}
	}
	if len(named) > 0 {
		items = named
	}
	want := func(ok func(catalog.Entry) bool) (catalog.Entry, bool) {
		for _, e := range items {
			if ok(e) {
				return e, true
			}
		}
		return catalog.Entry{}, false
	}
	switch {
	case containsAny(q.lower, []string{"セット", "全巻", "box set", "complete set"}):
		if e, ok := want(func(e catalog.Entry) bool { return e.Kind == "set" }); ok {
			return e
		}
	case containsAny(q.lower, []string{"予約", "次巻", "pre-order", "preorder", "upcoming", "next"}):
		if e, ok := want(func(e catalog.Entry) bool { return e.Kind == "preorder" }); ok {
			return e
		}
	case containsAny(q.lower, []string{"最新", "新刊", "latest", "newest", "new volume"}):
		if e, ok := want(func(e catalog.Entry) bool { return e.Latest }); ok {
			return e
		}
	}
	return items[0]
}

// isMentioned reports whether catalog item e belongs to the title the
// question is about.
func (q query) isMentioned(e catalog.Entry) bool {
	t := q.mentioned
	if t == nil {
		return false
	}
	series := strings.ToLower(e.Series + " " + e.SeriesJA + " " + e.TitleEN + " " + e.TitleJA)
	return strings.Contains(series, strings.ToLower(t.en)) || strings.Contains(series, strings.ToLower(t.ja)) || containsAny(series, t.aliases)
}

// foundMentioned reports whether the catalog context holds the title the
// question is about.
func (q query) foundMentioned() bool {
	for _, e := range q.found {
		if q.isMentioned(e) {
			return true
		}
	}
	return false
}

// titleWithoutStock answers a follow-up about the title discussed last
// ("how much is it?") when the catalog context holds nothing of it: what is
// known of the series, and where its price and stock are, never another
// series' figures.
func titleWithoutStock(q query) answerParts {
	t := q.mentioned
	if q.lang == japanese {
		return answerParts{
			opener: fmt.Sprintf("『%s』は%sの作品で、%sです。", t.ja, t.genreJA, t.volumesJA()),
			body:   []string{"各巻の価格と在庫は、商品ページで最新の情報をご確認いただけます。"},
			closer: "巻数を教えていただければ、その巻についてお調べします。",
		}
	}
	return answerParts{
		opener: fmt.Sprintf("%s is a %s series, %s.", t.en, t.genreEN, t.volumesEN()),
		body:   []string{"Each volume's price and stock are on its product page, always up to date."},
		closer: "Tell me which volume you mean and I will look it up.",
	}
}

// answerFromCatalog names the item's volume, price and stock, quoting the
// catalog context the gateway retrieved.
func answerFromCatalog(q query) answerParts {
	e := q.pick()
	var others []catalog.Entry
	for _, o := range q.found {
		if o.ID != e.ID && len(others) < 2 {
			others = append(others, o)
		}
	}
	if q.lang == japanese {
		opener := fmt.Sprintf("『%s』のご案内です。", e.TitleJA)
		if e.Latest {
			opener = fmt.Sprintf("『%s』の最新刊は%d巻です。", e.SeriesJA, e.Volume)
		}
		body := []string{fmt.Sprintf("価格は%d円（税込）で、現在%sです。", e.PriceJPY, catalog.StockText(e.Stock, "ja"))}
		var extras []string
		for _, o := range others {
			extras = append(extras, fmt.Sprintf("・『%s』%d円（%s）", o.TitleJA, o.PriceJPY, catalog.StockText(o.Stock, "ja")))
		}
		return answerParts{opener: opener, body: body, extras: extras, closer: "ご注文やお取り置きもお手伝いできますので、お気軽にお申し付けください。"}
	}
	opener := fmt.Sprintf("Here is %s.", e.TitleEN)
	if e.Latest {
		opener = fmt.Sprintf("The latest %s volume is Vol. %d.", e.Series, e.Volume)
	}
	body := []string{fmt.Sprintf("It costs ¥%d (tax included) and is currently %s.", e.PriceJPY, catalog.StockText(e.Stock, "en"))}
	var extras []string
	for _, o := range others {
		extras = append(extras, fmt.Sprintf("- %s: ¥%d (%s)", o.TitleEN, o.PriceJPY, catalog.StockText(o.Stock, "en")))
	}
	return answerParts{opener: opener, body: body, extras: extras, closer: "I can help you order it or set one aside if you like."}
}

// cannotCheckStock is the honest answer to a stock question without catalog
// context: the model must not invent volumes or prices.
func cannotCheckStock(q query) answerParts {
	if q.lang == japanese {
		return answerParts{
			opener: "申し訳ありません。ただいま在庫や最新刊の情報を確認できません。",
			body:   []string{"少し時間をおいてもう一度お尋ねいただくか、商品ページで最新の在庫状況をご確認ください。"},
			closer: "ほかにご不明な点があれば、お気軽にお聞きください。",
		}
	}
	return answerParts{
		opener: "Sorry, I can't check stock or the latest volumes right now.",
		body:   []string{"Please ask again in a moment, or check the product page for current availability."},
		closer: "Let me know if there is anything else I can help with!",
	}
}
