package sim

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

func norm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func embed(t *testing.T, s *Sim, model string, dims int, inputs ...string) *provider.EmbedResponse {
	t.Helper()
	r, err := s.Embed(context.Background(), &provider.EmbedRequest{Model: model, Inputs: inputs, Dimensions: dims})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestEmbedIsDeterministicAndNormalised: the same text gets the same unit
// vector from every call and every simulator, of the length asked for.
func TestEmbedIsDeterministicAndNormalised(t *testing.T) {
	models := map[string]Settings{"titan": {ModelID: "amazon.titan-embed-text-v2:0"}}
	s1, _ := newSim(t, 1, models)
	s2, _ := newSim(t, 99, models)
	for _, dims := range []int{8, 256, 1024} {
		a := embed(t, s1, "titan", dims, "A fantasy manga about dragons", "おすすめの漫画", "!!!")
		b := embed(t, s2, "titan", dims, "A fantasy manga about dragons", "おすすめの漫画", "!!!")
		for i := range a.Vectors {
			if len(a.Vectors[i]) != dims {
				t.Fatalf("dims %d: vector %d has %d dimensions", dims, i, len(a.Vectors[i]))
			}
			if !slices.Equal(a.Vectors[i], b.Vectors[i]) {
				t.Fatalf("dims %d: input %d got two vectors", dims, i)
			}
			if n := norm(a.Vectors[i]); math.Abs(n-1) > 1e-5 {
				t.Fatalf("dims %d: input %d has norm %v", dims, i, n)
			}
		}
	}
}

// TestEmbedSimilarTextsAreNear: texts that share words are nearer than
// texts about something else, in English and in Japanese.
func TestEmbedSimilarTextsAreNear(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"titan": {ModelID: "amazon.titan-embed-text-v2:0"}})
	tests := []struct {
		name                  string
		text, near, unrelated string
	}{
		{"en", "a fantasy manga about dragons and magic", "fantasy manga with dragons", "how do I return a damaged book for a refund"},
		{"ja", "ドラゴンと魔法のファンタジー漫画", "ドラゴンのファンタジー漫画", "破損した本の返品と返金の方法"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := embed(t, s, "titan", 1024, tt.text, tt.near, tt.unrelated).Vectors
			near, far := cosine(v[0], v[1]), cosine(v[0], v[2])
			if near < 0.5 || far > 0.3 || near-far < 0.3 {
				t.Fatalf("cosine to a similar text %.3f, to an unrelated one %.3f", near, far)
			}
		})
	}
}

// TestEmbedModelsDiffer: two simulated models place one text differently.
func TestEmbedModelsDiffer(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"titan": {ModelID: "amazon.titan-embed-text-v2:0"}, "cohere": {ModelID: "cohere.embed-multilingual-v3"}})
	a := embed(t, s, "titan", 256, "a fantasy manga").Vectors[0]
	b := embed(t, s, "cohere", 256, "a fantasy manga").Vectors[0]
	if c := cosine(a, b); c > 0.5 {
		t.Fatalf("the two models' vectors of one text have cosine %.3f", c)
	}
}

// TestEmbedBillsInputTokens: the input is counted with the tokenizer and
// billed to the model; a model over its TPM ceiling is throttled and bills
// nothing; an outage fails the call as unavailable.
func TestEmbedBillsInputTokens(t *testing.T) {
	s, clock := newSim(t, 1, map[string]Settings{"titan": {ModelID: "titan", TPMCeiling: 50}})
	inputs := []string{"Recommend a fantasy manga", "おすすめの漫画を教えて"}
	r := embed(t, s, "titan", 16, inputs...)
	want := CountTokens(inputs[0]) + CountTokens(inputs[1])
	if r.InputTokens != want || s.Usage("titan").InputTokens != want || r.ModelID != "titan" {
		t.Fatalf("billed %d (model total %d, id %q); want %d", r.InputTokens, s.Usage("titan").InputTokens, r.ModelID, want)
	}
	long := make([]string, 10)
	for i := range long {
		long[i] = "Recommend a long fantasy manga series"
	}
	_, err := s.Embed(context.Background(), &provider.EmbedRequest{Model: "titan", Inputs: long, Dimensions: 16})
	if provider.KindOf(err) != provider.KindThrottled || provider.RetryAfterOf(err) <= 0 {
		t.Fatalf("over the TPM ceiling: %v; want throttled with a retry hint", err)
	}
	if got := s.Usage("titan").InputTokens; got != want {
		t.Fatalf("a throttled call billed %d tokens", got-want)
	}
	clock.Advance(time.Minute)
	if err := s.SetSettings("titan", Settings{ModelID: "titan", Outage: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Embed(context.Background(), &provider.EmbedRequest{Model: "titan", Inputs: inputs, Dimensions: 16}); provider.KindOf(err) != provider.KindUnavailable {
		t.Fatalf("in an outage: %v; want unavailable", err)
	}
	if _, err := s.Embed(context.Background(), &provider.EmbedRequest{Model: "titan", Inputs: inputs, Dimensions: 0}); provider.KindOf(err) != provider.KindValidation {
		t.Fatalf("no dimensions: %v; want a validation failure", err)
	}
}
