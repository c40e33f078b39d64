package gateway

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/quota"
)

// fakeEmbedder answers one vector of the length asked for per input, or
// fails with fail; it counts its calls and the lengths it was asked for.
// With failFirst, only its first failFirst calls fail; a failing call
// reports billed tokens, as a vendor that billed part of it.
type fakeEmbedder struct {
	id        string
	fail      error
	failFirst int
	billed    int
	mu        sync.Mutex
	dims      []int
}

func (f *fakeEmbedder) Embed(_ context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	f.mu.Lock()
	f.dims = append(f.dims, req.Dimensions)
	n := len(f.dims)
	f.mu.Unlock()
	if f.fail != nil && (f.failFirst == 0 || n <= f.failFirst) {
		return &provider.EmbedResponse{ModelID: f.id, InputTokens: f.billed}, f.fail
	}
	r := &provider.EmbedResponse{ModelID: f.id, InputTokens: 3 * len(req.Inputs)}
	for range req.Inputs {
		r.Vectors = append(r.Vectors, make([]float32, req.Dimensions))
	}
	return r, nil
}

func (f *fakeEmbedder) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.dims)
}

// embedGateway has three embedding tiers: "big" (256 or 1024, long
// inputs), "small" (1024, short inputs) and "last" (1024, long inputs).
func embedGateway(t *testing.T, embedders map[string]*fakeEmbedder) *Gateway {
	t.Helper()
	cfg := config.Default()
	cfg.Embeddings = []config.Embedding{
		{Name: "big", Provider: "sim", ModelID: "big-1", InputPerMTok: 0.02, Dimensions: 1024, AllowedDimensions: []int{256, 1024},
			MaxInputTokens: 1000, Quota: quota.Ceiling{TPM: 1000, RPM: 10}},
		{Name: "small", Provider: "sim", ModelID: "small-1", InputPerMTok: 0.1, Dimensions: 1024, MaxInputTokens: 10,
			Quota: quota.Ceiling{TPM: 1000, RPM: 10}},
		{Name: "last", Provider: "sim", ModelID: "last-1", InputPerMTok: 0.05, Dimensions: 1024, MaxInputTokens: 1000,
			Quota: quota.Ceiling{TPM: 1000, RPM: 10}},
	}
	deps := Deps{Providers: map[string]provider.Provider{"sonnet": &scriptProvider{}, "haiku": &scriptProvider{}},
		Embedders: map[string]provider.Embedder{}}
	for name, e := range embedders {
		deps.Embedders[name] = e
	}
	g, err := New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func unavailable() error {
	return &provider.Error{Kind: provider.KindUnavailable, Status: 503, Err: errors.New("down")}
}

// TestEmbedRoute: a call starts at the tier asked for and falls, past the
// tiers that cannot give its length or take its inputs, to the next that
// can; it is degraded when another tier answered, priced at that tier.
func TestEmbedRoute(t *testing.T) {
	long := strings.Repeat("word ", 40) // about 50 tokens at four bytes a token: too long for "small"
	tests := []struct {
		name     string
		start    string
		in       EmbedInput
		down     []string
		wantTier string
		wantDims int
		wantCost float64
		degraded bool
	}{
		{"first tier", "", EmbedInput{Inputs: []string{"a", "b"}}, nil, "big", 1024, 6 * 0.02 / 1e6, false},
		{"a tier asked for", "small", EmbedInput{Inputs: []string{"a"}}, nil, "small", 1024, 3 * 0.1 / 1e6, false},
		{"falls to the next", "", EmbedInput{Inputs: []string{"a"}}, []string{"big"}, "small", 1024, 3 * 0.1 / 1e6, true},
		{"past a tier that takes shorter inputs", "", EmbedInput{Inputs: []string{long}}, []string{"big"}, "last", 1024, 3 * 0.05 / 1e6, true},
		{"its length", "", EmbedInput{Inputs: []string{"a"}, Dimensions: 256}, nil, "big", 256, 3 * 0.02 / 1e6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := map[string]*fakeEmbedder{"big": {id: "big-1"}, "small": {id: "small-1"}, "last": {id: "last-1"}}
			for _, name := range tt.down {
				es[name].fail = unavailable()
			}
			g := embedGateway(t, es)
			res, err := g.Embed(context.Background(), &Turn{RequestID: "r", StartTier: tt.start, UserID: "u"}, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if res.Tier != tt.wantTier || res.Degraded != tt.degraded || res.ModelID != es[tt.wantTier].id || len(res.Vectors[0]) != tt.wantDims {
				t.Fatalf("tier %q degraded %v model %q dims %d", res.Tier, res.Degraded, res.ModelID, len(res.Vectors[0]))
			}
			if res.InputTokens != 3*len(tt.in.Inputs) || math.Abs(res.CostUSD-tt.wantCost) > tt.wantCost*1e-9 {
				t.Fatalf("tokens %d cost %v; want %d at $%v", res.InputTokens, res.CostUSD, 3*len(tt.in.Inputs), tt.wantCost)
			}
			if tt.name == "past a tier that takes shorter inputs" && es["small"].calls() != 0 {
				t.Fatal("a tier whose inputs are shorter was called")
			}
		})
	}
}

// TestEmbedRefusals: a call the start tier cannot serve is refused before
// any tier is called, naming the field; when every tier of the route fails
// the call fails with 503 and Retry-After, and a model's refusal of the
// input is a 400.
func TestEmbedRefusals(t *testing.T) {
	tests := []struct {
		name       string
		start      string
		in         EmbedInput
		fail       error
		wantStatus int
		wantParam  string
		wantMsg    string
	}{
		{"no inputs", "", EmbedInput{}, nil, http.StatusBadRequest, "input", "must not be empty"},
		{"too many", "", EmbedInput{Inputs: make([]string, MaxEmbedInputs+1)}, nil, http.StatusBadRequest, "input", "the limit is 2048"},
		{"blank input", "", EmbedInput{Inputs: []string{"a", " "}}, nil, http.StatusBadRequest, "input", "input[1] must not be empty"},
		{"not UTF-8", "", EmbedInput{Inputs: []string{"\xff"}}, nil, http.StatusBadRequest, "input", "input[0] must be valid UTF-8"},
		{"a length the tier cannot give", "small", EmbedInput{Inputs: []string{"a"}, Dimensions: 256}, nil, http.StatusBadRequest, "dimensions",
			"embedding tier small gives vectors of 1024 dimensions, not 256"},
		{"an input too long for the tier", "small", EmbedInput{Inputs: []string{strings.Repeat("x", 100)}}, nil, http.StatusBadRequest, "input",
			"input[0] is about 25 tokens; embedding tier small takes at most 10"},
		{"too much input", "", EmbedInput{Inputs: manyTexts(400, 4000)}, nil, http.StatusRequestEntityTooLarge, "input", "over 300000 tokens"},
		{"no such tier", "nope", EmbedInput{Inputs: []string{"a"}}, nil, http.StatusNotFound, "", "No embedding tier"},
		{"every tier down", "", EmbedInput{Inputs: []string{"a"}}, unavailable(), http.StatusServiceUnavailable, "", "No embedding model is available"},
		{"the model refused the input", "", EmbedInput{Inputs: []string{"a"}},
			&provider.Error{Kind: provider.KindValidation, Status: 400, Err: errors.New("too long")}, http.StatusBadRequest, "", "refused the input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := map[string]*fakeEmbedder{"big": {fail: tt.fail}, "small": {fail: tt.fail}, "last": {fail: tt.fail}}
			g := embedGateway(t, es)
			_, err := g.Embed(context.Background(), &Turn{RequestID: "r", StartTier: tt.start, UserID: "u"}, tt.in)
			e, ok := errors.AsType[*Error](err)
			if !ok || e.Status != tt.wantStatus || e.Param != tt.wantParam || !strings.Contains(e.Message, tt.wantMsg) {
				t.Fatalf("%v; want %d on %q saying %q", err, tt.wantStatus, tt.wantParam, tt.wantMsg)
			}
			if tt.wantStatus == http.StatusServiceUnavailable && e.RetryAfterSeconds() < 1 {
				t.Fatal("a 503 without Retry-After")
			}
			called := es["big"].calls() + es["small"].calls() + es["last"].calls()
			if tt.fail == nil && called != 0 {
				t.Fatalf("a refused call reached %d tiers", called)
			}
		})
	}
}

