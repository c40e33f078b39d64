package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/language"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

// Run takes one turn through the pipeline. The steps below are the order of
// a turn (DESIGN.md); each is one method, most of them a call into the
// package that owns the policy.
//
// Run returns an *Error when the turn was refused before any answer (the
// front door sends it with its status); otherwise the answer — a model's, or
// a degraded one from the fallback cascade — went to out and Run returns it.
func (g *Gateway) Run(ctx context.Context, t *Turn, out Output) (res *Result, err error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	defer g.inflight.Done()
	g.enterConfig(t)
	ctx, span := g.startTurn(ctx, t)
	out = g.traceStream(ctx, out)
	beginTrace(out, g.traceID(ctx, t))
	defer func() { g.endTurn(span, t, out, res, err) }()

	// 1. Validate the request.
	if err := g.validate(t); err != nil {
		attribute(span, t) // refused in the language it was asked in
		return nil, err
	}
	// 1½. Batch the turn's shared-state calls (fleet mode: reads ahead for steps 2–5
	// and, for P0, reserves step 6's quota on the likeliest model).
	ctx, endBatch := g.batcher.Begin(ctx, t)
	defer endBatch()
	// 2. Identify the caller.
	g.identify(ctx, t)
	// 3. Admit: rate limits.
	if err := g.step(ctx, "admit", func(ctx context.Context) error { return g.admit.Admit(ctx, t) }); err != nil {
		return nil, err
	}
	// 3½. Hold one of the API key's slots of concurrency for the whole turn.
	if err := g.takeSlot(ctx, t); err != nil {
		return nil, err
	}
	defer g.giveSlot(ctx, t)
	// 3¾. Guard: personal data and denied terms are redacted or blocked
	// before any model or store sees the message; a blocked one gets the
	// redirect answer, and one the guardrail service could not check is
	// refused when its policy says so.
	if err := g.guard(ctx, t); err != nil {
		if e, ok := errors.AsType[*Error](err); ok {
			return nil, e
		}
		res, err = g.fallBack(ctx, t, err, out)
		return g.finish(ctx, span, t, out, res, err)
	}
	// 3⅞. Fetch the remote images the client named by URL: only now that
	// the caller is admitted, and before anything is estimated or charged.
	if err := g.fetchImages(ctx, t); err != nil {
		return nil, err
	}
	// 4. Budget: estimate tokens, enforce budgets, truncate history.
	// What the budget step holds is ended on every way out that Record
	// does not settle.
	defer g.releaseBudget(ctx, t)
	// Its estimate is priced at the first model the turn may reach: the
	// key's cheaper tier, or the one the client named.
	tiers := g.tiersFor(t)
	t.firstTier = g.primary(t)
	if len(tiers) > 0 {
		t.firstTier = tiers[0]
	}
	if err := g.step(ctx, "budget", func(ctx context.Context) error {
		if err := g.budget.Check(ctx, t, t.firstTier); err != nil {
			return err
		}
		return roomToThink(t, t.MaxOutput) // the output granted must hold the reasoning asked for, and an answer
	}); err != nil {
		return nil, err
	}
	// 4½. Retrieve: catalog context for the question, within its share of the deadline.
	g.retrieveContext(ctx, t)
	// 5. Plan the route of model tiers.
	route := g.plan.Plan(ctx, t, tiers)

	// 6–7. Reserve quota and invoke, tier by tier, until a model answers.
	res, err = g.invokeRoute(ctx, t, route, out)
	// 7½. Continue: with stream.continuation on, the next tier finishes an answer cut mid-stream.
	res, err = g.continueAnswer(ctx, t, route, res, err, out)

	// 8. Fall back when no model answered and nothing reached the client.
	if res == nil && !out.Started() {
		res, err = g.fallBack(ctx, t, err, out)
	}
	return g.finish(ctx, span, t, out, res, err)
}

