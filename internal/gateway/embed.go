package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider"
)

// Limits of one embedding call, as OpenAI sets them.
const (
	// MaxEmbedInputs is the most texts one call may embed.
	MaxEmbedInputs = 2048
	// MaxEmbedTokens bounds the input tokens of one call, all texts
	// together, counted with the gateway's tokenizer.
	MaxEmbedTokens = 300_000
)

// EmbedInput is what an embedding call asks for.
type EmbedInput struct {
	// Inputs are the texts, in the order of the vectors wanted.
	Inputs []string
	// Dimensions is the length of the vectors; 0 is the start tier's
	// default.
	Dimensions int
}

// EmbedResult is an embedding call's answer.
type EmbedResult struct {
	// Vectors are one per input, in order.
	Vectors [][]float32
	// Tier is the embedding tier that answered, ModelID its vendor's id.
	Tier, ModelID string
	// InputTokens is what the tier billed for the inputs, and CostUSD its
	// price.
	InputTokens int
	CostUSD     float64
	// Degraded is set when a tier below the one asked for answered: its
	// vectors are of another model, not comparable with the asked one's.
	Degraded bool
	TraceID  string
	// TraceParent is the W3C traceparent of the call's span; empty with
	// tracing off.
	TraceParent string
}

// CostBudgeter is an optional Budgeter for a call priced before it runs
// (an embedding call: input, no output): HoldCost applies the daily cost
// budget alone, holding usd in t.BudgetHold (an *Error refuses), and
// RecordCost records the cost spent, settling the hold. Budgeter.Release
// ends a hold no cost settled. Without one, the budget step passes.
type CostBudgeter interface {
	HoldCost(ctx context.Context, t *Turn, usd float64) error
	RecordCost(ctx context.Context, t *Turn, usd float64) error
}

// defaultEmbedFeature is the feature of an embedding call that names none.
const defaultEmbedFeature = "embeddings"

// Embed takes one embedding call through the steps of a turn that apply to
// it, in a turn's order: validate (the API key's tiers among them),
// identify, admit (the caller's rate limits, then a slot of the key's
// concurrency), budget (the call's cost held against the daily budget), plan
// (the embedding tiers from the one asked for, minus those whose breaker
// is open), then tier by tier quota and invoke (retries, the retry budget,
// the tier's breaker), and record the cost. A tier that fails hands the
// call to the next embedding tier that can give the same vectors' length;
// when none can, the call fails (503 with Retry-After): never a chat tier,
// never a canned answer. Each call is one "turn" span, attributed to its
// feature ("embeddings" unless the caller names another), with a
// model_attempt span per attempt carrying its tokens and cost.
//
// t carries the caller, from the door's authentication; its StartTier is
// the embedding tier asked for (the first when empty), and an answer from
// another tier is degraded. Embed returns an *Error on refusal or failure.
func (g *Gateway) Embed(ctx context.Context, t *Turn, in EmbedInput) (res *EmbedResult, err error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	defer g.inflight.Done()
	g.enterConfig(t)
	if t.Feature == "" {
		t.Feature = defaultEmbedFeature
	}
	ctx, span := g.startEmbed(ctx, t)
	defer func() { g.endEmbed(span, t, res, err) }()

	// 1. Validate: sizes, and the tiers that can give the vectors asked for.
	route, dims, err := g.validateEmbed(t, &in)
	if err != nil {
		return nil, err
	}
	// 2. Identify the caller.
	t.Received = g.now()
	t.UserHash = g.hasher.Hash(t.UserID)
	t.RequestHash = g.hasher.Hash(t.RequestID)
	// 3. Admit: rate limits.
	if err := g.step(ctx, "admit", func(ctx context.Context) error { return g.admit.Admit(ctx, t) }); err != nil {
		return nil, err
	}
	// 3½. Hold one of the API key's slots of concurrency for the call.
	if err := g.takeSlot(ctx, t); err != nil {
		return nil, err
	}
	defer g.giveSlot(ctx, t)
	// 4. Budget: the call's cost at the dearest tier of its route, held.
	defer g.releaseBudget(ctx, t)
	if err := g.step(ctx, "budget", func(ctx context.Context) error { return g.holdEmbedCost(ctx, t, route) }); err != nil {
		return nil, err
	}
	// 5. Plan: minus tiers whose breaker is open; P0 downshifts off a saturated tier.
	route = g.plan.Plan(ctx, t, route)

	// 6–7. Reserve quota and invoke, tier by tier, until one answers.
	ctx, cancel := context.WithDeadline(ctx, t.Received.Add(g.embedDeadline(t)))
	defer cancel()
	res, err = g.embedRoute(ctx, t, in, dims, route)

	// 10. Record what the tiers billed against the daily budget, failed
	// attempts included: owed whatever the client does now.
	if cb, ok := g.budget.(CostBudgeter); ok && (err == nil || t.embedSpent > 0) {
		rctx, rcancel := owed(ctx)
		if err := cb.RecordCost(rctx, t, t.embedSpent); err != nil {
			g.log.WarnContext(rctx, "budget record failed", "err", err)
		}
		rcancel()
	}
	if err != nil {
		return nil, g.embedFailure(ctx, err)
	}
	res.TraceID = g.traceID(ctx, t)
	return res, nil
}

