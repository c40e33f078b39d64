package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"
	"github.com/blevesearch/bleve/v2/analysis/lang/cjk"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/index/upsidedown"
	"github.com/blevesearch/bleve/v2/index/upsidedown/store/gtreap"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"
)

// Index searches the catalog. It is safe for concurrent use and holds no
// per-gateway state, so gateways in one process may share one.
type Index struct {
	idx   bleve.Index
	items map[string]*Item
	// BuildTime is how long New took to index the catalog.
	BuildTime time.Duration
}

// Service is the search as a gateway calls it: an Index and the faults an
// operator injected into this gateway's search.
type Service struct {
	ix     *Index
	mu     sync.Mutex
	faults Faults
	vecs   *Vectors // nil: full text alone
}

// NewService returns the search over ix, without faults.
func NewService(ix *Index) *Service { return &Service{ix: ix} }

// Search is Index.Search after the injected faults: a failure, or a delay
// that still honours ctx's deadline.
func (s *Service) Search(ctx context.Context, question string, k int) ([]Hit, error) {
	if err := s.fault(ctx); err != nil {
		return nil, err
	}
	return s.ix.Search(ctx, question, k)
}

// SearchHybrid is Index.SearchHybrid over the service's vectors, after the
// injected faults: q is the question's vector from model modelID, nil for
// full text alone.
func (s *Service) SearchHybrid(ctx context.Context, question string, k int, q []float32, modelID string) ([]Hit, error) {
	if err := s.fault(ctx); err != nil {
		return nil, err
	}
	return s.ix.SearchHybrid(ctx, question, k, s.Vectors(), q, modelID)
}

// Vectors returns the items' vectors, nil when the search is full text alone.
func (s *Service) Vectors() *Vectors {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vecs
}

// SetVectors gives the search the items' vectors (nil: full text alone).
func (s *Service) SetVectors(v *Vectors) {
	s.mu.Lock()
	s.vecs = v
	s.mu.Unlock()
}

// fault applies the injected faults: a failure, or a delay that still
// honours ctx's deadline.
func (s *Service) fault(ctx context.Context) error {
	f := s.Faults()
	if f.LatencyMs > 0 {
		t := time.NewTimer(time.Duration(f.LatencyMs) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("catalog: search: %w", ctx.Err())
		}
	}
	if f.Fail {
		return ErrFault
	}
	return nil
}

// Faults returns the injected faults.
func (s *Service) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// SetFaults injects faults; the zero Faults clears them.
func (s *Service) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// Hit is one search result.
type Hit struct {
	Item  *Item
	Score float64
}

// ErrFault is returned by Search while a fault is injected.
var ErrFault = errors.New("catalog: search unavailable (fault injected by an operator)")

// Faults make the search fail or slow, for tests and game days
// (PUT /admin/catalog/faults).
type Faults struct {
	// Fail makes every search return ErrFault.
	Fail bool `json:"fail"`
	// LatencyMs delays every search (the caller's deadline still applies).
	LatencyMs int `json:"latencyMs"`
}

// doc is what the index stores per item: Japanese fields analysed as CJK,
// English ones with stemming.
type doc struct {
	Series  string `json:"series"`
	TitleJA string `json:"title_ja"`
	TitleEN string `json:"title_en"`
	Author  string `json:"author"`
	GenreJA string `json:"genre_ja"`
	GenreEN string `json:"genre_en"`
	BlurbJA string `json:"blurb_ja"`
	BlurbEN string `json:"blurb_en"`
	TagsJA  string `json:"tags_ja"`
	TagsEN  string `json:"tags_en"`
	Volume  string `json:"volume"`
	Kind    string `json:"kind"`
}

func indexMapping() mapping.IndexMapping {
	text := func(analyzer string) *mapping.FieldMapping {
		f := bleve.NewTextFieldMapping()
		f.Analyzer = analyzer
		f.Store = false
		f.IncludeTermVectors = false
		f.IncludeInAll = false // queries name their fields; no _all copy
		f.DocValues = false
		return f
	}
	dm := bleve.NewDocumentStaticMapping()
	for _, f := range []string{"series", "title_ja", "author", "genre_ja", "blurb_ja", "tags_ja"} {
		dm.AddFieldMappingsAt(f, text(cjk.AnalyzerName))
	}
	for _, f := range []string{"title_en", "genre_en", "blurb_en", "tags_en"} {
		dm.AddFieldMappingsAt(f, text(en.AnalyzerName))
	}
	dm.AddFieldMappingsAt("volume", text(standard.Name))
	dm.AddFieldMappingsAt("kind", text(keyword.Name))
	im := bleve.NewIndexMapping()
	im.DefaultMapping = dm
	im.DefaultAnalyzer = standard.Name
	im.StoreDynamic, im.IndexDynamic, im.DocValuesDynamic = false, false, false
	return im
}

