package fallback

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/fallback/cache"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 19, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newResolver(t *testing.T, cfg Config, c cache.Cache, clk *fakeClock) (*Resolver, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	r, err := New(cfg, Deps{
		Cache:  c,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:    clk.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r, &logs
}

const cachedText = "Cached: One Piece is our top seller."

func TestAnswerByReason(t *testing.T) {
	faqQ := Question{Text: "送料はいくらですか", Locale: "ja", PromptVersion: "v1"}
	otherQ := Question{Text: "What is new this week?", Locale: "en", PromptVersion: "v1"}
	tests := []struct {
		name      string
		q         Question
		reason    Reason
		cached    bool
		wantTier  string
		wantText  string // prefix
		wantFAQID string
	}{
		{"circuit open serves the cache", otherQ, ReasonCircuitOpen, true, TierCache, cachedText, ""},
		{"circuit open, miss, FAQ", faqQ, ReasonCircuitOpen, false, TierFAQ, "国内の通常配送", "shipping"},
		{"error serves the cache before the FAQ", faqQ, ReasonError, true, TierCache, cachedText, ""},
		{"error, miss, FAQ in the asker's language", faqQ, ReasonError, false, TierFAQ, "国内の通常配送", "shipping"},
		{"error, miss, no FAQ match, graceful", otherQ, ReasonError, false, TierGraceful, "I", ""},
		{"timeout after simplified failed: cache", otherQ, ReasonModelTimeout, true, TierCache, cachedText, ""},
		{"timeout, miss, FAQ", Question{Text: "can I get a refund?", Locale: "en"}, ReasonModelTimeout, false, TierFAQ, "You can return unopened manga", "returns"},
		{"guardrail never serves the cache", otherQ, ReasonGuardrail, true, TierGraceful, "I cannot help with that request.", ""},
		{"guardrail never serves the FAQ", faqQ, ReasonGuardrail, true, TierGraceful, "そのリクエストにはお応えできません。", ""},
		{"unknown reason behaves as error", otherQ, Reason("weird"), true, TierCache, cachedText, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, _ := newResolver(t, DefaultConfig(), cache.NewMemory(DefaultConfig().Cache, clk.Now), clk)
			if tt.cached {
				r.Store(context.Background(), tt.q, cachedText)
			}
			got := r.Answer(context.Background(), tt.q, tt.reason)
			if got.Tier != tt.wantTier || !strings.HasPrefix(got.Text, tt.wantText) || got.FAQID != tt.wantFAQID {
				t.Fatalf("Answer = %+v, want tier %s, text prefix %q, faq %q", got, tt.wantTier, tt.wantText, tt.wantFAQID)
			}
			if !got.Degraded {
				t.Error("a non-model answer must be degraded")
			}
			if want := DefaultConfig().Confidence(tt.wantTier); got.Confidence != want {
				t.Errorf("Confidence = %v, want %v", got.Confidence, want)
			}
			if got.CacheHit != (tt.wantTier == TierCache) {
				t.Errorf("CacheHit = %v for tier %s", got.CacheHit, got.Tier)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	noCache := DefaultConfig()
	noCache.Tiers = []Tier{{"sonnet", 1}, {TierFAQ, 0.3}, {TierGraceful, 0.1}}
	tests := []struct {
		name   string
		cfg    Config
		reason Reason
		want   []Step
	}{
		{"circuit open", DefaultConfig(), ReasonCircuitOpen, []Step{StepCache, StepFAQ, StepGraceful}},
		{"timeout", DefaultConfig(), ReasonModelTimeout, []Step{StepSimplified, StepCache, StepFAQ, StepGraceful}},
		{"guardrail", DefaultConfig(), ReasonGuardrail, []Step{StepRedirect}},
		{"error", DefaultConfig(), ReasonError, []Step{StepCache, StepFAQ, StepGraceful}},
		{"cache tier removed", noCache, ReasonCircuitOpen, []Step{StepFAQ, StepGraceful}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.Plan(tt.reason)
			if strings.Join(steps(got), ",") != strings.Join(steps(tt.want), ",") {
				t.Errorf("Plan(%s) = %v, want %v", tt.reason, got, tt.want)
			}
		})
	}
}

func steps(s []Step) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = string(x)
	}
	return out
}