// IndexUser is the user an index's embedding calls (EmbedIndex) are
// attributed to in the events: the gateway's own work, no caller's.
const IndexUser = "fmgate-index"

// EmbedIndex embeds inputs with embedding tier tier and no other, for an
// index the gateway searches (the catalog's items): vectors of one model,
// comparable with the questions' the retrieval step embeds with the same
// tier. It is the gateway's own work, no caller's: there is no admission
// and no budget, but the tier's quota is reserved (at P3, the batch
// class, within deadline.batch), its breaker and retries apply, and the
// call is a turn in the events attributed to IndexUser and feature, with
// a model_attempt span per attempt carrying the tokens and cost the tier
// billed — so that the cost views count what the vendor bills for the
// index. It returns an *Error on refusal or failure.
func (g *Gateway) EmbedIndex(ctx context.Context, feature, tier string, inputs []string, dims int) (res *EmbedResult, err error) {
	if err := g.enter(); err != nil {
		return nil, err
	}
	defer g.inflight.Done()
	t := &Turn{RequestID: newID(), Route: "embeddings", Surface: "index", Feature: feature, UserID: IndexUser,
		Priority: P3, Stateless: true, StartTier: tier}
	g.enterConfig(t)
	ctx, span := g.startEmbed(ctx, t)
	defer func() { g.endEmbed(span, t, res, err) }()
	in := EmbedInput{Inputs: inputs, Dimensions: dims}
	route, dims, err := g.validateEmbed(t, &in)
	if err != nil {
		return nil, err
	}
	t.Received = g.now()
	t.UserHash = g.hasher.Hash(t.UserID)
	t.RequestHash = g.hasher.Hash(t.RequestID)
	route = g.plan.Plan(ctx, t, route[:min(len(route), 1)])
	ctx, cancel := context.WithDeadline(ctx, t.Received.Add(g.embedDeadline(t)))
	defer cancel()
	if res, err = g.embedRoute(ctx, t, in, dims, route); err != nil {
		return nil, g.embedFailure(ctx, err)
	}
	return res, nil
}

// validateEmbed checks the inputs and the dimensions against the start
// tier, and returns the route: the start tier and the tiers below it that
// can give vectors of the same length for inputs this long. It counts the
// input's tokens into t.EstimatedInput.
func (g *Gateway) validateEmbed(t *Turn, in *EmbedInput) ([]string, int, error) {
	tiers := t.cfg.Embeddings
	from := 0
	if t.StartTier != "" {
		from = slices.IndexFunc(tiers, func(e config.Embedding) bool { return e.Name == t.StartTier })
	}
	if from < 0 || len(tiers) == 0 {
		return nil, 0, &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: fmt.Sprintf("No embedding tier is named %q.", t.StartTier)}
	}
	start := tiers[from]
	if !t.mayUse(start.Name) {
		return nil, 0, forbiddenModel(t, start.Name)
	}
	t.StartTier = start.Name
	switch n := len(in.Inputs); {
	case n == 0:
		return nil, 0, invalidParam("input", "input must not be empty")
	case n > MaxEmbedInputs:
		return nil, 0, invalidParam("input", "input holds %d texts; the limit is %d", n, MaxEmbedInputs)
	}
	dims := in.Dimensions
	if dims == 0 {
		dims = start.Dimensions
	}
	if !start.Allows(dims) {
		return nil, 0, invalidParam("dimensions", "dimensions: embedding tier %s gives vectors of %s dimensions, not %d", start.Name, lengths(start), dims)
	}
	longest, total := 0, 0
	for i, text := range in.Inputs {
		if strings.TrimSpace(text) == "" {
			return nil, 0, invalidParam("input", "input[%d] must not be empty", i)
		}
		if !utf8.ValidString(text) {
			return nil, 0, invalidParam("input", "input[%d] must be valid UTF-8 text", i)
		}
		n := g.countTokens(text)
		if n > start.MaxInputTokens {
			return nil, 0, invalidParam("input", "input[%d] is about %d tokens; embedding tier %s takes at most %d a text", i, n, start.Name, start.MaxInputTokens)
		}
		longest, total = max(longest, n), total+n
		if total > MaxEmbedTokens {
			return nil, 0, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Param: "input",
				Message: fmt.Sprintf("input is over %d tokens, all texts together; send them in several calls", MaxEmbedTokens)}
		}
	}
	t.EstimatedInput = total
	route := make([]string, 0, len(tiers)-from)
	for _, e := range tiers[from:] {
		if e.Allows(dims) && e.MaxInputTokens >= longest && g.embedders[e.Name] != nil && t.mayUse(e.Name) {
			route = append(route, e.Name)
		}
	}
	return route, dims, nil
}

