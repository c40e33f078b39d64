// Package budget estimates the tokens a chat request will use and enforces
// the token and cost budgets before the request reaches a model: per request
// (input and output), the model's context window, per session, and per user
// per day in dollars. Over the per-request input limit it truncates the
// oldest history first, always keeping the latest exchange and the current
// message.
//
// Estimation is language-aware (text is split by script: kana, kanji, Latin,
// digits, punctuation, …) and calibrates itself per model from the usage the
// providers report, so Japanese and mixed traffic is estimated as well as
// English.
package budget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// Config holds the budget limits. A zero session or daily limit disables
// that budget.
type Config struct {
	// RequestInput is the most input tokens one request may carry after
	// history truncation. Default 4,000.
	RequestInput int `yaml:"requestInput"`
	// RequestOutput caps the output tokens granted to one request; a request
	// asking for more (or for nothing) gets this. Default 1,024.
	RequestOutput int `yaml:"requestOutput"`
	// ContextWindow is the model's window. The input may use the window
	// minus PromptOverhead, SafetyTokens and the granted output. Default 200,000.
	ContextWindow int `yaml:"contextWindow"`
	// PromptOverhead is reserved for the provider's own framing. Default 300.
	PromptOverhead int `yaml:"promptOverhead"`
	// SafetyTokens absorbs estimation error. Default 500.
	SafetyTokens int `yaml:"safetyTokens"`
	// SessionInput and SessionOutput bound a conversation's cumulative
	// tokens. Defaults 50,000 and 25,000.
	SessionInput  int `yaml:"sessionInput"`
	SessionOutput int `yaml:"sessionOutput"`
	// DailyCostUSD bounds a user's spend per day. Default 5.00.
	DailyCostUSD float64 `yaml:"dailyCostUsd"`
	// MonthlyCostUSD bounds a user's spend per calendar month. Default 0:
	// none.
	MonthlyCostUSD float64 `yaml:"monthlyCostUsd"`
	// Teams bounds the spend of every key of a team (auth.keys.*.tenant),
	// by team name. A team not listed has no budget of its own.
	Teams map[string]Limits `yaml:"teams"`
	// Features bounds the spend of a product feature (the turn's feature
	// attribution: the X-Fmgate-Feature header on the vendors' doors, a
	// batch job's feature), by feature name.
	Features map[string]Limits `yaml:"features"`
	// Timezone is the IANA zone whose midnight starts a new day. Default "UTC".
	Timezone string `yaml:"timezone"`
	// SessionTTL is how long session counters live after their last update.
	// Default 24h.
	SessionTTL time.Duration `yaml:"sessionTtl"`
	// StoreTimeout bounds every read or write of shared counters (Redis).
	// Default 100ms. In-process counters answer at once and are not bounded.
	StoreTimeout time.Duration `yaml:"storeTimeout"`
}

// Limits are a spender's budgets in dollars; zero disables one.
type Limits struct {
	// DailyCostUSD bounds the spend per day.
	DailyCostUSD float64 `yaml:"dailyCostUsd"`
	// MonthlyCostUSD bounds the spend per calendar month.
	MonthlyCostUSD float64 `yaml:"monthlyCostUsd"`
}

// Validate reports negative limits, each named under field.
func (l Limits) Validate(field string) error {
	var errs []error
	if l.DailyCostUSD < 0 {
		errs = append(errs, fmt.Errorf("%s.dailyCostUsd: must be >= 0", field))
	}
	if l.MonthlyCostUSD < 0 {
		errs = append(errs, fmt.Errorf("%s.monthlyCostUsd: must be >= 0", field))
	}
	return errors.Join(errs...)
}

// DefaultConfig returns the MangaAssist limits.
func DefaultConfig() Config {
	return Config{
		RequestInput:   4_000,
		RequestOutput:  1_024,
		ContextWindow:  200_000,
		PromptOverhead: 300,
		SafetyTokens:   500,
		SessionInput:   50_000,
		SessionOutput:  25_000,
		DailyCostUSD:   5.00,
		Timezone:       "UTC",
		SessionTTL:     24 * time.Hour,
		StoreTimeout:   100 * time.Millisecond,
	}
}

