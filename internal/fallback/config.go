package fallback

import (
	"errors"
	"fmt"
	"slices"

	"github.com/fmgate/fmgate/internal/fallback/cache"
	"github.com/fmgate/fmgate/internal/fallback/faq"
)

// Names of the non-model tiers. Every other name in Config.Tiers is a model
// tier the gateway maps to a provider model.
const (
	TierCache    = "cache"
	TierFAQ      = "faq"
	TierGraceful = "graceful"
)

// Tier is one rung of the cascade and the confidence reported with answers
// it serves.
type Tier struct {
	Name       string  `yaml:"name"`
	Confidence float64 `yaml:"confidence"`
}

// FAQConfig selects the FAQ file and how close a match must be.
type FAQConfig struct {
	// Path is a user FAQ file (see faq/faq.yaml for the format); empty means
	// the embedded MangaAssist FAQ.
	Path string `yaml:"path"`
	// MinScore is the BM25 score a match must reach. Default
	// faq.DefaultMinScore (1.5); higher is stricter.
	MinScore float64 `yaml:"minScore"`
}

// SimplifiedConfig shapes the short request sent to the cheaper model after
// the primary timed out.
type SimplifiedConfig struct {
	// MaxTokens caps the answer. Default 256.
	MaxTokens int `yaml:"maxTokens"`
	// History is how many of the latest conversation messages are kept,
	// the user's question included. Default 3.
	History int `yaml:"history"`
}

// Config is the fallback cascade.
type Config struct {
	// Tiers in cascade order: model tiers first, then any of cache and faq
	// (in that order), ending with graceful. Default sonnet 1.0, haiku 0.7,
	// cache 0.5, faq 0.3, graceful 0.1. Leaving out cache or faq disables
	// that tier. Every tier after the first serves degraded answers.
	Tiers      []Tier           `yaml:"tiers"`
	Cache      cache.Config     `yaml:"cache"`
	FAQ        FAQConfig        `yaml:"faq"`
	Simplified SimplifiedConfig `yaml:"simplified"`
}

// DefaultConfig returns the MangaAssist cascade.
func DefaultConfig() Config {
	return Config{
		Tiers: []Tier{
			{Name: "sonnet", Confidence: 1.0},
			{Name: "haiku", Confidence: 0.7},
			{Name: TierCache, Confidence: 0.5},
			{Name: TierFAQ, Confidence: 0.3},
			{Name: TierGraceful, Confidence: 0.1},
		},
		Cache:      cache.DefaultConfig(),
		FAQ:        FAQConfig{MinScore: faq.DefaultMinScore},
		Simplified: SimplifiedConfig{MaxTokens: 256, History: 3},
	}
}

func isContentTier(name string) bool {
	return name == TierCache || name == TierFAQ || name == TierGraceful
}

// Validate reports every invalid field, each as "path: problem".
func (c Config) Validate() error {
	var errs []error
	if len(c.Tiers) == 0 {
		errs = append(errs, errors.New("tiers: must not be empty"))
	}
	seen := map[string]bool{}
	lastContent := -1 // index in [cache, faq, graceful] of the last content tier seen
	order := []string{TierCache, TierFAQ, TierGraceful}
	for i, t := range c.Tiers {
		p := fmt.Sprintf("tiers[%d]", i)
		switch {
		case t.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: must not be empty", p))
		case seen[t.Name]:
			errs = append(errs, fmt.Errorf("%s.name: duplicate %q", p, t.Name))
		case isContentTier(t.Name):
			k := slices.Index(order, t.Name)
			if k < lastContent {
				errs = append(errs, fmt.Errorf("%s.name: %q must come before %q", p, t.Name, order[lastContent]))
			}
			lastContent = max(lastContent, k)
		case lastContent >= 0:
			errs = append(errs, fmt.Errorf("%s.name: model tier %q must come before cache, faq and graceful", p, t.Name))
		}
		seen[t.Name] = true
		if t.Confidence < 0 || t.Confidence > 1 {
			errs = append(errs, fmt.Errorf("%s.confidence: must be between 0 and 1", p))
		}
	}
	if n := len(c.Tiers); n > 0 && c.Tiers[n-1].Name != TierGraceful {
		errs = append(errs, errors.New(`tiers: must end with "graceful" so that every turn gets an answer`))
	}
	errs = append(errs, prefixed("cache.", c.Cache.Validate())...)
	if c.FAQ.MinScore <= 0 {
		errs = append(errs, errors.New("faq.minScore: must be > 0"))
	}
	if c.Simplified.MaxTokens <= 0 {
		errs = append(errs, errors.New("simplified.maxTokens: must be > 0"))
	}
	if c.Simplified.History <= 0 {
		errs = append(errs, errors.New("simplified.history: must be > 0"))
	}
	return errors.Join(errs...)
}

// prefixed puts p before each error of a joined error.
func prefixed(p string, err error) []error {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s%w", p, e)
	}
	return out
}

// ModelTiers returns the model tiers in cascade order (default sonnet, haiku).
func (c Config) ModelTiers() []Tier {
	var out []Tier
	for _, t := range c.Tiers {
		if !isContentTier(t.Name) {
			out = append(out, t)
		}
	}
	return out
}

// Confidence returns the confidence of the named tier, 0 if it is not
// configured.
func (c Config) Confidence(name string) float64 {
	for _, t := range c.Tiers {
		if t.Name == name {
			return t.Confidence
		}
	}
	return 0
}

// Degraded reports whether answers from the named tier are degraded: true
// for every tier but the first, and for tiers not configured.
func (c Config) Degraded(name string) bool {
	return len(c.Tiers) == 0 || c.Tiers[0].Name != name
}

func (c Config) has(name string) bool {
	return slices.ContainsFunc(c.Tiers, func(t Tier) bool { return t.Name == name })
}
