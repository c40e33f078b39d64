// Package metrics exports fmgate's Prometheus metrics: turn latency, time to
// first token, outcomes, errors, fallbacks, model attempts, tokens and cost
// (all derived from the schema-v3 spans of the event stream), throttles and
// retries (observed directly by the pipeline), and breaker, quota and queue
// gauges (read from a state callback at scrape time).
//
// A *Metrics is an events.Sink: give it to the event emitter and it derives
// the span metrics in the emitter's background goroutine, never in a turn.
// It owns its prometheus.Registry (with the Go and process collectors); serve
// it with Handler.
//
// Every label value is bounded: it is taken from a fixed list in this
// package or from the configured model names and ids (Options.Models), and
// anything else is reported as "other". No user id, request id, trace id or
// free text ever becomes a label value.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fmgate/fmgate/internal/events"
)

// Defaults of Options.
const (
	DefaultTTFTPending  = 4096
	DefaultTTFTMaxAge   = 10 * time.Minute
	DefaultStateTimeout = 500 * time.Millisecond
)

// latencyBuckets are the turn-duration histogram's upper bounds in seconds,
// dense around the 3 s "useful answer" objective.
// genAIOperation is gen_ai.operation.name of a model call.
const genAIOperation = "chat"

// genAIProvider is model's gen_ai.provider.name, or "other".
func genAIProvider(providers map[string]string, model string) string {
	if p := providers[model]; p != "" {
		return p
	}
	return LabelOther
}

// The GenAI conventions' recommended bucket boundaries: tokens by powers of
// four, seconds by doubling from 10 ms.
var (
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
)

var latencyBuckets = []float64{0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10}

// ttftBuckets are the time-to-first-token histogram's upper bounds in
// seconds.
var ttftBuckets = []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10}

// Options configures New. The zero value is usable: no model names (every
// model label is "other"), the real clock and the defaults above.
type Options struct {
	// Models are the configured model names and provider model ids
	// ("sonnet", "claude-sonnet-4-6", …): the only values, besides "other"
	// and "none", that a model, tier or breaker label may take.
	Models []string
	// Now is the clock; nil means time.Now. It ages the stream spans that
	// wait for their turn span.
	Now func() time.Time
	// TTFTPending is the most stream spans held while waiting for their turn
	// span (default 4096); beyond it the oldest is evicted and counted.
	TTFTPending int
	// TTFTMaxAge is how long a stream span waits for its turn span (default
	// 10 min); an older one is dropped and counted.
	TTFTMaxAge time.Duration
	// StateTimeout bounds the state callback at each scrape (default 500 ms).
	StateTimeout time.Duration
	// Providers names the vendor of each of Models as OpenTelemetry's GenAI
	// conventions do (gen_ai.provider.name: anthropic, aws.bedrock, …), for
	// the gen_ai_client_* histograms; a model without one is "other".
	Providers map[string]string
}

// Validate reports the first invalid field as "field: problem".
func (o Options) Validate() error {
	for i, m := range o.Models {
		switch {
		case m == "":
			return fmt.Errorf("models[%d]: empty", i)
		case !utf8.ValidString(m):
			return fmt.Errorf("models[%d]: not valid UTF-8", i)
		case m == LabelOther || m == LabelNone || m == TierPrimary:
			return fmt.Errorf("models[%d]: %q is a reserved label value", i, m)
		}
	}
	switch {
	case o.TTFTPending < 0:
		return errors.New("ttftPending: must not be negative")
	case o.TTFTMaxAge < 0:
		return errors.New("ttftMaxAge: must not be negative")
	case o.StateTimeout < 0:
		return errors.New("stateTimeout: must not be negative")
	}
	return nil
}

