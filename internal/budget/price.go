package budget

import "github.com/fmgate/fmgate/internal/provider"

// Price is a model's price in USD per million tokens. MangaAssist: sonnet
// $3 in / $15 out, haiku $0.25 / $1.25.
type Price struct {
	InputPerMTok  float64 `yaml:"inputPerMTok"`
	OutputPerMTok float64 `yaml:"outputPerMTok"`
	// CachedInputPerMTok prices prompt-cache reads and CacheWritePerMTok
	// prompt-cache writes; zero means they cost as ordinary input.
	CachedInputPerMTok float64 `yaml:"cachedInputPerMTok"`
	CacheWritePerMTok  float64 `yaml:"cacheWritePerMTok"`
}

// Cost returns the USD cost of u, each class of tokens at its own price
// (the classes of provider.Usage are disjoint).
func (p Price) Cost(u provider.Usage) float64 {
	cached, written := p.CachedInputPerMTok, p.CacheWritePerMTok
	if cached == 0 {
		cached = p.InputPerMTok
	}
	if written == 0 {
		written = p.InputPerMTok
	}
	return (float64(u.InputTokens)*p.InputPerMTok +
		float64(u.CachedInputTokens)*cached +
		float64(u.CacheWriteTokens)*written +
		float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}
