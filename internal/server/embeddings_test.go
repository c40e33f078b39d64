package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redistest"
)

// countingEmbedder wraps an embedding tier's backend: it counts calls and,
// while down, fails each as an upstream 503 would.
type countingEmbedder struct {
	provider.Embedder
	calls atomic.Int64
	down  atomic.Bool
}

func (c *countingEmbedder) Embed(ctx context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	c.calls.Add(1)
	if c.down.Load() {
		return nil, &provider.Error{Kind: provider.KindUnavailable, Model: req.Model, Status: 503, Err: errors.New("upstream 503")}
	}
	return c.Embedder.Embed(ctx, req)
}

// embedScenario is a gateway whose chat providers and embedding tiers are
// counted.
type embedScenario struct {
	*scenario
	embeds map[string]*countingEmbedder
}

func newEmbedScenario(t *testing.T, cfg config.Config) *embedScenario {
	t.Helper()
	es := &embedScenario{scenario: &scenario{t: t, upstream: map[string]*counting{}}, embeds: map[string]*countingEmbedder{}}
	s, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t),
		WrapProvider: func(model string, p provider.Provider) provider.Provider {
			c := &counting{Provider: p}
			es.upstream[model] = c
			return c
		},
		WrapEmbedder: func(tier string, e provider.Embedder) provider.Embedder {
			c := &countingEmbedder{Embedder: e}
			es.embeds[tier] = c
			return c
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	es.s = s
	es.srv = httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(es.srv.Close)
	return es
}

// client is the official Go SDK pointed at the gateway, as user.
func (es *embedScenario) client(user string, opts ...option.RequestOption) *sdk.Client {
	c := sdk.NewClient(append([]option.RequestOption{option.WithBaseURL(es.srv.URL + "/v1/"), option.WithAPIKey("sk-app"),
		option.WithMaxRetries(0), option.WithHeader("X-User-Id", user)}, opts...)...)
	return &c
}

// chatCalls is the calls the chat tiers got.
func (es *embedScenario) chatCalls() int64 { return es.attempts() }

func embedParams(model string, inputs ...string) sdk.EmbeddingNewParams {
	return sdk.EmbeddingNewParams{Model: model, Input: sdk.EmbeddingNewParamsInputUnion{OfArrayOfStrings: inputs}}
}

func cosine(a, b []float64) float64 {
	var dot, na, nb float64
	for i := range a {
		dot, na, nb = dot+a[i]*b[i], na+a[i]*a[i], nb+b[i]*b[i]
	}
	return dot / math.Sqrt(na*nb)
}

// isModelVector reports whether got is the simulated model's vector of
// text, bit for bit.
func isModelVector(got []float64, modelID, text string) bool {
	want := sim.EmbedText(modelID, text, len(got))
	for i := range got {
		if float32(got[i]) != want[i] {
			return false
		}
	}
	return len(got) > 0
}

func tokensOf(texts ...string) int {
	n := 0
	for _, s := range texts {
		n += sim.CountTokens(s)
	}
	return n
}

const (
	titanID  = "amazon.titan-embed-text-v2:0"
	cohereID = "cohere.embed-multilingual-v3"
)

