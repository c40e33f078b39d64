package server

import (
	"context"
	"fmt"
	"github.com/fmgate/fmgate/internal/adminauth"
	"maps"
	"net/http"
	"slices"
	"sort"

	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/live"
	"github.com/fmgate/fmgate/internal/metrics"
)

// observer is what the policy adapters report besides their decisions: the
// scope of every throttle and the reason of every retry, for the metrics.
type observer interface {
	Throttle(scope string)
	Retry(model, reason string)
}

// observers builds the two span sinks that watch the gateway from the
// same events as everything else: the Prometheus metrics (GET /metrics) and
// the live figures behind the dashboards (GET /admin/live). Their gauges of
// breakers, quota and the queue are read from the policies at scrape or
// snapshot time.
func (s *Server) observers(cfg config.Config) ([]events.Sink, error) {
	names, providers := modelLabels(cfg)
	m, err := metrics.New(metrics.Options{Models: names, Providers: providers})
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m.SetState(func(ctx context.Context) (metrics.State, error) {
		st, err := s.readState(ctx)
		if err != nil {
			return metrics.State{}, err
		}
		var out metrics.State
		for _, b := range st.Breakers {
			out.Breakers = append(out.Breakers, metrics.BreakerState{Name: b.Name, State: b.State})
		}
		for _, q := range st.Quota {
			out.Quota = append(out.Quota, metrics.QuotaState{Model: q.Model, TPMUsed: int64(q.TPMUsed),
				TPMCeiling: int64(q.TPMCeiling), RPMUsed: int64(q.RPMUsed), RPMCeiling: int64(q.RPMCeiling)})
		}
		for p, n := range st.Queue.ByPriority {
			out.Queue = append(out.Queue, metrics.QueueDepth{Priority: p, Depth: n})
		}
		sort.Slice(out.Queue, func(i, j int) bool { return out.Queue[i].Priority < out.Queue[j].Priority })
		deps := map[string]pressureName{}
		for _, n := range s.tiers.Load().pressureNames() {
			if n.deployment != "" {
				deps[n.name] = n
			}
		}
		for _, p := range st.Pressure {
			if d, ok := deps[p.Name]; ok {
				out.Deployments = append(out.Deployments, metrics.DeploymentPressure{Tier: d.tier, Deployment: d.deployment, Level: p.Level})
			}
		}
		return out, nil
	})
	s.Metrics = m

	lv := live.New(cfg.Live, s.readState, nil)
	if s.Redis != nil {
		// Fleet mode: the live figures are the whole fleet's.
		lv.SetFleet(live.NewRedisFleet(s.Redis, cfg.Fleet.KeyPrefix+"live:"), s.instanceID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = lv.Run(ctx) }()
	s.closers = append(s.closers, func() { cancel(); <-done })
	s.Live = lv
	s.admin.Handle("/admin/live", lv.Handler())
	s.admin.Handle("/admin/live/", lv.Handler())
	return []events.Sink{m, lv}, nil
}

// alerting runs the alert rules over the live figures, the sinks' losses
// and the canary verdict, and serves GET /admin/alerts.
func (s *Server) alerting(cfg config.Config) {
	am := alerts.New(cfg.Alerts, nil, s.log)
	primary := cfg.Models[0].ModelID
	if primary == "" {
		primary = cfg.Models[0].Name
	}
	observe := func(ctx context.Context) alerts.Observation {
		obs := alerts.Observation{Live: s.Live.Snapshot(ctx), Primary: primary, Dropped: map[string]uint64{}}
		if s.Events != nil {
			for name, st := range s.Events.Stats().Sinks {
				obs.Dropped[name] = st.Dropped
			}
		}
		if s.canaryVerdict != nil {
			obs.Canary = s.canaryVerdict()
		}
		obs.ReloadFailed = s.reloadFailed.Load()
		return obs
	}
	s.observe = observe
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = am.Run(ctx, observe) }()
	s.closers = append(s.closers, func() { cancel(); <-done })
	s.Alerts = am
	s.admin.Handle("/admin/alerts", am.Handler())
}

