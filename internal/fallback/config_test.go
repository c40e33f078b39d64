package fallback

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"sonnet": 1, "haiku": 0.7, TierCache: 0.5, TierFAQ: 0.3, TierGraceful: 0.1}
	for name, conf := range want {
		if got := c.Confidence(name); got != conf {
			t.Errorf("Confidence(%s) = %v, want %v", name, got, conf)
		}
		if got := c.Degraded(name); got != (name != "sonnet") {
			t.Errorf("Degraded(%s) = %v", name, got)
		}
	}
	if m := c.ModelTiers(); len(m) != 2 || m[0].Name != "sonnet" || m[1].Name != "haiku" {
		t.Errorf("ModelTiers = %v", m)
	}
	if c.Cache.TTL != time.Hour || c.Cache.StaleFor != 10*time.Minute || c.Cache.MaxEntries != 10_000 || c.Cache.MaxBytes != 64<<20 {
		t.Errorf("cache defaults = %+v", c.Cache)
	}
}

func TestConfigFromYAML(t *testing.T) {
	c := DefaultConfig()
	err := yaml.Unmarshal([]byte(`
tiers:
  - {name: haiku, confidence: 0.8}
  - {name: faq, confidence: 0.4}
  - {name: graceful, confidence: 0.1}
cache: {ttl: 30m, staleFor: 5m, maxEntries: 100, maxBytes: 1048576}
faq: {path: /etc/fmgate/faq.yaml, minScore: 2.5}
`), &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Cache.TTL != 30*time.Minute || c.Cache.StaleFor != 5*time.Minute || c.FAQ.MinScore != 2.5 || c.FAQ.Path != "/etc/fmgate/faq.yaml" {
		t.Errorf("decoded %+v", c)
	}
	if c.Degraded("haiku") || !c.Degraded(TierFAQ) {
		t.Error("the first configured tier must be the only undegraded one")
	}
	if c.Cache.Timeout != DefaultConfig().Cache.Timeout {
		t.Error("a field missing from YAML lost its default")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		give  func(*Config)
		wants []string
	}{
		{"no tiers", func(c *Config) { c.Tiers = nil }, []string{"tiers: must not be empty"}},
		{"graceful not last", func(c *Config) { c.Tiers = c.Tiers[:4] }, []string{`tiers: must end with "graceful"`}},
		{"duplicate", func(c *Config) { c.Tiers[1].Name = "sonnet" }, []string{`tiers[1].name: duplicate "sonnet"`}},
		{"empty name", func(c *Config) { c.Tiers[0].Name = "" }, []string{"tiers[0].name: must not be empty"}},
		{"model after cache", func(c *Config) {
			c.Tiers = []Tier{{"sonnet", 1}, {TierCache, .5}, {"haiku", .7}, {TierGraceful, .1}}
		}, []string{`tiers[2].name: model tier "haiku" must come before`}},
		{"faq before cache", func(c *Config) {
			c.Tiers = []Tier{{"sonnet", 1}, {TierFAQ, .3}, {TierCache, .5}, {TierGraceful, .1}}
		}, []string{`tiers[2].name: "cache" must come before "faq"`}},
		{"confidence range", func(c *Config) { c.Tiers[0].Confidence = 1.5 }, []string{"tiers[0].confidence: must be between 0 and 1"}},
		{"nested cache", func(c *Config) { c.Cache.TTL = 0; c.Cache.MaxBytes = -1 }, []string{"cache.ttl: must be > 0", "cache.maxBytes: must be > 0"}},
		{"faq", func(c *Config) { c.FAQ.MinScore = 0 }, []string{"faq.minScore: must be > 0"}},
		{"simplified", func(c *Config) { c.Simplified = SimplifiedConfig{} }, []string{"simplified.maxTokens: must be > 0", "simplified.history: must be > 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.give(&c)
			err := c.Validate()
			for _, w := range tt.wants {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %v, want it to contain %q", err, w)
				}
			}
			if _, err := New(c, Deps{}); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func TestNewLoadsUserFAQ(t *testing.T) {
	c := DefaultConfig()
	c.FAQ.Path = "testdata/faq.yaml"
	r, err := New(c, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Answer(t.Context(), Question{Text: "Do you offer gift wrapping?"}, ReasonError)
	if got.Tier != TierFAQ || got.FAQID != "gift_wrap" || got.Text != "Gift wrapping is free for every order." {
		t.Errorf("Answer = %+v, want the user's gift_wrap entry", got)
	}
	c.FAQ.Path = "testdata/missing.yaml"
	if _, err := New(c, Deps{}); err == nil {
		t.Error("New accepted a missing FAQ file")
	}
}