// TestEmbeddingsThroughTheGoSDK: the Go SDK's Embeddings.New gets one
// vector per input from the first embedding tier: the same text the same
// vector, call after call; similar texts nearer than unrelated ones; the
// length asked for; base64 decoded by the SDK to the same floats; usage
// counted with the tokenizer. No chat tier is called.
func TestEmbeddingsThroughTheGoSDK(t *testing.T) {
	es := newEmbedScenario(t, quickConfig())
	c := es.client("embed-user")
	texts := []string{"A fantasy manga about dragons and magic", "fantasy manga with dragons", "how do I return a damaged book", "A fantasy manga about dragons and magic"}
	var raw *http.Response
	res, err := c.Embeddings.New(context.Background(), embedParams("titan-embed", texts...), option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if res.Model != titanID || len(res.Data) != len(texts) || int(res.Usage.PromptTokens) != tokensOf(texts...) || res.Usage.TotalTokens != res.Usage.PromptTokens {
		t.Fatalf("model %q, %d vectors, usage %+v", res.Model, len(res.Data), res.Usage)
	}
	if raw.Header.Get("X-Fmgate-Tier") != "titan-embed" || raw.Header.Get("X-Fmgate-Degraded") != "false" || raw.Header.Get("X-Fmgate-Trace-Id") == "" {
		t.Fatalf("headers %v", raw.Header)
	}
	v := make([][]float64, len(res.Data))
	for i, d := range res.Data {
		if int(d.Index) != i || len(d.Embedding) != 1024 || !isModelVector(d.Embedding, titanID, texts[i]) {
			t.Fatalf("item %d: index %d, %d dimensions, the model's vector: %v", i, d.Index, len(d.Embedding), isModelVector(d.Embedding, titanID, texts[i]))
		}
		v[i] = d.Embedding
	}
	if near, far := cosine(v[0], v[1]), cosine(v[0], v[2]); near <= far+0.3 {
		t.Fatalf("cosine to a similar text %.3f, to an unrelated one %.3f", near, far)
	}
	if cosine(v[0], v[3]) < 1-1e-6 {
		t.Fatal("one text twice in a call got two vectors")
	}

	again, err := c.Embeddings.New(context.Background(), sdk.EmbeddingNewParams{Model: titanID,
		Input: sdk.EmbeddingNewParamsInputUnion{OfString: sdk.String(texts[0])}, Dimensions: sdk.Int(256),
		EncodingFormat: sdk.EmbeddingNewParamsEncodingFormatBase64})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Data) != 1 || len(again.Data[0].Embedding) != 256 || !isModelVector(again.Data[0].Embedding, titanID, texts[0]) {
		t.Fatalf("256 dimensions in base64, by model id: %d dimensions", len(again.Data[0].Embedding))
	}
	third, err := c.Embeddings.New(context.Background(), embedParams("titan-embed", texts[0]))
	if err != nil || !isModelVector(third.Data[0].Embedding, titanID, texts[0]) || cosine(third.Data[0].Embedding, v[0]) < 1-1e-9 {
		t.Fatalf("the same text again: %v", err)
	}
	if n := es.chatCalls(); n != 0 {
		t.Fatalf("embedding calls reached the chat tiers %d times", n)
	}
	if n := es.embeds["cohere-embed"].calls.Load(); n != 0 {
		t.Fatalf("the second embedding tier was called %d times with the first one up", n)
	}
}

// TestEmbeddingsFallBackToTheNextTier: with the first embedding tier
// failing, the call is answered by the second, marked degraded and named
// by its model; its breaker then spares the failing tier most calls. A
// simulated outage through the admin API does the same.
func TestEmbeddingsFallBackToTheNextTier(t *testing.T) {
	t.Run("upstream 503", func(t *testing.T) {
		es := newEmbedScenario(t, quickConfig())
		es.embeds["titan-embed"].down.Store(true)
		const n = 30
		for i := range n {
			c := es.client(fmt.Sprintf("fallback-user-%d", i)) // under the per-user limits
			var raw *http.Response
			text := fmt.Sprintf("volume %d of a fantasy manga", i)
			res, err := c.Embeddings.New(context.Background(), embedParams("titan-embed", text), option.WithResponseInto(&raw))
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if res.Model != cohereID || raw.Header.Get("X-Fmgate-Tier") != "cohere-embed" || raw.Header.Get("X-Fmgate-Degraded") != "true" {
				t.Fatalf("call %d: model %q tier %q degraded %q; want cohere's degraded answer", i, res.Model, raw.Header.Get("X-Fmgate-Tier"), raw.Header.Get("X-Fmgate-Degraded"))
			}
			if !isModelVector(res.Data[0].Embedding, cohereID, text) {
				t.Fatalf("call %d: not cohere's vector", i)
			}
		}
		titan := es.embeds["titan-embed"].calls.Load()
		if titan == 0 || titan > n/2 {
			t.Fatalf("the failing tier was called %d times for %d calls; want tried, then spared by its breaker", titan, n)
		}
		if es.chatCalls() != 0 {
			t.Fatal("a chat tier was called")
		}
	})
	t.Run("simulated outage", func(t *testing.T) {
		es := newEmbedScenario(t, quickConfig())
		adminPut(t, es.srv, "/admin/sim/titan-embed", `{"outage":true}`)
		res, err := es.client("outage-user").Embeddings.New(context.Background(), embedParams("titan-embed", "hello"))
		if err != nil || res.Model != cohereID {
			t.Fatalf("model %v, err %v; want cohere's answer", res, err)
		}
	})
}