// Validate reports every problem in c, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0", name))
		}
	}
	nonNegative := func(name string, v int) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be >= 0", name))
		}
	}
	positive("requestInput", c.RequestInput)
	positive("requestOutput", c.RequestOutput)
	positive("contextWindow", c.ContextWindow)
	nonNegative("promptOverhead", c.PromptOverhead)
	nonNegative("safetyTokens", c.SafetyTokens)
	nonNegative("sessionInput", c.SessionInput)
	nonNegative("sessionOutput", c.SessionOutput)
	if c.DailyCostUSD < 0 {
		errs = append(errs, errors.New("dailyCostUsd: must be >= 0"))
	}
	if c.MonthlyCostUSD < 0 {
		errs = append(errs, errors.New("monthlyCostUsd: must be >= 0"))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Teams)) {
		errs = append(errs, c.Teams[name].Validate("teams."+name))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Features)) {
		errs = append(errs, c.Features[name].Validate("features."+name))
	}
	if c.ContextWindow > 0 && c.ContextWindow-c.PromptOverhead-c.SafetyTokens-c.RequestOutput <= 0 {
		errs = append(errs, errors.New("contextWindow: leaves no room for input after overhead, safety and output"))
	}
	if _, err := time.LoadLocation(c.Timezone); err != nil || c.Timezone == "" {
		errs = append(errs, fmt.Errorf("timezone: unknown zone %q", c.Timezone))
	}
	if c.SessionTTL <= 0 {
		errs = append(errs, errors.New("sessionTtl: must be > 0"))
	}
	if c.StoreTimeout <= 0 {
		errs = append(errs, errors.New("storeTimeout: must be > 0"))
	}
	return errors.Join(errs...)
}

// Message is one conversation turn.
type Message = provider.Message

// Parts are the pieces of a request's input.
type Parts struct {
	System string
	// History is the conversation before the current message, oldest first.
	History []Message
	// Context is retrieved context; it travels inside the system prompt or
	// the user turn, so it adds no message framing of its own.
	Context string
	// User is the current message.
	User string
	// ImageTokens are the current message's images, in tokens
	// (provider.ImageTokens): counted as they are, not estimated from
	// text. History's images count in their messages.
	ImageTokens int
}

// Estimate is the estimated input tokens, by part.
type Estimate struct {
	System  int
	History int
	// HistoryEach is the estimate of each History message.
	HistoryEach []int
	Context     int
	User        int
	// Images is the part of History and User that is images, in tokens.
	Images int
	Total  int
	// Counts is what the estimate was computed from; pass it to
	// Estimator.Observe with the billed input tokens to calibrate.
	Counts ScriptCounts
}

// Estimate estimates parts for model.
func (e *Estimator) Estimate(model string, p Parts) Estimate {
	var est Estimate
	msg := func(c ScriptCounts, framed bool) (int, float64) {
		if framed {
			c.Messages = 1
		}
		est.Counts = est.Counts.Add(c)
		f := e.Tokens(model, c)
		return int(f + 0.5), f
	}
	var total, f float64
	if p.System != "" {
		est.System, f = msg(e.countSystem(p.System), true)
		total += f
	}
	est.HistoryEach = make([]int, len(p.History))
	for i, m := range p.History {
		est.HistoryEach[i], f = msg(Count(m.Content+m.ToolText()+m.ThinkingText()), true)
		img := m.ImageTokens()
		est.HistoryEach[i] += img
		est.History += est.HistoryEach[i]
		est.Images += img
		total += f + float64(img)
	}
	if p.Context != "" {
		est.Context, f = msg(Count(p.Context), false)
		total += f
	}
	est.User, f = msg(Count(p.User), true)
	est.User += p.ImageTokens
	est.Images += p.ImageTokens
	total += f + float64(p.ImageTokens)
	est.Total = int(total + 0.5)
	return est
}

// Budget names in ExceededError.
const (
	BudgetRequestInput   = "request_input"
	BudgetContextWindow  = "context_window"
	BudgetSessionInput   = "session_input"
	BudgetSessionOutput  = "session_output"
	BudgetDailyCost      = "daily_cost"
	BudgetMonthlyCost    = "monthly_cost"
	BudgetKeyDaily       = "key_daily_cost"
	BudgetKeyMonthly     = "key_monthly_cost"
	BudgetTeamDaily      = "team_daily_cost"
	BudgetTeamMonthly    = "team_monthly_cost"
	BudgetFeatureDaily   = "feature_daily_cost"
	BudgetFeatureMonthly = "feature_monthly_cost"
)

