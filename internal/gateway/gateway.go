// Package gateway wires fmgate together: the turn pipeline (pipeline.go, the
// order of a turn), the front doors (WebSocket, HTTP/SSE chat) and the admin
// API.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/artifacts"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/session"
	"github.com/fmgate/fmgate/internal/slots"
	"github.com/fmgate/fmgate/internal/stream"
)

type modelConfig = config.Model

// Gateway is one fmgate instance.
type Gateway struct {
	// inForce is the config in force with its model tiers' providers; a
	// turn reads the snapshot it started with (Turn.cfg, Turn.providers),
	// so a reload never shows it half of two configs.
	inForce   atomic.Pointer[snapshot]
	sessions  session.Store
	log       *slog.Logger
	now       func() time.Time
	prompts   Prompts
	hasher    UserHasher
	stateHash UserHasher // for the ids of shared state (Deps.StateHasher)
	keys      RuntimeKeys
	slots     slots.Slots
	proxies   []netip.Prefix // server.trustedProxies, fixed at start
	streamCfg stream.Config
	tracer    *events.Tracer

	admit    Admitter
	budget   Budgeter
	retrieve Retriever
	plan     Planner
	reserve  Reserver
	invoker  Invoker
	fallback Fallback
	judge    Judge
	batcher  Batcher
	images   ImageFetcher
	// guardrails are the remote guardrail checks by profile
	// (Deps.Guardrails).
	guardrails map[string]guardrail.Checker
	// payloads is the payload log (Deps.Payloads); nil: none.
	payloads PayloadLog

	draining atomic.Bool
	// drained is cancelled when Drain starts: turns still waiting for quota
	// end then (untilDrain) instead of when the drain times out.
	drained    context.Context
	startDrain context.CancelFunc
	inflight   sync.WaitGroup
	// turnsMu orders enter against Drain so no turn slips in after the wait.
	turnsMu sync.RWMutex

	requests inflightSet
	batches  *batchJobs
	connsMu  sync.Mutex
	conns    map[*wsConn]struct{}
	wsPing   wsKeepAlive
	admin    http.Handler // extra admin routes (e.g. the simulator's)
	throttle func(scope string)
	estimate func(*provider.Request) int
	// embedders serve the embedding tiers, by name; tokens counts an
	// embedding input's tokens.
	embedders map[string]provider.Embedder
	tokens    func(string) int
}

// Deps are what a Gateway is built from. Nil policies are pass-throughs.
type Deps struct {
	Providers map[string]provider.Provider
	Sessions  session.Store
	Log       *slog.Logger
	Now       func() time.Time
	// UserHasher hashes user ids for logs and events; it should be the
	// tracer's, so both join. Nil draws a per-process key.
	UserHasher UserHasher
	// Keys are the API keys managed at run time; nil: only auth.keys.
	Keys RuntimeKeys
	// Slots caps an API key's turns in flight (auth.keys.*.concurrent);
	// nil: in this process only.
	Slots slots.Slots
	// StateHasher names API keys and client addresses in shared state
	// (rate limits, quotas, budgets): every instance of a fleet must hash
	// them alike, whatever the user hash's key. Nil: UserHasher.
	StateHasher UserHasher

	// EstimateTokens counts a request's input tokens when its tier's vendor
	// cannot (CountTokens); nil counts a token per four bytes.
	EstimateTokens func(*provider.Request) int

	// Embedders serve the embedding tiers (Embed), by tier name; nil
	// serves none. CountTokens counts a text's tokens for their budgets,
	// quotas and input bounds; nil counts a token per four bytes.
	Embedders   map[string]provider.Embedder
	CountTokens func(string) int

	Admitter Admitter
	Budgeter Budgeter
	// Retriever is the catalog search; nil skips retrieval.
	Retriever Retriever
	Planner   Planner
	Reserver  Reserver
	Invoker   Invoker
	Fallback  Fallback
	// Judge grades a sample of completed turns; nil grades none.
	Judge Judge
	// Batcher groups a turn's shared-state calls into few round trips
	// (fleet mode); nil makes each call on its own.
	Batcher Batcher
	// Jobs keeps batch jobs' state for GET /v1/batch/{id}; nil keeps it in
	// this instance's memory. A fleet shares one (Redis), so a job's status
	// answers from any instance, and after its own restarts.
	Jobs JobStore
	// AdminRoutes are mounted under /admin/ behind the admin token.
	AdminRoutes http.Handler
	// Tracer emits one event per span; nil switches events off.
	Tracer *events.Tracer
	// Prompts is the prompt in force; nil uses the config's prompt, fixed.
	Prompts Prompts
	// OnThrottle counts a refusal by a limit the front doors enforce
	// themselves (scope "connection": turns in flight on one WebSocket), as
	// the policies count theirs. Nil counts nothing.
	OnThrottle func(scope string)

	// Images fetches the remote images a front door left pending; nil
	// refuses them.
	Images ImageFetcher

	// Guardrails are the remote guardrail checks, by guardrails profile
	// ("" for the top level's guardrails.bedrock), each run after the
	// built-in checks within its bedrock.timeout: each should be behind a
	// breaker of its own, wrapping ErrGuardrailOpen while that is open. A
	// profile with a remote check and none here fails the check (its
	// onError decides).
	Guardrails map[string]guardrail.Checker

	// Payloads keeps the request and answer of the turns payloadLog
	// chooses; nil keeps none (payloadLog.enabled off).
	Payloads PayloadLog
}

