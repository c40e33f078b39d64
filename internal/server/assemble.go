package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/artifacts"
	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/catalog"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/events/sinks"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/pgstore"
	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/fallback/cache"
	openaidoor "github.com/fmgate/fmgate/internal/frontdoor/openai"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/jobstore"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/queue"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/redishealth"
	"github.com/fmgate/fmgate/internal/respstore"
	"github.com/fmgate/fmgate/internal/retry"
	"github.com/fmgate/fmgate/internal/session"
	"github.com/fmgate/fmgate/internal/slots"
)

// policies builds every pipeline policy: in memory (the embedded default), or
// with shared state in Redis when fleet.redis is set.
func (s *Server) policies(cfg config.Config, configPath string, now func() time.Time) (gateway.Deps, error) {
	if now == nil {
		now = time.Now
	}
	var rdb *redis.Client
	prefix := cfg.Fleet.KeyPrefix
	if cfg.Fleet.Redis != "" {
		pw := cfg.Fleet.RedisPassword
		if v := os.Getenv("FMGATE_REDIS_PASSWORD"); v != "" {
			pw = v
		}
		rdb = redis.NewClient(&redis.Options{
			Addr: cfg.Fleet.Redis, Password: pw,
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
			ContextTimeoutEnabled: true, PoolSize: 64,
			// One retry, for a pooled connection Redis closed; more would
			// make each command of an outage wait out the client's backoff
			// before the health breaker has seen enough failures to open.
			MaxRetries: 1,
			// One dial per command: the pool's default five, 100ms apart,
			// would hold each command of an outage for half a second.
			DialerRetries: 1,
		})
		// A turn's batch (redisbatch) goes first, so that the pipeline it
		// sends is one call to the health state and to any counting hook.
		rdb.AddHook(redisbatch.Hook())
		// Every policy below shares this client, so every one of them
		// consults the one health state and fails fast while Redis is away.
		s.RedisHealth = redishealth.New(cfg.Breakers[redishealth.BreakerName], now, func(up bool) {
			if up {
				s.log.Warn("redis is back: shared state in use again", "redis", cfg.Fleet.Redis)
				if s.SessionBreaker != nil {
					// The histories live in that Redis: probe them now,
					// not at the end of their breaker's open period.
					s.SessionBreaker.EndOpen()
				}
				return
			}
			s.log.Warn("redis unreachable: policies follow their outage rules until a probe succeeds", "redis", cfg.Fleet.Redis)
		})
		s.RedisHealth.Watch(rdb)
		s.closers = append(s.closers, func() { _ = rdb.Close(); s.RedisHealth.Close() })
		s.Redis = rdb
	}

	// Step 2: the session store, and the Responses API's stored responses
	// beside it.
	sessions := s.sessions(cfg, rdb, now)
	s.responses = responseStore(cfg, rdb, now)

	// Step 3: rate limits.
	rlCfg := cfg.RateLimit
	rlCfg.FleetSize = cfg.Fleet.Size
	var rlStore ratelimit.Store
	if rdb != nil {
		rlStore = ratelimit.NewRedisStore(rdb, prefix+"rl:", rlCfg.RedisTimeout)
	}
	limiter, err := ratelimit.New(rlCfg, rlStore, now)
	if err != nil {
		return gateway.Deps{}, fmt.Errorf("rateLimit: %w", err)
	}
	s.limiter = limiter

	// Step 4: budgets.
	var counters budget.Counters = budget.NewMemoryCounters(cfg.Budget.SessionTTL, now)
	if rdb != nil {
		counters = aheadCounters{budget.NewRedisCounters(rdb, prefix+"budget:", cfg.Budget.SessionTTL)}
	}
	enf, err := budget.New(cfg.Budget, budget.NewEstimator(), counters, now)
	if err != nil {
		return gateway.Deps{}, fmt.Errorf("budget: %w", err)
	}
	s.Estimator = enf.Estimator()
	s.enforcer = enf

	// Step 6: quota ledger and the priority queue.
	var ledger quota.Ledger
	var q *queue.Queue
	if rdb != nil {
		if ledger, err = quota.NewRedis(rdb, prefix+"quota:", cfg.QuotaLedger()); err != nil {
			return gateway.Deps{}, fmt.Errorf("quota: %w", err)
		}
		q = queue.NewRedis(rdb, cfg.Queue, queue.RedisOptions{Prefix: prefix + "queue:"})
	} else {
		if ledger, err = quota.NewMemory(cfg.QuotaLedger(), now); err != nil {
			return gateway.Deps{}, fmt.Errorf("quota: %w", err)
		}
		q = queue.NewMemory(cfg.Queue, now)
	}
	s.Quota, s.Queue = ledger, q

	// Step 7: retries, breakers.
	retrier, err := retry.New(cfg.Retry, nil)
	if err != nil {
		return gateway.Deps{}, fmt.Errorf("retry: %w", err)
	}
	factory := breaker.MemoryFactory(now)
	if rdb != nil {
		retrier.Budget = retry.NewRedisBudget(rdb, prefix, cfg.Retry.Budget)
		retrier.Pressure = aheadPressure{retry.NewRedisPressure(rdb, prefix, "", cfg.Retry.Pressure, now)}
		if cfg.Retry.SendRate.Enabled {
			retrier.Rate = retry.NewRedisSendRate(rdb, prefix, cfg.Retry.SendRate, now)
		}
		factory = breaker.RedisFactory(rdb, prefix, 0)
	}
	s.Retrier = retrier
	// The redis breaker is Redis's health (above), not a model's.
	modelBreakers := maps.Clone(cfg.Breakers)
	delete(modelBreakers, redishealth.BreakerName)
	s.Breakers = breaker.NewSet(factory, modelBreakers, breaker.WithTransitionHook(func(name string, from, to breaker.State) {
		s.log.Warn("breaker transition", "breaker", name, "from", from.String(), "to", to.String())
	}))

	// Step 8: the cascade below the models.
	var respCache cache.Cache = cache.NewMemory(cfg.Fallback.Cache, now)
	if rdb != nil {
		respCache = cache.NewRedis(rdb, prefix+"cache:", cfg.Fallback.Cache)
	}
	resolver, err := fallback.New(cfg.Fallback, fallback.Deps{Cache: respCache, Logger: s.log, Now: now,
		Trace: fallbackSpans(func() config.UnitCosts { return s.config().UnitCosts })})
	if err != nil {
		return gateway.Deps{}, fmt.Errorf("fallback: %w", err)
	}

	versions, err := s.artifacts(cfg, configPath, now)
	if err != nil {
		return gateway.Deps{}, err
	}
	hints := provider.NewCacheHints(now)
	tracer, err := s.events(cfg, versions.Graph().Version)
	if err != nil {
		return gateway.Deps{}, err
	}
	s.tracer = tracer
	prompts, err := s.canary(cfg, versions, tracer, now)
	if err != nil {
		return gateway.Deps{}, err
	}
	judger, err := s.judge(cfg)
	if err != nil {
		return gateway.Deps{}, err
	}
	s.judger = judger
	s.admin.HandleFunc("GET /admin/judge", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"tier": judger.tier(), "prompt": judger.version,
			"sampleRate": cfg.Judge.SampleRate, "saturatedSampleRate": cfg.Judge.SaturatedSampleRate, "stats": judger.stats()})
	})
	var retr gateway.Retriever
	if cfg.Catalog.Enabled {
		ix, err := s.openCatalog(cfg)
		if err != nil {
			return gateway.Deps{}, fmt.Errorf("catalog: %w", err)
		}
		s.Catalog = ix
		svc := catalog.NewService(ix)
		s.catalogSvc = svc
		s.mountCatalog(svc)
		retr = retriever{ix: svc, br: s.Breakers.Get(searchBreaker), enf: enf, topK: cfg.Catalog.TopK, current: s.config}
	}
	s.mountAdmin()
	s.alerting(cfg)
	var batcher gateway.Batcher
	var jobs gateway.JobStore // nil: this instance's memory
	if rdb != nil {
		jobs = jobstore.NewRedis(rdb, prefix+"batch:")
		fb := &fleetBatcher{rdb: rdb, log: s.log, now: now, current: s.config, sessions: sessions,
			limiter: limiter, enf: enf, counters: counters, breakers: s.Breakers, ledger: ledger, pressure: retrier.Pressure,
			queue: q}
		fb.seen.isTier = func(name string) bool { return isModel(s.config(), name) }
		if retr != nil {
			fb.search = s.Breakers.Get(searchBreaker)
		}
		batcher = fb
		sessions = aheadSessions{sessions}
	}
	var keySlots slots.Slots = slots.NewMemory(now)
	if rdb != nil {
		keySlots = slots.NewRedis(rdb, prefix)
	}
	return gateway.Deps{
		Slots:       keySlots,
		Batcher:     batcher,
		Jobs:        jobs,
		Retriever:   retr,
		Tracer:      tracer,
		Sessions:    sessions,
		UserHasher:  s.hasher,
		StateHasher: stateHasher(cfg),
		// A vendor that cannot count tokens is estimated with the same
		// tokenizer as a cut stream's usage (estimateTokens).
		EstimateTokens: sim.InputTokens,
		Prompts:        prompts,
		Admitter:       admitter{l: limiter, obs: s.Metrics},
		Budgeter:       budgeter{enf: enf, current: s.config, hints: hints},
		Planner:        planner{breakers: s.Breakers, ledger: ledger, queue: q},
		Reserver:       reserver{ledger: ledger, breakers: s.Breakers, queue: q, current: s.config, hints: hints, obs: s.Metrics},
		Invoker:        invoker{retrier: retrier, breakers: s.Breakers, obs: s.Metrics},
		Fallback:       cascade{r: resolver, current: s.config},
		Judge:          judger,
	}, nil
}