// invalidParam is a 400 naming the request field at fault.
func invalidParam(param, format string, args ...any) *Error {
	e := invalid(format, args...)
	e.Param = param
	return e
}

// lengths lists the vector lengths a tier gives, for a refusal.
func lengths(e config.Embedding) string {
	ds := e.AllowedDimensions
	if len(ds) == 0 {
		ds = []int{e.Dimensions}
	}
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = fmt.Sprint(d)
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// countTokens is the gateway's count of a text's tokens.
func (g *Gateway) countTokens(text string) int {
	if g.tokens != nil {
		return g.tokens(text)
	}
	return (len(text) + 3) / 4
}

// holdEmbedCost is step 4 of an embedding call: its input priced at the
// dearest tier of its route, held against the daily cost budget.
func (g *Gateway) holdEmbedCost(ctx context.Context, t *Turn, route []string) error {
	cb, ok := g.budget.(CostBudgeter)
	if !ok {
		return nil
	}
	usd := 0.0
	for _, name := range route {
		e, _ := t.cfg.Embedding(name)
		usd = max(usd, e.Price().Cost(provider.Usage{InputTokens: t.EstimatedInput}))
	}
	return cb.HoldCost(ctx, t, usd)
}

// embedDeadline bounds an embedding call, its attempts and retries
// together: deadline.whole, the bound of a call answered in one piece, or
// deadline.batch for P3.
func (g *Gateway) embedDeadline(t *Turn) time.Duration {
	if t.Priority == P3 {
		return t.cfg.Deadline.Batch
	}
	return t.cfg.Deadline.Whole
}

// embedRoute tries the planned embedding tiers in order and stops at the
// first that answers.
func (g *Gateway) embedRoute(ctx context.Context, t *Turn, in EmbedInput, dims int, route []string) (*EmbedResult, error) {
	var last error = errNoModel
	for _, tier := range route {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var lease Lease
		err := g.step(ctx, "quota", func(ctx context.Context) (err error) {
			lease, err = g.reserveQuota(ctx, t, tier)
			return err
		})
		if err != nil {
			last = err
			if isRefusal(err) && t.Priority != P0 || isShuttingDown(err) {
				return nil, err // queued classes get the refusal
			}
			continue
		}
		res, billed, err := g.embedTier(ctx, t, tier, in, dims)
		if billed > 0 {
			lease.Settle(ctx, provider.Usage{InputTokens: billed})
			e, _ := t.cfg.Embedding(tier)
			t.embedSpent += e.Price().Cost(provider.Usage{InputTokens: billed})
		} else {
			lease.Release(ctx)
		}
		if err == nil {
			res.Degraded = tier != t.StartTier
			return res, nil
		}
		last = err
	}
	return nil, last
}

// embedTier calls one embedding tier through the retry loop and its
// breaker. Each attempt is a model_attempt span with its tokens and cost.
// It returns the input tokens the tier billed over every attempt, failed
// ones included.
func (g *Gateway) embedTier(ctx context.Context, t *Turn, tier string, in EmbedInput, dims int) (*EmbedResult, int, error) {
	e, _ := t.cfg.Embedding(tier)
	p := g.embedders[tier]
	req := &provider.EmbedRequest{Model: tier, Inputs: in.Inputs, Dimensions: dims}
	var resp *provider.EmbedResponse
	billed := 0
	_, err := g.invoker.Invoke(ctx, tier, func(ctx context.Context) error {
		actx, span := g.tracer.Start(ctx, "model_attempt", events.WithKind(events.KindLLMCall), events.WithNodeID(tier), events.WithMustPersist())
		span.SetModel(e.ModelID)
		span.SetPromptVersion(t.PromptVersion) // a chat turn's question: the turn's prompt; a call of its own: none
		r, err := p.Embed(actx, req)
		if err == nil {
			err = checkVectors(tier, r, len(in.Inputs), dims)
		}
		tokens := 0 // as billed, failed or not
		if r != nil {
			tokens = r.InputTokens
			span.SetModel(orElse(r.ModelID, e.ModelID))
		}
		endAttempt(span, modelConfig{InputPerMTok: e.InputPerMTok}, provider.Usage{InputTokens: tokens}, err)
		billed += tokens
		if err != nil {
			return err
		}
		resp = r
		return nil
	})
	if err != nil {
		return nil, billed, err
	}
	return &EmbedResult{Vectors: resp.Vectors, Tier: tier, ModelID: orElse(resp.ModelID, e.ModelID), InputTokens: resp.InputTokens,
		CostUSD: e.Price().Cost(provider.Usage{InputTokens: resp.InputTokens})}, billed, nil
}

// checkVectors refuses an answer that is not one finite vector of dims per
// input: a broken upstream, which the next tier may stand in for.
func checkVectors(tier string, r *provider.EmbedResponse, inputs, dims int) error {
	bad := func(format string, args ...any) error {
		return &provider.Error{Kind: provider.KindUnavailable, Model: tier, Code: "malformed_embeddings", Err: fmt.Errorf(format, args...)}
	}
	if len(r.Vectors) != inputs {
		return bad("%d vectors for %d inputs", len(r.Vectors), inputs)
	}
	for i, v := range r.Vectors {
		if len(v) != dims {
			return bad("vector %d has %d dimensions, not %d", i, len(v), dims)
		}
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return bad("vector %d is not finite", i)
			}
		}
	}
	return nil
}

