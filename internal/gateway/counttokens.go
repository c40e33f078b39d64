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
//
// The tier is t's start tier; for a request that names none, the first
// tier t's API key may use, where its turn would start. A request its key
// may not make is refused with the error a turn gets (403
// model_not_allowed), and nothing is counted.
func (g *Gateway) CountTokens(ctx context.Context, t *Turn) (n int, estimated bool, err error) {
	cfg := g.cfgOf(t)
	if err := keyMayChat(cfg, t); err != nil {
		return 0, false, err
	}
	own, _ := g.promptFor(t)
	t.System = appendPrompt(own, t.ClientSystem)
	name := t.StartTier
	if _, ok := cfg.Model(name); !ok {
		name = g.primary(t)
		for _, m := range cfg.Models {
			if t.mayUse(m.Name) {
				name = m.Name
				break
			}
		}
	}
	m, _ := cfg.Model(name)
	req := g.request(t, m)
	if tc, ok := g.providerOf(t, name).(provider.TokenCounter); ok {
		cctx, cancel := context.WithTimeout(ctx, cfg.Deadline.Attempt)
		n, err := tc.CountTokens(cctx, req)
		cancel()
		if err == nil {
			return n, false, nil
		}
		g.log.LogAttrs(ctx, slogInfo, "the vendor did not count the tokens; answering with the estimate", turnAttrs(t, err)...)
	}
	if g.estimate != nil {
		return g.estimate(req), true, nil
	}
	n = len(req.System) / 4
	for _, msg := range req.Messages {
		n += len(msg.Content) / 4
	}
	return n, true, nil
}
