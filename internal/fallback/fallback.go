// Package fallback supplies the non-model tiers of the fallback cascade
// (primary model → secondary model → response cache → static FAQ → graceful
// message) and decides, from why the models failed, which of them comes
// first. The gateway's pipeline drives the model tiers itself, reading them
// from Config.Tiers, and calls Resolver.Answer when no model answered.
//
// Every answer says which tier served it, a confidence, and whether it is
// degraded. Answer never fails: a broken cache is logged and skipped, and the
// graceful message always exists.
package fallback

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/fmgate/fmgate/internal/fallback/cache"
	"github.com/fmgate/fmgate/internal/fallback/faq"
	"github.com/fmgate/fmgate/internal/fallback/textfold"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/redis/go-redis/v9"
)

// Reason is why the model tiers did not answer; it picks the first
// non-model tier.
type Reason string

// Reasons, after the fallback types of the MangaAssist state machine.
const (
	// ReasonError is any other failure: cache → FAQ → graceful.
	ReasonError Reason = "error"
	// ReasonCircuitOpen: every model's breaker is open; cache first.
	ReasonCircuitOpen Reason = "circuit_open"
	// ReasonModelTimeout: the gateway first asks the cheaper model for a
	// short answer (Resolver.Simplified), then cache → FAQ → graceful.
	ReasonModelTimeout Reason = "model_timeout"
	// ReasonGuardrail: the request was blocked; the redirect message, never
	// a cached answer.
	ReasonGuardrail Reason = "guardrail"
)

// ReasonFor maps a model failure to a reason: guardrail blocks and timeouts
// have their own path, everything else is ReasonError. Circuit-open is
// decided by the gateway, which knows its breakers. (A turn refused for lack
// of capacity is not a fallback: it gets a 429 with Retry-After, since
// nothing would answer it later.)
func ReasonFor(err error) Reason {
	switch provider.KindOf(err) {
	case provider.KindGuardrail:
		return ReasonGuardrail
	case provider.KindTimeout:
		return ReasonModelTimeout
	}
	return ReasonError
}

// Step is one non-model step of a fallback plan.
type Step string

// Steps a plan may hold. StepSimplified is the gateway's to run; Answer runs
// the others.
const (
	StepSimplified Step = "simplified"
	StepCache      Step = TierCache
	StepFAQ        Step = TierFAQ
	StepGraceful   Step = TierGraceful
	StepRedirect   Step = "redirect"
)

// Plan returns the non-model steps for reason, in order, leaving out cache
// and FAQ when they are not configured tiers.
func (c Config) Plan(reason Reason) []Step {
	var steps []Step
	switch reason {
	case ReasonGuardrail:
		return []Step{StepRedirect}
	case ReasonModelTimeout:
		steps = append(steps, StepSimplified)
	}
	if c.has(TierCache) {
		steps = append(steps, StepCache)
	}
	if c.has(TierFAQ) {
		steps = append(steps, StepFAQ)
	}
	return append(steps, StepGraceful)
}

// Question is what the user asked, as far as the fallback tiers care.
type Question struct {
	Text string
	// Locale is the user's locale ("ja", "en-US"); empty means guess from Text.
	Locale string
	// PromptVersion keeps answers produced under different prompts apart in
	// the cache.
	PromptVersion string
	// NoCache keeps the answer cache out: the question's answer depends on
	// more than its text (the tools a client offers).
	NoCache bool
}

// Answer is what a non-model tier served.
type Answer struct {
	Text       string
	Tier       string // TierCache, TierFAQ or TierGraceful (also for redirect)
	Confidence float64
	Degraded   bool
	CacheHit   bool
	// Stale is set for a cache entry older than the TTL but within
	// staleFor. It is served with half the cache tier's confidence and not
	// refreshed in the background: the cache answers only when the models
	// cannot, so a refresh would call a failing model, while the next answer
	// a model gives to the question replaces the entry anyway.
	Stale bool
	// FAQID is the matched FAQ entry, for the FAQ tier.
	FAQID string
}

// Deps are the collaborators of a Resolver; every nil field has a default.
type Deps struct {
	// Cache is the response cache; nil disables the cache tier.
	Cache cache.Cache
	// FAQ is the FAQ index; nil loads Config.FAQ.Path (LoadFAQ).
	FAQ *faq.Index
	// Logger receives cache failures; nil discards them.
	Logger *slog.Logger
	// Now is the clock that ages cache entries; nil is time.Now.
	Now func() time.Time
	// Trace, when set, is called as the cache or FAQ step starts ("cache",
	// "faq") and returns the function to call with whether it answered, so
	// each step can be a span of the turn.
	Trace func(ctx context.Context, step string) (done func(hit bool))
}

// Resolver serves the non-model tiers. It is safe for concurrent use.
type Resolver struct {
	cfg   Config
	cache cache.Cache
	faq   *faq.Index
	log   *slog.Logger
	now   func() time.Time
	trace func(ctx context.Context, step string) func(hit bool)
}

