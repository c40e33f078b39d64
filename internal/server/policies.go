package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/fallback/faq"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/queue"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/redishealth"
	"github.com/fmgate/fmgate/internal/retry"
	"github.com/fmgate/fmgate/internal/stream"
)

// This file adapts each policy package to the small interface the pipeline
// consumes (internal/gateway/policies.go).

// admitter is step 3: the multi-scope rate limiter.
type admitter struct {
	l   *ratelimit.Limiter
	obs observer
}

func (a admitter) Admit(ctx context.Context, t *gateway.Turn) error {
	res, err := limitCheck(ctx, a.l, rateRequest(t))
	if err != nil {
		return err
	}
	if res.Allowed {
		return nil
	}
	a.obs.Throttle(string(res.Limit))
	return &gateway.Error{Status: http.StatusTooManyRequests, Code: gateway.CodeRateLimited,
		Message: res.Message(t.Locale), RetryAfter: res.RetryAfter, Header: res.Headers(),
		Err: fmt.Errorf("rate limit %s", res.Limit)}
}

// budgeter is step 4: estimate, enforce budgets, truncate history; and the
// usage record that calibrates the estimator.
type budgeter struct {
	enf *budget.Enforcer
	// current is the config in force, for a turn that took no snapshot;
	// the prices are the turn's config's (configOf).
	current func() *config.Config
	hints   *provider.CacheHints
}

// budgetSession is the session t's tokens count against: none for a
// stateless turn, whose session id is its request's own (a vendor door's
// request carries its whole conversation), so that each such request does
// not leave a counter behind for the session TTL.
func budgetSession(t *gateway.Turn) string {
	if t.Stateless {
		return ""
	}
	return t.SessionID
}

func (b budgeter) Check(ctx context.Context, t *gateway.Turn, model string) error {
	cfg := configOf(t, b.current)
	plan, err := b.enf.Check(ctx, budget.Request{
		UserID: t.UserID, SessionID: budgetSession(t), Model: model, MaxOutput: t.MaxOutput,
		Parts: budget.Parts{System: t.System + provider.ToolsText(t.Tools), History: t.History,
			User: t.Message + (&provider.Message{ToolResults: t.ToolResults}).ToolText(), ImageTokens: provider.ImagesTokens(t.Images)},
		ExpectCached: b.hints.Expect(model, t.System),
		Hold:         true,
		Accounts:     accounts(cfg, t),
	}, priceOf(cfg, model))
	if ex, ok := errors.AsType[*budget.ExceededError](err); ok {
		return budgetRefusal(t, ex)
	}
	if err != nil {
		return err
	}
	if plan.CountersErr != nil {
		// Admitted without the session and spending checks: say so on
		// the budget step's span, so the gap shows in the turn's trace.
		events.SpanFromContext(ctx).SetErrorCode("budget_counters_unavailable")
	}
	t.History = plan.History
	t.MaxOutput = plan.MaxOutput
	t.EstimatedInput = plan.InputTokens
	t.Calibration = plan.Counts
	if plan.Hold.ID != "" {
		t.BudgetHold = plan.Hold
	}
	return nil
}

// budgetRefusal is the 402 of a turn a budget refused.
func budgetRefusal(t *gateway.Turn, ex *budget.ExceededError) *gateway.Error {
	e := &gateway.Error{Status: http.StatusPaymentRequired, Code: gateway.CodeBudgetExceeded, Message: ex.Message(t.Locale), Err: ex}
	switch {
	case ex.Held:
		e.RetryAfter = budget.HeldRetry // the turns in flight end soon, and give back what they did not spend
	case !ex.ResetAt.IsZero():
		e.RetryAfter = time.Until(ex.ResetAt)
	}
	return e
}

// Release implements gateway.Budgeter: it ends the hold Check took for a
// turn that no model's usage settled. A failure leaves the hold to lapse
// (budget.HoldTTL).
func (b budgeter) Release(ctx context.Context, t *gateway.Turn) {
	if h, ok := t.BudgetHold.(budget.Hold); ok {
		_ = b.enf.Release(ctx, h)
		t.BudgetHold = nil
	}
}

func (b budgeter) Record(ctx context.Context, t *gateway.Turn, res *gateway.Result) error {
	if _, isModel := configOf(t, b.current).Model(res.Tier); !isModel {
		return nil
	}
	// A continued answer's input counts two calls, and each vendor bills
	// images its own way: either would skew the text's calibration.
	if counts, ok := t.Calibration.(budget.ScriptCounts); ok && res.Usage.Input() > 0 && !res.Continued && !res.Usage.Estimated && !t.HasImages() {
		b.enf.Estimator().Observe(res.Tier, counts, res.Usage.Input())
	}
	if !res.Continued {
		b.hints.Observe(res.Tier, t.System, res.Usage)
	}
	hold, _ := t.BudgetHold.(budget.Hold)
	err := b.enf.Record(ctx, t.UserID, budgetSession(t), accounts(configOf(t, b.current), t), hold, res.Usage.Input(), res.Usage.OutputTokens, res.CostUSD+t.RetrievalCostUSD)
	if err == nil {
		t.BudgetHold = nil // settled
	}
	if errors.Is(err, redishealth.ErrDown) {
		return nil // counters fail open while Redis is down; the outage was logged once
	}
	return err
}