// finish is steps 9 and 10 of a turn that has its answer, or its error.
func (g *Gateway) finish(ctx context.Context, span *events.Span, t *Turn, out Output, res *Result, err error) (*Result, error) {
	// 9. Stream: finish the answer, or end it with an error frame.
	if err != nil {
		edge := g.streamError(t, err)
		// A cut answer's tokens were spent all the same: charged before the
		// client hears the error, as a whole answer's before "done".
		g.charge(ctx, t, res)
		_ = out.Fail(edge)
		g.log.LogAttrs(ctx, levelFor(edge), "turn failed mid-stream", turnAttrs(t, edge)...)
		return nil, edge
	}
	res.TraceID = g.traceID(ctx, t)

	// 10. Record usage, history, cache: owed whatever the client does now,
	// and written before the client hears "done", so the next message it
	// sends, to whichever instance, finds its history and its spend.
	owedCtx, cancel := owed(ctx)
	defer cancel()
	g.record(owedCtx, t, res)
	// The turn's records are in the event log before the client hears "done".
	g.endTurn(span, t, out, res, nil)
	if err := out.Finish(res); err != nil {
		g.log.LogAttrs(ctx, slogInfo, "client gone before done", turnAttrs(t, err)...)
	}
	return res, nil
}

// settleTimeout bounds what a turn owes once its answer is out (owed).
// Graceful shutdown waits for turns in flight, so it waits for this too.
const settleTimeout = 5 * time.Second

// owed is the context of what a turn owes after its answer (the budget
// charge, the history, the cache, and the shared-state writes queued during
// the turn): the turn's values without its cancellation, since SDKs close
// the connection as soon as they read the last event, bounded by
// settleTimeout.
func owed(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
}

// releaseBudget ends the budget step's hold when nothing settled it; it is
// owed like the record, whatever the client did.
func (g *Gateway) releaseBudget(ctx context.Context, t *Turn) {
	if t.BudgetHold == nil {
		return
	}
	ctx, cancel := owed(ctx)
	defer cancel()
	g.budget.Release(ctx, t)
}

// charge records against the budgets the usage of an answer that failed
// mid-stream; res is nil or usage-free when nothing was spent.
func (g *Gateway) charge(ctx context.Context, t *Turn, res *Result) {
	if res == nil || res.Usage == (provider.Usage{}) {
		return
	}
	ctx, cancel := owed(ctx)
	defer cancel()
	if err := g.budget.Record(ctx, t, res); err != nil {
		g.log.WarnContext(ctx, "budget record failed", "err", err)
	}
}

// validate enforces sizes and encoding; the decoders checked the shape.
// The turn's language is decided first, so that a refused turn is counted
// in it too.
func (g *Gateway) validate(t *Turn) error {
	asked := t.Locale
	g.decideLocale(t)
	cfg := g.cfgOf(t)
	msg := strings.TrimSpace(t.Message)
	switch {
	case msg == "" && len(t.ToolResults) == 0 && len(t.Images) == 0:
		return invalid("message must not be empty")
	case !utf8.ValidString(t.Message):
		return invalid("message must be valid UTF-8 text")
	case len(t.Message) > cfg.Server.MaxMessageBytes:
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: fmt.Sprintf("message is %d bytes; the limit is %d bytes", len(t.Message), cfg.Server.MaxMessageBytes)}
	case t.SessionID == "":
		return invalid("sessionId must not be empty")
	case len(t.SessionID) > 128 || !utf8.ValidString(t.SessionID):
		return invalid("sessionId must be at most 128 bytes of UTF-8")
	}
	if asked != "" && !g.supportsLocale(asked) {
		return invalid("locale %q is not supported (use one of %s)", asked, strings.Join(cfg.Locales, ", "))
	}
	if err := keyMayChat(cfg, t); err != nil {
		return err
	}
	if t.Guardrail != nil && len(g.tiersFor(t)) == 0 {
		// Answered by a model that cannot apply it, the guardrail would be
		// dropped without a word.
		e := invalid("guardrailConfig: no model tier this request may use can apply a Bedrock guardrail (tiers with the guardrails capability: the bedrock ones by default); send the request without guardrailConfig, or name a Bedrock tier")
		e.Param = "guardrailConfig"
		return e
	}
	return compileShapes(t)
}