// ErrExceeded is matched (errors.Is) by every *ExceededError.
var ErrExceeded = errors.New("budget: exceeded")

// ExceededError says which budget refused a request.
type ExceededError struct {
	// Budget is one of the Budget* names.
	Budget string
	Limit  float64
	Used   float64
	// ResetAt is when the budget starts afresh, in the configured zone; zero
	// when it never resets by itself (per request, per session).
	ResetAt time.Time
	// Held is set when what is left of the daily budget is held by the
	// user's turns in flight rather than spent: it frees up as they end,
	// within HeldRetry.
	Held bool
}

// HeldRetry is when to try again a turn refused because the user's turns
// in flight hold the rest of the daily budget.
const HeldRetry = 2 * time.Second

func (e *ExceededError) Error() string {
	s := fmt.Sprintf("budget: %s exceeded (%g of %g)", e.Budget, e.Used, e.Limit)
	if !e.ResetAt.IsZero() {
		s += ", resets at " + e.ResetAt.Format(time.RFC3339)
	}
	return s
}

// Is makes errors.Is(err, ErrExceeded) true.
func (e *ExceededError) Is(target error) bool { return target == ErrExceeded }

// Message is a user-facing explanation in locale ("ja…" for Japanese,
// anything else English).
func (e *ExceededError) Message(locale string) string {
	ja := len(locale) >= 2 && locale[:2] == "ja"
	reset := e.ResetAt.Format("2006-01-02 15:04 MST")
	switch e.Budget {
	case BudgetRequestInput:
		if ja {
			return fmt.Sprintf("メッセージが長すぎます（1回のリクエストの上限は%sトークンです）。短くしてもう一度お試しください。", thousands(e.Limit))
		}
		return fmt.Sprintf("Your message is too long for one request (limit %s tokens). Please shorten it and try again.", thousands(e.Limit))
	case BudgetContextWindow:
		if ja {
			return "リクエストがモデルの処理できる長さを超えています。メッセージを短くするか、新しい会話を始めてください。"
		}
		return "This request is longer than the model can read at once. Please shorten your message or start a new conversation."
	case BudgetSessionInput, BudgetSessionOutput:
		if ja {
			return fmt.Sprintf("この会話はご利用上限（%sトークン）に達しました。新しい会話を始めてください。", thousands(e.Limit))
		}
		return fmt.Sprintf("This conversation has reached its limit (%s tokens). Please start a new conversation.", thousands(e.Limit))
	case BudgetDailyCost:
		if e.Held {
			if ja {
				return "処理中の他のリクエストが本日のご利用上限の残りを使用中です。少し待ってからもう一度お試しください。"
			}
			return "Your requests in progress are using the rest of today's usage limit. Please try again in a moment."
		}
		if ja {
			return fmt.Sprintf("本日のご利用上限（$%.2f）に達しました。%s にリセットされます。", e.Limit, reset)
		}
		return fmt.Sprintf("You have reached today's usage limit ($%.2f). It resets at %s.", e.Limit, reset)
	case BudgetMonthlyCost, BudgetKeyDaily, BudgetKeyMonthly, BudgetTeamDaily, BudgetTeamMonthly, BudgetFeatureDaily, BudgetFeatureMonthly:
		return e.spenderMessage(ja, reset)
	}
	if ja {
		return "ご利用上限に達しました。"
	}
	return "A usage limit was reached."
}

// spenderMessage explains a refusal by a budget other than the user's day.
func (e *ExceededError) spenderMessage(ja bool, reset string) string {
	whose := map[string][2]string{
		BudgetMonthlyCost:    {"今月のご利用上限", "this month's usage limit"},
		BudgetKeyDaily:       {"このAPIキーの本日の予算", "this API key's budget for today"},
		BudgetKeyMonthly:     {"このAPIキーの今月の予算", "this API key's budget for this month"},
		BudgetTeamDaily:      {"チームの本日の予算", "your team's budget for today"},
		BudgetTeamMonthly:    {"チームの今月の予算", "your team's budget for this month"},
		BudgetFeatureDaily:   {"この機能の本日の予算", "this feature's budget for today"},
		BudgetFeatureMonthly: {"この機能の今月の予算", "this feature's budget for this month"},
	}[e.Budget]
	if e.Held {
		if ja {
			return fmt.Sprintf("処理中の他のリクエストが%s（$%.2f）の残りを使用中です。少し待ってからもう一度お試しください。", whose[0], e.Limit)
		}
		return fmt.Sprintf("Requests in progress are using the rest of %s ($%.2f). Please try again in a moment.", whose[1], e.Limit)
	}
	if ja {
		return fmt.Sprintf("%s（$%.2f）に達しました。%s にリセットされます。", whose[0], e.Limit, reset)
	}
	return fmt.Sprintf("The request would go over %s ($%.2f). It resets at %s.", whose[1], e.Limit, reset)
}

