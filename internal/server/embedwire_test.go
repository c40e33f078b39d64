package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	sdk "github.com/openai/openai-go/v3"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// embedUpstream serves a simulator of Titan Text Embeddings v2 ("titan")
// and Cohere Embed ("cohere") on the vendors' wires (h2c, as `fmgate sim`
// does), standing in for Bedrock and an OpenAI-compatible server, with
// static AWS credentials in the environment for the bedrock embedders'
// default chain.
func embedUpstream(t *testing.T) (*sim.Sim, string) {
	t.Helper()
	home := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDSCENARIO", "AWS_SECRET_ACCESS_KEY": "scenario-secret", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	up, err := sim.New(sim.Config{Models: map[string]sim.Settings{"titan": {ModelID: titanID}, "cohere": {ModelID: cohereID}}}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(simserver.Handler(up))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return up, srv.URL
}

// wireEmbeddings gives cfg, beside its simulated titan-embed and
// cohere-embed tiers, the same two models through each wire to endpoint:
// titan-bedrock and cohere-bedrock on the bedrock provider (InvokeModel),
// titan-openai on the openai provider (POST /v1/embeddings). Each is asked
// for by name, so none falls to another.
func wireEmbeddings(cfg config.Config, endpoint string) config.Config {
	titan, _ := cfg.Embedding("titan-embed")
	cohere, _ := cfg.Embedding("cohere-embed")
	tb, to, cb := titan, titan, cohere
	tb.Name, tb.Provider, tb.Region, tb.Endpoint = "titan-bedrock", "bedrock", "us-east-1", endpoint
	to.Name, to.Provider, to.Endpoint = "titan-openai", "openai", endpoint+"/v1"
	cb.Name, cb.Provider, cb.Region, cb.Endpoint = "cohere-bedrock", "bedrock", "us-east-1", endpoint
	cfg.Embeddings = append(cfg.Embeddings, tb, to, cb)
	return cfg
}

// TestEmbeddingsSameVectorOnEveryProvider: one model gives one text the
// same vector, bit for bit, whether the gateway calls it in process, over
// Bedrock's InvokeModel (Titan one text a call, Cohere in batches) or over
// an OpenAI-compatible server, at its default length and at one asked
// for; and each path bills the same tokens.
func TestEmbeddingsSameVectorOnEveryProvider(t *testing.T) {
	_, endpoint := embedUpstream(t)
	es := newEmbedScenario(t, wireEmbeddings(quickConfig(), endpoint))
	texts := []string{"A fantasy manga about dragons and magic", "おすすめの少年漫画を教えて", "Where is my order?"}
	tests := []struct {
		model string
		tiers []string
		dims  int
	}{
		{titanID, []string{"titan-embed", "titan-bedrock", "titan-openai"}, 1024},
		{titanID, []string{"titan-embed", "titan-bedrock", "titan-openai"}, 256},
		{cohereID, []string{"cohere-embed", "cohere-bedrock"}, 1024},
	}
	c := es.client("wire-user")
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.model, tt.dims), func(t *testing.T) {
			for _, tier := range tt.tiers {
				p := embedParams(tier, texts...)
				if tt.dims != 1024 {
					p.Dimensions = sdk.Int(int64(tt.dims))
				}
				res, err := c.Embeddings.New(context.Background(), p)
				if err != nil {
					t.Fatalf("%s: %v", tier, err)
				}
				if res.Model != tt.model || int(res.Usage.PromptTokens) != tokensOf(texts...) || len(res.Data) != len(texts) {
					t.Fatalf("%s: model %q, %d tokens, %d vectors; want %s, %d tokens, %d vectors", tier, res.Model,
						res.Usage.PromptTokens, len(res.Data), tt.model, tokensOf(texts...), len(texts))
				}
				for i, d := range res.Data {
					if len(d.Embedding) != tt.dims || !isModelVector(d.Embedding, tt.model, texts[i]) {
						t.Fatalf("%s: vector %d (%d dimensions) is not the model's vector of %q", tier, i, len(d.Embedding), texts[i])
					}
				}
			}
		})
	}
	if n := es.embeds["titan-bedrock"].calls.Load() + es.embeds["titan-openai"].calls.Load() + es.embeds["cohere-bedrock"].calls.Load(); n != 5 {
		t.Fatalf("the wire tiers were called %d times; want 5, one a request", n)
	}
}