// Metrics derives Prometheus metrics from spans and direct observations.
// Its methods are safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler
	now     func() time.Time

	// named are the model label values and the span path's series by
	// them; SetModels swaps them.
	named atomic.Pointer[named]

	mu      sync.Mutex // guards pending and the span path's cells
	pending *pending

	turnDuration *prometheus.HistogramVec
	ttft         *prometheus.HistogramVec
	turns        *prometheus.CounterVec
	errors       *prometheus.CounterVec
	fallbacks    *prometheus.CounterVec
	attempts     *prometheus.CounterVec
	tokens       *prometheus.CounterVec
	cost         *prometheus.CounterVec
	spans        *prometheus.CounterVec
	ttftDropped  *prometheus.CounterVec
	throttles    *prometheus.CounterVec
	// deployCalls and deploySeconds count the calls to each deployment
	// of a tier with several (their labels come from the config).
	deployCalls, deploySeconds *prometheus.CounterVec
	retries                    *prometheus.CounterVec
	// OpenTelemetry's GenAI client metrics, in Prometheus's naming.
	genAITokens   *prometheus.HistogramVec
	genAIDuration *prometheus.HistogramVec
	stateCollect  *stateCollector
	dropped       *droppedCollector
	payloads      *payloadCollector
}

// New returns Metrics with its own registry, or an error for invalid opts.
func New(opts Options) (*Metrics, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.TTFTPending == 0 {
		opts.TTFTPending = DefaultTTFTPending
	}
	if opts.TTFTMaxAge == 0 {
		opts.TTFTMaxAge = DefaultTTFTMaxAge
	}
	if opts.StateTimeout == 0 {
		opts.StateTimeout = DefaultStateTimeout
	}
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		now:     opts.Now,
		pending: newPending(opts.TTFTPending, opts.TTFTMaxAge),
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m.turnDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fmgate_turn_duration_seconds",
		Help:    "Whole-turn latency from the turn span, by route (ws, sse, http, batch), model that answered and tier (primary or the fallback tier that served).",
		Buckets: latencyBuckets,
	}, []string{"route", "model", "tier"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fmgate_turn_ttft_seconds",
		Help:    "Time from the start of the turn to the first text reaching the client (stream span start minus turn span start).",
		Buckets: ttftBuckets,
	}, []string{"route", "model", "tier"})
	m.turns = counter("fmgate_turns_total", "Finished turns by route and status (ok, fallback, retry_succeeded, failed).", "route", "status")
	m.errors = counter("fmgate_errors_total", "Turns that ended with an edge error, by error code.", "code")
	m.fallbacks = counter("fmgate_fallback_total", "Degraded turns by the tier that served them.", "tier")
	m.attempts = counter("fmgate_model_attempts_total", "Upstream model calls by model and outcome (ok, the provider error kind, or invalid_json_answer and invalid_tool_call for an answer that failed the client's schema or tools).", "model", "outcome")
	m.tokens = counter("fmgate_tokens_total", "Tokens billed by model and direction (in, out).", "model", "direction")
	m.cost = counter("fmgate_cost_usd_total", "Cost in US dollars by model (none when no model was involved) and component (the span that incurred it).", "model", "component")
	m.spans = counter("fmgate_spans_total", "Spans received from the event stream, by span name.", "span")
	m.ttftDropped = counter("fmgate_ttft_pending_dropped_total", "Stream spans dropped before their turn span arrived: evicted (too many waiting) or expired (waited too long).", "reason")
	m.throttles = counter("fmgate_throttles_total", "Turns refused or held by a limiter, by scope.", "scope")
	m.retries = counter("fmgate_retries_total", "Retries of a model call, by model and the error kind that caused them.", "model", "reason")
	m.deployCalls = counter("fmgate_deployment_calls_total", "Calls to a tier's deployments by outcome: ok, throttled, failed, error (the request's fault) or skipped (passed over while throttled or its breaker open).", "tier", "deployment", "outcome")
	m.deploySeconds = counter("fmgate_deployment_call_seconds_total", "Time spent in calls to a tier's deployments; divided by their calls, the average latency.", "tier", "deployment")
	m.genAITokens = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gen_ai_client_token_usage",
		Help:    "Tokens of each model call, input and output, as OpenTelemetry's GenAI conventions measure them (input counts cache reads and writes).",
		Buckets: genAITokenBuckets,
	}, []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "gen_ai_token_type"})
	m.genAIDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "gen_ai_client_operation_duration_seconds",
		Help:    "Duration of each model call, as OpenTelemetry's GenAI conventions measure it; error_type is the provider error kind, empty on success.",
		Buckets: genAIDurationBuckets,
	}, []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "error_type"})
	m.stateCollect = &stateCollector{m: m, timeout: opts.StateTimeout,
		errors: counter("fmgate_state_errors_total", "Scrapes that exported no breaker, quota or queue gauges, by reason (error, timeout, busy, panic).", "reason")}
	m.dropped = &droppedCollector{}
	m.payloads = &payloadCollector{}
	pendingGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fmgate_ttft_pending",
		Help: "Stream spans waiting for their turn span.",
	}, func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return float64(m.pending.len())
	})

	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.turnDuration, m.ttft, m.turns, m.errors, m.fallbacks, m.attempts,
		m.tokens, m.cost, m.spans, m.ttftDropped, m.throttles, m.retries, m.genAITokens, m.genAIDuration,
		m.deployCalls, m.deploySeconds, m.stateCollect, m.dropped, m.payloads, pendingGauge,
	} {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	m.named.Store(m.newNamed(opts.Models, opts.Providers))
	m.preset()
	m.handler = promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:            m.reg,
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	}))
	return m, nil
}

