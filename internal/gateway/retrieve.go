package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// Capability flags a turn's spans carry (capability_flags_active) about its
// retrieval step.
const (
	// FlagCatalog: the answer was given catalog context.
	FlagCatalog = "catalog"
	// FlagCatalogUnavailable: the search was down, slow or its breaker open;
	// the turn answered without context.
	FlagCatalogUnavailable = "catalog_unavailable"
)

// ErrSearchNoTime is what the retrieval step records when too little of the
// first-byte budget is left to search at all.
var ErrSearchNoTime = errors.New("too little of the turn's deadline left to search the catalog")

// retrieveContext runs the Retriever under its share of the first-byte
// budget (catalog.timeout, and never so long that the model call has less
// than deadline.minAttempt left). Retrieval never fails a turn: without it
// the turn answers without context, degraded, and its spans say so.
func (g *Gateway) retrieveContext(ctx context.Context, t *Turn) {
	if g.retrieve == nil {
		return
	}
	cfg := g.cfgOf(t)
	share := min(cfg.Catalog.Timeout, g.firstByteLeft(t)-cfg.Deadline.MinAttempt)
	sctx, span := g.tracer.Start(ctx, "retrieve", events.WithKind(events.KindToolCall), events.WithNodeID("retrieve"))
	span.SetTool("catalog_search", "bleve-v2")
	err := ErrSearchNoTime
	if share > 0 {
		rctx, cancel := context.WithTimeout(sctx, share)
		err = g.search(rctx, span, t, share)
		cancel()
	}
	flag := FlagCatalog
	if err != nil {
		t.Context, t.ContextUnavailable = "", true
		flag = FlagCatalogUnavailable
		span.SetStatus(events.StatusFailed)
		span.SetErrorCode(retrieveCode(err))
		g.log.LogAttrs(ctx, slogInfo, "catalog search unavailable; answering without context", turnAttrs(t, err)...)
	} else if t.Context == "" {
		flag = ""
	}
	if flag != "" {
		span.AddCapabilityFlags(flag)
		events.SpanFromContext(ctx).AddCapabilityFlags(flag)
	}
	span.End()
}

// HybridRetriever is a Retriever that can also rank the catalog by the
// question's vector, from the embedding tier its items were embedded with.
type HybridRetriever interface {
	Retriever
	// QueryEmbedding is the embedding tier and the vector length of the
	// items' vectors; ok is false while it has none (full text alone).
	QueryEmbedding() (tier string, dims int, ok bool)
	// RetrieveWith is Retrieve with the question's vector, made by the
	// vendor's model modelID; a nil vector is full text alone.
	RetrieveWith(ctx context.Context, t *Turn, vector []float32, modelID string) error
}

// search is the retrieval step's search. A HybridRetriever with vectors
// first has the question embedded, within the first three quarters of the
// step's share (the rest is the search's); when the embedding fails or is
// late the search is full text alone, and the turn goes on.
func (g *Gateway) search(ctx context.Context, span *events.Span, t *Turn, share time.Duration) error {
	hr, ok := g.retrieve.(HybridRetriever)
	if !ok {
		return g.retrieve.Retrieve(ctx, t)
	}
	tier, dims, ok := hr.QueryEmbedding()
	if !ok || strings.TrimSpace(t.Message) == "" {
		return hr.RetrieveWith(ctx, t, nil, "")
	}
	ectx, cancel := context.WithTimeout(ctx, share*3/4)
	res, err := g.embedQuestion(ectx, t, tier, dims)
	cancel()
	if err != nil {
		g.log.LogAttrs(ctx, slogInfo, "question embedding unavailable; catalog searched by full text alone", turnAttrs(t, err)...)
		return hr.RetrieveWith(ctx, t, nil, "")
	}
	span.SetTool("catalog_search", "bleve-v2+rrf")
	return hr.RetrieveWith(ctx, t, res.Vectors[0], res.ModelID)
}

// embedQuestion embeds the turn's question with embedding tier tier, the
// one the catalog's items were embedded with, and no other: another tier's
// vectors would not be comparable. The call rides on the turn's admission
// and is planned (the tier's breaker), reserves the tier's quota and is
// invoked with retries as any embedding call; its attempt is a
// model_attempt span of the turn, with its tokens and cost.
func (g *Gateway) embedQuestion(ctx context.Context, t *Turn, tier string, dims int) (*EmbedResult, error) {
	cfg := g.cfgOf(t)
	e, ok := cfg.Embedding(tier)
	if !ok || g.embedders[tier] == nil {
		return nil, fmt.Errorf("no embedding tier %q", tier)
	}
	tokens := g.countTokens(t.Message)
	if tokens > e.MaxInputTokens {
		return nil, fmt.Errorf("question of about %d tokens; embedding tier %s takes at most %d", tokens, tier, e.MaxInputTokens)
	}
	// The call's own turn: the caller's identity and class, the question's
	// tokens for its quota reservation.
	sub := &Turn{cfg: cfg, RequestID: t.RequestID, Locale: t.Locale, Feature: t.Feature, PromptVersion: t.PromptVersion,
		UserHash: t.UserHash, RequestHash: t.RequestHash, Priority: t.Priority, Received: t.Received,
		StartTier: tier, EstimatedInput: tokens}
	sub.SetCaller(t)
	route := g.plan.Plan(ctx, sub, []string{tier})
	if len(route) == 0 {
		return nil, fmt.Errorf("embedding tier %s: %w", tier, errNoModel)
	}
	res, err := g.embedRoute(ctx, sub, EmbedInput{Inputs: []string{t.Message}}, dims, route)
	t.RetrievalCostUSD += sub.embedSpent // the turn's, charged with its answer, used or not
	if err != nil {
		return nil, err
	}
	if res.Tier != tier {
		return nil, fmt.Errorf("embedding tier %s answered for %s", res.Tier, tier)
	}
	return res, nil
}

func retrieveCode(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrSearchNoTime):
		return "timeout"
	case errors.Is(err, ErrSearchOpen):
		return "breaker_open"
	}
	return "unavailable"
}

// ErrSearchOpen is for Retrievers to wrap when the search's breaker is open.
var ErrSearchOpen = errors.New("catalog search breaker open")

// withContext appends retrieved context to the system prompt.
func withContext(system, context string) string {
	if context == "" {
		return system
	}
	return system + "\n\n" + context
}
