package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
)

func TestDiffNamesChangedFields(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"inline rate-limit fields", func(c *Config) { c.RateLimit.User.PerMinute.Rate = 3 }, []string{"rateLimit.user.perMinute.rate"}},
		{"a route added", func(c *Config) { c.RateLimit.Routes["chat"] = ratelimit.Rule{Limit: ratelimit.PerSecond(1, 1)} },
			[]string{"rateLimit.routes.chat"}},
		{"a model's price", func(c *Config) { c.Models[1].OutputPerMTok = 2 }, []string{"models[1].outputPerMTok"}},
		{"a model's aliases", func(c *Config) { c.Models[0].Aliases = []string{"s"} }, []string{"models[0].aliases"}},
		{"a tier removed", func(c *Config) { c.Models = c.Models[:1] }, []string{"models"}},
		{"priority keys", func(c *Config) { c.Quota.PauseAt[quota.P3] = 0.5 }, []string{"quota.pauseAt.P3"}},
		{"a durations and a string", func(c *Config) {
			c.Server.Addr = "127.0.0.1:9"
			c.Deadline.Idle = 9 * time.Second
		}, []string{"server.addr", "deadline.idle"}},
		{"an api key, redacted", func(c *Config) { c.Auth.Keys = map[string]Caller{"sk-secret-123": {UserID: "u"}} },
			[]string{"auth.keys.sk-s…"}},
		{"a breaker", func(c *Config) {
			b := c.Breakers["sonnet"]
			b.FailureThreshold++
			c.Breakers["sonnet"] = b
		}, []string{"breakers.sonnet.failureThreshold"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := Default(), Default()
			tt.give(&b)
			if got := Diff(a, b); !slices.Equal(got, tt.want) {
				t.Errorf("Diff = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckReloadRefusesRestartFields(t *testing.T) {
	tests := []struct {
		name        string
		give        func(*Config)
		wantChanged []string
		wantRestart []string
	}{
		{"limits, prices, budgets, keys and deadlines reload", func(c *Config) {
			c.RateLimit.User.PerMinute.Rate = 3
			c.Models[0].InputPerMTok = 4
			c.Models[0].MaxOutputTokens = 512
			c.Budget.DailyCostUSD = 1
			c.Quota.Models["haiku"] = quota.Ceiling{TPM: 10, RPM: 1}
			c.Deadline.FirstByte = 4 * time.Second
			c.Prompt.System = "be brief"
			c.Retry.MaxRetries = 1
		}, []string{"prompt.system", "models[0].inputPerMTok", "models[0].maxOutputTokens", "deadline.firstByte",
			"rateLimit.user.perMinute.rate", "budget.dailyCostUsd", "quota.models.haiku.tpm", "quota.models.haiku.rpm", "retry.maxRetries"}, nil},
		{"listener, redis and event store need a restart", func(c *Config) {
			c.Server.Addr = "0.0.0.0:80"
			c.Fleet.Redis = "127.0.0.1:6379"
			c.EventStore.Path = "other.db"
			c.RateLimit.Global.Rate = 1
		}, []string{"server.addr", "fleet.redis", "rateLimit.global.rate", "eventStore.path"},
			[]string{"server.addr", "fleet.redis", "eventStore.path"}},
		{"tiers, their providers and the model tiers of the cascade reload", func(c *Config) {
			c.Models[1].Name = "small"
			c.Models[0].Provider = "bedrock"
			c.Fallback.Tiers[1].Name = "small"
		}, []string{"models[0].provider", "models[1].name", "fallback.tiers[1].name"}, nil},
		{"the cascade below the models needs a restart", func(c *Config) {
			c.Fallback.Tiers[len(c.Fallback.Tiers)-2].Confidence = 0.2
		}, nil, []string{"fallback.tiers["}},
		{"embedding tiers need a restart", func(c *Config) {
			c.Embeddings[0].Endpoint = "https://example.com"
		}, nil, []string{"embeddings[0].endpoint"}},
		{"a guardrails profile without a remote check, and the choice of it, reload", func(c *Config) {
			c.Guardrails.Profiles = map[string]guardrail.Config{"storefront": {Email: guardrail.Redact}}
			c.Guardrails.Features = map[string]string{"recommend": "storefront"}
		}, []string{"guardrails.profiles.storefront", "guardrails.features.recommend"}, nil},
		{"a guardrails profile with a Bedrock guardrail needs a restart", func(c *Config) {
			c.Guardrails.Profiles = map[string]guardrail.Config{"storefront": {Bedrock: guardrail.BedrockConfig{GuardrailID: "gr-1", GuardrailVersion: "1", Region: "us-east-1"}}}
		}, nil, []string{"guardrails.profiles.storefront"}},
		{"the first key changes the hosts allowed", func(c *Config) {
			c.Auth.Keys = map[string]Caller{"sk-secret-123": {UserID: "u"}}
		}, []string{"auth.keys.sk-s…"}, []string{"auth.keys (adding the first key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := Default(), Default()
			tt.give(&b)
			changed, err := CheckReload(a, b)
			if tt.wantChanged != nil && !slices.Equal(changed, tt.wantChanged) {
				t.Errorf("changed = %q, want %q", changed, tt.wantChanged)
			}
			var re *RestartError
			if tt.wantRestart == nil {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want *RestartError", err)
			}
			if len(re.Fields) != len(tt.wantRestart) {
				t.Fatalf("restart fields %q, want %q", re.Fields, tt.wantRestart)
			}
			for i, w := range tt.wantRestart {
				if !strings.HasPrefix(re.Fields[i], w) {
					t.Errorf("restart field %d = %q, want %q", i, re.Fields[i], w)
				}
			}
			if !strings.Contains(err.Error(), "needs a restart") {
				t.Errorf("error %q does not say it needs a restart", err)
			}
		})
	}
}

func TestCheckReloadKeysWithAllowedHosts(t *testing.T) {
	a, b := Default(), Default()
	a.Server.AllowedHosts = []string{"gw.example.com"}
	b.Server.AllowedHosts = []string{"gw.example.com"}
	b.Auth.Keys = map[string]Caller{"sk-secret-123": {UserID: "u"}}
	if _, err := CheckReload(a, b); err != nil {
		t.Fatalf("a key added with server.allowedHosts set: %v, want it reloaded", err)
	}
}

// A tier keeps its provider across a reload that changes only what turns
// read per call; a new endpoint, model id or deployment needs a new one.
func TestSameConnection(t *testing.T) {
	base := Default().Models[0]
	tests := []struct {
		name string
		give func(*Model)
		want bool
	}{
		{"unchanged", func(*Model) {}, true},
		{"prices, bounds, aliases and capabilities", func(m *Model) {
			m.InputPerMTok, m.MaxOutputTokens, m.Confidence = 9, 10, 0.5
			m.Aliases = append(m.Aliases, "claude-next")
			m.Capabilities = []string{CapabilityText}
		}, true},
		{"model id", func(m *Model) { m.ModelID = "other" }, false},
		{"endpoint", func(m *Model) { m.Endpoint = "https://example.com" }, false},
		{"provider", func(m *Model) { m.Provider = "openai" }, false},
		{"a deployment", func(m *Model) { m.Deployments = []Deployment{{Name: "east", Weight: 1}} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := base
			b.Aliases = slices.Clone(base.Aliases)
			tt.give(&b)
			if got := SameConnection(base, b); got != tt.want {
				t.Errorf("SameConnection = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReloadable(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"models[3].inputPerMTok", true},
		{"models[3].endpoint", true},
		{"models", true},
		{"embeddings[0].provider", false},
		{"sim.models.sonnet.ttftMs", true},
		{"rateLimit.routes.chat.burst", true},
		{"rateLimit.redisTimeout", false},
		{"rateLimit", false},
		{"auth.keys.sk-s…", true},
		{"auth.trustUserHeader", false},
		{"budget.sessionTtl", false},
		{"deadline.idle", true},
		{"prompt.reloadInterval", false},
		{"retry.budget.ratio", false},
		{"guardrails.card", true},
		{"guardrails.denyTerms", true},
		{"guardrails.bedrock.onError", true},
		{"guardrails.bedrock.timeout", true},
		{"guardrails.bedrock.guardrailId", false},
		{"guardrails.bedrock.region", false},
		{"guardrails.profiles.storefront.email", true},
		{"guardrails.profiles.storefront.bedrock.onError", true},
		{"guardrails.profiles.storefront.bedrock.guardrailId", false},
		{"guardrails.routes.chat", true},
	}
	for _, tt := range tests {
		if got := Reloadable(tt.give); got != tt.want {
			t.Errorf("Reloadable(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
