package budget

import "github.com/fmgate/fmgate/internal/provider"

// Price is a model's price in USD per million tokens. MangaAssist: sonnet
// $3 in / $15 out, haiku $0.25 / $1.25.
type Price struct {
	InputPerMTok  float64 `yaml:"inputPerMTok"`
	OutputPerMTok float64 `yaml:"outputPerMTok"`
	// CachedInputPerMTok prices prompt-cache reads; zero means they cost as
	// ordinary input.
	CachedInputPerMTok float64 `yaml:"cachedInputPerMTok"`
}

// Cost returns the USD cost of u. CachedInputTokens are taken to be reported
// apart from InputTokens, as Bedrock and Anthropic report cache reads.
func (p Price) Cost(u provider.Usage) float64 {
	cached := p.CachedInputPerMTok
	if cached == 0 {
		cached = p.InputPerMTok
	}
	return (float64(u.InputTokens)*p.InputPerMTok +
		float64(u.CachedInputTokens)*cached +
		float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}
