package catalog_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/fmgate/fmgate/internal/catalog"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// TestFuse: reciprocal rank fusion by hand. With k=60, b (2nd and 1st) has
// 1/62+1/61, a (1st and 3rd) 1/61+1/63, c (3rd and 2nd) 1/63+1/62, d (4th,
// one list) 1/64 and e (4th, the other) 1/64: b, a, c, then d before e, as
// the first list breaks ties.
func TestFuse(t *testing.T) {
	got := catalog.Fuse(catalog.RRFK, []string{"a", "b", "c", "d"}, []string{"b", "c", "a", "e"})
	var ids []string
	for _, f := range got {
		ids = append(ids, f.ID)
	}
	if want := []string{"b", "a", "c", "d", "e"}; !slices.Equal(ids, want) {
		t.Fatalf("Fuse = %v, want %v", ids, want)
	}
	if want := 1.0/62 + 1.0/61; math.Abs(got[0].Score-want) > 1e-12 {
		t.Errorf("b's score = %v, want %v", got[0].Score, want)
	}
	// An item ranked well by both lists beats one ranked first by one alone.
	got = catalog.Fuse(catalog.RRFK, []string{"x", "y"}, []string{"z", "y"})
	if got[0].ID != "y" {
		t.Errorf("Fuse = %v, want y (2nd in both) first", got)
	}
}

// fixedEmbedder gives each input the vector its text maps to.
type fixedEmbedder map[string][]float32

func (f fixedEmbedder) Embed(_ context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	resp := &provider.EmbedResponse{ModelID: "fixed"}
	for _, in := range req.Inputs {
		resp.Vectors = append(resp.Vectors, f[in])
	}
	return resp, nil
}

// TestNearest: the cosine search ranks by angle, not length.
func TestNearest(t *testing.T) {
	items := []catalog.Item{{ID: "east", TitleJA: "東", TitleEN: "East"}, {ID: "north", TitleJA: "北", TitleEN: "North"}, {ID: "northeast", TitleJA: "北東", TitleEN: "Northeast"}}
	e := fixedEmbedder{}
	vecs := map[string][]float32{"east": {10, 0, 0}, "north": {0, 1, 0}, "northeast": {1, 1, 0}}
	for i := range items {
		e[catalog.EmbedText(&items[i])] = vecs[items[i].ID]
	}
	v, err := catalog.EmbedItems(context.Background(), items, e, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Nearest([]float32{0.1, 0.9, 0}, 3)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"north", "northeast", "east"}; !slices.Equal(got, want) {
		t.Errorf("Nearest = %v, want %v", got, want)
	}
	if _, err := v.Nearest([]float32{1, 0}, 3); !errors.Is(err, catalog.ErrVector) {
		t.Errorf("a 2-dimension question: err = %v, want ErrVector", err)
	}
}

// failingEmbedder fails every call, as an embedding tier in an outage.
type failingEmbedder struct{}

func (failingEmbedder) Embed(context.Context, *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	return nil, &provider.Error{Kind: provider.KindUnavailable, Err: errors.New("outage")}
}

// TestEmbedFailureLeavesFullText: when the items cannot be embedded the
// service keeps no vectors and a hybrid search is the full-text one.
func TestEmbedFailureLeavesFullText(t *testing.T) {
	items, err := catalog.Load(catalog.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := catalog.EmbedItems(context.Background(), items, failingEmbedder{}, "titan-embed", 8); err == nil {
		t.Fatal("EmbedItems with a failing embedder: no error")
	}
	svc := catalog.NewService(catalog.SharedIndex(t))
	if svc.Vectors() != nil {
		t.Fatal("a new service has vectors")
	}
	hits, err := svc.SearchHybrid(context.Background(), "ワンピースの最新刊は？", 5, []float32{1, 0, 0, 0, 0, 0, 0, 0}, "m")
	if err != nil || len(hits) == 0 || hits[0].Item.ID != "MA001-V110" {
		t.Fatalf("hybrid search without vectors = %v, %v; want the full-text hits, MA001-V110 first", hits, err)
	}
}

// simEmbedder is the simulator's titan-embed tier.
func simEmbedder(t testing.TB) *sim.Sim {
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"titan-embed": {ModelID: "amazon.titan-embed-text-v2:0"}}}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRecallAt5Hybrid: the labelled questions' recall@5 with the full-text
// ranking fused with the simulator's vectors is no lower than full text's.
func TestRecallAt5Hybrid(t *testing.T) {
	ix := catalog.SharedIndex(t)
	items, err := catalog.Load(catalog.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	emb := simEmbedder(t)
	const tier, dims = "titan-embed", 1024
	vecs, err := catalog.EmbedItems(context.Background(), items, emb, tier, dims)
	if err != nil {
		t.Fatal(err)
	}
	if vecs.Len() != len(items) || vecs.ModelID != "amazon.titan-embed-text-v2:0" {
		t.Fatalf("%d vectors of model %q; want %d of amazon.titan-embed-text-v2:0", vecs.Len(), vecs.ModelID, len(items))
	}
	ctx := context.Background()
	fullText := func(q string, k int) ([]catalog.Hit, error) { return ix.Search(ctx, q, k) }
	hybrid := func(q string, k int) ([]catalog.Hit, error) {
		r, err := emb.Embed(ctx, &provider.EmbedRequest{Model: tier, Inputs: []string{q}, Dimensions: dims})
		if err != nil {
			return nil, err
		}
		return ix.SearchHybrid(ctx, q, k, vecs, r.Vectors[0], r.ModelID)
	}
	for lang, qs := range catalog.LoadQuestions(t) {
		t.Run(lang, func(t *testing.T) {
			ft, _ := catalog.RecallAt5(t, fullText, qs)
			hy, misses := catalog.RecallAt5(t, hybrid, qs)
			t.Logf("recall@5 %s over %d questions: full text %.3f, hybrid %.3f", lang, len(qs), ft, hy)
			for _, m := range misses {
				t.Log("hybrid:", m)
			}
			if hy < ft {
				t.Errorf("hybrid recall@5 %.3f < full text's %.3f", hy, ft)
			}
		})
	}
}

// TestHybridOn: catalog.hybrid defaults to on when an embedding tier is
// configured, is off without one, and can be switched off.
func TestHybridOn(t *testing.T) {
	off := false
	c := catalog.DefaultConfig()
	if !c.HybridOn(2) || c.HybridOn(0) {
		t.Errorf("unset: HybridOn(2) = %v, HybridOn(0) = %v; want true, false", c.HybridOn(2), c.HybridOn(0))
	}
	c.Hybrid = &off
	if c.HybridOn(2) {
		t.Error("hybrid: false: HybridOn(2) = true")
	}
}
