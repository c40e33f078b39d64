package gateway

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider"
)

// continuationNote tells the continuing model what the trailing assistant
// message is.
const continuationNote = "The assistant's last message was cut off by a technical failure. " +
	"Continue it from exactly where it stops, in the same language and tone, without repeating any of it."

// continueAnswer lets the next model tier finish an answer whose model
// failed after text reached the client (stream.continuation; DESIGN step
// 7): the tier gets the conversation with the cut answer as its last,
// assistant message and streams the rest into the same output. At most one
// continuation per turn; its first token must come within deadline.attempt
// and its retries fit in deadline.firstByte. The result bills both parts.
// Off, when the turn offers tools (a continued answer could not call
// them) or asks for thinking (a continuation is a prefill, which thinking
// does not allow), or when no tier is left or the failure was not the model's (the
// client left or was too slow, the stream hit its maximum duration), the
// cut answer ends with its error as before.
func (g *Gateway) continueAnswer(ctx context.Context, t *Turn, route []string, res *Result, err error, out Output) (*Result, error) {
	if err == nil || res == nil || res.Text == "" || len(t.Tools) > 0 || t.Thinking != nil || t.Format.Kind != provider.FormatText || t.Prefill != "" ||
		!g.cfgOf(t).Stream.Continuation || !out.Started() || ctx.Err() != nil || !continuable(err) {
		return res, err
	}
	next := ""
	for i, m := range route {
		if m == res.Tier && i+1 < len(route) {
			next = route[i+1]
		}
	}
	if next == "" {
		return res, err
	}
	var lease Lease
	if qerr := g.step(ctx, "quota", func(ctx context.Context) (e error) {
		lease, e = g.reserve.Reserve(ctx, t, next)
		return e
	}); qerr != nil {
		return res, err
	}
	cont, cerr := g.continueWith(ctx, t, next, res.Text, out)
	if cont != nil {
		lease.Settle(ctx, cont.Usage)
	} else {
		lease.Release(ctx)
	}
	g.log.LogAttrs(ctx, slogInfo, "continued a cut answer on the next tier",
		append(turnAttrs(t, err), attrString("from", res.Tier), attrString("tier", next))...)
	if cerr != nil {
		return res, err // the first failure is the one to explain; both parts' spans carry their cost
	}
	m, _ := g.cfgOf(t).Model(next)
	return &Result{
		Text:          res.Text + cont.Text,
		Tier:          next,
		ModelID:       cont.ModelID,
		StopReason:    cont.StopReason,
		Degraded:      true,
		Confidence:    min(m.Confidence, g.confidence(t, res.Tier)),
		Usage:         res.Usage.Add(cont.Usage),
		CostUSD:       res.CostUSD + cont.CostUSD,
		CacheSavedUSD: res.CacheSavedUSD + cont.CacheSavedUSD,
		TTFT:          res.TTFT,
		Continued:     true,
		Parts: []Part{
			{Tier: res.Tier, Chars: utf8.RuneCountInString(res.Text)},
			{Tier: next, Chars: utf8.RuneCountInString(cont.Text)},
		},
	}, nil
}

// continuable reports whether a mid-stream failure was the model's, which
// another model can make good.
func continuable(err error) bool {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, errSlowClient), errors.Is(err, errStreamTooLong):
		return false
	}
	return provider.KindOf(err) != provider.KindGuardrail
}

// continueWith streams model's continuation of sofar into out. Attempts that
// wrote nothing may be retried; once the continuation has written, a
// failure is final.
func (g *Gateway) continueWith(ctx context.Context, t *Turn, model, sofar string, out Output) (*Result, error) {
	m, _ := g.cfgOf(t).Model(model)
	req := g.request(t, m)
	req.System += "\n\n" + continuationNote
	req.Messages = append(req.Messages, provider.Message{Role: provider.RoleAssistant, Content: sofar})
	p := g.providerOf(t, model)
	dctx, cancel := context.WithTimeout(ctx, g.cfgOf(t).Deadline.FirstByte)
	defer cancel()
	var (
		usage provider.Usage
		resp  *provider.Response
		wrote bool
	)
	// No BeginTier: the answer's headers and first event are long gone; the
	// done frame's parts name the tiers.
	_, err := g.invoker.Invoke(dctx, model, func(context.Context) error {
		sctx, span := g.attemptSpan(ctx, t, model, m)
		span.SetFallbackUsed(model)
		span.AddCapabilityFlags("continuation")
		actx, stop := context.WithCancelCause(sctx)
		defer stop(nil)
		late := time.AfterFunc(g.cfgOf(t).Deadline.Attempt, func() {
			stop(&provider.Error{Kind: provider.KindTimeout, Err: errFirstTokenLate})
		})
		defer late.Stop()
		// The continuation's text is checked as the answer's was.
		to, guarded := out, g.guardAnswer(t, out)
		if guarded != nil {
			to = guarded
		}
		r, err := p.Stream(actx, req, func(text string) error {
			if !wrote {
				wrote = true
				late.Stop()
			}
			return to.Write(text)
		})
		if guarded != nil {
			err = g.settleGuard(sctx, guarded, r, err)
		}
		var attempt provider.Usage
		if r != nil {
			attempt = r.Usage
			usage = usage.Add(r.Usage)
		}
		defer func() { endAttempt(span, m, attempt, err) }()
		if err != nil {
			if cause := context.Cause(actx); errors.Is(cause, errFirstTokenLate) && ctx.Err() == nil {
				err = cause
			}
			if wrote {
				return final(err)
			}
			return err
		}
		resp = r
		return nil
	})
	if err != nil {
		if usage != (provider.Usage{}) {
			return &Result{Tier: model, Usage: usage, CostUSD: cost(m, usage), CacheSavedUSD: cacheSaving(m, usage)}, err
		}
		return nil, err
	}
	events.SpanFromContext(ctx).AddCapabilityFlags("continuation")
	return &Result{Text: resp.Text, Tier: model, ModelID: resp.ModelID, StopReason: resp.StopReason,
		Usage: usage, CostUSD: cost(m, usage), CacheSavedUSD: cacheSaving(m, usage)}, nil
}

func (g *Gateway) confidence(t *Turn, tier string) float64 {
	if m, ok := g.cfgOf(t).Model(tier); ok {
		return m.Confidence
	}
	return 1
}