// keyMayChat refuses t when its API key may not use the model tier its
// request names, or may use no chat tier at all: every door that takes a
// chat request answers these the same (a turn, a token count).
func keyMayChat(cfg *config.Config, t *Turn) *Error {
	if i := startTier(cfg.Models, t.StartTier); i >= 0 && !t.mayUse(cfg.Models[i].Name) {
		return forbiddenModel(t, t.StartTier)
	}
	if len(t.KeyModels) > 0 && !slices.ContainsFunc(cfg.Models, func(m config.Model) bool { return t.mayUse(m.Name) }) {
		// Only embedding tiers: a chat turn would reach no model, only
		// the fallback cascade's answers.
		return &Error{Status: http.StatusForbidden, Code: CodeModelForbidden,
			Message: fmt.Sprintf("This API key may use no chat model; it may use %s.", strings.Join(t.KeyModels, ", "))}
	}
	return nil
}

// forbiddenModel refuses t's request for a tier its API key may not use.
func forbiddenModel(t *Turn, asked string) *Error {
	return &Error{Status: http.StatusForbidden, Code: CodeModelForbidden,
		Message: fmt.Sprintf("This API key may not use the model %q; it may use %s.", asked, strings.Join(t.KeyModels, ", "))}
}

// decideLocale sets t.Locale to the language t is answered in. The
// message's language wins over the locale field: the models, the cache, the
// FAQ and every message of this turn follow this one decision. Without a
// message to read, the locale field stands when it is one the gateway
// answers in; with neither, the language is unknown and t.Locale is "".
// A refused turn gets the same decision, as far as what it sent allows.
func (g *Gateway) decideLocale(t *Turn) {
	asked := t.Locale
	if !g.supportsLocale(asked) {
		asked = ""
	}
	if strings.TrimSpace(t.Message) == "" || !utf8.ValidString(t.Message) {
		t.Locale = asked
		return
	}
	if asked == "" {
		asked = g.cfgOf(t).Locales[0]
	}
	t.Locale = asked
	if l := language.Of(t.Message, asked); g.supportsLocale(l) {
		t.Locale = l
	}
}

// identify fills what the rest of the turn knows about the caller.
func (g *Gateway) identify(ctx context.Context, t *Turn) {
	t.Received = g.now()
	t.UserHash = g.hasher.Hash(t.UserID)
	t.RequestHash = g.hasher.Hash(t.RequestID)
	if t.PromptVersion == "" { // a caller (the eval judge) may bring its own prompt
		t.System, t.PromptVersion = g.promptFor(t)
	}
	t.System = appendPrompt(t.System, t.ClientSystem)
	events.SpanFromContext(ctx).SetPromptVersion(t.PromptVersion)
	if t.Feature == "" {
		t.Feature = defaultFeature
	}
	attribute(events.SpanFromContext(ctx), t)
	g.choosePayload(ctx, t)
	if t.Stateless {
		return // the front door brought the conversation
	}
	g.loadHistory(ctx, t)
}

// promptFor is the prompt in force for t's session: the canary's candidate
// for the sessions in its share, the live prompt for the others.
func (g *Gateway) promptFor(t *Turn) (text, version string) {
	if sp, ok := g.prompts.(SessionPrompts); ok {
		return sp.ForSession(t.UserID, t.SessionID)
	}
	return g.prompts.Active()
}

// appendPrompt adds the client's system prompt after fmgate's.
func appendPrompt(own, client string) string {
	switch {
	case client == "":
		return own
	case own == "":
		return client
	}
	return own + "\n\n" + client
}

// invokeRoute tries the planned model tiers in order. It stops at the first
// answer, or as soon as text reached the client (no fallback after that).
func (g *Gateway) invokeRoute(ctx context.Context, t *Turn, route []string, out Output) (*Result, error) {
	ctx = withStatus(ctx, t, out)
	var last error = errNoModel
	for i, model := range route {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if i > 0 {
			NotifyStatus(ctx, Status{State: stream.StateFallingBack, Attempt: i + 1, Of: len(route)})
		}
		if g.firstByteLeft(t) < g.cfgOf(t).Deadline.MinAttempt {
			last = fmt.Errorf("%s: %w", model, errNoTime)
			break
		}
		var lease Lease
		err := g.step(ctx, "quota", func(ctx context.Context) (err error) {
			lease, err = g.reserveQuota(ctx, t, model)
			return err
		})
		if err != nil {
			last = err
			if isRefusal(err) && t.Priority != P0 || isShuttingDown(err) {
				return nil, err // queued classes get the refusal, not a degraded answer
			}
			continue
		}
		res, err := g.invoke(ctx, t, model, provider.KindOf(last) == provider.KindTimeout, out)
		if res != nil {
			lease.Settle(ctx, res.Usage)
		} else {
			lease.Release(ctx)
		}
		if err == nil {
			return res, nil
		}
		last = err
		if out.Started() || ctx.Err() != nil {
			return res, err // res: the cut answer's text and usage so far, if any
		}
		out.Discard()
		if provider.KindOf(err) == provider.KindGuardrail {
			break // blocked content: another model would block it too (or should not answer it)
		}
		if errors.Is(err, errStreamIdle) && takesWhole(out) && t.stallGrace == 0 {
			// The model stalled mid-answer while the client, waiting for the
			// whole answer, saw nothing: the next tier gets one attempt's
			// wait for its first token, though the budget is spent.
			t.stallGrace = max(g.cfgOf(t).Deadline.Attempt-g.firstByteLeft(t), time.Nanosecond)
		}
	}
	return nil, last
}

