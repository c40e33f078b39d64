package gateway

import (
	"context"

	"github.com/fmgate/fmgate/internal/provider"
)

// CountTokens counts the input tokens of t's request as its tier would be
// sent it — fmgate's system prompt, the client's, and the messages; not the
// catalog context a turn retrieves — by the tier's vendor where it counts
// tokens (provider.TokenCounter), within deadline.attempt. Otherwise, or
// when the vendor fails, the count is fmgate's estimate and estimated is
// set. t's caller must have been authenticated.
func (g *Gateway) CountTokens(ctx context.Context, t *Turn) (n int, estimated bool) {
	own, _ := g.promptFor(t)
	t.System = appendPrompt(own, t.ClientSystem)
	name := t.StartTier
	if !g.isModel(name) {
		name = g.primary(t)
	}
	cfg := g.cfgOf(t)
	m, _ := cfg.Model(name)
	req := g.request(t, m)
	if tc, ok := g.providerOf(t, name).(provider.TokenCounter); ok {
		cctx, cancel := context.WithTimeout(ctx, cfg.Deadline.Attempt)
		n, err := tc.CountTokens(cctx, req)
		cancel()
		if err == nil {
			return n, false
		}
		g.log.LogAttrs(ctx, slogInfo, "the vendor did not count the tokens; answering with the estimate", turnAttrs(t, err)...)
	}
	if g.estimate != nil {
		return g.estimate(req), true
	}
	n = len(req.System) / 4
	for _, msg := range req.Messages {
		n += len(msg.Content) / 4
	}
	return n, true
}