func thousands(v float64) string {
	s := fmt.Sprintf("%d", int64(v))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Request is what Check needs to know about a turn.
type Request struct {
	UserID    string
	SessionID string
	Model     string
	Parts     Parts
	// MaxOutput is the output the caller asks for; zero or more than
	// Config.RequestOutput means Config.RequestOutput.
	MaxOutput int
	// ExpectCached is the input tokens the vendor is expected to read from
	// its prompt cache (CacheHints.Expect): the cost estimate prices them
	// as cache reads.
	ExpectCached int
	// Hold asks for the turn's estimated cost to be held against its
	// spending budgets (see Counters) until Record settles it or Release
	// ends it: Plan.Hold names the hold. Without it, the user's daily
	// budget is checked against what was spent, and Accounts are refused:
	// their budgets are enforced only by holding.
	Hold bool
	// Accounts are the spenders besides the user whose budgets the turn is
	// held against and charged to: its API key, team, feature.
	Accounts []Account
}

// Account scopes.
const (
	ScopeKey     = "key"
	ScopeTeam    = "team"
	ScopeFeature = "feature"
)

// An Account is a spender whose budgets a turn is held against and charged
// to besides its user's.
type Account struct {
	// Scope is ScopeKey, ScopeTeam or ScopeFeature.
	Scope string
	// ID names the spender in its scope: a key's hash, a team, a feature.
	ID string
	Limits
}

// newHoldID names a hold: random, since two turns must never share one.
func newHoldID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// HoldTTL is how long a turn's hold on the daily cost budget lasts when
// neither Record nor Release ends it (its instance died mid-turn): longer
// than any turn, short enough that a user is not held back for long.
const HoldTTL = 10 * time.Minute

// Hold is a turn's hold on its spending budgets; the zero Hold holds
// nothing.
type Hold struct {
	ID string
	// Day is the day the hold was taken on: the turn is charged to it even
	// when it ends after midnight.
	Day string
	// meters are those the turn is charged to, on the day and month it
	// was held.
	meters []Meter
	// local is set for a hold taken in this process while the shared
	// counters could not be reached (Enforcer.local).
	local bool
}

// Plan is an admitted request.
type Plan struct {
	// History is the history to send: the request's, possibly truncated.
	History []Message
	// Truncated reports that Dropped oldest history messages were removed.
	Truncated bool
	Dropped   int
	// Estimate is for the parts as sent (after truncation).
	Estimate Estimate
	// InputTokens is Estimate.Total.
	InputTokens int
	// MaxOutput is the output granted: the request's ask, capped by
	// Config.RequestOutput and by what is left of the session's output budget.
	MaxOutput int
	// CachedTokens is the part of InputTokens expected to be read from the
	// vendor's prompt cache (Request.ExpectCached, at most InputTokens).
	CachedTokens int
	// CostUSD is the worst-case cost (input + MaxOutput) at the given
	// price, CachedTokens at the cache-read price.
	CostUSD float64
	// Counts is Estimate.Counts, for Estimator.Observe once usage is known.
	Counts ScriptCounts
	// Hold is the turn's hold on the daily cost budget (Request.TurnID),
	// for Record or Release; zero when nothing was held.
	Hold Hold
	// CountersErr is set when the session and daily counters could not be
	// read: the request is admitted without those two checks (degrade, don't
	// fail) and the caller should report it.
	CountersErr error
}

// Enforcer checks requests against the budgets and records usage.
type Enforcer struct {
	limits   atomic.Pointer[limits] // swapped whole by SetConfig
	est      *Estimator
	counters Counters
	// local holds spending for this process while shared counters cannot
	// be reached: each instance then keeps its callers within their
	// budgets on its own, instead of letting every turn through. Nil when
	// counters are this process's already.
	local *MemoryCounters
	now   func() time.Time
	today atomic.Pointer[calendarDay] // the last day asked for
}

// New returns an Enforcer. now is the clock (time.Now when nil).
func New(cfg Config, est *Estimator, counters Counters, now func() time.Time) (*Enforcer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("budget: %w", err)
	}
	if est == nil || counters == nil {
		return nil, errors.New("budget: estimator and counters are required")
	}
	if now == nil {
		now = time.Now
	}
	b := &Enforcer{est: est, counters: counters, now: now}
	if _, inProcess := counters.(*MemoryCounters); !inProcess {
		b.local = NewMemoryCounters(cfg.SessionTTL, now)
	}
	loc, _ := time.LoadLocation(cfg.Timezone)
	b.limits.Store(&limits{Config: cfg, loc: loc})
	return b, nil
}

