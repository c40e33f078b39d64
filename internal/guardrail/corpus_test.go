package guardrail

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

// corpusEntry is one snippet of testdata/pii_corpus.tsv: the kinds a
// reader finds in it (none for a look-alike: an ISBN, a JAN code, an
// order number, a price, a date).
type corpusEntry struct {
	kinds []string
	text  string
}

func readCorpus(t *testing.T) []corpusEntry {
	t.Helper()
	f, err := os.Open("testdata/pii_corpus.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []corpusEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		kinds, text, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("corpus line %q has no tab", line)
		}
		e := corpusEntry{text: text}
		if kinds != "" {
			e.kinds = strings.Split(kinds, ",")
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The checks against a corpus of Japanese and English snippets, with
// personal data and with look-alikes: every kind is found wherever it is
// (recall 1) and redacted out of the text, and at most one look-alike in
// ten is taken for personal data. The figures are logged (go test -v).
func TestCorpusRecallAndPrecision(t *testing.T) {
	corpus := readCorpus(t)
	all := Config{Email: Redact, Phone: Redact, Card: Redact, MyNumber: Redact, PostalCode: Redact}
	type score struct{ found, missed, false_ int }
	scores := map[string]*score{}
	for _, k := range []string{KindEmail, KindPhone, KindCard, KindMyNumber, KindPostalCode} {
		scores[k] = &score{}
	}
	positives, lookAlikes, flagged := 0, 0, 0
	for _, e := range corpus {
		v := all.Check(e.text)
		got := v.Kinds()
		for _, k := range e.kinds {
			if slices.Contains(got, k) {
				scores[k].found++
			} else {
				scores[k].missed++
				t.Errorf("%s missed in %q (found %v)", k, e.text, got)
			}
		}
		for _, k := range got {
			if !slices.Contains(e.kinds, k) {
				scores[k].false_++
				t.Logf("%s found in %q, which holds %v", k, e.text, e.kinds)
			}
		}
		if len(e.kinds) == 0 {
			lookAlikes++
			if len(got) > 0 {
				flagged++
			}
			continue
		}
		positives++
		// Redacted, none of the snippet's digits runs or addresses stay.
		if v.Text == e.text || strings.Contains(v.Text, "@") && slices.Contains(e.kinds, KindEmail) {
			t.Errorf("%q redacted as %q", e.text, v.Text)
		}
	}
	if positives < 50 || lookAlikes < 50 {
		t.Fatalf("the corpus has %d snippets with personal data and %d look-alikes; want at least 50 of each", positives, lookAlikes)
	}
	for _, k := range []string{KindEmail, KindPhone, KindCard, KindMyNumber, KindPostalCode} {
		s := scores[k]
		recall := float64(s.found) / float64(max(s.found+s.missed, 1))
		precision := float64(s.found) / float64(max(s.found+s.false_, 1))
		t.Logf("%-12s recall %.3f (%d of %d)  precision %.3f (%d false)", k, recall, s.found, s.found+s.missed, precision, s.false_)
	}
	rate := float64(flagged) / float64(lookAlikes)
	t.Logf("look-alikes taken for personal data: %d of %d (%.1f%%)", flagged, lookAlikes, 100*rate)
	if rate > 0.10 {
		t.Errorf("%d of %d look-alikes taken for personal data; the bound is 10%%", flagged, lookAlikes)
	}
}
