package faq

import (
	"strings"
	"unicode"

	"github.com/fmgate/fmgate/internal/fallback/textfold"
)

// token is a term and the weight a query gives it: single kanji and
// bigrams ending in hiragana say less about the topic than a word or a
// kanji or katakana compound.
type token struct {
	term   string
	weight float64
}

const (
	kanjiWeight     = 0.3
	okuriganaWeight = 0.5 // kanji or katakana then hiragana: "届く", "料は"
	hiraganaWeight  = 0.3 // "いく", "はど": mostly grammar
)

// stopWords carry no topic. Question words are among them: "where" and
// "when" would otherwise pull every question towards tracking and hours;
// so is "manga", which every question in a manga store may use.
var stopWords = toSet("a an the and or but if of to in on at for from by with about as is are was were be been " +
	"being do does did done have has had i me my mine we us our you your it its this that these those what which " +
	"who whom how when where why can could would should will shall may might must there here please tell get got " +
	"just so than then too very not no yes hi hello thanks thank any some much many also up out into over more " +
	"most want like know need let make one manga")

// stopBigrams are hiragana pairs that are grammar (endings, particles,
// politeness), not topic.
var stopBigrams = toSet("です すか ます まし した ませ せん くだ ださ さい して てい いま すが でし しょ ょう うか " +
	"ある あり りま とは など この その あの どう なに には のは をし てく たい いで ので けま " +
	"いつ どこ どれ 教え えて")

func toSet(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

func isJapanese(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana) || r == 'ー' || r == '々'
}

// tokenize splits folded text into runs of word characters and of Japanese
// characters, each tokenised its own way.
func tokenize(s string) []token {
	var out []token
	rs := []rune(textfold.Fold(s))
	for i := 0; i < len(rs); {
		r := rs[i]
		j := i + 1
		switch {
		case isJapanese(r):
			for j < len(rs) && isJapanese(rs[j]) {
				j++
			}
			out = appendJapanese(out, rs[i:j])
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			for j < len(rs) && !isJapanese(rs[j]) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j]) || rs[j] == '\'') {
				j++
			}
			if w := word(string(rs[i:j])); w != "" {
				out = append(out, token{w, 1})
			}
		}
		i = j
	}
	return out
}

func word(w string) string {
	w, _, _ = strings.Cut(w, "'") // what's -> what, manga's -> manga
	if stopWords[w] {
		return ""
	}
	return stem(w)
}

// stem folds plurals and -ing/-ed and a final e, enough for "shipping",
// "ships" and "shipped" to meet "ship", "arriving" to meet "arrive".
func stem(w string) string {
	if len(w) <= 3 {
		return w
	}
	switch {
	case strings.HasSuffix(w, "ies") && len(w) > 4:
		w = w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"):
		w = w[:len(w)-2]
	case strings.HasSuffix(w, "ss"), strings.HasSuffix(w, "us"), strings.HasSuffix(w, "is"):
	case strings.HasSuffix(w, "s"):
		w = w[:len(w)-1]
	}
	for _, suf := range []string{"ing", "ed"} {
		if strings.HasSuffix(w, suf) && len(w)-len(suf) >= 3 {
			w = w[:len(w)-len(suf)]
			if n := len(w); w[n-1] == w[n-2] && !strings.ContainsRune("lsz", rune(w[n-1])) {
				w = w[:n-1] // shipp -> ship
			}
			break
		}
	}
	if len(w) > 4 && strings.HasSuffix(w, "e") {
		w = w[:len(w)-1]
	}
	return w
}

func appendJapanese(out []token, run []rune) []token {
	if len(run) == 1 {
		return append(out, token{string(run), 1})
	}
	for i := range run {
		if unicode.Is(unicode.Han, run[i]) {
			out = append(out, token{string(run[i]), kanjiWeight})
		}
		if i+1 == len(run) {
			break
		}
		bi := string(run[i : i+2])
		hira, nextHira := unicode.Is(unicode.Hiragana, run[i]), unicode.Is(unicode.Hiragana, run[i+1])
		if stopBigrams[bi] || hira && !nextHira {
			// A particle before a word ("の天", "を教") joins two topics.
			continue
		}
		w := 1.0
		switch {
		case hira:
			w = hiraganaWeight
		case nextHira:
			w = okuriganaWeight
		}
		out = append(out, token{bi, w})
	}
	return out
}