// limits are the budgets in force and the zone their days are counted in.
type limits struct {
	Config
	loc *time.Location
}

// SetConfig replaces the budgets from the next check on. The counters keep
// what was spent and held: a session or a day goes on under the new limits.
// The counters' own settings (sessionTtl) are fixed when they are built.
func (b *Enforcer) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("budget: %w", err)
	}
	loc, _ := time.LoadLocation(cfg.Timezone)
	b.limits.Store(&limits{Config: cfg, loc: loc})
	b.today.Store(nil) // the zone may have changed
	return nil
}

// Estimator returns the estimator the enforcer uses, for Observe.
func (b *Enforcer) Estimator() *Estimator { return b.est }

// Day is the counter key ("2006-01-02", in the configured zone) of the day
// t falls in: the day Check loads counters for.
func (b *Enforcer) Day(t time.Time) string {
	d, _ := b.day(t)
	return d
}

// day returns the counter key of the day t falls in and when it ends.
func (b *Enforcer) day(t time.Time) (string, time.Time) {
	d := b.calendar(t)
	return d.key, d.end
}

// calendar returns the day t falls in. The last day asked for is kept:
// every turn of a day asks for the same one.
func (b *Enforcer) calendar(t time.Time) *calendarDay {
	loc := b.limits.Load().loc
	if d := b.today.Load(); d != nil && d.loc == loc && !t.Before(d.start) && t.Before(d.end) {
		return d
	}
	t = t.In(loc)
	y, m, dd := t.Date()
	d := &calendarDay{key: t.Format("2006-01-02"), start: time.Date(y, m, dd, 0, 0, 0, 0, loc), end: time.Date(y, m, dd+1, 0, 0, 0, 0, loc), loc: loc,
		month: t.Format("2006-01"), monthEnd: time.Date(y, m+1, 1, 0, 0, 0, 0, loc)}
	b.today.Store(d)
	return d
}

// calendarDay is one day in the enforcer's zone and its counter key, and
// the month it falls in.
type calendarDay struct {
	key        string
	start, end time.Time
	loc        *time.Location
	month      string
	monthEnd   time.Time
}

// budgetMeter is a limited meter and the budget it enforces.
type budgetMeter struct {
	name    string
	usd     float64
	resetAt time.Time
}

// meters returns the meters a turn of userID on day d with accounts is
// charged to — the user's day always, the others when limited — and, in
// step, the limited ones for the hold and their budgets.
func meters(cfg *limits, d *calendarDay, userID string, accounts []Account) (charge, hold []Meter, budgets []budgetMeter) {
	charge = []Meter{UserDayMeter(userID, d.key, cfg.DailyCostUSD)}
	if cfg.DailyCostUSD > 0 {
		hold = append(hold, charge[0])
		budgets = append(budgets, budgetMeter{BudgetDailyCost, cfg.DailyCostUSD, d.end})
	}
	// add charges a spender's day and month (always, or only when
	// limited) and holds them when limited.
	add := func(name, scope, id string, l Limits, always bool) {
		for _, p := range []struct {
			suffix, period, budget string
			usd                    float64
			ttl                    time.Duration
			reset                  time.Time
		}{
			{"_day", d.key, "daily_cost", l.DailyCostUSD, dayTTL, d.end},
			{"_month", d.month, "monthly_cost", l.MonthlyCostUSD, monthTTL, d.monthEnd},
		} {
			m := Meter{Key: meterKey(scope+p.suffix, p.period, id), Limit: toNano(p.usd), TTL: p.ttl}
			switch {
			case p.usd > 0:
				charge, hold = append(charge, m), append(hold, m)
				budgets = append(budgets, budgetMeter{name + p.budget, p.usd, p.reset})
			case always:
				charge = append(charge, m)
			}
		}
	}
	add("", "user", userID, Limits{MonthlyCostUSD: cfg.MonthlyCostUSD}, false)
	for _, a := range accounts {
		add(a.Scope+"_", a.Scope, a.ID, a.Limits, true)
	}
	return charge, hold, budgets
}