// named is the model label values allowed (Options.Models, and those
// SetModels adds) and the span path's series by them.
type named struct {
	models    *label // the model names and ids, and LabelNone
	tiers     *label // TierPrimary, fallbackTiers and the model names and ids
	none      int    // index of LabelNone in models
	providers map[string]string
	c         spanCells
}

func (m *Metrics) newNamed(models []string, providers map[string]string) *named {
	n := &named{
		models:    newLabel(models, []string{LabelNone}),
		tiers:     newLabel([]string{TierPrimary}, fallbackTiers, models),
		providers: providers,
	}
	n.none = n.models.index(LabelNone)
	n.c = spanCells{
		turnDuration: newCells(m.turnDuration.WithLabelValues, routeLabel, n.models, n.tiers),
		ttft:         newCells(m.ttft.WithLabelValues, routeLabel, n.models, n.tiers),
		turns:        newCells(m.turns.WithLabelValues, routeLabel, statusLabel),
		errors:       newCells(m.errors.WithLabelValues, codeLabel),
		fallbacks:    newCells(m.fallbacks.WithLabelValues, n.tiers),
		attempts:     newCells(m.attempts.WithLabelValues, n.models, outcomeLabel),
		genAITokens: newCells(func(v ...string) prometheus.Observer {
			return m.genAITokens.WithLabelValues(genAIOperation, genAIProvider(providers, v[0]), v[0], v[1])
		}, n.models, tokenTypeLabel),
		genAIDuration: newCells(func(v ...string) prometheus.Observer {
			errType := v[1]
			if errType == outcomeOK {
				errType = ""
			}
			return m.genAIDuration.WithLabelValues(genAIOperation, genAIProvider(providers, v[0]), v[0], errType)
		}, n.models, outcomeLabel),
		tokens: newCells(m.tokens.WithLabelValues, n.models, directionLabel),
		cost:   newCells(m.cost.WithLabelValues, n.models, spanLabel),
		spans:  newCells(m.spans.WithLabelValues, spanLabel),
	}
	return n
}

