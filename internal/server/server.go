// Package server builds a running fmgate from its config: the providers, the
// policies of each pipeline step (in memory, or in Redis in fleet mode), the
// gateway and its HTTP routes. cmd/fmgate and the end-to-end tests both start
// the gateway through it.
package server

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/adminauth"
	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/artifacts"
	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/canary"
	"github.com/fmgate/fmgate/internal/catalog"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/dashboard"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	anthropicdoor "github.com/fmgate/fmgate/internal/frontdoor/anthropic"
	bedrockdoor "github.com/fmgate/fmgate/internal/frontdoor/bedrock"
	openaidoor "github.com/fmgate/fmgate/internal/frontdoor/openai"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/keystore"
	"github.com/fmgate/fmgate/internal/live"
	"github.com/fmgate/fmgate/internal/metrics"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/queue"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redishealth"
	"github.com/fmgate/fmgate/internal/retry"
	"github.com/fmgate/fmgate/internal/vision"
	"github.com/fmgate/fmgate/internal/webui"
)

// Options are what a Server needs besides its config. Zero values are the
// defaults.
type Options struct {
	Log *slog.Logger
	Now func() time.Time
	// Catalog, when set, is a prebuilt index of the catalog (for gateways
	// sharing one process); nil builds it from catalog.file at start.
	Catalog *catalog.Index
	// SimOptions lets tests pace the simulator.
	SimOptions sim.Options
	// WrapProvider, when set, wraps each model's provider (e.g. to count
	// upstream attempts in load runs).
	WrapProvider func(model string, p provider.Provider) provider.Provider
	// WrapEmbedder, when set, wraps each embedding tier's backend.
	WrapEmbedder func(tier string, e provider.Embedder) provider.Embedder
	// ConfigPath is the file cfg was loaded from: Reload (SIGHUP, POST
	// /admin/reload) reads it again, and the prompt section is re-read from
	// it while running. Empty: the config and the prompt are fixed.
	ConfigPath string
	// Override, when set, is applied to the config file's contents on
	// every reload as it was to cfg (e.g. serve's -addr flag), so that a
	// flag does not read as a change of the file.
	Override func(*config.Config)
	// InstanceID names this gateway in the fleet's live figures (fleet
	// mode). Default: $FMGATE_INSTANCE_ID, else host name, process id and
	// a random suffix.
	InstanceID string
}

// Server is an assembled gateway.
type Server struct {
	Gateway *gateway.Gateway
	Sim     *sim.Sim
	// keys are the API keys managed at run time; nil until New opens them.
	keys *keystore.Registry
	// The policies' state, for the admin API and tests.
	Breakers  *breaker.Set
	Quota     quota.Ledger
	Queue     *queue.Queue
	Retrier   *retry.Retrier
	Estimator *budget.Estimator
	// Catalog is the retrieval step's index; nil when catalog.enabled is off.
	Catalog *catalog.Index
	// catalogSvc is the retrieval step's search; nil when catalog.enabled
	// is off.
	catalogSvc *catalog.Service
	// SessionBreaker guards the session store in Redis (fleet mode only;
	// nil on the embedded default).
	SessionBreaker *breaker.Memory
	// Redis is the fleet-mode client, nil on the embedded default.
	Redis *redis.Client
	// RedisHealth is Redis's health as this instance sees it (nil on the
	// embedded default). Every command through Redis consults it already;
	// a store built on another client calls RedisHealth.Watch on it.
	RedisHealth *redishealth.Health
	// Events is the span event emitter.
	Events *events.Emitter
	// Ledger holds the live artifact versions (prompt, graph, models).
	Ledger *artifacts.Ledger
	// Metrics are the Prometheus metrics; Live the dashboards' live figures.
	Metrics *metrics.Metrics
	Live    *live.Aggregator
	// Alerts evaluates the alert rules (GET /admin/alerts).
	Alerts *alerts.Manager

	// Canary routes a share of sessions to a candidate prompt; nil without
	// one.
	Canary *canary.Controller

	store eventstore.Views
	// judger grades sampled turns and datasets; payloads is the payload
	// log, nil while payloadLog.enabled is off.
	judger   *judger
	payloads *payloads
	// responses are the OpenAI door's stored responses (previous_response_id).
	responses openaidoor.ResponseStore
	// canaryVerdict, when a canary runs, reports its latest verdict to the
	// alert rules.
	canaryVerdict func() *alerts.Canary

	// cfg is the config the server was built with; the one in force is
	// the gateway's (config).
	cfg        config.Config
	configPath string
	override   func(*config.Config)
	// The policies a reload gives new limits.
	limiter  *ratelimit.Limiter
	enforcer *budget.Enforcer
	tracer   *events.Tracer
	// tiers are the model tiers' providers in force; wrapProvider is
	// Options.WrapProvider.
	tiers        atomic.Pointer[tierSet]
	wrapProvider func(model string, p provider.Provider) provider.Provider
	// vendors name each model tier's vendor, by tier name and model id, as
	// OpenTelemetry's GenAI conventions do.
	vendors atomic.Pointer[map[string]string]
	// reloading holds one token while a reload runs: reloads take turns.
	reloading chan struct{}
	// reloadFailed is why the last reload was refused (nil after a
	// success), for the ConfigReloadFailed alert.
	reloadFailed atomic.Pointer[alerts.ReloadFailure]
	// observe reads what the alert rules look at.
	observe    func(context.Context) alerts.Observation
	instanceID string
	log        *slog.Logger
	hasher     *events.Hasher
	admin      *http.ServeMux
	closers    []func()
}