// Check applies the budgets in order — per-request input and output, context
// window, session input and output, daily cost — and returns the plan or an
// *ExceededError. Counter store failures never refuse a request: see
// Plan.CountersErr.
func (b *Enforcer) Check(ctx context.Context, req Request, price Price) (Plan, error) {
	cfg := b.limits.Load() // one check, one set of budgets
	maxOut := req.MaxOutput
	if maxOut <= 0 || maxOut > cfg.RequestOutput {
		maxOut = cfg.RequestOutput
	}
	window := cfg.ContextWindow - cfg.PromptOverhead - cfg.SafetyTokens - maxOut
	target := min(cfg.RequestInput, window)

	parts := req.Parts
	est := b.est.Estimate(req.Model, parts)
	plan := Plan{History: parts.History}
	if est.Total > target {
		keep, dropped := truncate(parts.History, est.HistoryEach, est.Total-target)
		if dropped > 0 {
			parts.History = keep
			est = b.est.Estimate(req.Model, parts)
			plan.History, plan.Truncated, plan.Dropped = keep, true, dropped
		}
	}
	if est.Total > target && len(parts.History) > 0 {
		// Only the latest exchange is left, and it alone is over the budget
		// (an answer longer than the input budget): shorten it, or drop it,
		// rather than refuse every later turn of the session.
		parts.History = shorten(parts.History, est.HistoryEach, est.Total-target)
		if est = b.est.Estimate(req.Model, parts); est.Total > target {
			parts.History = nil
			est = b.est.Estimate(req.Model, parts)
		}
		plan.Dropped += len(plan.History) - len(parts.History)
		plan.History, plan.Truncated = parts.History, true
	}
	if est.Total > cfg.RequestInput {
		return Plan{}, &ExceededError{Budget: BudgetRequestInput, Limit: float64(cfg.RequestInput), Used: float64(est.Total)}
	}
	if est.Total > window {
		return Plan{}, &ExceededError{Budget: BudgetContextWindow, Limit: float64(window), Used: float64(est.Total)}
	}

	if len(req.Accounts) > 0 && !req.Hold {
		return Plan{}, errors.New("budget: accounts are enforced only by holding: set Request.Hold")
	}
	cal := b.calendar(b.now())
	day, next := cal.key, cal.end
	tctx, cancel := b.storeCtx(ctx)
	tot, err := b.counters.Load(tctx, req.UserID, req.SessionID, day)
	cancel()
	if err != nil {
		plan.CountersErr = fmt.Errorf("budget: load counters: %w", err)
	} else {
		if lim := cfg.SessionInput; lim > 0 && tot.SessionInput+est.Total > lim {
			return Plan{}, &ExceededError{Budget: BudgetSessionInput, Limit: float64(lim), Used: float64(tot.SessionInput)}
		}
		if lim := cfg.SessionOutput; lim > 0 {
			left := lim - tot.SessionOutput
			if left <= 0 {
				return Plan{}, &ExceededError{Budget: BudgetSessionOutput, Limit: float64(lim), Used: float64(tot.SessionOutput)}
			}
			maxOut = min(maxOut, left)
		}
	}
	cached := min(max(req.ExpectCached, 0), est.Total)
	cost := price.Cost(provider.Usage{InputTokens: est.Total - cached, CachedInputTokens: cached, OutputTokens: maxOut})
	if lim := cfg.DailyCostUSD; err == nil && lim > 0 && tot.DayCostUSD+cost > lim {
		return Plan{}, &ExceededError{Budget: BudgetDailyCost, Limit: lim, Used: tot.DayCostUSD, ResetAt: next}
	}
	// The hold checks the spending budgets itself, atomically: it is
	// tried even when the totals could not be read.
	if req.Hold {
		if err := b.hold(ctx, cfg, cal, req.UserID, req.Accounts, cost, &plan); err != nil {
			return Plan{}, err
		}
	}
	plan.Estimate = est
	plan.InputTokens = est.Total
	plan.MaxOutput = maxOut
	plan.CachedTokens = cached
	plan.CostUSD = cost
	plan.Counts = est.Counts
	return plan, nil
}