// New builds a gateway. Every configured model needs a provider.
func New(cfg config.Config, d Deps) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkProviders(cfg, d.Providers); err != nil {
		return nil, err
	}
	for _, e := range cfg.Embeddings {
		if d.Embedders != nil && d.Embedders[e.Name] == nil {
			return nil, errors.New("gateway: no embedder for embedding tier " + e.Name)
		}
	}
	g := &Gateway{
		estimate:   d.EstimateTokens,
		sessions:   d.Sessions,
		log:        d.Log,
		now:        d.Now,
		prompts:    d.Prompts,
		hasher:     d.UserHasher,
		stateHash:  d.StateHasher,
		keys:       d.Keys,
		slots:      d.Slots,
		proxies:    cfg.Server.Proxies(),
		streamCfg:  cfg.Stream,
		wsPing:     wsKeepAlive{every: wsPingInterval, pongWait: wsPongWait},
		admit:      d.Admitter,
		budget:     d.Budgeter,
		retrieve:   d.Retriever,
		plan:       d.Planner,
		reserve:    d.Reserver,
		invoker:    d.Invoker,
		fallback:   d.Fallback,
		judge:      d.Judge,
		batcher:    d.Batcher,
		images:     d.Images,
		guardrails: d.Guardrails,
		payloads:   d.Payloads,
		admin:      d.AdminRoutes,
		tracer:     d.Tracer,
		batches:    newBatchJobs(cfg.Batch, d.Jobs, d.Now),
		throttle:   d.OnThrottle,
		embedders:  d.Embedders,
		tokens:     d.CountTokens,
	}
	g.inForce.Store(newSnapshot(&cfg, d.Providers))
	g.drained, g.startDrain = context.WithCancel(context.Background())
	if g.throttle == nil {
		g.throttle = func(string) {}
	}
	if g.prompts == nil {
		text, err := cfg.SystemPrompt()
		if err != nil {
			return nil, err
		}
		g.prompts = staticPrompt{text: text, version: artifacts.Version(cfg.Prompt.Name, text)}
	}
	if g.hasher == nil {
		g.hasher = events.NewHasher(nil)
	}
	if g.slots == nil {
		g.slots = slots.NewMemory(g.now)
	}
	if g.stateHash == nil {
		g.stateHash = g.hasher
	}
	if g.sessions == nil {
		g.sessions = session.NewMemory(cfg.Session.HistoryExchanges, cfg.Session.MaxSessions, cfg.Session.TTL, nil)
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.admit == nil {
		g.admit = passAdmitter{}
	}
	if g.budget == nil {
		g.budget = passBudgeter{}
	}
	if g.plan == nil {
		g.plan = passPlanner{}
	}
	if g.reserve == nil {
		g.reserve = passReserver{}
	}
	if g.invoker == nil {
		g.invoker = onceInvoker{}
	}
	if g.fallback == nil {
		g.fallback = gracefulOnly{}
	}
	if g.judge == nil {
		g.judge = passJudge{}
	}
	if g.batcher == nil {
		g.batcher = oneByOne{}
	}
	return g, nil
}

// enter registers a turn in flight, refusing new turns while draining; the
// turn ends with g.inflight.Done.
func (g *Gateway) enter() error {
	g.turnsMu.RLock()
	defer g.turnsMu.RUnlock()
	if g.draining.Load() {
		return shuttingDown(nil)
	}
	g.inflight.Add(1)
	return nil
}

