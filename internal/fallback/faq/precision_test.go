package faq

import (
	"os"
	"testing"

	"gopkg.in/yaml.v3"
)

type labelled struct {
	Q    string `yaml:"q"`
	Want string `yaml:"want"`
}

// precisionFloor is what the default FAQ must keep on testdata/labelled.yaml,
// per language.
const precisionFloor = 0.9

// TestPrecisionAtOne reports, per language, the share of labelled shoppers'
// questions whose best match is the entry that answers them.
func TestPrecisionAtOne(t *testing.T) {
	data, err := os.ReadFile("testdata/labelled.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var set map[string][]labelled
	if err := yaml.Unmarshal(data, &set); err != nil {
		t.Fatal(err)
	}
	x, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range []string{"en", "ja"} {
		qs := set[lang]
		if len(qs) < 20 {
			t.Fatalf("%s: %d labelled questions; want at least 20", lang, len(qs))
		}
		right := 0
		for _, l := range qs {
			hit, ok := x.Match(l.Q, DefaultMinScore)
			if ok && hit.ID == l.Want {
				right++
				continue
			}
			t.Logf("%s: %q → %q (score %.2f, matched %v), want %q", lang, l.Q, hit.ID, hit.Score, ok, l.Want)
		}
		p := float64(right) / float64(len(qs))
		t.Logf("%s: precision@1 %.2f (%d/%d)", lang, p, right, len(qs))
		if p < precisionFloor {
			t.Errorf("%s: precision@1 %.2f, below the floor %.2f", lang, p, precisionFloor)
		}
	}
}