// New assembles a gateway from cfg.
func New(ctx context.Context, cfg config.Config, opts Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, admin: http.NewServeMux(), hasher: userHasher(cfg), instanceID: instanceID(opts.InstanceID),
		configPath: opts.ConfigPath, override: opts.Override, reloading: make(chan struct{}, 1)}
	if strings.HasPrefix(s.instanceID, "#") {
		return nil, fmt.Errorf("instance id %q: may not start with # (set FMGATE_INSTANCE_ID to another)", s.instanceID)
	}

	sm, err := sim.New(cfg.SimConfig(), opts.SimOptions)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s.Sim = sm
	s.admin.Handle("/admin/sim/", sm.Handler())

	s.Catalog = opts.Catalog
	deps, err := s.policies(cfg, opts.ConfigPath, opts.Now)
	if err != nil {
		return nil, err
	}
	s.wrapProvider = opts.WrapProvider
	tiers, err := s.buildTiers(ctx, cfg, nil)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.tiers.Store(tiers)
	embedders, err := s.embedders(ctx, cfg, opts.WrapEmbedder)
	if err != nil {
		s.Close()
		return nil, err
	}
	deps.Embedders, deps.CountTokens = embedders, sim.CountTokens
	if s.Metrics != nil {
		deps.OnThrottle = s.Metrics.Throttle
	}
	deps.Providers = tiers.providers
	deps.Log = log
	deps.Now = opts.Now
	deps.AdminRoutes = s.admin
	keys, err := s.openKeys(context.Background(), cfg)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("keys: %w", err)
	}
	deps.Keys, s.keys = runtimeKeys{keys}, keys
	s.mountKeys(keys)
	deps.Images = imageFetcher(cfg.Server.Images)
	if deps.Guardrails, err = s.remoteGuardrails(ctx, cfg); err != nil {
		s.Close()
		return nil, err
	}
	if s.payloads, err = s.openPayloads(ctx, cfg); err != nil {
		s.Close()
		return nil, err
	}
	if s.payloads != nil {
		deps.Payloads = s.payloads.writer
	}
	s.mountPayloads(s.payloads)
	gw, err := gateway.New(cfg, deps)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Gateway = gw
	s.startPruning(s.payloads, cfg.PayloadLog.PruneInterval)
	s.embedCatalog(cfg, s.catalogSvc)
	s.admin.HandleFunc("POST /admin/reload", s.serveReload)
	s.admin.HandleFunc("GET /admin/deployments", s.serveDeployments)
	return s, nil
}

// config is the config in force: the gateway's, which a reload swaps.
func (s *Server) config() *config.Config {
	if s.Gateway == nil {
		return &s.cfg
	}
	return s.Gateway.Config()
}