// New validates cfg and returns a Resolver.
func New(cfg Config, d Deps) (*Resolver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	r := &Resolver{cfg: cfg, cache: d.Cache, faq: d.FAQ, log: d.Logger, now: d.Now, trace: d.Trace}
	if r.trace == nil {
		r.trace = func(context.Context, string) func(bool) { return func(bool) {} }
	}
	if r.faq == nil {
		x, err := LoadFAQ(cfg.FAQ.Path)
		if err != nil {
			return nil, err
		}
		r.faq = x
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	return r, nil
}

// LoadFAQ loads a user FAQ file, or the embedded MangaAssist FAQ when path is
// empty.
func LoadFAQ(path string) (*faq.Index, error) {
	if path == "" {
		x, err := faq.Default()
		if err != nil {
			return nil, fmt.Errorf("fallback: embedded faq: %w", err)
		}
		return x, nil
	}
	x, err := faq.Load(path)
	if err != nil {
		return nil, fmt.Errorf("fallback: %w", err)
	}
	return x, nil
}

// DefaultKeyPrefix is the Redis key prefix of the response cache.
const DefaultKeyPrefix = "fmgate:cache:"

// NewCache returns the response cache for c: the Redis store under prefix
// (DefaultKeyPrefix when empty) when client is not nil, else the in-memory
// LRU on the clock now (time.Now when nil). Pass a nil interface, not a nil
// *redis.Client, for the memory store.
func NewCache(c Config, client redis.Scripter, prefix string, now func() time.Time) cache.Cache {
	if client == nil {
		return cache.NewMemory(c.Cache, now)
	}
	if prefix == "" {
		prefix = DefaultKeyPrefix
	}
	return cache.NewRedis(client, prefix, c.Cache)
}

// CacheKey is the cache key of q: the first 32 hex digits of the SHA-256 of
// its language, prompt version and normalised text (width and case folded,
// white space collapsed, trailing punctuation dropped), so "送料は？" and
// "送料は" share an answer but "ja" and "en" askers do not.
func CacheKey(q Question) string {
	h := sha256.New()
	h.Write([]byte(Lang(q.Locale, q.Text)))
	h.Write([]byte{0})
	h.Write([]byte(q.PromptVersion))
	h.Write([]byte{0})
	h.Write([]byte(textfold.Question(q.Text)))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Answer serves q from the first non-model step of Plan(reason) that has an
// answer, skipping StepSimplified (the gateway's). It always returns an
// answer; cache failures are logged and fall through.
func (r *Resolver) Answer(ctx context.Context, q Question, reason Reason) Answer {
	lang := Lang(q.Locale, q.Text)
	for _, step := range r.cfg.Plan(reason) {
		switch step {
		case StepCache:
			if r.cache == nil || q.NoCache {
				continue
			}
			done := r.trace(ctx, "cache")
			a, ok := r.fromCache(ctx, q)
			done(ok)
			if ok {
				return a
			}
		case StepFAQ:
			done := r.trace(ctx, "faq")
			hit, ok := r.faq.Match(q.Text, r.cfg.FAQ.MinScore)
			done(ok)
			if ok {
				a := r.answer(TierFAQ, hit.Answer(lang))
				a.FAQID = hit.ID
				return a
			}
		case StepRedirect:
			return r.answer(TierGraceful, Redirect(lang))
		}
	}
	return r.answer(TierGraceful, Graceful(lang, seedOf(q.Text)))
}

func (r *Resolver) answer(tier, text string) Answer {
	return Answer{Text: text, Tier: tier, Confidence: r.cfg.Confidence(tier), Degraded: r.cfg.Degraded(tier)}
}

func (r *Resolver) fromCache(ctx context.Context, q Question) (Answer, bool) {
	if r.cache == nil {
		return Answer{}, false
	}
	key := CacheKey(q)
	e, ok, err := r.cache.Get(ctx, key)
	if err != nil {
		r.logCacheError(ctx, "get", key, err)
		return Answer{}, false
	}
	if !ok {
		return Answer{}, false
	}
	age := r.now().Sub(e.StoredAt)
	if age >= r.cfg.Cache.TTL+r.cfg.Cache.StaleFor {
		return Answer{}, false
	}
	a := r.answer(TierCache, e.Text)
	a.CacheHit = true
	if a.Stale = age >= r.cfg.Cache.TTL; a.Stale {
		a.Confidence /= 2
	}
	return a, true
}

// Store caches a model's answer to q. Only full answers from a model tier
// belong here, never degraded text or a blocked request's redirect. Failures
// are logged, not returned: the cache must never fail a turn. It reports
// whether it called the cache.
func (r *Resolver) Store(ctx context.Context, q Question, text string) bool {
	if r.cache == nil || !r.cfg.has(TierCache) || text == "" {
		return false
	}
	key := CacheKey(q)
	if err := r.cache.Set(ctx, key, text); err != nil {
		r.logCacheError(ctx, "set", key, err)
	}
	return true
}

func (r *Resolver) logCacheError(ctx context.Context, op, key string, err error) {
	level := slog.LevelWarn
	if errors.Is(err, cache.ErrUnavailable) {
		level = slog.LevelDebug // the store's breaker is open; the failure that opened it was logged
	}
	r.log.Log(ctx, level, "fallback: response cache failed, skipping it",
		slog.String("op", op), slog.String("key", key), slog.Any("err", err))
}

// seedOf picks the graceful message from the question, so a user asking again
// sees the same one.
func seedOf(text string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(textfold.Question(text)))
	return h.Sum64()
}

// Config returns the configuration the Resolver was built with.
func (r *Resolver) Config() Config { return r.cfg }
