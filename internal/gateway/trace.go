package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider"
)

// Every step of a turn is a span: one schema-v3 event each, nested under the
// turn's span. A nil tracer makes all of this a no-op.

// startTurn opens the turn's span, continuing an incoming traceparent.
func (g *Gateway) startTurn(ctx context.Context, t *Turn) (context.Context, *events.Span) {
	if tc, ok := events.ParseTraceparent(t.TraceParent); ok {
		ctx = events.ContextWithRemote(ctx, tc)
	}
	ctx, span := g.tracer.Start(ctx, "turn", events.WithKind(events.KindInternal), events.WithNodeID("turn"),
		events.WithInvocationMode(invocationMode(t)), events.WithMustPersist())
	span.SetSession(t.SessionID)
	span.SetUser(t.UserID)
	span.SetWorkflow(t.RequestID)
	attribute(span, t)
	if tc := span.Context(); tc.IsValid() && t.OnTraceparent != nil {
		t.OnTraceparent(events.FormatTraceparent(tc))
	}
	return ctx, span
}

// attribute charges the span to the turn's feature, surface, locale and tier.
// A turn that names no feature is chat's, refused or not: a refusal before
// the pipeline identified the turn is charged to the same feature as the
// turn would have been.
func attribute(span *events.Span, t *Turn) {
	tier := "standard"
	if t.Premium {
		tier = "premium"
	}
	feature := t.Feature
	if feature == "" {
		feature = defaultFeature
	}
	span.SetAttribution(events.Attribution{Feature: feature, Surface: t.Surface, Locale: t.Locale, UserTier: tier, Priority: t.Priority.String()})
}

// defaultFeature is the feature of a turn that names none.
const defaultFeature = "chat"

// endTurn ends the answer's stream span and the turn's span with the turn's
// outcome; later calls do nothing. The turn's own cost is its compute time;
// its spans carry the rest.
func (g *Gateway) endTurn(span *events.Span, t *Turn, out Output, res *Result, err error) {
	if o, ok := out.(*tracedOutput); ok {
		code := ""
		if err != nil {
			code = asEdgeError(err).Code
		}
		o.end(res, code)
	}
	span.SetCost(g.cfgOf(t).UnitCosts.ComputePerSecondUSD * g.now().Sub(span.Started()).Seconds())
	switch {
	case err != nil:
		span.SetStatus(events.StatusFailed)
		span.SetErrorCode(asEdgeError(err).Code)
	case res.Degraded:
		span.SetStatus(events.StatusFallback)
		span.SetFallbackUsed(res.Tier)
	default:
		span.SetStatus(events.StatusOK)
	}
	if res != nil {
		if tc := span.Context(); tc.IsValid() && res.TraceParent == "" { // the deferred call repeats it
			res.TraceParent = events.FormatTraceparent(tc)
		}
		span.SetModel(res.ModelID)
		if res.CacheHit {
			span.SetCacheHit(events.CacheFull)
		}
	}
	span.End()
}

// Refuse records a turn a front door refused before it reached the
// pipeline (a bad frame or body, a duplicate request id, a failed login, a
// connection's own limit, a cross-site request) as a failed turn span with
// the refusal's code, so that /metrics and the live figures count it once,
// like the refusals of the pipeline's own steps. t needs its Route and
// Surface, and its caller, message and locale when known: the turn is
// counted in the language it was asked in, as an answered one would be.
// It returns err, for the door to send.
func (g *Gateway) Refuse(ctx context.Context, t *Turn, err error) error {
	g.decideLocale(t) // of the message and locale, when the door read them
	_, span := g.startTurn(ctx, t)
	span.SetStatus(events.StatusFailed)
	span.SetErrorCode(asEdgeError(err).Code)
	span.End()
	return err
}

// step runs one pipeline step in a child span named name.
func (g *Gateway) step(ctx context.Context, name string, fn func(context.Context) error) error {
	ctx, span := g.tracer.Start(ctx, name, events.WithKind(events.KindInternal), events.WithNodeID(name))
	err := fn(ctx)
	if err != nil {
		span.SetStatus(events.StatusFailed)
		span.SetErrorCode(asEdgeError(err).Code)
	} else {
		span.SetStatus(events.StatusOK)
	}
	span.End()
	return err
}

// attemptSpan opens the span of one model attempt; cost and quota records
// are must-persist.
// The returned ctx carries the span: the provider sends its traceparent
// upstream.
// A turn's images are counted, and their tokens given by the tier's
// vendor's formula and priced at its model's input price.
func (g *Gateway) attemptSpan(ctx context.Context, t *Turn, model string, m modelConfig) (context.Context, *events.Span) {
	ctx, span := g.tracer.Start(ctx, "model_attempt", events.WithKind(events.KindLLMCall), events.WithNodeID(model), events.WithMustPersist())
	span.SetModel(m.ModelID)
	span.SetPromptVersion(t.PromptVersion)
	if n := t.ImageCount(); n > 0 {
		span.SetImages(n)
		tokens := 0
		for _, msg := range t.History {
			for _, im := range msg.Images {
				tokens += provider.VendorImageTokens(m.Provider, im)
			}
		}
		for _, im := range t.Images {
			tokens += provider.VendorImageTokens(m.Provider, im)
		}
		span.SetImageTokens(tokens, cost(m, provider.Usage{InputTokens: tokens}))
	}
	return ctx, span
}