func TestReasonFor(t *testing.T) {
	tests := []struct {
		give error
		want Reason
	}{
		{&provider.Error{Kind: provider.KindGuardrail}, ReasonGuardrail},
		{&provider.Error{Kind: provider.KindTimeout}, ReasonModelTimeout},
		{context.DeadlineExceeded, ReasonModelTimeout},
		{&provider.Error{Kind: provider.KindThrottled}, ReasonError},
		{errors.New("boom"), ReasonError},
	}
	for _, tt := range tests {
		if got := ReasonFor(tt.give); got != tt.want {
			t.Errorf("ReasonFor(%v) = %s, want %s", tt.give, got, tt.want)
		}
	}
}

func TestCacheTierRemovedIsNeverUsed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Tiers = []Tier{{"sonnet", 1}, {TierFAQ, 0.3}, {TierGraceful, 0.1}}
	clk := newFakeClock()
	mem := cache.NewMemory(cfg.Cache, clk.Now)
	r, _ := newResolver(t, cfg, mem, clk)
	q := Question{Text: "What is new this week?", Locale: "en"}
	r.Store(context.Background(), q, cachedText)
	if mem.Len() != 0 {
		t.Error("Store wrote to a cache that is not a configured tier")
	}
	if got := r.Answer(context.Background(), q, ReasonCircuitOpen); got.Tier != TierGraceful {
		t.Errorf("Answer tier = %s, want graceful", got.Tier)
	}
}

// An entry past its TTL is still served for staleFor, with half the cache
// tier's confidence, and the next answer a model gives replaces it.
func TestStaleEntries(t *testing.T) {
	cfg := DefaultConfig() // TTL 1h, staleFor 10m
	q := Question{Text: "What is new this week?", Locale: "en", PromptVersion: "v1"}
	full := cfg.Confidence(TierCache)
	tests := []struct {
		name           string
		age            time.Duration
		wantTier       string
		wantStale      bool
		wantConfidence float64
	}{
		{"fresh", 59 * time.Minute, TierCache, false, full},
		{"at TTL it is stale", time.Hour, TierCache, true, full / 2},
		{"within staleFor", time.Hour + 9*time.Minute, TierCache, true, full / 2},
		{"past staleFor", time.Hour + 10*time.Minute, TierGraceful, false, cfg.Confidence(TierGraceful)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			r, _ := newResolver(t, cfg, cache.NewMemory(cfg.Cache, clk.Now), clk)
			r.Store(context.Background(), q, cachedText)
			clk.Advance(tt.age)
			got := r.Answer(context.Background(), q, ReasonError)
			if got.Tier != tt.wantTier || got.Stale != tt.wantStale || got.Confidence != tt.wantConfidence {
				t.Errorf("after %v: tier %s stale %v confidence %v, want %s stale %v confidence %v",
					tt.age, got.Tier, got.Stale, got.Confidence, tt.wantTier, tt.wantStale, tt.wantConfidence)
			}
			// A model's next answer to the question refreshes the entry.
			r.Store(context.Background(), q, "fresh answer")
			if got := r.Answer(context.Background(), q, ReasonError); got.Stale || got.Text != "fresh answer" {
				t.Errorf("after a new model answer: %+v; want it fresh", got)
			}
		})
	}
}