// readState reads the breakers, the quota ledger, the queue and the
// adaptive pressure levels, each bounded by ctx.
func (s *Server) readState(ctx context.Context) (live.State, error) {
	var st live.State
	snaps := s.Breakers.Snapshots(ctx)
	names := make([]string, 0, len(snaps))
	for n := range snaps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if snaps[n].Error != "" {
			return live.State{}, fmt.Errorf("breaker %s: %s", n, snaps[n].Error)
		}
		st.Breakers = append(st.Breakers, live.Breaker{Name: n, State: snaps[n].State.String()})
	}
	for _, tier := range quotaTiers(s.cfg) {
		q, err := s.Quota.Saturation(ctx, tier[0])
		if err != nil {
			return live.State{}, fmt.Errorf("quota %s: %w", tier[0], err)
		}
		st.Quota = append(st.Quota, live.Quota{Model: tier[0], ModelID: tier[1], TPMUsed: q.TokensUsed, TPMCeiling: q.TPMLimit,
			RPMUsed: q.RequestsUsed, RPMCeiling: q.RPMLimit, Saturation: q.Saturation})
	}
	qs, err := s.Queue.Stats(ctx)
	if err != nil {
		return live.State{}, fmt.Errorf("queue: %w", err)
	}
	st.Queue = live.QueueState{Depth: qs.Depth, OldestWait: qs.OldestWait, ByPriority: map[string]int{}}
	for p, n := range qs.ByPriority {
		st.Queue.ByPriority[fmt.Sprintf("P%d", p)] = n
	}
	if s.Retrier != nil && s.Retrier.Pressure != nil {
		names := s.tiers.Load().pressureNames()
		keys := make([]string, len(names))
		for i, n := range names {
			keys[i] = n.name
		}
		for i, l := range s.Retrier.Pressure.Levels(ctx, keys) {
			st.Pressure = append(st.Pressure, live.Pressure{Name: keys[i], Level: l.String()})
		}
	}
	return st, nil
}

// pressureName is a name the retrier keeps a pressure level under: a
// model tier's, or a deployment's "<tier>@<deployment>".
type pressureName struct{ name, tier, deployment string }

// pressureNames are the model tiers in force, by name, each followed by
// its deployments; none before the tiers are built (the live view starts
// reading first).
func (ts *tierSet) pressureNames() []pressureName {
	if ts == nil {
		return nil
	}
	var out []pressureName
	for _, name := range slices.Sorted(maps.Keys(ts.built)) {
		m := ts.built[name]
		out = append(out, pressureName{name: m.Name, tier: m.Name})
		for _, d := range m.Deployments {
			out = append(out, pressureName{name: m.Deployment(d).Name, tier: m.Name, deployment: d.Name})
		}
	}
	return out
}

// metricsHandler serves GET /metrics: behind the admin token, unless
// server.publicMetrics opens it to scrapers without credentials.
func (s *Server) metricsHandler(auth *adminauth.Auth) http.Handler {
	h := s.Metrics.Handler()
	if s.cfg.Server.PublicMetrics {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !auth.Authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fmgate metrics"`)
			http.Error(w, "GET /metrics needs Authorization: Bearer <admin token> (or set server.publicMetrics: true)", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// modelLabels are the names and model ids of cfg's model and embedding
// tiers, and the vendor of each as OpenTelemetry's GenAI conventions name
// it (gen_ai.provider.name): the model label values of the metrics.
func modelLabels(cfg config.Config) ([]string, map[string]string) {
	tiers := cfg.Models
	for _, e := range cfg.Embeddings {
		tiers = append(tiers[:len(tiers):len(tiers)], e.Connection())
	}
	names := make([]string, 0, 2*len(tiers))
	providers := genAIProviders(tiers) // by tier name
	for _, m := range tiers {
		names = append(names, m.Name)
		if m.ModelID != "" && m.ModelID != m.Name {
			names = append(names, m.ModelID)
			providers[m.ModelID] = providers[m.Name]
		}
	}
	return names, providers
}

// observeTiers names cfg's model tiers in the metrics and the exported
// spans, after a reload put them in force.
func (s *Server) observeTiers(cfg config.Config) {
	names, providers := modelLabels(cfg)
	// A span of a turn still running on a tier the reload removed keeps
	// its vendor's name.
	vendors := maps.Clone(providers)
	if old := s.vendors.Load(); old != nil {
		for k, v := range *old {
			if _, ok := vendors[k]; !ok {
				vendors[k] = v
			}
		}
	}
	s.vendors.Store(&vendors)
	if s.Metrics != nil {
		if err := s.Metrics.AddModels(names, providers); err != nil {
			s.log.Warn("metrics keep the model labels they had", "err", err)
		}
	}
	if s.Ledger != nil {
		s.Ledger.SetModels(ledgerModels(cfg))
		s.Ledger.SetEmbeddings(ledgerEmbeddings(cfg))
	}
}

// vendorOf is tier's gen_ai.provider.name in the config in force.
func (s *Server) vendorOf(tier string) string {
	if v := s.vendors.Load(); v != nil {
		return (*v)[tier]
	}
	return ""
}