// Drain stops accepting turns and waits for those in flight, up to ctx.
func (g *Gateway) Drain(ctx context.Context) error {
	g.turnsMu.Lock()
	g.draining.Store(true)
	g.turnsMu.Unlock()
	g.startDrain()
	g.stopBatches() // batch work is resubmitted, not waited for; its jobs' last state is saved

	done := make(chan struct{})
	go func() { g.inflight.Wait(); g.batches.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shuttingDown is the refusal of a turn this instance will not serve because
// it is draining; the client (or its load balancer) retries elsewhere.
func shuttingDown(err error) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown,
		Message: "The assistant is restarting. Please reconnect in a few seconds.", RetryAfter: 5 * time.Second, Err: err}
}

// errDraining is the cause of a wait ended by the start of a drain.
var errDraining = errors.New("gateway: draining")

// untilDrain is ctx, also cancelled (with errDraining) when the gateway
// starts draining. A turn waiting in the quota queue has sent nothing
// upstream, so it ends at once with shutting_down, which the client can
// retry on another instance, rather than being cut when the drain times out.
func (g *Gateway) untilDrain(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(g.drained, func() { cancel(errDraining) })
	return ctx, func() { stop(); cancel(nil) }
}

// Ready reports whether the gateway accepts new turns.
func (g *Gateway) Ready() bool { return !g.draining.Load() }

// snapshot is a config and the providers of its model tiers, put in force
// together.
type snapshot struct {
	cfg       *config.Config
	tiers     []string // the model tiers' names in cascade order
	providers map[string]provider.Provider
}

func newSnapshot(cfg *config.Config, providers map[string]provider.Provider) *snapshot {
	return &snapshot{cfg: cfg, tiers: tierNames(cfg.Models), providers: providers}
}

// checkProviders refuses providers that lack one of cfg's model tiers.
func checkProviders(cfg config.Config, providers map[string]provider.Provider) error {
	for _, m := range cfg.Models {
		if providers[m.Name] == nil {
			return errors.New("gateway: no provider for model " + m.Name)
		}
	}
	return nil
}

// SetConfig puts cfg in force for the turns that start from now on, with
// the model tiers' providers in force; turns in flight finish under the
// config they started with. The embedding tiers and the stream settings
// stay as the gateway was built: config.CheckReload refuses a reload that
// changes them.
func (g *Gateway) SetConfig(cfg config.Config) error {
	return g.SetTiers(cfg, g.inForce.Load().providers)
}

// SetTiers is SetConfig with new providers for the model tiers (by tier
// name; every tier of cfg needs one): a reload that adds, removes,
// reorders or reconnects tiers. A turn in flight keeps the providers it
// started with.
func (g *Gateway) SetTiers(cfg config.Config, providers map[string]provider.Provider) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := checkProviders(cfg, providers); err != nil {
		return err
	}
	for _, e := range cfg.Embeddings {
		if g.embedders != nil && g.embedders[e.Name] == nil {
			return errors.New("gateway: the embedding tiers cannot change without a restart")
		}
	}
	g.inForce.Store(newSnapshot(&cfg, providers))
	return nil
}

// Config is the config in force for the turns starting now.
func (g *Gateway) Config() *config.Config { return g.inForce.Load().cfg }

// Providers is the model tiers' providers in force, by tier name; the map
// may not be changed.
func (g *Gateway) Providers() map[string]provider.Provider { return g.inForce.Load().providers }

// enterConfig gives t the config and providers in force, unless it took
// them already: the whole turn runs under these.
func (g *Gateway) enterConfig(t *Turn) {
	if t.cfg == nil {
		t.in = g.inForce.Load()
		t.cfg = t.in.cfg
	}
}

// snapshotOf is the snapshot t runs under, or the one in force.
func (g *Gateway) snapshotOf(t *Turn) *snapshot {
	if t != nil && t.in != nil && t.in.cfg == t.cfg {
		return t.in
	}
	if t != nil && t.cfg != nil { // a turn given its config by hand
		in := g.inForce.Load()
		return newSnapshot(t.cfg, in.providers)
	}
	return g.inForce.Load()
}

// providerOf is the provider of t's model tier named tier.
func (g *Gateway) providerOf(t *Turn, tier string) provider.Provider {
	return g.snapshotOf(t).providers[tier]
}

// cfgOf is the config t runs under: the snapshot it took when it entered
// the pipeline, or the one in force for a turn that has not.
func (g *Gateway) cfgOf(t *Turn) *config.Config {
	if t != nil && t.cfg != nil {
		return t.cfg
	}
	return g.Config()
}