// sessions is the conversation history store: in memory, or in Redis when
// fleet.redis is set, so that a conversation continues whichever instance
// answers. The Redis store sits behind the session_store breaker, kept in
// this process's memory even in fleet mode: it guards Redis itself, so its
// state must not live there.
func (s *Server) sessions(cfg config.Config, rdb *redis.Client, now func() time.Time) session.Store {
	c := cfg.Session
	if rdb == nil {
		return session.NewMemory(c.HistoryExchanges, c.MaxSessions, c.TTL, now)
	}
	rs := session.NewRedis(rdb, cfg.Fleet.KeyPrefix+"session:", c.HistoryExchanges, c.TTL)
	rs.Timeout = c.RedisTimeout
	bcfg, ok := cfg.Breakers["session_store"]
	if !ok {
		bcfg = breaker.Defaults()["session_store"]
	}
	b := breaker.NewMemory("session_store", bcfg, now)
	b.OnTransition = func(name string, from, to breaker.State) {
		s.log.Warn("breaker transition", "breaker", name, "from", from.String(), "to", to.String())
	}
	s.SessionBreaker = b
	return session.Guarded{Store: rs, Breaker: b}
}

// responseStore keeps the OpenAI door's stored responses as long as an
// idle session: in memory (at most session.maxSessions of them), or in
// Redis when fleet.redis is set, so that previous_response_id continues a
// conversation on whichever instance answers. A response that cannot be
// read when continued is a 503, never an answer without its conversation.
func responseStore(cfg config.Config, rdb *redis.Client, now func() time.Time) openaidoor.ResponseStore {
	if rdb == nil {
		return respstore.NewMemory(cfg.Session.MaxSessions, 0, cfg.Session.TTL, now)
	}
	rs := respstore.NewRedis(rdb, cfg.Fleet.KeyPrefix+"resp:", cfg.Session.TTL)
	rs.Timeout = cfg.Session.RedisTimeout
	return rs
}