// Handler is the gateway's HTTP routes with the embedded pages; /dashboard
// is the operator dashboards, behind the admin token. The admin API and
// /metrics accept the admin token as a bearer credential or a dashboard
// session; sessions belong to this handler, so a gateway started with a
// new admin token knows none of the old ones.
func (s *Server) Handler(adminToken string) http.Handler {
	auth := adminauth.New(adminToken, adminauth.Options{ExternalURL: s.cfg.Server.ExternalURL})
	mux := http.NewServeMux()
	dash := dashboard.Handler(auth)
	mux.Handle("/dashboard", dash)
	mux.Handle("/dashboard/", dash)
	mux.Handle("GET /metrics", s.metricsHandler(auth))
	mux.Handle("/admin/", requireAdmin(auth, s.admin))
	// The vendor front doors, sharing one bound on images.
	images := imageLimits(s.cfg.Server.Images)
	oai := openaidoor.New(s.Gateway, openaidoor.Options{Images: images, Responses: s.responses, Log: s.log})
	mux.Handle("POST /v1/chat/completions", oai)
	mux.Handle("POST /v1/responses", oai)
	mux.Handle("GET /v1/responses/{id}", oai)
	mux.Handle("DELETE /v1/responses/{id}", oai)
	anth := anthropicdoor.New(s.Gateway, anthropicdoor.Options{Images: images})
	// The models list in the asking vendor's shape: Anthropic's SDKs say who
	// they are in their headers.
	models := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			apiMethodNotAllowed(w, r, "GET")
			return
		}
		if anthropicdoor.IsAnthropic(r) {
			anth.ServeHTTP(w, r)
			return
		}
		oai.ServeHTTP(w, r)
	})
	mux.Handle("/v1/models", models)
	mux.Handle("/v1/models/", models)
	mux.Handle("POST /v1/messages", anth)
	mux.Handle("POST /v1/messages/count_tokens", anth)
	mux.Handle("/model/", bedrockdoor.New(s.Gateway, bedrockdoor.Options{Images: images}))
	// OpenAI's embeddings, served by the embedding tiers.
	mux.Handle("POST /v1/embeddings", openaidoor.NewEmbeddings(s.Gateway, openaidoor.Options{}))
	// Another method on a vendor route: a JSON 405 the SDKs show, not the
	// mux's plain text.
	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/responses": "POST",
		"/v1/responses/{id}": "GET, DELETE", "/v1/messages": "POST", "/v1/messages/count_tokens": "POST", "/v1/embeddings": "POST"} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { apiMethodNotAllowed(w, r, allow) })
	}
	mux.Handle("/debug/pprof/", requireAdmin(auth, pprofHandler()))
	mux.Handle("/metrics", gateway.MethodNotAllowed("GET", "HEAD"))
	gw := s.Gateway.Handler(adminToken, webui.Handler(http.HandlerFunc(unknownAPI)))
	mux.Handle("/", gw)
	// The gateway's own API under /v1/, and a JSON answer naming what is
	// served for any other path there (an SDK shows a plain-text 404 as
	// "404 404 page not found").
	for _, p := range []string{"/v1/chat", "/v1/batch", "/v1/batch/"} {
		mux.Handle(p, gw)
	}
	mux.Handle("/v1/", http.HandlerFunc(unknownAPI))
	// Bedrock Runtime's other operations (ApplyGuardrail, the async
	// invocations), which the AWS SDKs send to the same endpoint.
	mux.Handle("/guardrail/", http.HandlerFunc(unknownAPI))
	mux.Handle("/async-invoke", http.HandlerFunc(unknownAPI))
	mux.Handle("/async-invoke/", http.HandlerFunc(unknownAPI))
	return guardEdge(s.cfg.Server.BodyTimeout, guardHost(s.cfg.HostPatterns(),
		guardCrossSite(s.cfg.Server.OriginPatterns, s.Gateway, guardOperator(s.cfg.Server.ExternalURL, mux))))
}

