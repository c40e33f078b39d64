package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	sdk "github.com/openai/openai-go/v3"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
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

// TestEmbeddingsCostReconciles: every embedding call the gateway makes —
// the catalog's items at start (over Bedrock's wire), each chat turn's
// question, and /v1/embeddings calls on every tier, in process and over
// both wires, with the upstreams failing a fifth of their calls (so that
// attempts are retried, fall to the next tier, or fail after some of a
// request's texts were billed) — is in the events with the tokens and cost
// the simulators billed, to within 0.1%: the cost views count what the
// vendors bill. The catalog's calls are attributed to feature
// catalog-index, and each chat turn carries its question's embedding.
func TestEmbeddingsCostReconciles(t *testing.T) {
	up, endpoint := embedUpstream(t)
	cfg := withCatalog(wireEmbeddings(quickConfig(), endpoint))
	// The catalog is embedded through Bedrock: titan-bedrock first.
	cfg.Embeddings = append([]config.Embedding{cfg.Embeddings[2]}, append(cfg.Embeddings[:2:2], cfg.Embeddings[3:]...)...)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Rate = 1
	es := newEmbedScenario(t, cfg)
	if v := es.s.catalogSvc.Vectors(); v == nil || v.Tier != "titan-bedrock" {
		t.Fatalf("catalog vectors %+v; want them from titan-bedrock", v)
	}
	flaky := map[provider.Kind]float64{provider.KindUnavailable: 0.2}
	for _, m := range []string{"titan", "cohere"} {
		st, _ := up.Settings(m)
		st.ErrorRate = flaky
		if err := up.SetSettings(m, st); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := es.s.Sim.Settings("titan-embed")
	st.ErrorRate = flaky
	if err := es.s.Sim.SetSettings("titan-embed", st); err != nil {
		t.Fatal(err)
	}

	texts := []string{"A fantasy manga about dragons", "おすすめの少年漫画", "Where is my order?", "One Piece volume 107", "Frieren"}
	tiers := []string{"titan-bedrock", "titan-openai", "titan-embed", "cohere-bedrock", "cohere-embed"}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			c := es.client(fmt.Sprintf("reconcile-%d", i))
			_, _ = c.Embeddings.New(context.Background(), embedParams(tiers[i%len(tiers)], texts[:1+(i/len(tiers))%len(texts)]...))
		})
	}
	for i := range 8 {
		wg.Go(func() {
			es.chat(fmt.Sprintf("reconcile-chat-%d", i), []string{"ワンピースの最新刊は？", "Recommend a fantasy manga"}[i%2], "")
		})
	}
	wg.Wait()
	es.s.Close() // flush the events

	spans := readSpans(t, path)
	feature := map[string]string{} // by trace: its turn's feature
	for _, e := range spans {
		if e.Name == "turn" && e.ParentSpanID == "" {
			feature[e.TraceID] = e.Attribution.Feature
		}
	}
	// billedBy names the simulator, and its model, that billed each tier.
	billedBy := map[string]struct {
		sim   *sim.Sim
		model string
	}{
		"titan-bedrock": {up, "titan"}, "titan-openai": {up, "titan"}, "cohere-bedrock": {up, "cohere"},
		"titan-embed": {es.s.Sim, "titan-embed"}, "cohere-embed": {es.s.Sim, "cohere-embed"},
	}
	type sum struct {
		tokens int
		cost   float64
	}
	got := map[string]sum{}
	byFeature := map[string]float64{}
	for _, e := range spans {
		b, ok := billedBy[e.Node.NodeID]
		if e.Name != "model_attempt" || !ok {
			continue
		}
		s := got[b.model]
		s.tokens += e.Resource.TokensIn
		s.cost += e.Resource.CostUSD
		got[b.model] = s
		byFeature[feature[e.TraceID]] += e.Resource.CostUSD
	}
	for _, b := range billedBy {
		if _, ok := got[b.model]; !ok {
			continue // counted once per model
		}
		u := b.sim.Usage(b.model)
		price := map[string]float64{"titan": 0.02, "titan-embed": 0.02, "cohere": 0.10, "cohere-embed": 0.10}[b.model]
		billed := float64(u.InputTokens) * price / 1e6
		g := got[b.model]
		t.Logf("%s: events %d tokens $%.8f, simulator %d tokens $%.8f", b.model, g.tokens, g.cost, u.InputTokens, billed)
		if billed == 0 || math.Abs(g.cost-billed)/billed > 0.001 || g.tokens != u.InputTokens {
			t.Errorf("%s: the events count %d tokens, $%.8f; the simulator billed %d tokens, $%.8f", b.model, g.tokens, g.cost, u.InputTokens, billed)
		}
		delete(got, b.model)
	}
	if byFeature["catalog-index"] == 0 || byFeature["embeddings"] == 0 || byFeature["chat"] == 0 {
		t.Fatalf("embedding cost by feature %v; want the catalog's, the calls' and the chat turns' questions'", byFeature)
	}
}