// ledgerModels are cfg's model tiers as the artifact ledger lists them.
func ledgerModels(cfg config.Config) []artifacts.Model {
	models := make([]artifacts.Model, len(cfg.Models))
	for i, m := range cfg.Models {
		models[i] = artifacts.Model{Name: m.Name, ModelID: m.ModelID, Provider: m.Provider}
	}
	return models
}

// ledgerEmbeddings are cfg's embedding tiers as the artifact ledger lists
// them.
func ledgerEmbeddings(cfg config.Config) []artifacts.Model {
	out := make([]artifacts.Model, len(cfg.Embeddings))
	for i, e := range cfg.Embeddings {
		out[i] = artifacts.Model{Name: e.Name, ModelID: e.ModelID, Provider: e.Provider}
	}
	return out
}

// genAIProviders names each tier's vendor as OpenTelemetry's GenAI
// conventions do (gen_ai.provider.name).
func genAIProviders(models []config.Model) map[string]string {
	names := map[string]string{"anthropic": "anthropic", "bedrock": "aws.bedrock", "openai": "openai", "sim": "fmgate.sim"}
	out := make(map[string]string, len(models))
	for _, m := range models {
		out[m.Name] = names[m.Provider]
	}
	return out
}

// events opens the sinks, the embedded event store and the emitter, and
// returns the tracer the pipeline emits spans through.
func (s *Server) events(cfg config.Config, graphVersion string) (*events.Tracer, error) {
	ctx := context.Background()
	sinkCfg := cfg.Events.Sinks
	_, vendors := modelLabels(cfg)
	s.vendors.Store(&vendors)
	sinkCfg.OTLP.Providers = s.vendorOf
	sinkList, err := sinks.FromConfig(ctx, sinkCfg, s.log)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	sinkList = sampleSinks(sinkList, cfg.Events.Sampling)
	watchers, err := s.observers(cfg)
	if err != nil {
		return nil, err
	}
	sinkList = append(sinkList, watchers...)
	switch {
	case cfg.EventStore.Driver == eventstore.DriverPostgres:
		// The fleet's store: filled by fmgate ingest from NATS, only read
		// here, so that no turn ever waits for PostgreSQL.
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		pg, err := pgstore.Open(octx, cfg.EventStore.PostgresDSN(), pgstore.Options{Log: s.log, ReadOnly: true})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("eventStore: %w", err)
		}
		s.closers = append(s.closers, func() { _ = pg.Close() })
		s.store = pg
		s.mountCost(eventstore.NewHandler(judgedViews{Views: pg, canary: cfg.Canary}, nil, s.log))
	case cfg.EventStore.Path != "":
		st, err := eventstore.Open(ctx, cfg.EventStore, nil)
		if err != nil {
			return nil, fmt.Errorf("eventStore: %w", err)
		}
		sinkList = append(sinkList, holdForDecision(st, cfg.Events.Sampling))
		s.store = st
		s.mountCost(eventstore.NewHandler(judgedViews{Views: st, canary: cfg.Canary}, nil, s.log))
	}
	em, err := events.New(ctx, cfg.Events, sinkList, s.log)
	if err != nil {
		return nil, err // it says "events: …" itself
	}
	s.Events = em
	s.Metrics.RegisterDropped(func() map[string]uint64 {
		out := map[string]uint64{}
		for name, st := range em.Stats().Sinks {
			out[name] = st.Dropped
		}
		return out
	})
	s.closers = append(s.closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = em.Close(cctx)
	})
	opts := cfg.Events.TracerOptions()
	opts.GraphVersion = graphVersion
	opts.Hasher = s.hasher
	return events.NewTracer(em, opts), nil
}