// primary is the first model tier of t's config.
func (g *Gateway) primary(t *Turn) string { return g.cfgOf(t).Models[0].Name }

// tiersFor is the model tiers that may serve t, in cascade order: from its
// start tier (a tier name or modelId; all tiers when empty or unknown),
// less those that lack a capability t needs (tools, prefill, top_k,
// vision, thinking, guardrails, json). The slice may not be appended to.
func (g *Gateway) tiersFor(t *Turn) []string {
	in := g.snapshotOf(t)
	models := in.cfg.Models
	from := max(startTier(models, t.StartTier), 0)
	tiers := in.tiers[from:len(in.tiers):len(in.tiers)]
	needs := t.needs()
	if len(needs) == 0 && len(t.KeyModels) == 0 {
		return tiers
	}
	able := make([]string, 0, len(tiers))
	for i, name := range tiers {
		if canAll(models[from+i], needs) && canShape(t, models[from+i]) && roomToThink(t, models[from+i].MaxOutputTokens) == nil && t.mayUse(name) {
			able = append(able, name)
		}
	}
	return able
}

// startTier is the index of the model tier a turn asking for start (a
// tier's name or its model id) starts at; -1 for none.
func startTier(models []config.Model, start string) int {
	if start == "" {
		return -1
	}
	return slices.IndexFunc(models, func(m config.Model) bool { return m.Name == start || m.ModelID == start })
}

// mayUse reports whether t's API key may use the model tier (or embedding
// tier) named tier.
func (t *Turn) mayUse(tier string) bool {
	return len(t.KeyModels) == 0 || slices.Contains(t.KeyModels, tier)
}

// MayUse reports whether the API key t was authenticated with may use the
// tier named tier (a door's list of models shows only those).
func (t *Turn) MayUse(tier string) bool { return t.mayUse(tier) }

// needs are the capabilities a tier must have to serve t.
func (t *Turn) needs() []string {
	var n []string
	if len(t.Tools) > 0 {
		n = append(n, config.CapabilityTools)
	}
	if t.Prefill != "" {
		n = append(n, config.CapabilityPrefill)
	}
	if t.TopK != nil {
		n = append(n, config.CapabilityTopK)
	}
	if t.Seed != nil {
		n = append(n, config.CapabilitySeed)
	}
	if t.HasImages() {
		n = append(n, config.CapabilityVision)
	}
	if t.Thinking != nil {
		n = append(n, config.CapabilityThinking)
	}
	if t.Guardrail != nil {
		n = append(n, config.CapabilityGuardrails)
	}
	if t.Format.Kind != provider.FormatText {
		n = append(n, config.CapabilityJSON)
	}
	return n
}

// roomToThink refuses a thinking turn whose output, capped at maxOut
// tokens (a tier's maxOutputTokens, the budgets' grant), leaves no room for
// an answer after its thinking budget: Anthropic refuses a max_tokens not
// above budget_tokens, and the gateway does not shrink either silently.
func roomToThink(t *Turn, maxOut int) error {
	if t.Thinking == nil || maxOut <= 0 || maxOut > t.Thinking.BudgetTokens {
		return nil
	}
	return invalid("thinking.budget_tokens: %d leaves no room for an answer within the %d output tokens this request is granted (budget.requestOutput, the session's output budget, the tiers' maxOutputTokens); ask for a smaller budget",
		t.Thinking.BudgetTokens, maxOut)
}

// canShape reports whether m can give t's answer its format: natively, or
// through the answer tool, which takes a tier that calls tools.
func canShape(t *Turn, m config.Model) bool {
	return t.Format.Kind == provider.FormatText || nativeFormat(m) || m.Can(config.CapabilityTools)
}

func canAll(m config.Model, needs []string) bool {
	for _, c := range needs {
		if !m.Can(c) {
			return false
		}
	}
	return true
}

func tierNames(models []config.Model) []string {
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.Name
	}
	return names
}

// ResolveModel returns the tier that name (a tier or its modelId) starts at.
func (g *Gateway) ResolveModel(name string) (config.Model, bool) {
	return g.Config().ResolveModel(name)
}

// Models is the configured model tiers in cascade order.
func (g *Gateway) Models() []config.Model { return g.Config().Models }

func (g *Gateway) isModel(tier string) bool {
	_, ok := g.Config().Model(tier)
	return ok
}