// requireAdmin lets operators through to h and answers everyone else 401.
func requireAdmin(auth *adminauth.Auth, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !auth.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fmgate admin"`)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]string{"code": "unauthorized",
				"message": "The admin API needs Authorization: Bearer <admin token> (or a dashboard session: sign in at /dashboard/login)."}})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Close releases what New opened.
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// instanceID is id, else $FMGATE_INSTANCE_ID, else host-pid-random.
func instanceID(id string) string {
	if id != "" {
		return id
	}
	if v := os.Getenv("FMGATE_INSTANCE_ID"); v != "" {
		return v
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "fmgate"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// userHasher keys the user id hash of logs and events with
// events.privacy.hashSecret, or FMGATE_HASH_SECRET which overrides it, so
// that hashes join across restarts and instances; with neither, the key is
// drawn at random for this process.
func userHasher(cfg config.Config) *events.Hasher {
	secret := cfg.Events.Privacy.HashSecret
	if v := os.Getenv("FMGATE_HASH_SECRET"); v != "" {
		secret = v
	}
	return events.NewHasher([]byte(secret))
}

// stateHasher names API keys and client addresses in shared state. Its
// key is the user hash's secret when one is set, else a fixed one: the
// instances of a fleet must agree on these names even when each draws its
// own key for the user hashes of its logs.
func stateHasher(cfg config.Config) *events.Hasher {
	return events.NewHasher([]byte(stateSecret(cfg)))
}

// stateSecret is the state hasher's key; it also keys the hashes API keys
// created at run time are stored as.
func stateSecret(cfg config.Config) string {
	secret := cfg.Events.Privacy.HashSecret
	if v := os.Getenv("FMGATE_HASH_SECRET"); v != "" {
		secret = v
	}
	if secret == "" {
		secret = "fmgate shared-state names"
	}
	return secret
}

// unknownAPI answers a request for a path fmgate does not serve with a
// JSON 404 the asking SDK reads: Bedrock's UnknownOperationException to an
// AWS SDK (a SigV4-signed request), else an error both the OpenAI and the
// Anthropic SDKs parse (an SDK shows a plain-text 404 as "404 404 page not
// found").
func unknownAPI(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if len(p) > 200 {
		p = p[:200] + "…"
	}
	msg := fmt.Sprintf("fmgate does not serve %s %s. It serves POST /v1/chat/completions, POST /v1/embeddings, POST /v1/responses, "+
		"GET and DELETE /v1/responses/{id} and GET /v1/models (OpenAI), "+
		"POST /v1/messages and /v1/messages/count_tokens (Anthropic), POST /model/{model}/converse, /converse-stream, /invoke, "+
		"/invoke-with-response-stream and /count-tokens (Bedrock), "+
		"and its own POST /v1/chat, GET /ws and /v1/batch.", r.Method, strings.ToValidUTF8(p, "?"))
	if strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") || r.Header.Get("X-Amz-Date") != "" {
		bedrockdoor.WriteException(w, bedrockdoor.Exception{Status: http.StatusNotFound, Type: bedrockdoor.UnknownOperationException, Message: msg})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error",
		"error": map[string]string{"type": "not_found_error", "code": "not_found", "message": msg}})
}

// apiMethodNotAllowed answers a vendor route asked with another method than
// allow, in unknownAPI's error shape.
func apiMethodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusMethodNotAllowed)
	msg := fmt.Sprintf("%s %s is not served: use %s.", r.Method, r.URL.Path, allow)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error",
		"error": map[string]string{"type": "invalid_request_error", "code": "method_not_allowed", "message": msg}})
}

// imageLimits are the vendor doors' bounds on images, from server.images.
func imageLimits(c config.Images) vision.Limits {
	return vision.Limits{MaxBytes: c.MaxBytes, MaxPerRequest: c.MaxPerRequest, MaxSide: c.MaxSide, Hosts: c.AllowedHosts}
}

// imageFetcher fetches remote images from server.images.allowedHosts; nil
// when it lists none, and the doors refuse remote images.
func imageFetcher(c config.Images) gateway.ImageFetcher {
	if len(c.AllowedHosts) == 0 {
		return nil
	}
	return vision.NewFetcher(imageLimits(c), vision.FetchOptions{Timeout: c.FetchTimeout})
}