// accounts are the spenders besides its user whose budgets t is held
// against and charged to: its API key, its team and its feature, each when
// it has a budget.
func accounts(cfg *config.Config, t *gateway.Turn) []budget.Account {
	var a []budget.Account
	if t.KeyHash != "" { // counted even without a budget: its spend shows on /admin/keys
		a = append(a, budget.Account{Scope: budget.ScopeKey, ID: t.KeyHash, Limits: budget.Limits{DailyCostUSD: t.KeyDailyUSD, MonthlyCostUSD: t.KeyMonthlyUSD}})
	}
	if l, ok := cfg.Budget.Teams[t.Tenant]; ok && t.Tenant != "" {
		a = append(a, budget.Account{Scope: budget.ScopeTeam, ID: t.Tenant, Limits: l})
	}
	if l, ok := cfg.Budget.Features[t.Feature]; ok && t.Feature != "" {
		a = append(a, budget.Account{Scope: budget.ScopeFeature, ID: t.Feature, Limits: l})
	}
	return a
}

// planner is step 5: the configured tiers minus models whose breaker is
// open, and for P0 minus a primary whose quota is saturated.
type planner struct {
	breakers *breaker.Set
	ledger   quota.Ledger
	queue    *queue.Queue // woken when quota reserved ahead goes back
}

func (p planner) Plan(ctx context.Context, t *gateway.Turn, models []string) []string {
	route := make([]string, 0, len(models))
	for i, m := range models {
		if snap, err := breakerSnapshot(ctx, p.breakers, m); err == nil && snap.State == breaker.Open && snap.RetryAfter > 0 {
			continue
		}
		if t.Priority == gateway.P0 && i < len(models)-1 {
			if snap, err := quotaSaturation(ctx, p.ledger, m); err == nil && snap.Saturation >= 1 {
				continue // downshift: the cheaper tier answers instead
			}
		}
		route = append(route, m)
	}
	if a := aheadFrom(ctx); a != nil && (len(route) == 0 || !a.specOn(route[0])) {
		// The quota reserved ahead was for a model the route does not
		// start with: it goes back with the turn's next command.
		if sp := a.takeAnySpec(); sp != nil && sp.res != nil {
			lease{res: sp.res, q: p.queue}.Release(ctx)
		}
	}
	return route
}

// reserver is step 6: quota reservations, with the priority queue for the
// classes that wait.
type reserver struct {
	ledger   quota.Ledger
	breakers *breaker.Set
	queue    *queue.Queue
	// current is the config in force, for a turn that took no snapshot;
	// a tier's maxOutputTokens is the turn's config's (configOf).
	current func() *config.Config
	hints   *provider.CacheHints
	obs     observer
}