// reserveQuota is step 6 for one tier. P1–P3 turns may wait in the quota
// queue; having sent nothing upstream, they stop waiting when the drain
// starts (untilDrain) and end with shutting_down, which the client retries
// on another instance. P0 turns never wait: reserved or refused at once.
func (g *Gateway) reserveQuota(ctx context.Context, t *Turn, model string) (Lease, error) {
	if t.Priority == P0 {
		return g.reserve.Reserve(ctx, t, model)
	}
	ctx, stop := g.untilDrain(ctx)
	defer stop()
	lease, err := g.reserve.Reserve(ctx, t, model)
	if err != nil && context.Cause(ctx) == errDraining {
		err = shuttingDown(err)
	}
	return lease, err
}

// invoke calls one model through the retry loop, streaming into out. Usage of
// every attempt, failed ones included, is billed in the result.
//
// After the primary timed out, a cheaper tier is asked for a brief answer
// (simplified), which is quicker to produce.
func (g *Gateway) invoke(ctx context.Context, t *Turn, model string, simplified bool, out Output) (*Result, error) {
	// What the attempts share lives in one value: the retry loop's closure
	// escapes, and so would each variable it captured on its own.
	var a struct {
		m     modelConfig
		usage provider.Usage
		resp  *provider.Response
		ttft  time.Duration
		sofar string // the text of the last attempt, for a continuation
	}
	a.m, _ = g.cfgOf(t).Model(model)
	req := g.request(t, a.m)
	shapeRequest(t, a.m, req)
	// A thinking turn is not simplified: a brief answer's few tokens leave
	// no room for the reasoning it asked for.
	simplified = simplified && t.Thinking == nil
	if simplified {
		req = g.fallback.Simplify(req, model)
	}
	p := g.providerOf(t, model)
	// A client that takes its answer whole may get it from one whole call
	// (the tier's upstream "client"); every other answer is streamed.
	whole := wholeCall(a.m.Upstream, t, out)
	// A JSON answer is held until it is whole and checked.
	into, held := out, (*heldOutput)(nil)
	if t.Format.Kind != provider.FormatText {
		held = &heldOutput{Output: out}
		into = held
	}
	// The retry loop sees the first-byte deadline so it never starts doomed
	// work; each attempt runs under ctx, because the deadline bounds the
	// wait for the first token (watchStream), not the whole answer.
	dctx, cancel := context.WithDeadline(ctx, t.Received.Add(g.firstByteBudget(t)))
	defer cancel()
	_, err := g.invoker.Invoke(dctx, model, func(context.Context) error {
		out.Discard()
		beginTier(out, model, a.m.ModelID, model != t.firstTier)
		sctx, span := g.attemptSpan(ctx, t, model, a.m)
		// The answer is checked on its way to the client (guardrails.answers).
		to, guarded := into, g.guardAnswer(t, into)
		if guarded != nil {
			to = guarded
		}
		w, r, err := g.call(sctx, t, p, req, whole, to, &a.ttft)
		defer w.stop()
		if guarded != nil {
			err = g.settleGuard(sctx, guarded, r, err)
			if len(guarded.kinds) > 0 {
				code := "answer_checked:"
				if isAnswerBlocked(err) {
					code = "answer_blocked:"
				}
				t.noteGuard(code + strings.Join(guarded.kinds, ","))
			}
		}
		var attempt provider.Usage
		if r != nil {
			attempt = r.Usage
			a.usage = a.usage.Add(r.Usage)
			a.sofar = r.Text
		}
		defer func() {
			if provider.KindOf(err) == provider.KindGuardrail {
				span.SetStopReason("content_filtered") // a guardrail stopped the answer: its finish reason
			}
			g.captureContent(span, t, r, err)
			endAttempt(span, a.m, attempt, err)
		}()
		if err == nil {
			err = settleShape(t, model, r)
		}
		if err == nil && len(t.Tools) > 0 {
			err = checkToolCalls(t, model, r)
		}
		if err == nil && held != nil {
			err = held.release(r.Text)
		}
		if err != nil {
			if cause := context.Cause(w); isWatchdog(cause) && ctx.Err() == nil {
				err = cause
			}
			if out.Started() {
				return final(err)
			}
			return err
		}
		a.resp = r
		span.SetStopReason(r.StopReason)
		if len(r.ToolCalls) > 0 {
			span.SetToolCalls(toolNames(r.ToolCalls))
		}
		return nil
	})
	if err != nil {
		if a.usage != (provider.Usage{}) || (out.Started() && a.sofar != "") {
			return &Result{Text: a.sofar, Tier: model, ModelID: a.m.ModelID, Usage: a.usage, CostUSD: cost(a.m, a.usage),
				CacheSavedUSD: cacheSaving(a.m, a.usage)}, err
		}
		return nil, err
	}
	return &Result{
		Text:           a.resp.Text,
		Tier:           model,
		ModelID:        a.resp.ModelID,
		StopReason:     a.resp.StopReason,
		StopSequence:   a.resp.StopSequence,
		ToolCalls:      a.resp.ToolCalls,
		Thinking:       a.resp.Thinking,
		GuardrailTrace: a.resp.GuardrailTrace,
		Degraded:       model != t.firstTier || t.ContextUnavailable,
		Confidence:     a.m.Confidence,
		Usage:          a.usage,
		CostUSD:        cost(a.m, a.usage),
		CacheSavedUSD:  cacheSaving(a.m, a.usage),
		TTFT:           a.ttft,
		Simplified:     simplified,
	}, nil
}