// AddModels adds model names and ids a label may take, and their vendors
// (Options.Models, Options.Providers): after a reload that adds model
// tiers. The names allowed before stay, so that a turn that ran on a tier
// a reload removed is still counted by its name.
func (m *Metrics) AddModels(models []string, providers map[string]string) error {
	if err := (Options{Models: models}).Validate(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.named.Load()
	all := slices.DeleteFunc(slices.Clone(old.models.vals), func(v string) bool { return v == LabelNone || v == LabelOther })
	vendors := maps.Clone(old.providers)
	if vendors == nil {
		vendors = map[string]string{}
	}
	for _, v := range models {
		if !slices.Contains(all, v) {
			all = append(all, v)
		}
	}
	maps.Copy(vendors, providers)
	m.named.Store(m.newNamed(all, vendors))
	return nil
}

// preset creates the series of the fixed lists at zero, so that rates and
// ratios are defined from the first scrape instead of appearing with the
// first event.
func (m *Metrics) preset() {
	for _, r := range routeLabel.vals {
		for _, s := range statusLabel.vals {
			m.turns.WithLabelValues(r, s)
		}
	}
	for _, c := range codeLabel.vals {
		m.errors.WithLabelValues(c)
	}
	for _, s := range scopeLabel.vals {
		m.throttles.WithLabelValues(s)
	}
	for _, r := range []string{dropEvicted, dropExpired} {
		m.ttftDropped.WithLabelValues(r)
	}
	for _, r := range []string{stateError, stateTimeout, stateBusy, statePanic} {
		m.stateCollect.errors.WithLabelValues(r)
	}
}

// Name is the sink name, "metrics".
func (m *Metrics) Name() string { return "metrics" }

// Handler serves the registry in the Prometheus exposition formats (mount
// it at GET /metrics). At most 4 scrapes run at once; more get 503.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Registry is the registry Handler serves, for collectors of other packages.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Throttle counts one refusal (or hold) by a limiter in
// fmgate_throttles_total{scope}. scope is user, session, ip, global, tenant,
// route, provider, quota, connection or pace (an attempt the adaptive send
// rate kept from a throttling model), or one of them followed by '_' or ':' and more
// (ratelimit's "user_per_minute" is "user", "route_chat" is "route");
// anything else counts as "other".
func (m *Metrics) Throttle(scope string) {
	m.throttles.WithLabelValues(boundScope(scope)).Inc()
}

// Deployment counts one call to a deployment of tier by its outcome, and
// its time.
func (m *Metrics) Deployment(tier, deployment, outcome string, latency time.Duration) {
	m.deployCalls.WithLabelValues(tier, deployment, outcome).Inc()
	if latency > 0 {
		m.deploySeconds.WithLabelValues(tier, deployment).Add(latency.Seconds())
	}
}

// Retry counts one retry of a model call in fmgate_retries_total{model,reason}.
// model is a configured model name or id (else "other"); reason is the
// provider.Kind of the error that caused the retry (throttled, unavailable,
// server, timeout, not_ready, validation, access_denied, not_found,
// guardrail, canceled, unknown; else "other").
func (m *Metrics) Retry(model, reason string) {
	m.retries.WithLabelValues(m.modelName(model), kindLabel.bound(reason)).Inc()
}

// model returns the label index of a model name or id; "" is LabelNone.
func (n *named) model(v string) int {
	if v == "" {
		return n.none
	}
	return n.models.index(v)
}

// modelName bounds a model name or id for a label value.
func (m *Metrics) modelName(v string) string {
	n := m.named.Load()
	return n.models.vals[n.model(v)]
}

// spanCells are the span path's series, by label indexes.
type spanCells struct {
	turnDuration, ttft                                      *cells[prometheus.Observer]
	turns, errors, fallbacks, attempts, tokens, cost, spans *cells[prometheus.Counter]
	genAITokens, genAIDuration                              *cells[prometheus.Observer]
}

// Write derives the span metrics from batch. It never fails. The events
// sink calls it from one goroutine; concurrent calls are safe but a stream
// span must be written before its turn span for time to first token.
func (m *Metrics) Write(_ context.Context, batch []events.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range batch {
		m.observe(&batch[i])
	}
	return nil
}

// observe derives the metrics of one span. Called with m.mu held.
func (m *Metrics) observe(e *events.Event) {
	n := m.named.Load()
	span := spanLabel.index(e.Name)
	n.c.spans.at(span).Inc()
	switch e.Name {
	case "turn":
		if e.Node.NodeID != events.NodeEmbeddings { // an embedding call is no chat turn: its attempts count below
			m.observeTurn(n, e)
		}
		// The turn span summarises its children; counting its tokens or
		// cost as well would count them twice.
		return
	case "stream":
		if e.ParentSpanID != "" && !e.TSStart.IsZero() {
			ev, ex := m.pending.put(spanKey{e.TraceID, e.ParentSpanID}, e.TSStart, m.now())
			m.countDropped(ev, ex)
		}
	case "model_attempt":
		outcome := attemptOK
		switch {
		case e.Outcome.ErrorCode == "unknown" && slices.Contains(answerRejections, e.Outcome.VendorCode):
			outcome = outcomeLabel.index(e.Outcome.VendorCode) // a schema or tool-call check failed on this tier
		case e.Outcome.ErrorCode != "":
			outcome = outcomeLabel.index(e.Outcome.ErrorCode)
		}
		model := n.model(e.Artifact.ModelID)
		n.c.attempts.at(model, outcome).Inc()
		n.c.genAIDuration.at(model, outcome).Observe(float64(e.DurationMS) / 1000)
		if e.Resource.TokensIn > 0 {
			n.c.genAITokens.at(model, tokenInput).Observe(float64(e.Resource.TokensIn))
		}
		if e.Resource.TokensOut > 0 {
			n.c.genAITokens.at(model, tokenOutput).Observe(float64(e.Resource.TokensOut))
		}
	}
	r := &e.Resource
	if r.TokensIn <= 0 && r.TokensOut <= 0 && !(r.CostUSD > 0) {
		return
	}
	model := n.model(e.Artifact.ModelID)
	if r.TokensIn > 0 {
		n.c.tokens.at(model, dirIn).Add(float64(r.TokensIn))
	}
	if r.TokensOut > 0 {
		n.c.tokens.at(model, dirOut).Add(float64(r.TokensOut))
	}
	if r.CostUSD > 0 && r.CostUSD < maxSpanCost {
		n.c.cost.at(model, span).Add(r.CostUSD)
	}
}

var (
	tokenInput  = tokenTypeLabel.index("input")
	tokenOutput = tokenTypeLabel.index("output")
	attemptOK   = outcomeLabel.index(outcomeOK)
	dirIn       = directionLabel.index(directionIn)
	dirOut      = directionLabel.index(directionOut)
)

// maxSpanCost rejects absurd (or infinite) costs so one bad span cannot
// poison a counter forever.
const maxSpanCost = 1e6

func (m *Metrics) observeTurn(n *named, e *events.Event) {
	route := routeLabel.index(e.Attribution.Surface)
	model := n.model(e.Artifact.ModelID)
	tier := n.tiers.index(TierPrimary)
	if e.Outcome.FallbackUsed != "" {
		tier = n.tiers.index(e.Outcome.FallbackUsed)
	}

	d := time.Duration(e.DurationMS) * time.Millisecond
	if !e.TSStart.IsZero() && !e.TSEnd.IsZero() && !e.TSEnd.Before(e.TSStart) {
		d = e.TSEnd.Sub(e.TSStart)
	}
	if d >= 0 {
		n.c.turnDuration.at(route, model, tier).Observe(d.Seconds())
	}
	if first, ok, expired := m.pending.take(spanKey{e.TraceID, e.SpanID}, m.now()); ok {
		if t := first.Sub(e.TSStart); t >= 0 && !e.TSStart.IsZero() {
			n.c.ttft.at(route, model, tier).Observe(t.Seconds())
		}
	} else if expired {
		m.countDropped(0, 1)
	}

	n.c.turns.at(route, statusLabel.index(string(e.Outcome.Status))).Inc()
	if e.Outcome.ErrorCode != "" {
		n.c.errors.at(codeLabel.index(e.Outcome.ErrorCode)).Inc()
	}
	if e.Outcome.FallbackUsed != "" {
		n.c.fallbacks.at(tier).Inc()
	}
}

const (
	dropEvicted = "evicted"
	dropExpired = "expired"
)

func (m *Metrics) countDropped(evicted, expired int) {
	if evicted > 0 {
		m.ttftDropped.WithLabelValues(dropEvicted).Add(float64(evicted))
	}
	if expired > 0 {
		m.ttftDropped.WithLabelValues(dropExpired).Add(float64(expired))
	}
}
