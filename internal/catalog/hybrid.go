package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fmgate/fmgate/internal/provider"
)

// RRFK is the k of reciprocal rank fusion: an item's fused score is the sum
// over the lists it appears in of 1/(RRFK + rank), rank counted from 1. 60
// is the value of the method's paper, which keeps one list's top rank from
// outweighing agreement between lists.
const RRFK = 60

// Fused is one id of a fusion and its fused score.
type Fused struct {
	ID    string
	Score float64
}

// Fuse merges ranked lists of ids, best first, by reciprocal rank fusion
// with constant k. Ties keep the order in which the ids first appear, the
// lists read in order, so the first list breaks them.
func Fuse(k int, lists ...[]string) []Fused {
	score := map[string]float64{}
	var order []string
	for _, l := range lists {
		for i, id := range l {
			if _, seen := score[id]; !seen {
				order = append(order, id)
			}
			score[id] += 1 / float64(k+i+1)
		}
	}
	slices.SortStableFunc(order, func(a, b string) int {
		switch sa, sb := score[a], score[b]; {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	out := make([]Fused, len(order))
	for i, id := range order {
		out[i] = Fused{ID: id, Score: score[id]}
	}
	return out
}

// MaxVectorItems bounds the vector store. Its search is brute force: a
// question costs one dot product per item, n·d multiply-adds (the embedded
// catalog, 343 items of 1,024 dimensions: about 0.35 million, well under a
// millisecond). A larger catalog is searched by full text alone.
const MaxVectorItems = 5_000

// EmbedBatch is the most items embedded in one call at build: within every
// embedding tier's limit (Cohere Embed takes 96 inputs a call).
const EmbedBatch = 64

// Vectors is the catalog's items embedded by one model, kept in memory: a
// brute-force cosine search over them.
type Vectors struct {
	// Tier is the embedding tier that made them, ModelID its vendor's id and
	// Dims their length. A question's vector is comparable with them only
	// when the same model made it.
	Tier, ModelID string
	Dims          int
	ids           []string
	vecs          [][]float32 // L2-normalised
}

// Len is the number of vectors.
func (v *Vectors) Len() int { return len(v.ids) }

// EmbedItems embeds every item's text through e, as embedding tier tier
// asks for vectors of dims, in calls of at most EmbedBatch items. ctx
// bounds the whole build. Any failure is returned: the caller then
// searches by full text alone.
func EmbedItems(ctx context.Context, items []Item, e provider.Embedder, tier string, dims int) (*Vectors, error) {
	if len(items) > MaxVectorItems {
		return nil, fmt.Errorf("catalog: %d items; vector search takes at most %d", len(items), MaxVectorItems)
	}
	v := &Vectors{Tier: tier, Dims: dims, ids: make([]string, 0, len(items)), vecs: make([][]float32, 0, len(items))}
	for from := 0; from < len(items); from += EmbedBatch {
		batch := items[from:min(from+EmbedBatch, len(items))]
		inputs := make([]string, len(batch))
		for i := range batch {
			inputs[i] = EmbedText(&batch[i])
		}
		resp, err := e.Embed(ctx, &provider.EmbedRequest{Model: tier, Inputs: inputs, Dimensions: dims})
		if err != nil {
			return nil, fmt.Errorf("catalog: embed items %d..%d: %w", from, from+len(batch)-1, err)
		}
		if len(resp.Vectors) != len(batch) {
			return nil, fmt.Errorf("catalog: embed items %d..%d: %d vectors for %d items", from, from+len(batch)-1, len(resp.Vectors), len(batch))
		}
		if v.ModelID == "" {
			v.ModelID = resp.ModelID
		}
		for i, vec := range resp.Vectors {
			n, ok := normalised(vec, dims)
			if !ok {
				return nil, fmt.Errorf("catalog: item %s: not a finite, non-zero vector of %d dimensions", batch[i].ID, dims)
			}
			v.ids = append(v.ids, batch[i].ID)
			v.vecs = append(v.vecs, n)
		}
	}
	return v, nil
}

// normalised is vec scaled to length 1, false when it is not dims long,
// finite and non-zero.
func normalised(vec []float32, dims int) ([]float32, bool) {
	if len(vec) != dims {
		return nil, false
	}
	var sum float64
	for _, x := range vec {
		sum += float64(x) * float64(x)
	}
	if sum == 0 || math.IsNaN(sum) || math.IsInf(sum, 0) {
		return nil, false
	}
	norm := math.Sqrt(sum)
	out := make([]float32, len(vec))
	for i, x := range vec {
		out[i] = float32(float64(x) / norm)
	}
	return out, true
}

// ErrVector is Nearest's refusal of a question vector of another length,
// or not finite and non-zero.
var ErrVector = errors.New("catalog: question vector does not match the catalog's")

// Nearest returns the ids of the k items whose vectors are nearest q by
// cosine similarity, nearest first (ties in catalog order).
func (v *Vectors) Nearest(q []float32, k int) ([]string, error) {
	q, ok := normalised(q, v.Dims)
	if !ok {
		return nil, ErrVector
	}
	type scored struct {
		i   int
		cos float64
	}
	all := make([]scored, len(v.vecs))
	for i, vec := range v.vecs {
		var dot float64
		for j, x := range vec {
			dot += float64(x) * float64(q[j])
		}
		all[i] = scored{i, dot}
	}
	slices.SortStableFunc(all, func(a, b scored) int {
		switch {
		case a.cos > b.cos:
			return -1
		case a.cos < b.cos:
			return 1
		}
		return 0
	})
	k = min(k, len(all))
	out := make([]string, k)
	for i := range k {
		out[i] = v.ids[all[i].i]
	}
	return out, nil
}

// EmbedText is the text of an item that is embedded: its series and titles
// in both languages, aliases, author, genres, kind and volume, and the tags
// the full-text index gives it (最新刊/latest, 全巻セット/box set …).
func EmbedText(it *Item) string {
	d := toDoc(it)
	parts := []string{d.Series, d.TitleJA, d.TitleEN, d.Author, d.GenreJA, d.GenreEN, d.TagsJA, d.TagsEN, it.Kind}
	if it.Volume > 0 {
		parts = append(parts, strconv.Itoa(it.Volume)+"巻", "vol "+strconv.Itoa(it.Volume))
	}
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}

// hybridDepth is how deep each list is read for the fusion: twice the k
// wanted, so that an item just below one list's top k that the other ranks
// high can rise into the answer, and no deeper, so that items near the
// question only by shared words (every "1巻" of the catalog) do not crowd
// out what full text found. Deeper lists lost labelled questions' items in
// the recall evaluation.
func hybridDepth(k int) int { return 2 * k }

// SearchHybrid is Search fused with the items nearest the question's
// vector q by reciprocal rank fusion (RRFK): bleve's ranking and the cosine
// ranking, each read hybridDepth(k) deep. Without vectors, or with a q not
// from the model that made them (modelID), it is Search.
func (ix *Index) SearchHybrid(ctx context.Context, question string, k int, vecs *Vectors, q []float32, modelID string) ([]Hit, error) {
	if vecs == nil || q == nil || (modelID != "" && vecs.ModelID != "" && modelID != vecs.ModelID) {
		return ix.Search(ctx, question, k)
	}
	depth := hybridDepth(k)
	text, err := ix.Search(ctx, question, depth)
	if err != nil {
		return nil, err
	}
	near, err := vecs.Nearest(q, depth)
	if err != nil {
		if len(text) > k {
			text = text[:k]
		}
		return text, nil
	}
	ids := make([]string, len(text))
	for i, h := range text {
		ids[i] = h.Item.ID
	}
	fused := Fuse(RRFK, ids, near)
	hits := make([]Hit, 0, k)
	for _, f := range fused {
		if len(hits) == k {
			break
		}
		if it := ix.items[f.ID]; it != nil {
			hits = append(hits, Hit{Item: it, Score: f.Score})
		}
	}
	return hits, nil
}