// TestEmbeddingsEveryTierDown: with every embedding tier failing, the
// client gets a 503 with Retry-After in OpenAI's error shape: never a
// chat answer. A length only the failing tier gives does not fall to a
// tier that would give another.
func TestEmbeddingsEveryTierDown(t *testing.T) {
	es := newEmbedScenario(t, quickConfig())
	es.embeds["titan-embed"].down.Store(true)
	adminPut(t, es.srv, "/admin/sim/cohere-embed", `{"outage":true}`)
	c := es.client("down-user")
	for _, p := range []sdk.EmbeddingNewParams{embedParams("titan-embed", "hello"), embedParams("cohere-embed", "hello")} {
		_, err := c.Embeddings.New(context.Background(), p)
		var apiErr *sdk.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Type != "server_error" || apiErr.Code != "upstream_failed" {
			t.Fatalf("%s: %v; want 503 upstream_failed", p.Model, err)
		}
		if s, err := strconv.Atoi(apiErr.Response.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Fatalf("%s: Retry-After %q", p.Model, apiErr.Response.Header.Get("Retry-After"))
		}
	}
	before := es.embeds["cohere-embed"].calls.Load()
	p := embedParams("titan-embed", "hello")
	p.Dimensions = sdk.Int(256)
	if _, err := c.Embeddings.New(context.Background(), p); err == nil {
		t.Fatal("256 dimensions answered with titan down")
	}
	if es.embeds["cohere-embed"].calls.Load() != before {
		t.Fatal("a call for 256 dimensions went to a tier that gives 1024")
	}
	if es.chatCalls() != 0 {
		t.Fatal("a chat tier was called")
	}
}

// TestEmbeddingsRefusals: an unknown model is a 404 and a length the tier
// cannot give or an input longer than it takes a 400, in OpenAI's shape,
// each naming what was wrong; over the route's rate limit the caller gets
// 429 with Retry-After.
func TestEmbeddingsRefusals(t *testing.T) {
	cfg := quickConfig()
	cfg.RateLimit.Routes = map[string]ratelimit.Rule{"embeddings": {Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}}
	es := newEmbedScenario(t, cfg)
	c := es.client("refused-user")
	long := strings.Repeat("dragon ", 600)
	tests := []struct {
		name       string
		give       sdk.EmbeddingNewParams
		wantStatus int
		wantCode   string
		wantParam  string
		wantMsg    string
	}{
		{"unknown model", embedParams("text-embedding-3-small", "hello"), http.StatusNotFound, "model_not_found", "model", "does not exist"},
		{"chat tier", embedParams("sonnet", "hello"), http.StatusNotFound, "model_not_found", "model", "does not exist"},
		{"length the tier cannot give", func() sdk.EmbeddingNewParams {
			p := embedParams("titan-embed", "hello")
			p.Dimensions = sdk.Int(1536)
			return p
		}(), http.StatusBadRequest, "invalid_request", "dimensions", "dimensions: embedding tier titan-embed gives vectors of 256, 512 or 1024 dimensions, not 1536"},
		{"input too long for the tier", embedParams("cohere-embed", "short", long), http.StatusBadRequest, "invalid_request", "input", "input[1] is about"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Embeddings.New(context.Background(), tt.give)
			var apiErr *sdk.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("%v; want an API error", err)
			}
			if apiErr.StatusCode != tt.wantStatus || apiErr.Code != tt.wantCode || apiErr.Param != tt.wantParam || !strings.Contains(apiErr.Message, tt.wantMsg) {
				t.Fatalf("%v (param %q); want %d %s on %q saying %q", err, apiErr.Param, tt.wantStatus, tt.wantCode, tt.wantParam, tt.wantMsg)
			}
		})
	}
	// The refusals above came before admission. The long input fits the
	// first tier; then the route's limit refuses.
	if _, err := c.Embeddings.New(context.Background(), embedParams("titan-embed", long)); err != nil {
		t.Fatalf("a long input on titan-embed: %v", err)
	}
	_, err := c.Embeddings.New(context.Background(), embedParams("titan-embed", "hello"))
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limited" || apiErr.Response.Header.Get("Retry-After") == "" {
		t.Fatalf("over the route's limit: %v; want 429 rate_limited with Retry-After", err)
	}
}