func (g *Gateway) supportsLocale(l string) bool {
	for _, s := range g.Config().Locales {
		if s == l {
			return true
		}
	}
	return false
}

// streamError maps a failure to what the client sees.
func (g *Gateway) streamError(t *Turn, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case isAnswerBlocked(err):
		msg := "The rest of this answer was withheld by the content checks. Please ask in another way."
		if t.Locale == "ja" {
			msg = "この回答の続きはコンテンツチェックにより表示できません。別の聞き方でお試しください。"
		}
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeAnswerWithheld, Message: msg, Err: err}
	case errors.Is(err, context.Canceled):
		return &Error{Status: 499, Code: CodeCanceled, Message: "The request was cancelled.", Err: err}
	case errors.Is(err, errSlowClient):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeSlowClient,
			Message: "The connection was too slow to receive the answer. Please check your network and ask again.", Err: err}
	case errors.Is(err, errStreamIdle):
		return &Error{Status: http.StatusGatewayTimeout, Code: CodeUpstream,
			Message: "The model stopped answering part-way through. Please ask again.", Err: err}
	case errors.Is(err, errStreamTooLong):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeStreamTimeout,
			Message: "The answer took too long and was stopped. Please ask again, perhaps more briefly.", Err: err}
	}
	return &Error{Status: http.StatusBadGateway, Code: CodeUpstream,
		Message: "The answer was interrupted by a model failure. Please ask again.", Err: err}
}

// errSlowClient and errStreamTooLong are what outputs return when the client
// cannot keep up or the stream hit its maximum duration.
var (
	errSlowClient    = errors.New("client too slow")
	errStreamTooLong = errors.New("stream reached its maximum duration")
)

// isRefusal reports whether err is a deliberate refusal (429 and the like)
// rather than a failure.
func isRefusal(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Status == http.StatusTooManyRequests
}

// isShuttingDown reports whether err refuses the turn because the instance
// is draining: another instance answers it better than a fallback tier.
func isShuttingDown(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Code == CodeShuttingDown
}

// cost prices usage with the model's price table (one definition, in budget).
func cost(m modelConfig, u provider.Usage) float64 {
	return m.Price().Cost(u)
}

// cacheSaving is what the vendor's prompt cache saved on u.
func cacheSaving(m modelConfig, u provider.Usage) float64 {
	return m.Price().CacheSaving(u)
}

// final marks an error that must not be retried (text reached the client).
type finalError struct{ err error }

func (f finalError) Error() string { return f.err.Error() }
func (f finalError) Unwrap() error { return f.err }

func final(err error) error { return finalError{err} }

// IsFinal reports whether err must not be retried because part of the
// answer already reached the client.
func IsFinal(err error) bool {
	_, ok := errors.AsType[finalError](err)
	return ok
}

// inflightSet tracks request ids in flight to refuse duplicates.
type inflightSet struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (s *inflightSet) add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[string]struct{})
	}
	if _, dup := s.ids[id]; dup {
		return false
	}
	s.ids[id] = struct{}{}
	return true
}

func (s *inflightSet) remove(id string) {
	s.mu.Lock()
	delete(s.ids, id)
	s.mu.Unlock()
}

const slogInfo = slog.LevelInfo

func levelFor(e *Error) slog.Level {
	if e.Status >= 500 && e.Code != CodeCanceled {
		return slog.LevelError
	}
	return slog.LevelInfo
}

func attrString(k, v string) slog.Attr { return slog.String(k, v) }

func turnAttrs(t *Turn, err error) []slog.Attr {
	attrs := []slog.Attr{
		slog.String("request_id_hash", t.RequestHash),
		slog.String("user_id_hash", t.UserHash),
		slog.String("surface", t.Surface),
		slog.String("priority", t.Priority.String()),
	}
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	return attrs
}

// gracefulOnly is the fallback used until a cascade is configured: the
// graceful message in the user's locale.
type gracefulOnly struct{}

func (gracefulOnly) Answer(_ context.Context, t *Turn, _ error) (*Result, error) {
	text := "I'm having a bit of trouble right now, but I'm still here! Could you try asking again in a moment?"
	if t.Locale == "ja" {
		text = "ただいま少し調子が悪いようです。少し時間をおいて、もう一度お試しください。"
	}
	return &Result{Text: text, Tier: "graceful", Degraded: true, Confidence: 0.1}, nil
}

func (gracefulOnly) Remember(context.Context, *Turn, *Result) bool { return false }

func (gracefulOnly) Simplify(req *provider.Request, _ string) *provider.Request { return req }
