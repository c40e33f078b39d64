package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/catalog"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
)

// retriever is the retrieval step: the catalog search behind the "search"
// breaker, its results fitted into what the token budget left.
type retriever struct {
	ix   *catalog.Service
	br   breaker.Breaker
	enf  *budget.Enforcer
	topK int
	// current is the config in force, for a turn that took no snapshot;
	// the context is estimated for the turn's first tier.
	current func() *config.Config
}

func (r retriever) Retrieve(ctx context.Context, t *gateway.Turn) error {
	return r.RetrieveWith(ctx, t, nil, "")
}

// QueryEmbedding implements gateway.HybridRetriever: the tier the items
// were embedded with, while the search has their vectors.
func (r retriever) QueryEmbedding() (string, int, bool) {
	v := r.ix.Vectors()
	if v == nil {
		return "", 0, false
	}
	return v.Tier, v.Dims, true
}

// RetrieveWith implements gateway.HybridRetriever: the search fuses the
// full-text ranking with the items nearest vector, when there is one.
func (r retriever) RetrieveWith(ctx context.Context, t *gateway.Turn, vector []float32, modelID string) error {
	permit, err := allow(ctx, r.br, searchBreaker)
	if errors.Is(err, breaker.ErrOpen) {
		return fmt.Errorf("%w: %w", gateway.ErrSearchOpen, err)
	}
	hits, err := r.ix.SearchHybrid(ctx, t.Message, r.topK, vector, modelID)
	if err != nil && ctx.Err() != nil {
		permit.Release(ctx) // the turn's share of the deadline ran out, or it left: no verdict on the index
	} else {
		permit.Done(ctx, err == nil)
	}
	if err != nil {
		return err
	}
	lines := make([]string, len(hits))
	for i, h := range hits {
		lines[i] = catalog.Line(h.Item)
	}
	room := r.enf.ContextRoom(t.EstimatedInput, t.MaxOutput)
	for ; len(lines) > 0; lines = lines[:len(lines)-1] {
		text := catalog.Context(lines)
		n := r.enf.Estimator().Estimate(configOf(t, r.current).Models[0].Name, budget.Parts{Context: text}).Context
		if n <= room {
			t.Context = text
			t.EstimatedInput += n
			return nil
		}
	}
	return nil
}

// openCatalog loads the catalog and builds its index within
// catalog.buildTimeout, unless Options.Catalog brought one.
func (s *Server) openCatalog(cfg config.Config) (*catalog.Index, error) {
	if s.Catalog != nil {
		return s.Catalog, nil
	}
	items, err := catalog.Load(cfg.Catalog)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Catalog.BuildTimeout)
	defer cancel()
	ix, err := catalog.New(ctx, items)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = ix.Close() })
	s.log.Info("catalog indexed", "items", ix.Len(), "build_ms", ix.BuildTime.Milliseconds())
	return ix, nil
}

// catalogIndexFeature is the feature the catalog's embedding calls are
// attributed to in the cost views.
const catalogIndexFeature = "catalog-index"

// embedCatalog gives the search the items' vectors from the first embedding
// tier, when catalog.hybrid is on, within catalog.buildTimeout. The calls
// go through the gateway (the tier's quota, breaker and retries) and are
// costed in the events under feature catalog-index. A failure leaves the
// search full text alone: it is logged, never fatal.
func (s *Server) embedCatalog(cfg config.Config, svc *catalog.Service) {
	if svc == nil || !cfg.Catalog.HybridOn(len(cfg.Embeddings)) {
		return
	}
	e := cfg.Embeddings[0]
	emb := indexEmbedder{g: s.Gateway, feature: catalogIndexFeature}
	items, err := catalog.Load(cfg.Catalog)
	if err != nil {
		s.log.Warn("catalog search is full text alone: the catalog could not be read for embedding", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Catalog.BuildTimeout)
	defer cancel()
	start := time.Now()
	v, err := catalog.EmbedItems(ctx, items, emb, e.Name, e.Dimensions)
	if err != nil {
		s.log.Warn("catalog search is full text alone: embedding the items failed", "tier", e.Name, "err", err)
		return
	}
	svc.SetVectors(v)
	s.log.Info("catalog embedded for hybrid search", "tier", e.Name, "model", v.ModelID, "items", v.Len(), "dims", v.Dims,
		"build_ms", time.Since(start).Milliseconds())
}

// mountCatalog adds the catalog's admin routes:
//
//	GET /admin/catalog/search?q=…&k=5   what the retrieval step would find
//	GET /admin/catalog/faults           the injected faults
//	PUT /admin/catalog/faults           {"fail":true} or {"latencyMs":500}; {} clears
func (s *Server) mountCatalog(ix *catalog.Service) {
	s.admin.HandleFunc("GET /admin/catalog/search", func(w http.ResponseWriter, r *http.Request) {
		k, err := strconv.Atoi(r.URL.Query().Get("k"))
		if err != nil || k <= 0 || k > 50 {
			k = 5
		}
		hits, err := ix.Search(r.Context(), r.URL.Query().Get("q"), k)
		if err != nil {
			writeAdminError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		out := make([]map[string]any, len(hits))
		for i, h := range hits {
			out[i] = map[string]any{"score": h.Score, "item": h.Item}
		}
		writeJSON(w, http.StatusOK, out)
	})
	s.admin.HandleFunc("GET /admin/catalog/faults", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, ix.Faults())
	})
	s.admin.HandleFunc("PUT /admin/catalog/faults", func(w http.ResponseWriter, r *http.Request) {
		var f catalog.Faults
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil || f.LatencyMs < 0 {
			writeAdminError(w, http.StatusBadRequest, `body must be {"fail":bool,"latencyMs":N} with N >= 0`)
			return
		}
		ix.SetFaults(f)
		writeJSON(w, http.StatusOK, f)
	})
}

// indexEmbedder is the gateway's EmbedIndex as a provider.Embedder, for
// catalog.EmbedItems.
type indexEmbedder struct {
	g       *gateway.Gateway
	feature string
}

func (e indexEmbedder) Embed(ctx context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	res, err := e.g.EmbedIndex(ctx, e.feature, req.Model, req.Inputs, req.Dimensions)
	if err != nil {
		return nil, err
	}
	return &provider.EmbedResponse{Vectors: res.Vectors, InputTokens: res.InputTokens, ModelID: res.ModelID}, nil
}