// CheckCost applies the spending budgets alone — the user's and its
// accounts' — to a request priced before it runs at costUSD (an embedding
// call: input, no output) and, with hold, holds the cost until Record
// settles it or Release ends it (Plan.Hold). The per-request,
// context-window and session budgets bound a conversation, and do not
// apply. As for Check, a counter store failure refuses nothing: see
// Plan.CountersErr.
func (b *Enforcer) CheckCost(ctx context.Context, userID string, accounts []Account, costUSD float64, hold bool) (Plan, error) {
	if len(accounts) > 0 && !hold {
		return Plan{}, errors.New("budget: accounts are enforced only by holding: set hold")
	}
	cfg := b.limits.Load()
	plan := Plan{CostUSD: costUSD}
	cal := b.calendar(b.now())
	if _, limited, _ := meters(cfg, cal, userID, accounts); len(limited) == 0 {
		return plan, nil // no budget to check: nothing to read
	}
	tctx, cancel := b.storeCtx(ctx)
	tot, err := b.counters.Load(tctx, userID, "", cal.key)
	cancel()
	if err != nil {
		plan.CountersErr = fmt.Errorf("budget: load counters: %w", err)
		return plan, nil
	}
	if lim := cfg.DailyCostUSD; lim > 0 && tot.DayCostUSD+costUSD > lim {
		return Plan{}, &ExceededError{Budget: BudgetDailyCost, Limit: lim, Used: tot.DayCostUSD, ResetAt: cal.end}
	}
	if hold {
		if err := b.hold(ctx, cfg, cal, userID, accounts, costUSD, &plan); err != nil {
			return Plan{}, err
		}
	}
	return plan, nil
}

// hold holds cost on every limited budget of userID and accounts at once
// (plan.Hold): what was spent may already be spoken for by turns in
// flight, so concurrent turns cannot together spend past any of them. The
// refusal is an *ExceededError; a store failure refuses nothing and is set
// in plan.CountersErr.
func (b *Enforcer) hold(ctx context.Context, cfg *limits, cal *calendarDay, userID string, accounts []Account, cost float64, plan *Plan) error {
	charge, hold, budgets := meters(cfg, cal, userID, accounts)
	if len(hold) == 0 {
		return nil
	}
	hctx, cancel := b.storeCtx(ctx)
	id := newHoldID()
	nano := toNano(cost)
	refused, spent, err := b.counters.Hold(hctx, id, nano, hold, HoldTTL)
	cancel()
	local := false
	if err != nil && b.local != nil {
		// Held in this process instead: the shared counters' spend is
		// not known here, so each instance allows at most the whole budget
		// while they are out of reach, never an unbounded spend.
		plan.CountersErr = fmt.Errorf("budget: hold (held in this process instead): %w", err)
		refused, spent, err = b.local.Hold(ctx, id, nano, hold, HoldTTL)
		local = true
	}
	switch {
	case err != nil:
		plan.CountersErr = fmt.Errorf("budget: hold: %w", err)
	case refused >= 0:
		by := budgets[refused]
		return &ExceededError{Budget: by.name, Limit: by.usd, Used: float64(spent) / nanoUSD, ResetAt: by.resetAt,
			Held: spent+nano <= hold[refused].Limit}
	default:
		plan.Hold = Hold{ID: id, Day: cal.key, meters: charge, local: local}
	}
	return nil
}

// truncate drops the oldest history until excess tokens are gone, keeping
// the latest exchange (the last two messages). It then also drops a leading
// assistant message, since conversations must open with the user, and a
// leading message of tool results, whose calls went with what was dropped.
func truncate(history []Message, each []int, excess int) ([]Message, int) {
	i := 0
	for excess > 0 && len(history)-i > 2 {
		excess -= each[i]
		i++
	}
	for i > 0 && len(history)-i > 2 && (history[i].Role == provider.RoleAssistant || len(history[i].ToolResults) > 0) {
		i++
	}
	return history[i:], i
}

// ShortenedMark ends a history message that shorten cut.
const ShortenedMark = " …"