// holdForDecision hands the embedded store each turn's spans together with
// its turn span, which carries the sampling decision, when sampling is on.
func holdForDecision(st events.Sink, cfg events.SamplingConfig) events.Sink {
	if !cfg.Enabled {
		return st
	}
	return events.NewTailSampler(st, events.HoldForDecision, cfg, nil)
}

// mountCost serves the event store's cost and eval views.
func (s *Server) mountCost(h http.Handler) {
	s.admin.Handle("/admin/cost", h)
	s.admin.Handle("/admin/cost/", h)
	s.admin.Handle("/admin/eval", h)
}

// sampleSinks puts the trace export (OTLP) and the raw span log (JSONL)
// behind tail sampling; the NATS stream and the event store, where roll-ups
// are computed, keep every span.
func sampleSinks(list []events.Sink, cfg events.SamplingConfig) []events.Sink {
	if !cfg.Enabled {
		return list
	}
	for i, sk := range list {
		switch sk.Name() {
		case "otlp":
			list[i] = events.NewTailSampler(sk, events.DropUnsampled, cfg, nil)
		case "jsonl":
			list[i] = events.NewTailSampler(sk, events.KeepRecords, cfg, nil)
		}
	}
	return list
}

// mountAdmin adds the policies' admin routes.
func (s *Server) mountAdmin() {
	s.admin.HandleFunc("GET /admin/breakers", func(w http.ResponseWriter, r *http.Request) {
		snaps := s.Breakers.Snapshots(r.Context())
		if s.RedisHealth != nil {
			snaps[redishealth.BreakerName] = s.RedisHealth.Snapshot(r.Context())
		}
		if s.SessionBreaker != nil {
			snaps["session_store"], _ = s.SessionBreaker.Snapshot(r.Context())
		}
		writeJSON(w, http.StatusOK, snaps)
	})
	s.admin.HandleFunc("GET /admin/quota", func(w http.ResponseWriter, r *http.Request) {
		out := map[string]any{}
		for _, tier := range quotaTiers(s.cfg) {
			snap, err := s.Quota.Saturation(r.Context(), tier[0])
			if err != nil {
				out[tier[0]] = map[string]string{"error": err.Error()}
				continue
			}
			out[tier[0]] = snap
		}
		qs, err := s.Queue.Stats(r.Context())
		if err == nil {
			out["queue"] = map[string]any{"depth": qs.Depth, "byPriority": qs.ByPriority, "oldestWaitMs": qs.OldestWait.Milliseconds()}
		}
		writeJSON(w, http.StatusOK, out)
	})
	// PUT /admin/quota/{model} {"tpm":N,"rpm":N} changes a provider ceiling at
	// run time (e.g. the provider cut our TPM); {} restores the configured one.
	s.admin.HandleFunc("PUT /admin/quota/{model}", func(w http.ResponseWriter, r *http.Request) {
		model := r.PathValue("model")
		if _, ok := s.config().QuotaLedger().Models[model]; !ok {
			writeAdminError(w, http.StatusNotFound, "unknown model "+model)
			return
		}
		var c struct {
			TPM int `json:"tpm"`
			RPM int `json:"rpm"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil || c.TPM < 0 || c.RPM < 0 {
			writeAdminError(w, http.StatusBadRequest, `body must be {"tpm":N,"rpm":N} with N >= 0`)
			return
		}
		if err := s.Quota.SetCeiling(r.Context(), model, quota.Ceiling{TPM: c.TPM, RPM: c.RPM}); err != nil {
			writeAdminError(w, http.StatusBadRequest, err.Error())
			return
		}
		snap, _ := s.Quota.Saturation(r.Context(), model)
		writeJSON(w, http.StatusOK, snap)
	})
	s.admin.HandleFunc("GET /admin/budget/accuracy", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.Estimator.Accuracy())
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeAdminError(w http.ResponseWriter, status int, msg string) {
	code := "invalid_request"
	if status == http.StatusNotFound {
		code = "not_found"
	}
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// artifacts builds the ledger of live versions. The prompt is re-read from
// the config file at configPath (when the gateway was started from one) and
// from the prompt file it names, so editing either switches the prompt
// version without a restart.
func (s *Server) artifacts(cfg config.Config, configPath string, now func() time.Time) (*artifacts.Ledger, error) {
	source := func() (string, string, string, error) {
		c := cfg
		if configPath != "" {
			var err error
			if c, err = config.Load(configPath); err != nil {
				return "", "", "", err
			}
		}
		text, err := c.SystemPrompt()
		return c.Prompt.Name, text, c.Prompt.File, err
	}
	models := ledgerModels(cfg)
	graph := artifacts.Graph{Version: cfg.Events.GraphVersion, ConfigHash: configHash(cfg)}
	l, err := artifacts.New(graph, models, nil, source, now, s.log)
	if err != nil {
		return nil, err
	}
	l.SetEmbeddings(ledgerEmbeddings(cfg))
	s.Ledger = l
	s.admin.Handle("/admin/versions", l.Handler())
	s.admin.Handle("/admin/versions/", l.Handler())
	if cfg.Prompt.ReloadInterval > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		s.closers = append(s.closers, cancel)
		go l.Watch(ctx, cfg.Prompt.ReloadInterval)
	}
	return l, nil
}

// configHash is sha12 of the effective configuration with its secrets and
// the prompt (versioned on its own) left out.
func configHash(cfg config.Config) string {
	c := cfg
	c.Server.AdminToken = ""
	c.Auth.Keys = nil
	c.Fleet.RedisPassword = ""
	c.Events.Privacy.HashSecret = ""
	c.Prompt = config.Prompt{}
	b, err := json.Marshal(c)
	if err != nil { // a field JSON cannot encode: a defect, not a config
		panic("configHash: " + err.Error())
	}
	return artifacts.Hash12(b)
}

// fallbackSpans makes each cache and FAQ lookup of the fallback cascade a
// span of the turn; a cache call carries its unit cost.
func fallbackSpans(units func() config.UnitCosts) func(context.Context, string) func(bool) {
	return func(ctx context.Context, step string) func(bool) {
		var opts []events.StartOption
		if step == "cache" {
			opts = append(opts, events.WithMustPersist()) // a cost record
		}
		_, span := events.StartChild(ctx, step, opts...)
		if step == "cache" {
			span.SetCost(units().CacheCallUSD)
		}
		return func(hit bool) {
			switch {
			case step == "cache" && hit:
				span.SetCacheHit(events.CacheFull)
			case step == "cache":
				span.SetCacheHit(events.CacheMiss)
			}
			if !hit {
				span.SetErrorCode("no_match")
			}
			span.End()
		}
	}
}
