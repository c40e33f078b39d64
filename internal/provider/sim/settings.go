package sim

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/fmgate/fmgate/internal/provider"
)

// faultKinds are the kinds errorRate may inject, in the order a call's draw
// walks them.
var faultKinds = []provider.Kind{
	provider.KindThrottled,
	provider.KindUnavailable,
	provider.KindTimeout,
	provider.KindNotReady,
	provider.KindGuardrail,
}

// Settings shape one simulated model. The zero value is a model that answers
// at once, as fast as it can, and never fails. The JSON names are the ones
// the admin API (GET/PUT /admin/sim/{model}) reads and writes.
type Settings struct {
	// ModelID is the provider-side id reported in Response.ModelID, e.g.
	// "anthropic.claude-3-sonnet-20240229-v1:0". Empty reports the gateway's
	// model name.
	ModelID string `json:"modelId" yaml:"modelId"`
	// Outage makes every call fail with kind unavailable, after LatencyMs.
	Outage bool `json:"outage" yaml:"outage"`
	// ErrorRate is the probability, drawn once per call, of each injected
	// failure: throttled, unavailable, timeout, not_ready, guardrail. Each
	// must be within [0,1] and together at most 1.
	ErrorRate map[provider.Kind]float64 `json:"errorRate" yaml:"errorRate"`
	// LatencyMs is an extra delay before anything happens (network, queueing
	// at the provider). Default 0.
	LatencyMs int `json:"latencyMs" yaml:"latencyMs"`
	// TTFTMs is the base time to first token, jittered by ±20% per call.
	TTFTMs int `json:"ttftMs" yaml:"ttftMs"`
	// TokensPerSecond is the output pace, jittered by ±1/3 per call (60 gives
	// 40–80 tok/s). 0 emits as fast as possible, for benchmarks.
	TokensPerSecond float64 `json:"tokensPerSecond" yaml:"tokensPerSecond"`
	// StallAfterTokens, when > 0, makes the stream stop producing after that
	// many output tokens and hang until the caller's context ends.
	StallAfterTokens int `json:"stallAfterTokens" yaml:"stallAfterTokens"`
	// CutAfterTokens, when > 0, makes the stream fail with kind unavailable
	// after that many output tokens, as a dropped connection.
	CutAfterTokens int `json:"cutAfterTokens" yaml:"cutAfterTokens"`
	// TPMCeiling is the tokens-per-minute quota (input + output over a
	// rolling 60 s; input read from the prompt cache does not count, as on
	// Anthropic and Bedrock). A call whose input would exceed it fails with kind
	// throttled and a RetryAfter saying when enough tokens expire. 0 means no
	// ceiling.
	TPMCeiling int `json:"tpmCeiling" yaml:"tpmCeiling"`
	// CacheMinTokens is the shortest prompt prefix, in input tokens, the
	// model caches: a cache mark ending a shorter prefix is ignored, neither
	// read nor written, as Anthropic ignores it (1024 tokens for Claude 3
	// Sonnet, 2048 for Haiku). 0 caches a prefix of any length.
	CacheMinTokens int `json:"cacheMinTokens" yaml:"cacheMinTokens"`
}

// Validate reports every problem with s, each worded "field: problem".
func (s Settings) Validate() error {
	return errors.Join(s.problems("")...)
}

func (s Settings) problems(prefix string) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s%s: %s", prefix, field, fmt.Sprintf(format, args...)))
	}
	sum := 0.0
	for _, k := range slices.Sorted(maps.Keys(s.ErrorRate)) {
		p := s.ErrorRate[k]
		if !slices.Contains(faultKinds, k) {
			bad("errorRate."+string(k), "unknown kind, want one of throttled, unavailable, timeout, not_ready, guardrail")
			continue
		}
		if math.IsNaN(p) || p < 0 || p > 1 {
			bad("errorRate."+string(k), "must be within [0,1], got %v", p)
			continue
		}
		sum += p
	}
	if sum > 1+1e-9 {
		bad("errorRate", "probabilities sum to %.3g, must be <= 1", sum)
	}
	nonNegative := []struct {
		field string
		v     float64
	}{
		{"latencyMs", float64(s.LatencyMs)},
		{"ttftMs", float64(s.TTFTMs)},
		{"tokensPerSecond", s.TokensPerSecond},
		{"stallAfterTokens", float64(s.StallAfterTokens)},
		{"cutAfterTokens", float64(s.CutAfterTokens)},
		{"tpmCeiling", float64(s.TPMCeiling)},
		{"cacheMinTokens", float64(s.CacheMinTokens)},
	}
	for _, f := range nonNegative {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			bad(f.field, "must be >= 0, got %v", f.v)
		}
	}
	return errs
}

// clone returns s with a map of its own, so callers can never share state
// with the simulator. ErrorRate is never nil in the copy, so it encodes as {}.
func (s Settings) clone() Settings {
	rates := make(map[provider.Kind]float64, len(s.ErrorRate))
	maps.Copy(rates, s.ErrorRate)
	s.ErrorRate = rates
	return s
}

// Config lists the simulated models by the gateway's model name.
type Config struct {
	Models map[string]Settings `yaml:"models"`
}

// DefaultConfig is the MangaAssist pair: "sonnet" (Claude 3 Sonnet, about
// 600 ms to first token and 60 tok/s, i.e. 40–80 tok/s after jitter, caching
// prompt prefixes from 1024 tokens) and "haiku" (Claude 3 Haiku, about 250
// ms and 120 tok/s, caching from 2048 tokens). No faults, no TPM ceiling.
func DefaultConfig() Config {
	return Config{Models: map[string]Settings{
		"sonnet": {
			ModelID:         "anthropic.claude-3-sonnet-20240229-v1:0",
			TTFTMs:          600,
			TokensPerSecond: 60,
			CacheMinTokens:  1024,
		},
		"haiku": {
			ModelID:         "anthropic.claude-3-haiku-20240307-v1:0",
			TTFTMs:          250,
			TokensPerSecond: 120,
			CacheMinTokens:  2048,
		},
	}}
}

// Validate reports every problem with c, each worded "models.<name>.field:
// problem".
func (c Config) Validate() error {
	var errs []error
	if len(c.Models) == 0 {
		errs = append(errs, errors.New("models: must name at least one model"))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Models)) {
		if name == "" {
			errs = append(errs, errors.New("models: model name must not be empty"))
			continue
		}
		errs = append(errs, c.Models[name].problems("models."+name+".")...)
	}
	return errors.Join(errs...)
}