// New indexes items in memory. ctx bounds the build.
func New(ctx context.Context, items []Item) (*Index, error) {
	start := time.Now()
	// upside_down over the gtreap in-memory store: builds this size of
	// catalog in milliseconds, where scorch's in-memory mode takes seconds.
	idx, err := bleve.NewUsing("", indexMapping(), upsidedown.Name, gtreap.Name, nil)
	if err != nil {
		return nil, fmt.Errorf("catalog: index: %w", err)
	}
	ix := &Index{idx: idx, items: make(map[string]*Item, len(items))}
	const batchSize = 500
	b := idx.NewBatch()
	for i := range items {
		it := &items[i]
		ix.items[it.ID] = it
		if err := b.Index(it.ID, toDoc(it)); err != nil {
			return nil, fmt.Errorf("catalog: index %s: %w", it.ID, err)
		}
		if b.Size() >= batchSize || i == len(items)-1 {
			if err := ctx.Err(); err != nil {
				_ = idx.Close()
				return nil, fmt.Errorf("catalog: index build stopped after %d of %d items: %w", i, len(items), err)
			}
			if err := idx.Batch(b); err != nil {
				return nil, fmt.Errorf("catalog: index: %w", err)
			}
			b.Reset()
		}
	}
	ix.BuildTime = time.Since(start)
	return ix, nil
}

func toDoc(it *Item) doc {
	d := doc{
		Series:  it.Series + " " + it.SeriesEN,
		TitleJA: strings.Join(append([]string{it.Series, it.TitleJA}, it.Aliases...), " "),
		TitleEN: strings.Join(append([]string{it.SeriesEN, it.TitleEN}, it.Aliases...), " "),
		Author:  it.AuthorJA + " " + it.AuthorEN,
		GenreJA: strings.Join(it.GenresJA, " "),
		GenreEN: strings.Join(it.GenresEN, " "),
		BlurbJA: it.BlurbJA + " " + it.Publisher,
		BlurbEN: it.BlurbEN,
		Volume:  strconv.Itoa(it.Volume),
		Kind:    it.Kind,
	}
	var ja, enTags []string
	switch {
	case it.Latest:
		ja = append(ja, "最新刊", "最新巻", "新刊")
		enTags = append(enTags, "latest", "newest", "new", "volume", "release")
	case it.Kind == "set":
		ja = append(ja, "全巻セット", "全巻", "まとめ買い", "完結")
		enTags = append(enTags, "complete", "box", "set", "all volumes", "boxset")
	case it.Kind == "preorder":
		ja = append(ja, "予約", "次巻", "発売予定")
		enTags = append(enTags, "pre-order", "preorder", "upcoming", "next volume")
	case it.Volume == 1:
		ja = append(ja, "第1巻", "1巻", "一巻")
		enTags = append(enTags, "first", "start", "beginning")
	}
	d.TagsJA = strings.Join(ja, " ")
	d.TagsEN = strings.Join(enTags, " ")
	return d
}

// fieldBoosts weigh where a question's words matched: a title beats an
// author, an author beats a genre or a blurb.
var fieldBoosts = []struct {
	field string
	boost float64
}{
	{"series", 3}, {"title_ja", 4}, {"title_en", 4}, {"author", 2}, {"tags_ja", 1.5}, {"tags_en", 1.5},
	{"genre_ja", 1}, {"genre_en", 1}, {"blurb_ja", 0.5}, {"blurb_en", 0.5}, {"volume", 0.5},
}

// Search returns the k best items for question, best first. It honours
// ctx's deadline.
func (ix *Index) Search(ctx context.Context, question string, k int) ([]Hit, error) {
	question = strings.TrimSpace(question)
	if question == "" || k <= 0 {
		return nil, nil
	}
	var qs []query.Query
	for _, fb := range fieldBoosts {
		m := bleve.NewMatchQuery(question)
		m.SetField(fb.field)
		m.SetBoost(fb.boost)
		qs = append(qs, m)
	}
	req := bleve.NewSearchRequestOptions(bleve.NewDisjunctionQuery(qs...), k, 0, false)
	res, err := ix.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("catalog: search: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("catalog: search: %w", err)
	}
	hits := make([]Hit, 0, len(res.Hits))
	for _, h := range res.Hits {
		if it := ix.items[h.ID]; it != nil {
			hits = append(hits, Hit{Item: it, Score: h.Score})
		}
	}
	return hits, nil
}

// Len is the number of items indexed.
func (ix *Index) Len() int { return len(ix.items) }

// Close releases the index.
func (ix *Index) Close() error { return ix.idx.Close() }