// embedFailure is what the client gets when no embedding tier answered:
// a refusal as it is (429 quota_exhausted, shutting_down), 400 when the
// model refused the input itself, otherwise 503 with Retry-After.
func (g *Gateway) embedFailure(ctx context.Context, err error) error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	switch kind := provider.KindOf(err); {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return &Error{Status: 499, Code: CodeCanceled, Message: "The request was cancelled.", Err: err}
	case kind == provider.KindValidation:
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest,
			Message: "The embedding model refused the input; check the length and the text of each input.", Err: err}
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeUpstream, RetryAfter: max(5*time.Second, provider.RetryAfterOf(err)),
		Message: "No embedding model is available right now. Please try again shortly.", Err: err}
}

// startEmbed opens the call's span: a turn, so that the cost views count
// it with its feature, answered in one piece.
func (g *Gateway) startEmbed(ctx context.Context, t *Turn) (context.Context, *events.Span) {
	if tc, ok := events.ParseTraceparent(t.TraceParent); ok {
		ctx = events.ContextWithRemote(ctx, tc)
	}
	ctx, span := g.tracer.Start(ctx, "turn", events.WithKind(events.KindInternal), events.WithNodeID(events.NodeEmbeddings),
		events.WithInvocationMode(events.ModeSync), events.WithMustPersist())
	span.SetUser(t.UserID)
	span.SetWorkflow(t.RequestID)
	attribute(span, t)
	if tc := span.Context(); tc.IsValid() && t.OnTraceparent != nil {
		t.OnTraceparent(events.FormatTraceparent(tc))
	}
	return ctx, span
}

// endEmbed ends the call's span with its outcome. As a chat turn's, its
// own cost is its compute time; its attempts carry the model's.
func (g *Gateway) endEmbed(span *events.Span, t *Turn, res *EmbedResult, err error) {
	span.SetCost(t.cfg.UnitCosts.ComputePerSecondUSD * g.now().Sub(span.Started()).Seconds())
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
		span.SetModel(res.ModelID)
		if tc := span.Context(); tc.IsValid() {
			res.TraceParent = events.FormatTraceparent(tc)
		}
	}
	span.End()
}

// ResolveEmbedding returns the embedding tier name (a tier, its modelId or
// an alias) names.
func (g *Gateway) ResolveEmbedding(name string) (config.Embedding, bool) {
	return g.Config().ResolveEmbedding(name)
}

func orElse(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
