package gateway

import (
	"context"
	"strings"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider"
)

// guard is step 3¾: it checks t's message under the config's guardrails,
// redacts what is to be redacted in place, and returns a guardrail error
// for a message to block — the cascade answers it with the redirect
// message. A message with findings gets a span naming the kinds found and
// the action taken, never the text.
func (g *Gateway) guard(ctx context.Context, t *Turn) error {
	cfg := g.cfgOf(t).Guardrails
	if !cfg.Enabled() {
		return nil
	}
	v := cfg.Check(t.Message)
	if len(v.Findings) == 0 {
		return nil // a clean message costs no span
	}
	ctx, span := g.tracer.Start(ctx, "guard", events.WithKind(events.KindInternal), events.WithNodeID("guard"))
	defer span.End()
	kinds := strings.Join(v.Kinds(), ",")
	if v.Blocked {
		// None of it is kept: not in the events, not in the session (the
		// turn leaves its history as it was). Its language was decided.
		t.Message, t.Stateless = "", true
		span.SetErrorCode("guardrail_blocked:" + kinds)
		g.log.LogAttrs(ctx, slogInfo, "message blocked by the guardrails", append(turnAttrs(t, nil), attrString("found", kinds))...)
		return &provider.Error{Kind: provider.KindGuardrail, Model: "guardrails", Code: "blocked:" + kinds}
	}
	t.Message = v.Text
	span.SetErrorCode("guardrail_checked:" + kinds)
	return nil
}
