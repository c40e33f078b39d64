package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/quota"
)

// TestEmbeddingTiersResolve: a request's model names an embedding tier by
// its name, its model id, an alias or a Bedrock ARN of its model; a chat
// tier's name is no embedding tier.
func TestEmbeddingTiersResolve(t *testing.T) {
	cfg, err := Parse(strings.NewReader(`
embeddings:
  - {name: titan-embed, provider: sim, modelId: amazon.titan-embed-text-v2:0, aliases: [titan], dimensions: 1024,
     allowedDimensions: [256, 512, 1024], maxInputTokens: 8192, inputPerMTok: 0.02, quota: {tpm: 1000, rpm: 10}}
  - {name: cohere-embed, provider: sim, modelId: cohere.embed-multilingual-v3, dimensions: 1024, maxInputTokens: 512,
     inputPerMTok: 0.1, quota: {tpm: 2000, rpm: 20}}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string
		want string
	}{
		{"titan-embed", "titan-embed"},
		{"amazon.titan-embed-text-v2:0", "titan-embed"},
		{"titan", "titan-embed"},
		{"arn:aws:bedrock:us-east-1::foundation-model/cohere.embed-multilingual-v3", "cohere-embed"},
		{"sonnet", ""},
		{"text-embedding-3-small", ""},
		{"", ""},
	}
	for _, tt := range tests {
		e, ok := cfg.ResolveEmbedding(tt.give)
		if ok != (tt.want != "") || e.Name != tt.want {
			t.Errorf("ResolveEmbedding(%q) = %q, %v; want %q", tt.give, e.Name, ok, tt.want)
		}
	}
	q := cfg.QuotaLedger()
	if q.Models["titan-embed"] != (quota.Ceiling{TPM: 1000, RPM: 10}) || q.Models["sonnet"] != cfg.Quota.Models["sonnet"] {
		t.Fatalf("ledger ceilings %+v", q.Models)
	}
	if _, ok := cfg.Quota.Models["titan-embed"]; ok {
		t.Fatal("QuotaLedger wrote into the config's own quota.models")
	}
	if titan, _ := cfg.Embedding("titan-embed"); !titan.Allows(256) || titan.Allows(1536) {
		t.Fatal("titan-embed's allowed dimensions")
	}
	if cohere, _ := cfg.Embedding("cohere-embed"); !cohere.Allows(1024) || cohere.Allows(512) {
		t.Fatal("a tier without allowedDimensions gives its dimensions alone")
	}
}

// TestEmbeddingTiersValidate: every problem of an embedding tier is named
// by its field path.
func TestEmbeddingTiersValidate(t *testing.T) {
	const ok = "provider: sim, modelId: m, dimensions: 8, maxInputTokens: 100, quota: {tpm: 10, rpm: 1}"
	tests := []struct {
		name string
		give string
		want string
	}{
		{"no name", "{" + ok + "}", "embeddings[0].name: must not be empty"},
		{"a chat tier's name", "{name: sonnet, " + ok + "}", `embeddings[0].name: "sonnet" is a chat tier's name`},
		{"twice", "{name: e, " + ok + "}\n  - {name: e, " + ok + "}", `embeddings[1].name: duplicate embedding tier "e"`},
		{"alias of another", "{name: e, " + ok + "}\n  - {name: f, aliases: [e], " + ok + "}", `embeddings[1].aliases[0]: "e" already names embedding tier "e"`},
		{"unknown provider", "{name: e, provider: anthropic, modelId: m, dimensions: 8, maxInputTokens: 1, quota: {tpm: 1, rpm: 1}}",
			`embeddings[0].provider: unknown provider "anthropic" (want one of sim, openai, bedrock)`},
		{"bedrock without region", "{name: e, provider: bedrock, modelId: amazon.titan-embed-text-v2:0, dimensions: 8, maxInputTokens: 1, quota: {tpm: 1, rpm: 1}}",
			"embeddings[0].region: bedrock needs an AWS region"},
		{"bedrock model it cannot speak", "{name: e, provider: bedrock, region: us-east-1, modelId: amazon.titan-embed-image-v1, dimensions: 8, maxInputTokens: 1, quota: {tpm: 1, rpm: 1}}",
			`embeddings[0].modelId: "amazon.titan-embed-image-v1": bedrock embedding tiers speak`},
		{"openai without model id", "{name: e, provider: openai, dimensions: 8, maxInputTokens: 1, quota: {tpm: 1, rpm: 1}}",
			"embeddings[0].modelId: must name the provider's model id"},
		{"no dimensions", "{name: e, provider: sim, maxInputTokens: 1, quota: {tpm: 1, rpm: 1}}", "embeddings[0].dimensions: must be > 0"},
		{"default not allowed", "{name: e, provider: sim, dimensions: 8, allowedDimensions: [4, 16], maxInputTokens: 1, quota: {tpm: 1, rpm: 1}}",
			"embeddings[0].allowedDimensions: must include dimensions (8)"},
		{"negative price", "{name: e, inputPerMTok: -1, " + ok + "}", "embeddings[0].inputPerMTok: must be >= 0"},
		{"no input bound", "{name: e, provider: sim, dimensions: 8, quota: {tpm: 1, rpm: 1}}", "embeddings[0].maxInputTokens: must be > 0"},
		{"no ceiling", "{name: e, provider: sim, dimensions: 8, maxInputTokens: 1}", "embeddings[0].quota.tpm: must be > 0"},
		{"misspelt field", "{name: e, dimension: 8, " + ok + "}", "embeddings[0].dimension: unknown field (did you mean dimensions?)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader("embeddings:\n  - " + tt.give + "\n"))
			var p *Problems
			if !errors.As(err, &p) {
				t.Fatalf("err %v, want *Problems", err)
			}
			for _, line := range p.List {
				if strings.HasPrefix(line, tt.want) {
					return
				}
			}
			t.Fatalf("problems:\n%s\nwant %q", strings.Join(p.List, "\n"), tt.want)
		})
	}
	_, err := Parse(strings.NewReader("quota:\n  models:\n    titan-embed: {tpm: 1, rpm: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), "quota.models.titan-embed: titan-embed is an embedding tier: its ceilings are embeddings[0].quota") {
		t.Fatalf("a chat ceiling for an embedding tier: %v", err)
	}
	if _, err := Parse(strings.NewReader("sim:\n  models:\n    titan-embed: {outage: true}\n")); err != nil {
		t.Fatalf("an embedding tier's sim settings refused: %v", err)
	}
	if _, err := Parse(strings.NewReader("embeddings: []\n")); err != nil {
		t.Fatalf("a config without embedding tiers refused: %v", err)
	}
}

// TestEmbeddingTiersReload: prices, lengths and ceilings apply on reload;
// a new tier, or another provider, needs a restart.
func TestEmbeddingTiersReload(t *testing.T) {
	cur := Default()
	next := Default()
	next.Embeddings = append([]Embedding(nil), cur.Embeddings...)
	next.Embeddings[0].InputPerMTok = 0.05
	next.Embeddings[0].Quota.TPM = 10
	if _, err := CheckReload(cur, next); err != nil {
		t.Fatalf("price and ceiling: %v", err)
	}
	next.Embeddings[1].Provider = "openai"
	var re *RestartError
	if _, err := CheckReload(cur, next); !errors.As(err, &re) || len(re.Fields) != 1 || re.Fields[0] != "embeddings[1].provider" {
		t.Fatalf("another provider: %v", err)
	}
	if sc := cur.SimConfig(); sc.Models["titan-embed"].ModelID != "amazon.titan-embed-text-v2:0" {
		t.Fatalf("the simulator's titan-embed: %+v", sc.Models["titan-embed"])
	}
}
