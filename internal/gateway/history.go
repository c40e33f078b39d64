package gateway

import (
	"context"

	"github.com/fmgate/fmgate/internal/events"
)

// FlagNoHistory is the capability flag of a turn answered without its
// session's history because the session store could not be read.
const FlagNoHistory = "no_history"

// loadHistory reads the caller's session. When the store cannot answer, the
// turn goes on without history and its events say so: the turn carries the
// capability flag no_history, and a "session" span (emitted only then)
// carries error_code session_unavailable and the time lost.
func (g *Gateway) loadHistory(ctx context.Context, t *Turn) {
	start := g.now()
	h, err := g.sessions.History(ctx, t.UserID, t.SessionID)
	if err == nil {
		t.History = h
		return
	}
	g.log.WarnContext(ctx, "session history unavailable; answering without it", "err", err)
	events.SpanFromContext(ctx).AddCapabilityFlag(FlagNoHistory)
	_, span := g.tracer.Start(ctx, "session", events.WithKind(events.KindInternal),
		events.WithNodeID("session"), events.WithStartTime(start))
	span.SetErrorCode("session_unavailable")
	span.End()
}