// shorten cuts the messages of history, the latest first, by excess tokens
// and a margin for the estimate's error, each in proportion to its runes.
// When a message would keep less than a useful part of itself, the history
// goes whole: a question without its answer would mislead the model.
func shorten(history []Message, each []int, excess int) []Message {
	const margin, least = 16, 64 // tokens
	out := slices.Clone(history)
	for i := len(out) - 1; i >= 0 && excess > 0; i-- {
		keep := each[i] - excess - margin
		if keep < least {
			if each[i] <= least {
				continue // short already: cutting it would not help
			}
			return nil
		}
		runes := []rune(out[i].Content)
		out[i].Content = string(runes[:len(runes)*keep/each[i]]) + ShortenedMark
		excess -= each[i] - keep
	}
	return out
}

// Record adds a finished request's billed usage to its session and to the
// spend of its user and accounts: on the day and month of its hold h
// (ending it), or, without one, today's.
// The error (store unreachable or slow) is for the caller to report; the
// request has already been served.
func (b *Enforcer) Record(ctx context.Context, userID, sessionID string, accounts []Account, h Hold, in, out int, costUSD float64) error {
	charge := h.meters
	if h.ID == "" {
		charge, _, _ = meters(b.limits.Load(), b.calendar(b.now()), userID, accounts)
	}
	hold := h.ID
	if h.local {
		// The local hold ends with the cost, which stays counted here
		// against this process's later local holds; the shared counters
		// hold nothing under this id.
		_ = b.local.Add(ctx, userID, "", h.ID, charge, 0, 0, costUSD) // no session: the shared counters count it
		hold = ""
	}
	ctx, cancel := b.storeCtx(ctx)
	defer cancel()
	if err := b.counters.Add(ctx, userID, sessionID, hold, charge, in, out, costUSD); err != nil {
		return fmt.Errorf("budget: record: %w", err)
	}
	return nil
}

// Spend is what an account has spent today and this month, in the
// configured zone.
type Spend struct {
	TodayUSD float64 `json:"todayUsd"`
	MonthUSD float64 `json:"monthUsd"`
}

// Spend reads what each of accounts has spent today and this month.
func (b *Enforcer) Spend(ctx context.Context, accounts []Account) ([]Spend, error) {
	cal := b.calendar(b.now())
	meters := make([]Meter, 0, 2*len(accounts))
	for _, a := range accounts {
		meters = append(meters, Meter{Key: meterKey(a.Scope+"_day", cal.key, a.ID)}, Meter{Key: meterKey(a.Scope+"_month", cal.month, a.ID)})
	}
	ctx, cancel := b.storeCtx(ctx)
	defer cancel()
	nano, err := b.counters.Spent(ctx, meters)
	if err != nil {
		return nil, fmt.Errorf("budget: spent: %w", err)
	}
	out := make([]Spend, len(accounts))
	for i := range out {
		out[i] = Spend{TodayUSD: float64(nano[2*i]) / nanoUSD, MonthUSD: float64(nano[2*i+1]) / nanoUSD}
	}
	return out, nil
}

// Release ends a hold that no usage settles (the turn spent nothing on a
// model: refused after the budget step, or answered by the cache).
func (b *Enforcer) Release(ctx context.Context, h Hold) error {
	if h.ID == "" {
		return nil
	}
	if h.local {
		return b.local.Release(ctx, h.ID, h.meters)
	}
	ctx, cancel := b.storeCtx(ctx)
	defer cancel()
	if err := b.counters.Release(ctx, h.ID, h.meters); err != nil {
		return fmt.Errorf("budget: release: %w", err)
	}
	return nil
}

// storeCtx bounds one counter call by StoreTimeout. In-process counters
// never wait, so they get ctx as it is: for them a deadline's timer would
// cost more than the call.
func (b *Enforcer) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, local := b.counters.(*MemoryCounters); local {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, b.limits.Load().StoreTimeout)
}

// ContextRoom is how many input tokens retrieved context may add to a
// request already estimated at input tokens with maxOut output granted: what
// the per-request input budget and the context window leave. Context gets
// only this room, so it is cut before any history is.
func (b *Enforcer) ContextRoom(input, maxOut int) int {
	cfg := b.limits.Load()
	if maxOut <= 0 || maxOut > cfg.RequestOutput {
		maxOut = cfg.RequestOutput
	}
	window := cfg.ContextWindow - cfg.PromptOverhead - cfg.SafetyTokens - maxOut
	return max(0, min(cfg.RequestInput, window)-input)
}