func (r reserver) Reserve(ctx context.Context, t *gateway.Turn, model string) (gateway.Lease, error) {
	in := t.EstimatedInput
	m, known := configOf(t, r.current).Model(model)
	// A vendor that does not count prompt-cache reads against its
	// tokens-per-minute limit (Anthropic, Bedrock) is reserved without the
	// reads expected from hints, and settled without the reads reported.
	free := known && !m.CacheReadsInQuota()
	if free {
		in -= min(r.hints.Expect(model, t.System), in)
	}
	tokens := in + min(t.MaxOutput, m.MaxOutputTokens)
	if t.MaxOutput == 0 {
		tokens = in + m.MaxOutputTokens
	}
	prio := quota.Priority(t.Priority)
	if t.Priority == gateway.P0 {
		res, err := reserveAndAllow(ctx, r.ledger, r.breakers, r.queue, model, prio, tokens)
		switch {
		case errors.Is(err, quota.ErrSaturated):
			r.obs.Throttle("quota")
			return nil, quotaRefusal(t, err)
		case err != nil:
			// The shared ledger is unreachable: serve the turn rather than
			// fail it; the provider's own throttling still protects it.
			return lease{q: r.queue}, nil
		}
		return lease{res: res, q: r.queue, readsFree: free}, nil
	}
	var got quota.Reservation
	queued := false
	waitCtx := ctx
	tenant := t.Tenant
	if tenant == "" {
		tenant = t.UserID
	}
	ticket := queue.Ticket{ID: t.RequestID, Priority: queue.Priority(t.Priority), Tenant: tenant, Locale: t.Locale, Premium: t.Premium}
	err := r.queue.Wait(ctx, ticket, func(ctx context.Context) (bool, error) {
		res, err := r.ledger.Reserve(ctx, model, prio, tokens)
		if errors.Is(err, quota.ErrSaturated) {
			r.obs.Throttle("quota")
			if !queued {
				queued = true
				gateway.NotifyStatus(waitCtx, gateway.Status{State: stream.StateQueued})
			}
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got = res
		return true, nil
	})
	var full *queue.FullError
	switch {
	case err == nil:
		return lease{res: got, q: r.queue, readsFree: free}, nil
	case errors.As(err, &full):
		return nil, &gateway.Error{Status: http.StatusTooManyRequests, Code: gateway.CodeQueueFull,
			Message: localize(t.Locale, "We're very busy right now and the waiting line is full. Please try again shortly.",
				"ただいま大変混み合っており、待ち行列がいっぱいです。しばらくしてからもう一度お試しください。"),
			RetryAfter: full.RetryAfter, Err: err}
	case errors.Is(err, queue.ErrExpired):
		return nil, &gateway.Error{Status: http.StatusServiceUnavailable, Code: gateway.CodeQueueTimeout,
			Message: localize(t.Locale, "Your request timed out in the queue while the models were at capacity. Please try again.",
				"モデルが混み合っていたため、待ち行列でタイムアウトしました。もう一度お試しください。"),
			RetryAfter: 5 * time.Second, Err: err}
	case ctx.Err() == nil:
		// The shared queue or ledger is unreachable: like the ledger for P0,
		// fail open rather than fail the turn; the provider's own throttling
		// still protects it.
		return lease{q: r.queue}, nil
	}
	return nil, err
}

func quotaRefusal(t *gateway.Turn, err error) error {
	var sat *quota.SaturatedError
	if !errors.As(err, &sat) {
		return err
	}
	return &gateway.Error{Status: http.StatusTooManyRequests, Code: gateway.CodeQuotaExhausted,
		Message: localize(t.Locale, "The assistant is at capacity right now. Please try again shortly.",
			"ただいまアシスタントが混み合っています。しばらくしてからもう一度お試しください。"),
		RetryAfter: sat.RetryAfter, Err: err}
}

type lease struct {
	res       quota.Reservation
	q         *queue.Queue
	readsFree bool // the vendor does not count prompt-cache reads (see reserver)
}

func (l lease) Settle(ctx context.Context, u provider.Usage) {
	if l.res != nil {
		_ = l.res.Settle(context.WithoutCancel(ctx), quotaTokens(u, l.readsFree))
	}
	l.notify(ctx)
}

func (l lease) Release(ctx context.Context) {
	if l.res != nil {
		_ = l.res.Release(context.WithoutCancel(ctx))
	}
	l.notify(ctx)
}

// quotaTokens is what u counts against a tokens-per-minute limit: every
// token, less the prompt-cache reads when the vendor does not count them.
func quotaTokens(u provider.Usage, readsFree bool) int {
	n := u.Input() + u.OutputTokens
	if readsFree {
		n -= u.CachedInputTokens
	}
	return n
}

// notify wakes the turns waiting for quota once the settlement reached the
// ledger: in fleet mode it rides the turn's Redis batch, and a turn woken
// before it landed would find the hold still there and wait on.
func (l lease) notify(ctx context.Context) {
	if redisbatch.From(ctx) == nil { // memory mode: no batch to wait for
		l.q.Notify()
		return
	}
	if !redisbatch.AfterQueued(ctx, l.q.Notify) {
		l.q.Notify()
	}
}

// invoker is step 7: the retry loop, with the model's breaker consulted on
// every attempt.
type invoker struct {
	retrier  *retry.Retrier
	breakers *breaker.Set
	obs      observer
}

func (iv invoker) Invoke(ctx context.Context, model string, call func(context.Context) error) (gateway.InvokeReport, error) {
	var prev error
	rep, err := iv.retrier.Do(ctx, model, func(ctx context.Context, attempt int) error {
		if attempt > 0 {
			iv.obs.Retry(model, string(provider.KindOf(prev)))
		}
		permit, err := allow(ctx, iv.breakers.Get(model), model)
		if errors.Is(err, breaker.ErrOpen) {
			return retry.Final(err) // fall to the next tier at once, no tokens burnt
		}
		err = call(ctx)
		prev = err
		switch kind := provider.KindOf(err); {
		case err == nil:
			permit.Done(ctx, true)
		case gateway.TurnOutOfTime(err):
			// Given only what its turn had left, less than an attempt's
			// deadline: no verdict on the model, and no time for a retry.
			permit.Release(ctx)
			return retry.Final(retry.Unjudged(err))
		case kind == provider.KindThrottled, kind == provider.KindCanceled:
			// The provider asked us to slow down, or the client left: neither
			// says the model is unhealthy, so the permit goes back without a
			// verdict (a half-open probe's place goes to the next turn).
			// Throttling is for the retry budget, adaptive pressure, the
			// adaptive send rate and the quota ledger to absorb; a breaker
			// opened by it would shift all traffic away for a whole open
			// period.
			if kind == provider.KindThrottled {
				iv.obs.Throttle("provider")
			}
			permit.Release(ctx)
		case kind == provider.KindValidation, kind == provider.KindGuardrail, kind == provider.KindAccessDenied, kind == provider.KindNotFound:
			permit.Done(ctx, true) // the model answered; the request was the problem
		case gateway.RejectedAnswer(err):
			// The model answered, but not in the form the client asked for
			// (its schema, its tools): the next tier answers, and neither the
			// breaker nor the pressure counts it against a healthy model.
			permit.Done(ctx, true)
			return retry.Final(retry.Unjudged(err))
		default:
			permit.Done(ctx, false)
		}
		if gateway.IsFinal(err) {
			return retry.Final(err)
		}
		return err
	})
	if rep.Stop == retry.StopPaced {
		iv.obs.Throttle("pace") // the model throttles: this attempt went to the next tier unsent
	}
	return gateway.InvokeReport{Attempts: rep.Attempts, Retries: rep.Retries}, err
}

// cascade is step 8 below the model tiers: cache, FAQ, graceful message.
type cascade struct {
	r *fallback.Resolver
	// current is the config in force, for a turn that took no snapshot.
	current func() *config.Config
}

func (c cascade) Answer(ctx context.Context, t *gateway.Turn, cause error) (*gateway.Result, error) {
	a := c.r.Answer(ctx, c.question(t), fallback.ReasonFor(cause))
	return &gateway.Result{Text: a.Text, Tier: a.Tier, Degraded: a.Degraded, Confidence: a.Confidence, CacheHit: a.CacheHit}, nil
}

// Remember caches a model's answer for other callers asking the same
// question, unless the answer drew on the caller's own conversation: those
// can hold what one user told the assistant, and the cache is shared. Nor
// is a reply that takes up none of the question's terms (a greeting, a
// list of what the assistant can do) cached: served later, when the models
// are down, it would stand in front of the FAQ's answer.
func (c cascade) Remember(ctx context.Context, t *gateway.Turn, res *gateway.Result) bool {
	// An answer given without the catalog (search down) is not worth reusing.
	if isModel(configOf(t, c.current), res.Tier) && !res.Simplified && len(t.History) == 0 && !t.ContextUnavailable && plainAnswer(t, res) &&
		faq.SharesTopic(t.Message, res.Text) {
		return c.r.Store(ctx, c.question(t), res.Text)
	}
	return false
}

// plainAnswer reports whether res is the model's whole answer to the bare
// question, as the cache keys it: not cut (by max tokens or by the
// client's stop sequences), nor shaped by the client's own system prompt or
// sampling, nor given with tools to call, images to look at, reasoning
// to show (the cache keeps no thinking blocks) or the client's own
// guardrail to apply. Another
// caller asking the same words would get any other as if it were the
// answer.
func plainAnswer(t *gateway.Turn, res *gateway.Result) bool {
	return (res.StopReason == "" || res.StopReason == "end_turn") && t.ClientSystem == "" &&
		len(t.StopSequences) == 0 && t.Temperature == nil && t.TopP == nil && t.TopK == nil && t.Seed == nil && t.Prefill == "" &&
		len(t.Tools) == 0 && t.Thinking == nil && t.Format.Kind == provider.FormatText && !t.HasImages() && t.Guardrail == nil
}

func (c cascade) Simplify(req *provider.Request, model string) *provider.Request {
	return c.r.Simplified(req, model)
}

func (c cascade) question(t *gateway.Turn) fallback.Question {
	return fallback.Question{Text: t.Message, Locale: t.Locale, PromptVersion: t.PromptVersion, NoCache: len(t.Tools) > 0 || t.Thinking != nil || t.Format.Kind != provider.FormatText || t.Prefill != "" || t.HasImages() ||
		t.Guardrail != nil}
}

func localize(locale, en, ja string) string {
	if locale == "ja" {
		return ja
	}
	return en
}

// configOf is the config t runs under: the snapshot it took when it
// entered the pipeline, or for a turn that has not, the one in force.
func configOf(t *gateway.Turn, current func() *config.Config) *config.Config {
	if c := t.Config(); c != nil {
		return c
	}
	return current()
}

// priceOf is the price of cfg's model tier (zero for another tier).
func priceOf(cfg *config.Config, model string) budget.Price {
	m, _ := cfg.Model(model)
	return m.Price()
}
