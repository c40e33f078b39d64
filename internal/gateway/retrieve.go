package gateway

import (
	"context"
	"errors"

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
		err = g.retrieve.Retrieve(rctx, t)
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