// traceStream wraps out so that the answer's delivery is a "stream" span:
// from the first text written (the time to first token, measured from the
// turn's start) to the done or error frame.
func (g *Gateway) traceStream(ctx context.Context, out Output) Output {
	if g.tracer == nil {
		return out
	}
	return &tracedOutput{Output: out, g: g, ctx: ctx}
}

type tracedOutput struct {
	Output
	g   *Gateway
	ctx context.Context

	mu    sync.Mutex
	first time.Time // zero until text is written, again after a Discard before delivery
	ended bool
}

func (o *tracedOutput) Write(text string) error {
	o.mu.Lock()
	if o.first.IsZero() {
		o.first = o.g.now()
	}
	o.mu.Unlock()
	return o.Output.Write(text)
}

func (o *tracedOutput) Discard() {
	o.Output.Discard()
	if !o.Output.Started() {
		o.mu.Lock()
		o.first = time.Time{}
		o.mu.Unlock()
	}
}

func (o *tracedOutput) Finish(res *Result) error {
	o.end(res, "")
	return o.Output.Finish(res)
}

// BeginTier and BeginTrace reach the front door's output through the
// tracing wrapper.
func (o *tracedOutput) BeginTier(tier, modelID string, degraded bool) {
	beginTier(o.Output, tier, modelID, degraded)
}

func (o *tracedOutput) BeginTrace(traceID string) { beginTrace(o.Output, traceID) }

// Think reaches the front door's output through the tracing wrapper.
func (o *tracedOutput) Think(d provider.ThinkingDelta) error {
	if th, ok := o.Output.(Thinker); ok {
		return th.Think(d)
	}
	return nil
}

// WholeAnswer is the front door's output's own answer.
func (o *tracedOutput) WholeAnswer() bool { return takesWhole(o.Output) }

func (o *tracedOutput) Fail(e *Error) error {
	o.end(nil, e.Code)
	return o.Output.Fail(e)
}

// end emits the stream span, once: from the first text to now.
func (o *tracedOutput) end(res *Result, code string) {
	o.mu.Lock()
	first, ended := o.first, o.ended
	o.ended = true
	o.mu.Unlock()
	if ended || first.IsZero() {
		return // nothing was written: no stream to record
	}
	_, span := o.g.tracer.Start(o.ctx, "stream", events.WithStartTime(first))
	if res != nil {
		span.SetModel(res.ModelID)
		if res.Degraded {
			span.SetFallbackUsed(res.Tier)
		}
	}
	if code != "" {
		span.SetStatus(events.StatusFailed)
		span.SetErrorCode(code)
	}
	span.End()
}

// FlagUsageEstimated marks a model attempt's event whose tokens and cost
// are the gateway's estimate, not the vendor's report
// (resource.capability_flags_active).
const FlagUsageEstimated = "usage_estimated"

func endAttempt(span *events.Span, m modelConfig, u provider.Usage, err error) {
	span.SetTokens(u.Input(), u.OutputTokens)
	if u.CachedInputTokens > 0 {
		span.SetCacheHit(events.CachePrefixPartial) // the vendor read part of the prompt from its cache
	}
	span.SetCost(cost(m, u))
	if u.CachedInputTokens > 0 || u.CacheWriteTokens > 0 {
		span.SetPromptCache(u.CachedInputTokens, u.CacheWriteTokens, cacheSaving(m, u))
	}
	if u.Estimated {
		// The vendor reported no usage (the stream was cut or abandoned):
		// the figures are the gateway's estimate.
		span.AddCapabilityFlags(FlagUsageEstimated)
	}
	if err != nil {
		span.SetStatus(events.StatusFailed)
		span.SetErrorCode(string(provider.KindOf(err)))
		if pe := (*provider.Error)(nil); errors.As(err, &pe) && pe.Code != "" {
			span.SetVendorCode(pe.Code)
		}
	} else {
		span.SetStatus(events.StatusOK)
	}
	span.End()
}

func invocationMode(t *Turn) events.InvocationMode {
	switch t.Surface {
	case "batch":
		return events.ModeBatch
	case "http":
		return events.ModeSync
	}
	return events.ModeSyncStreaming
}

// traceID is the id clients quote: the turn's trace id, or the request id
// when tracing is off.
func (g *Gateway) traceID(ctx context.Context, t *Turn) string {
	if id := events.TraceID(ctx); id != "" {
		return id
	}
	return t.RequestID
}