// manyTexts is n texts of size bytes each.
func manyTexts(n, size int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Repeat("y", size)
	}
	return out
}

// costBudget is a CostBudgeter that sums what is recorded.
type costBudget struct {
	mu       sync.Mutex
	recorded float64
}

func (*costBudget) Check(context.Context, *Turn, string) error     { return nil }
func (*costBudget) Release(context.Context, *Turn)                 {}
func (*costBudget) Record(context.Context, *Turn, *Result) error   { return nil }
func (*costBudget) HoldCost(context.Context, *Turn, float64) error { return nil }
func (b *costBudget) RecordCost(_ context.Context, _ *Turn, usd float64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.recorded += usd
	return nil
}

// TestEmbedCostsFailedAttempts: an attempt that fails after the vendor
// billed part of it is charged to the caller's budget with the answer of
// the tier the call fell to, and so is a call that fails whole.
func TestEmbedCostsFailedAttempts(t *testing.T) {
	es := map[string]*fakeEmbedder{"big": {id: "big-1", fail: unavailable(), failFirst: 1, billed: 5}, "small": {id: "small-1"}, "last": {id: "last-1"}}
	g := embedGateway(t, es)
	b := &costBudget{}
	g.budget = b
	res, err := g.Embed(context.Background(), &Turn{RequestID: "r", UserID: "u"}, EmbedInput{Inputs: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := 5*0.02/1e6 + 3*0.1/1e6; res.Tier != "small" || math.Abs(b.recorded-want) > want*1e-9 {
		t.Fatalf("tier %s, recorded $%v; want small's answer, and $%v: big's failed attempt's 5 tokens and small's 3", res.Tier, b.recorded, want)
	}
	down := map[string]*fakeEmbedder{"big": {fail: unavailable(), billed: 2}, "small": {fail: unavailable()}, "last": {fail: unavailable()}}
	g = embedGateway(t, down)
	b = &costBudget{}
	g.budget = b
	if _, err := g.Embed(context.Background(), &Turn{RequestID: "r", UserID: "u"}, EmbedInput{Inputs: []string{"a"}}); err == nil {
		t.Fatal("every tier down, and the call answered")
	}
	if b.recorded <= 0 {
		t.Fatal("a failed call whose attempts were billed recorded no cost")
	}
}

// TestEmbedIndex: an index's embedding call is made by the tier asked for
// alone, never answered by another tier; an unknown tier is a 404.
func TestEmbedIndex(t *testing.T) {
	es := map[string]*fakeEmbedder{"big": {id: "big-1"}, "small": {id: "small-1"}, "last": {id: "last-1"}}
	g := embedGateway(t, es)
	res, err := g.EmbedIndex(context.Background(), "catalog-index", "big", []string{"a", "b"}, 256)
	if err != nil || res.Tier != "big" || res.Degraded || len(res.Vectors) != 2 || len(res.Vectors[0]) != 256 {
		t.Fatalf("%+v, %v; want big's vectors of 256", res, err)
	}
	es["big"].fail = unavailable()
	if _, err := g.EmbedIndex(context.Background(), "catalog-index", "big", []string{"a"}, 1024); err == nil {
		t.Fatal("the tier down, and the index call answered")
	}
	if n := es["small"].calls() + es["last"].calls(); n != 0 {
		t.Fatalf("another tier was called %d times for an index's vectors", n)
	}
	_, err = g.EmbedIndex(context.Background(), "catalog-index", "nope", []string{"a"}, 1024)
	if e, ok := errors.AsType[*Error](err); !ok || e.Status != http.StatusNotFound {
		t.Fatalf("unknown tier: %v; want a 404", err)
	}
}
