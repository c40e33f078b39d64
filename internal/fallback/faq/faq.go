// Package faq answers common MangaAssist questions from a static, editable
// list: the fallback tier served when no model and no cached answer is
// available. Questions are matched with BM25 over a tokenisation that works
// for English (words, stop words dropped, plurals and -ing/-ed folded) and
// Japanese (character bigrams, plus single kanji at a lower weight), so one
// index serves both languages; the answer follows the asker's locale.
package faq

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

//go:embed faq.yaml
var defaultYAML []byte

// DefaultYAML returns the embedded MangaAssist FAQ, a starting point for a
// user's own file.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Entry is one FAQ answer with the examples it is matched by. Maps are keyed
// by locale ("en", "ja").
type Entry struct {
	ID        string              `yaml:"id"`
	Answer    map[string]string   `yaml:"answer"`
	Questions map[string][]string `yaml:"questions"`
	Keywords  map[string][]string `yaml:"keywords"`
}

type file struct {
	Entries []Entry `yaml:"entries"`
}

// BM25 parameters: the usual values; short documents make b matter little.
const (
	k1 = 1.2
	b  = 0.75
)

// background holds the document frequencies of the embedded FAQ, which every
// index adds to its own when computing IDF. A FAQ is a tiny corpus: on its
// own a one-entry file gives every term almost no weight, so a fixed
// minScore would mean different things for different files. Against the
// background, words every shop question uses stay cheap whatever the file.
var background = sync.OnceValues(func() (map[string]int, int) {
	var f file
	if err := yaml.Unmarshal(defaultYAML, &f); err != nil {
		return nil, 0 // the embedded file is tested; this cannot happen
	}
	df := map[string]int{}
	for _, e := range f.Entries {
		for t := range docTerms(e) {
			df[t]++
		}
	}
	return df, len(f.Entries)
})

// Index is a parsed FAQ ready for matching. It is immutable and safe for
// concurrent use.
type Index struct {
	entries []Entry
	docs    []map[string]float64 // term frequencies per entry
	lens    []float64
	avgLen  float64
	idf     map[string]float64
}

// Hit is a matched entry.
type Hit struct {
	ID    string
	Score float64
	entry *Entry
}

// Answer returns the entry's answer in lang ("ja", "en"; see Lang), else in
// English, else in the first locale the entry has.
func (h Hit) Answer(lang string) string {
	if a, ok := h.entry.Answer[lang]; ok {
		return a
	}
	if a, ok := h.entry.Answer["en"]; ok {
		return a
	}
	keys := make([]string, 0, len(h.entry.Answer))
	for k := range h.entry.Answer {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return h.entry.Answer[keys[0]]
}

var defaultIndex = sync.OnceValues(func() (*Index, error) { return Parse(defaultYAML) })

// Default returns the index of the embedded MangaAssist FAQ (shipping,
// returns, cancellation, payment, tracking, recommendations, store hours,
// membership in Japanese and English). It is built once.
func Default() (*Index, error) { return defaultIndex() }

// Load reads and parses a user's FAQ file.
func Load(path string) (*Index, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("faq: %w", err)
	}
	x, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("faq: %s: %w", path, err)
	}
	return x, nil
}

// Parse reads a FAQ document (see faq.yaml for the format), rejecting
// unknown fields, duplicate or empty ids, entries without an answer and
// entries with nothing to match.
func Parse(data []byte) (*Index, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return build(f.Entries), nil
}

func (f file) validate() error {
	if len(f.Entries) == 0 {
		return errors.New("entries: must not be empty")
	}
	var errs []error
	seen := map[string]bool{}
	for i, e := range f.Entries {
		p := fmt.Sprintf("entries[%d]", i)
		switch {
		case strings.TrimSpace(e.ID) == "":
			errs = append(errs, fmt.Errorf("%s.id: must not be empty", p))
		case seen[e.ID]:
			errs = append(errs, fmt.Errorf("%s.id: duplicate %q", p, e.ID))
		}
		seen[e.ID] = true
		nonEmpty := 0
		for _, a := range e.Answer {
			if strings.TrimSpace(a) != "" {
				nonEmpty++
			}
		}
		if nonEmpty == 0 || nonEmpty != len(e.Answer) {
			errs = append(errs, fmt.Errorf("%s.answer: needs a non-empty answer for each locale listed", p))
		}
		if len(docTerms(e)) == 0 {
			errs = append(errs, fmt.Errorf("%s: needs questions or keywords with matchable words", p))
		}
	}
	return errors.Join(errs...)
}

// docTerms is the bag of terms of every example of every locale of e.
func docTerms(e Entry) map[string]float64 {
	tf := map[string]float64{}
	add := func(m map[string][]string) {
		for _, texts := range m {
			for _, s := range texts {
				for _, t := range tokenize(s) {
					tf[t.term]++
				}
			}
		}
	}
	add(e.Questions)
	add(e.Keywords)
	return tf
}

func build(entries []Entry) *Index {
	x := &Index{entries: entries, idf: map[string]float64{}}
	df := map[string]int{}
	var total float64
	for _, e := range entries {
		tf := docTerms(e)
		var n float64
		for t, c := range tf {
			df[t]++
			n += c
		}
		x.docs = append(x.docs, tf)
		x.lens = append(x.lens, n)
		total += n
	}
	x.avgLen = total / float64(len(entries))
	bg, bgN := background()
	N := float64(len(entries) + bgN)
	for t, n := range df {
		n += bg[t]
		x.idf[t] = math.Log(1 + (N-float64(n)+0.5)/(float64(n)+0.5))
	}
	return x
}

// IDs returns the entry ids in file order.
func (x *Index) IDs() []string {
	ids := make([]string, len(x.entries))
	for i, e := range x.entries {
		ids[i] = e.ID
	}
	return ids
}

// Match returns the best-scoring entry for text if its BM25 score reaches
// minScore (see DefaultMinScore). Ties go to the entry listed first.
func (x *Index) Match(text string, minScore float64) (Hit, bool) {
	q := map[string]float64{}
	for _, t := range tokenize(text) {
		q[t.term] = max(q[t.term], t.weight)
	}
	best, bestScore := -1, 0.0
	for i, tf := range x.docs {
		var s float64
		norm := k1 * (1 - b + b*x.lens[i]/x.avgLen)
		for term, w := range q {
			f := tf[term]
			if f == 0 {
				continue
			}
			s += w * x.idf[term] * f * (k1 + 1) / (f + norm)
		}
		if s > bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 || bestScore < minScore {
		return Hit{}, false
	}
	return Hit{ID: x.entries[best].ID, Score: bestScore, entry: &x.entries[best]}, true
}

// DefaultMinScore is the score a match must reach with the default FAQ: above
// what a lone shared kanji or common word earns, below one distinctive term.
const DefaultMinScore = 1.5
