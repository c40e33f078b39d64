package budget

import "github.com/fmgate/fmgate/internal/provider"

// Price is a model's price in USD per million tokens. MangaAssist: sonnet
// $3 in / $15 out, haiku $0.25 / $1.25.
type Price struct {
	InputPerMTok  float64 `yaml:"inputPerMTok"`
	OutputPerMTok float64 `yaml:"outputPerMTok"`
	// CachedInputPerMTok prices prompt-cache reads, CacheWritePerMTok
	// five-minute prompt-cache writes and CacheWrite1hPerMTok one-hour
	// ones; zero means they cost as ordinary input (a one-hour write: as a
	// five-minute one).
	CachedInputPerMTok  float64 `yaml:"cachedInputPerMTok"`
	CacheWritePerMTok   float64 `yaml:"cacheWritePerMTok"`
	CacheWrite1hPerMTok float64 `yaml:"cacheWrite1hPerMTok"`
}

// Cost returns the USD cost of u, each class of tokens at its own price.
func (p Price) Cost(u provider.Usage) float64 {
	cached, written, written1h := p.CachedInputPerMTok, p.CacheWritePerMTok, p.CacheWrite1hPerMTok
	if cached == 0 {
		cached = p.InputPerMTok
	}
	if written == 0 {
		written = p.InputPerMTok
	}
	if written1h == 0 {
		written1h = written
	}
	long := min(max(u.CacheWrite1hTokens, 0), u.CacheWriteTokens)
	return (float64(u.InputTokens)*p.InputPerMTok +
		float64(u.CachedInputTokens)*cached +
		float64(u.CacheWriteTokens-long)*written +
		float64(long)*written1h +
		float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}

// CacheSaving is what the vendor's prompt cache saved on u: its cost with
// every input token at the plain input price, less its cost. It is
// negative when the cache writes cost more than the reads saved.
func (p Price) CacheSaving(u provider.Usage) float64 {
	plain := u
	plain.InputTokens = u.Input()
	plain.CachedInputTokens, plain.CacheWriteTokens, plain.CacheWrite1hTokens = 0, 0, 0
	return p.Cost(plain) - p.Cost(u)
}