// The same question asked with different width, case, spacing or final
// punctuation is a cache hit, whatever the locale field says (the answer is
// in the message's language); another language or prompt version is not.
func TestCacheHitAcrossSpellings(t *testing.T) {
	clk := newFakeClock()
	r, _ := newResolver(t, DefaultConfig(), cache.NewMemory(DefaultConfig().Cache, clk.Now), clk)
	stored := Question{Text: "Is Chainsaw Man volume 17 out?", Locale: "en-US", PromptVersion: "v3"}
	r.Store(context.Background(), stored, cachedText)
	tests := []struct {
		give Question
		want bool
	}{
		{Question{Text: "is chainsaw man volume 17 out", Locale: "en", PromptVersion: "v3"}, true},
		{Question{Text: "ＩＳ　Ｃｈａｉｎｓａｗ　Ｍａｎ　ｖｏｌｕｍｅ　１７　ｏｕｔ？！", Locale: "EN", PromptVersion: "v3"}, true},
		{Question{Text: "Is Chainsaw Man volume 17 out?", Locale: "ja", PromptVersion: "v3"}, true},
		{Question{Text: "チェンソーマンの17巻は出ていますか", Locale: "en", PromptVersion: "v3"}, false},
		{Question{Text: "Is Chainsaw Man volume 17 out?", Locale: "en", PromptVersion: "v4"}, false},
		{Question{Text: "Is Chainsaw Man volume 18 out?", Locale: "en", PromptVersion: "v3"}, false},
	}
	for _, tt := range tests {
		if got := r.Answer(context.Background(), tt.give, ReasonError).CacheHit; got != tt.want {
			t.Errorf("%+v: CacheHit = %v, want %v", tt.give, got, tt.want)
		}
	}
}

func TestRedisDownStillAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	cfg := DefaultConfig()
	clk := newFakeClock()
	r, logs := newResolver(t, cfg, cache.NewRedis(client, DefaultKeyPrefix, cfg.Cache), clk)

	tests := []struct {
		q        Question
		wantTier string
	}{
		{Question{Text: "配送にどれくらいかかりますか", Locale: "ja"}, TierFAQ},
		{Question{Text: "tell me a joke about cats", Locale: "en"}, TierGraceful},
	}
	for _, tt := range tests {
		start := time.Now()
		r.Store(context.Background(), tt.q, "model answer")
		got := r.Answer(context.Background(), tt.q, ReasonCircuitOpen)
		if got.Tier != tt.wantTier || got.Text == "" {
			t.Errorf("%q: Answer = %+v, want tier %s", tt.q.Text, got, tt.wantTier)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%q took %v with Redis down", tt.q.Text, d)
		}
	}
	if !strings.Contains(logs.String(), "response cache failed") {
		t.Errorf("cache failure not logged; log:\n%s", logs)
	}
}

func TestRedisCacheTier(t *testing.T) {
	client, prefix := redistest.Client(t)
	cfg := DefaultConfig()
	r, _ := newResolver(t, cfg, cache.NewRedis(client, prefix, cfg.Cache), nil)
	r.now = time.Now
	q := Question{Text: "ONE PIECEの最新刊は？", Locale: "ja", PromptVersion: "v1"}
	r.Store(context.Background(), q, "最新刊は第110巻です。")
	got := r.Answer(context.Background(), q, ReasonCircuitOpen)
	if got.Tier != TierCache || got.Text != "最新刊は第110巻です。" || got.Stale {
		t.Fatalf("Answer = %+v, want a fresh cache hit", got)
	}
	ttl, err := client.PTTL(context.Background(), prefix+CacheKey(q)).Result()
	if err != nil || ttl <= time.Hour || ttl > time.Hour+10*time.Minute {
		t.Errorf("entry under the key prefix expires in %v (err %v), want TTL+staleFor = 1h10m", ttl, err)
	}
}

func TestGracefulAnswerIsStablePerQuestion(t *testing.T) {
	clk := newFakeClock()
	r, _ := newResolver(t, DefaultConfig(), nil, clk)
	q := Question{Text: "今日の天気は？", Locale: "ja"}
	a := r.Answer(context.Background(), q, ReasonError)
	b := r.Answer(context.Background(), Question{Text: "今日の天気は", Locale: "ja-JP"}, ReasonError)
	if a.Tier != TierGraceful || a.Text != b.Text {
		t.Errorf("graceful answers differ for the same question: %q vs %q", a.Text, b.Text)
	}
	if !strings.Contains(a.Text, "support@mangaassist.jp") {
		t.Errorf("graceful answer lacks the support address: %q", a.Text)
	}
}