// call makes one model attempt under its watchdog, which the caller stops:
// a whole answer, written to out once it is in, or a stream, written as it
// comes. It sets ttft to the time to the first token (to the whole answer).
//
// A client that takes its answer whole (takesWhole) sees nothing while
// the model streams: a silence is cut once the first-byte budget is spent
// and the model has been silent for deadline.attempt, not deadline.idle, so
// the turn moves to the next tier instead of holding the client.
func (g *Gateway) call(ctx context.Context, t *Turn, p provider.Provider, req *provider.Request, whole bool, out Output, ttft *time.Duration) (*watchdog, *provider.Response, error) {
	start := g.now()
	if whole {
		w := g.watchWhole(ctx, t, req.MaxTokens)
		r, err := p.Complete(w, req)
		if err == nil {
			*ttft = g.now().Sub(start)
			err = out.Write(r.Text)
		}
		return w, r, err
	}
	w := g.watchStream(ctx, t)
	if takesWhole(out) {
		w.byteDeadline, w.shortIdle = t.Received.Add(g.firstByteBudget(t)), g.cfgOf(t).Deadline.Attempt
	}
	sctx := context.Context(w)
	if req.Thinking != nil {
		// The reasoning is the model's first tokens: they keep the
		// watchdog from taking a thinking model for a silent one, and go
		// to a door that shows them.
		think, _ := out.(Thinker)
		sctx = provider.WithThinking(w, func(d provider.ThinkingDelta) error {
			if w.token() {
				*ttft = g.now().Sub(start)
			}
			if think == nil {
				return nil
			}
			return think.Think(d)
		})
	}
	r, err := p.Stream(sctx, req, func(text string) error {
		if w.token() {
			*ttft = g.now().Sub(start)
		}
		return out.Write(text)
	})
	return w, r, err
}