// TestEmbeddingsCostInTheViews: each call is one turn in the cost views,
// under its feature ("embeddings", or the one the caller names) and its
// model, costing its input tokens at the tier's price, as the answer's
// usage says; the tier's quota ledger counts it under the tier's name.
func TestEmbeddingsCostInTheViews(t *testing.T) {
	cfg := quickConfig()
	cfg.UnitCosts = config.UnitCosts{} // the model's cost alone
	es := newEmbedScenario(t, cfg)
	titan, _ := cfg.Embedding("titan-embed")
	byFeature := map[string][]string{
		"embeddings":    {"Recommend a fantasy manga", "おすすめの漫画を教えて", "Where is my order?"},
		"catalog-index": {"One Piece volume 107", "Spy x Family volume 12"},
	}
	want := map[string]float64{}
	tokens := 0
	for feature, texts := range byFeature {
		var opts []option.RequestOption
		if feature != "embeddings" {
			opts = append(opts, option.WithHeader("X-Fmgate-Feature", feature))
		}
		c := es.client("cost-user", opts...)
		for _, text := range texts {
			res, err := c.Embeddings.New(context.Background(), embedParams("titan-embed", text))
			if err != nil {
				t.Fatal(err)
			}
			n := tokensOf(text)
			cost := float64(n) * titan.InputPerMTok / 1e6
			got, _ := strconv.ParseFloat(res.Usage.JSON.ExtraFields["cost_usd"].Raw(), 64)
			if int(res.Usage.PromptTokens) != n || math.Abs(got-cost) > cost*1e-9 {
				t.Fatalf("%q: usage %d tokens, cost_usd %v; want %d tokens at $%v", text, res.Usage.PromptTokens, got, n, cost)
			}
			want[feature] += cost
			tokens += n
		}
	}
	type row struct {
		Key      string  `json:"key"`
		Turns    int     `json:"turns"`
		CostUSD  float64 `json:"costUsd"`
		TokensIn int     `json:"tokensIn"`
	}
	var rep struct {
		Rows []row `json:"rows"`
	}
	find := func(key string) (row, bool) {
		for _, r := range rep.Rows {
			if r.Key == key {
				return r, true
			}
		}
		return row{}, false
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		getJSON(t, es.srv, "/admin/cost?by=feature&from=-1h", &rep)
		e, ok1 := find("embeddings")
		ci, ok2 := find("catalog-index")
		if ok1 && ok2 && e.Turns == 3 && ci.Turns == 2 {
			for feature, r := range map[string]row{"embeddings": e, "catalog-index": ci} {
				if math.Abs(r.CostUSD-want[feature]) > want[feature]*1e-6 {
					t.Errorf("feature %s: $%.10f in the view; its calls cost $%.10f", feature, r.CostUSD, want[feature])
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cost view by feature never showed the calls: %+v", rep.Rows)
		}
	}
	getJSON(t, es.srv, "/admin/cost?by=model&from=-1h", &rep)
	m, ok := find(titanID)
	total := want["embeddings"] + want["catalog-index"]
	if !ok || m.Turns != 5 || m.TokensIn != tokens || math.Abs(m.CostUSD-total) > total*1e-6 {
		t.Fatalf("the cost view by model: %+v; want 5 turns, %d tokens, $%.10f", m, tokens, total)
	}
	snap, err := es.s.Quota.Saturation(context.Background(), "titan-embed")
	if err != nil || snap.RequestsUsed != 5 || snap.TokensUsed != tokens {
		t.Fatalf("titan-embed's quota: %+v, %v; want 5 requests and %d tokens", snap, err, tokens)
	}
}

// TestEmbeddingsSpendTheDailyBudget: an embedding call's cost goes to its
// caller's daily cost budget: with room for one call, the second is
// refused (402), the day's limit reached rather than held by a call in
// flight.
func TestEmbeddingsSpendTheDailyBudget(t *testing.T) {
	const text = "A fantasy manga about dragons"
	cfg := quickConfig()
	titan, _ := cfg.Embedding("titan-embed")
	cfg.Budget.DailyCostUSD = 1.5 * float64(tokensOf(text)) * titan.InputPerMTok / 1e6
	es := newEmbedScenario(t, cfg)
	c := es.client("budget-user")
	p := embedParams("titan-embed", text)
	p.Dimensions = sdk.Int(256) // titan-embed alone gives it: the call is held at its price
	if _, err := c.Embeddings.New(context.Background(), p); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := c.Embeddings.New(context.Background(), p)
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusPaymentRequired || apiErr.Code != "budget_exceeded" ||
		!strings.Contains(apiErr.Message, "today's usage limit") || apiErr.Response.Header.Get("Retry-After") == "" {
		t.Fatalf("second call: %v; want 402 budget_exceeded, the day's limit reached", err)
	}
	if _, err := es.client("another-user").Embeddings.New(context.Background(), p); err != nil {
		t.Fatalf("another user's call: %v", err)
	}
}

// TestEmbeddingsInFleetMode: with shared state in Redis, an embedding call
// is admitted, reserved, guarded and budgeted there: the fleet's quota
// ledger counts it under the tier's name, and a second instance on the
// same Redis sees the breaker the first one's failures opened.
func TestEmbeddingsInFleetMode(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	es := newEmbedScenario(t, cfg)
	res, err := es.client("fleet-embed-user").Embeddings.New(context.Background(), embedParams("titan-embed", "おすすめの漫画"))
	if err != nil || res.Model != titanID {
		t.Fatalf("fleet call: %v, %v", res, err)
	}
	snap, err := es.s.Quota.Saturation(context.Background(), "titan-embed")
	if err != nil || snap.RequestsUsed != 1 || snap.TokensUsed != tokensOf("おすすめの漫画") {
		t.Fatalf("redis ledger: %+v, %v", snap, err)
	}
	es.embeds["titan-embed"].down.Store(true)
	for i := range 10 {
		res, err := es.client(fmt.Sprintf("fleet-embed-%d", i)).Embeddings.New(context.Background(), embedParams("titan-embed", "hello"))
		if err != nil || res.Model != cohereID {
			t.Fatalf("call %d with titan down: %v, %v", i, res, err)
		}
	}
	s2, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if snap, err := s2.Breakers.Get("titan-embed").Snapshot(context.Background()); err != nil || snap.State.String() == "closed" {
		t.Fatalf("second instance sees titan-embed's breaker %v (%v); want it opened by the first", snap.State, err)
	}
}