// fallBack asks the cascade below the model tiers and writes its answer.
func (g *Gateway) fallBack(ctx context.Context, t *Turn, cause error, out Output) (*Result, error) {
	if isRefusal(cause) && t.Priority != P0 || isShuttingDown(cause) {
		return nil, cause
	}
	if errors.Is(cause, context.Canceled) && ctx.Err() != nil {
		return nil, cause
	}
	if t.ToolChoice.Forced() || t.Format.Kind != provider.FormatText {
		// The client's code expects a tool call or JSON: prose would break it.
		return nil, &Error{Status: http.StatusServiceUnavailable, Code: CodeUpstream, RetryAfter: 5 * time.Second,
			Message: "No model that can give the answer in the form asked for is available right now. Please try again shortly.", Err: cause}
	}
	var res *Result
	err := g.step(ctx, "fallback", func(ctx context.Context) (err error) {
		res, err = g.fallback.Answer(ctx, t, cause)
		if err == nil {
			events.SpanFromContext(ctx).SetFallbackUsed(res.Tier)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	// A guardrail's redirect answer says so in its stop reason, which each
	// vendor door gives in its own words (content_filter, refusal,
	// guardrail_intervened).
	if pe, ok := errors.AsType[*provider.Error](cause); ok && pe.Kind == provider.KindGuardrail {
		res.StopReason = StopGuardrail
	}
	// The client's stop sequences end a fallback tier's text too, as they
	// would have ended a model's.
	if text, stop, ok := cutAtStop(res.Text, t.StopSequences); ok {
		res.Text, res.StopReason, res.StopSequence = text, "stop_sequence", stop
	}
	beginTier(out, res.Tier, "", true)
	if err := out.Write(res.Text); err != nil {
		return nil, err
	}
	g.log.LogAttrs(ctx, slogInfo, "answered by fallback tier",
		append(turnAttrs(t, cause), attrString("tier", res.Tier))...)
	return res, nil
}

// cutAtStop cuts text before the first of stops it holds, and says which
// one; ok is false when it holds none.
func cutAtStop(text string, stops []string) (cut, stop string, ok bool) {
	at := -1
	for _, s := range stops {
		if i := strings.Index(text, s); s != "" && i >= 0 && (at < 0 || i < at) {
			at, stop = i, s
		}
	}
	if at < 0 {
		return text, "", false
	}
	return text[:at], stop, true
}

// record keeps the exchange in the session, remembers a model's answer for
// later fallbacks and records usage against budgets. Its span carries the
// cost of the writes.
func (g *Gateway) record(ctx context.Context, t *Turn, res *Result) {
	ctx, span := g.tracer.Start(ctx, "record", events.WithKind(events.KindInternal), events.WithMustPersist())
	defer span.End()
	// The three writes are independent: in fleet mode they share a round trip.
	// Their outcomes are one value, so the closures share one allocation.
	var w struct {
		sessionErr, budgetErr error
		cached                bool
	}
	g.batcher.Together(ctx,
		func(ctx context.Context) { w.sessionErr = g.appendSession(ctx, t, res) },
		func(ctx context.Context) {
			w.cached = (!res.Degraded || g.isModel(res.Tier)) && g.fallback.Remember(ctx, t, res)
		},
		func(ctx context.Context) { w.budgetErr = g.budget.Record(ctx, t, res) })
	units := g.cfgOf(t).UnitCosts
	usd := 0.0
	switch {
	case w.sessionErr != nil:
		g.log.WarnContext(ctx, "session append failed", "err", w.sessionErr)
		span.SetErrorCode("session_write_failed")
	case !t.Stateless:
		usd += units.StorageWriteUSD
	}
	if w.cached {
		usd += units.CacheCallUSD
	}
	if w.budgetErr != nil {
		g.log.WarnContext(ctx, "budget record failed", "err", w.budgetErr)
	}
	span.SetCost(usd)
	g.judge.Consider(ctx, t, res)
	g.keepPayload(t, res)
}

// appendSession keeps the exchange in the caller's session, unless the turn
// brought its own conversation.
func (g *Gateway) appendSession(ctx context.Context, t *Turn, res *Result) error {
	if t.Stateless {
		return nil
	}
	return g.sessions.Append(ctx, t.UserID, t.SessionID, t.Message, res.Text)
}

// request builds the provider request for a model tier.
func (g *Gateway) request(t *Turn, m modelConfig) *provider.Request {
	msgs := make([]provider.Message, 0, len(t.History)+1)
	msgs = append(msgs, t.History...)
	msgs = append(msgs, provider.Message{Role: provider.RoleUser, Content: t.Message, Cache: t.MessageCache, ToolResults: t.ToolResults, Images: t.Images})
	if t.Prefill != "" {
		msgs = append(msgs, provider.Message{Role: provider.RoleAssistant, Content: t.Prefill})
	}
	maxOut := m.MaxOutputTokens
	if t.MaxOutput > 0 && t.MaxOutput < maxOut {
		maxOut = t.MaxOutput
	}
	req := &provider.Request{Model: m.Name, System: withContext(t.System, t.Context), Messages: msgs, MaxTokens: maxOut, Locale: t.Locale,
		Temperature: t.Temperature, TopP: t.TopP, TopK: t.TopK, Seed: t.Seed, StopSequences: t.StopSequences, CacheKey: t.PromptCacheKey, Tools: t.Tools, ToolChoice: t.ToolChoice,
		Thinking: t.Thinking, Guardrail: t.Guardrail, Metadata: t.Metadata}
	markPrefixes(t, m, req)
	return req
}

// watchStream bounds one streaming attempt, whatever the provider: the
// watchdog it returns is the attempt's context, with token to call on every
// token (true on the first) and stop to call when the attempt is over. The
// context is cancelled, with the reason as its cause, when the first token
// is later than the attempt's share of the first-byte budget
// (errFirstTokenLate), when the model then stays silent for deadline.idle
// (errStreamIdle), or when the turn reaches stream.maxDuration
// (errStreamTooLong). Before the first byte reaches the client each is a
// timeout the cascade falls back from; after it, the upstream call is
// cancelled and the client gets an error frame.
func (g *Gateway) watchStream(ctx context.Context, t *Turn) *watchdog {
	left := g.firstByteLeft(t)
	attempt := g.cfgOf(t).Deadline.Attempt
	// An attempt given less than deadline.attempt (a retry, a later tier)
	// and late says the turn ran out of time, not that the model is slow.
	return g.watch(ctx, t, min(attempt, left), false, left < attempt)
}

// watchWhole bounds one attempt asked for its whole answer of at most
// maxTokens at once (wholeBound): it is cancelled with errWholeLate past
// that bound, or with errStreamTooLong at stream.maxDuration, whichever
// comes first.
func (g *Gateway) watchWhole(ctx context.Context, t *Turn, maxTokens int) *watchdog {
	d := g.cfgOf(t).Deadline
	return g.watch(ctx, t, wholeBound(d.Attempt, d.Whole, maxTokens), true, false)
}

// WholePaceFloor is the slowest pace, in tokens a second, at which a
// healthy model writes an answer: a whole call not done by then is taken
// for a stalled one.
const WholePaceFloor = 20

// wholeBound is how long a whole call granted maxTokens may take: the
// first token's deadline, then the output at WholePaceFloor, at most
// limit. A short answer's stall is found in seconds, as a stream's is.
func wholeBound(attempt, limit time.Duration, maxTokens int) time.Duration {
	if maxTokens <= 0 {
		return limit
	}
	return min(limit, attempt+time.Duration(maxTokens)*time.Second/WholePaceFloor)
}

// wholeCall reports whether a model call is asked for its whole answer at
// once, by the tier's upstream mode: never for a client that reads its
// answer as it comes.
func wholeCall(mode string, t *Turn, out Output) bool {
	if !takesWhole(out) {
		return false
	}
	switch mode {
	case config.UpstreamClient:
		return true
	case config.UpstreamStream:
		return false
	}
	// auto: the vendors' APIs are called whole; the assistant's own chat
	// keeps the first-token deadline its 3-second promise rests on.
	switch t.Surface {
	case "openai", "openai.responses", "anthropic", "bedrock":
		return true
	}
	return false
}

func (g *Gateway) watch(ctx context.Context, t *Turn, first time.Duration, whole, cut bool) *watchdog {
	w := &watchdog{capAt: t.Received.Add(g.streamCfg.MaxDuration), idle: g.cfgOf(t).Deadline.Idle, whole: whole, cut: cut}
	w.Context, w.cancel = context.WithCancelCause(ctx)
	if time.Until(w.capAt) <= 0 {
		w.cancel(errStreamTooLong)
	}
	w.timer = time.AfterFunc(w.within(first), w.fire)
	return w
}

// watchdog is one attempt's context. One timer keeps all three of its
// deadlines: it is armed for the nearest one, and when it fires the time
// and whether a token came say which it was.
type watchdog struct {
	context.Context // cancelled with the reason as its cause
	cancel          context.CancelCauseFunc
	timer           *time.Timer
	capAt           time.Time // stream.maxDuration after the turn started
	idle            time.Duration
	// byteDeadline, when set, is the first-byte deadline of a client that
	// sees nothing until the answer is whole: past it, a silence of
	// shortIdle is a stall.
	byteDeadline time.Time
	shortIdle    time.Duration
	whole        bool // one whole answer, no tokens to watch
	// cut says the first-token wait was what was left of the turn's
	// first-byte budget, shorter than deadline.attempt.
	cut  bool
	seen atomic.Bool
}

// Deadline is the stream's maximum duration, or the turn's own deadline
// when that comes first.
func (w *watchdog) Deadline() (time.Time, bool) {
	if dl, ok := w.Context.Deadline(); ok && dl.Before(w.capAt) {
		return dl, true
	}
	return w.capAt, true
}

// within caps a wait at what is left to the stream's maximum duration.
func (w *watchdog) within(d time.Duration) time.Duration {
	return min(d, time.Until(w.capAt))
}

func (w *watchdog) fire() {
	switch {
	case !time.Now().Before(w.capAt):
		w.cancel(errStreamTooLong)
	case w.whole:
		w.cancel(&provider.Error{Kind: provider.KindTimeout, Err: errWholeLate})
	case w.seen.Load():
		w.cancel(&provider.Error{Kind: provider.KindTimeout, Err: errStreamIdle})
	case w.cut:
		w.cancel(&provider.Error{Kind: provider.KindTimeout, Err: errFirstByteSpent})
	default:
		w.cancel(&provider.Error{Kind: provider.KindTimeout, Err: errFirstTokenLate})
	}
}

// TurnOutOfTime reports whether err ended an attempt that was given only
// the rest of its turn's first-byte budget, less than deadline.attempt,
// before its first token: the turn ran out of time, which says nothing of
// the model's health.
func TurnOutOfTime(err error) bool { return errors.Is(err, errFirstByteSpent) }

// token restarts the idle wait; it reports whether this was the first token.
func (w *watchdog) token() bool {
	first := !w.seen.Swap(true)
	idle := w.idle
	if !w.byteDeadline.IsZero() {
		idle = min(idle, max(time.Until(w.byteDeadline), w.shortIdle))
	}
	w.timer.Reset(w.within(idle))
	return first
}

// stop ends the watch and releases the attempt's context.
func (w *watchdog) stop() {
	w.timer.Stop()
	w.cancel(nil)
}

// isWatchdog reports whether err is a reason watchStream cut an attempt.
func isWatchdog(err error) bool {
	return errors.Is(err, errFirstTokenLate) || errors.Is(err, errStreamIdle) || errors.Is(err, errStreamTooLong) ||
		errors.Is(err, errWholeLate) || errors.Is(err, errFirstByteSpent)
}

// firstByteLeft is what remains of the turn's budget to the first byte.
func (g *Gateway) firstByteLeft(t *Turn) time.Duration {
	return g.firstByteBudget(t) - g.now().Sub(t.Received)
}

// firstByteBudget is the turn's deadline to the first useful byte: the sync
// chat budget, or the longer batch budget for P3.
func (g *Gateway) firstByteBudget(t *Turn) time.Duration {
	d := g.cfgOf(t).Deadline
	if t.Priority == P3 {
		return d.Batch + t.stallGrace
	}
	return d.FirstByte + t.stallGrace
}

var (
	errNoModel        = errors.New("no model tier available")
	errNoTime         = errors.New("too little of the turn's deadline left to start a model call")
	errFirstTokenLate = errors.New("no first token within the attempt deadline")
	errFirstByteSpent = errors.New("no first token within what was left of the turn's first-byte budget")
	errStreamIdle     = errors.New("the model stopped sending tokens for longer than deadline.idle")
	errWholeLate      = errors.New("no whole answer within deadline.whole")
)
