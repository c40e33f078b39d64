package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/deploy"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/quota"
)

// tierSet is the providers of a config's model tiers.
type tierSet struct {
	// built is what each tier's provider was built from, by tier name.
	built map[string]config.Model
	// raw are the providers as built; providers as the gateway calls them
	// (Options.WrapProvider).
	raw, providers map[string]provider.Provider
	// pools are the tiers with several deployments, in cascade order.
	pools []*deploy.Pool
}

// buildTiers builds the providers of cfg's model tiers. A tier that old
// (nil at start) built from the same connection (config.SameConnection)
// keeps its provider, and with it its connections and its deployments'
// balancing state; the others are built anew.
func (s *Server) buildTiers(ctx context.Context, cfg config.Config, old *tierSet) (*tierSet, error) {
	ts := &tierSet{built: map[string]config.Model{}, raw: map[string]provider.Provider{}, providers: map[string]provider.Provider{}}
	for _, m := range cfg.Models {
		p := provider.Provider(nil)
		if prev, ok := old.model(m.Name); ok && config.SameConnection(prev, m) {
			p = old.raw[m.Name]
		} else {
			var err error
			if p, err = s.tierProvider(ctx, cfg, m); err != nil {
				return nil, fmt.Errorf("models: %s: %w", m.Name, err)
			}
		}
		ts.built[m.Name], ts.raw[m.Name], ts.providers[m.Name] = m, p, p
		if s.wrapProvider != nil {
			ts.providers[m.Name] = s.wrapProvider(m.Name, p)
		}
		if pool, ok := p.(*deploy.Pool); ok {
			ts.pools = append(ts.pools, pool)
		}
	}
	return ts, nil
}

// model is what ts built tier name's provider from; none for a nil ts.
func (ts *tierSet) model(name string) (config.Model, bool) {
	if ts == nil {
		return config.Model{}, false
	}
	m, ok := ts.built[name]
	return m, ok
}

// tierProvider is the provider of tier m: its one provider, or the pool
// over its deployments, each with a provider, a breaker of its own
// ("<tier>@<deployment>", fleet-shared like the tier's, and configured as
// the tier's unless breakers names it) and an adaptive pressure level of
// its own under the same name (in the retrier's pressure, fleet-shared
// like the tier's), and the pool's state in Redis in fleet mode.
func (s *Server) tierProvider(ctx context.Context, cfg config.Config, m config.Model) (provider.Provider, error) {
	if len(m.Deployments) == 0 {
		return s.provider(ctx, m)
	}
	tierBreaker, ok := cfg.Breakers[m.Name]
	if !ok {
		tierBreaker = breaker.DefaultConfig()
	}
	deps := make([]deploy.Deployment, len(m.Deployments))
	for i, d := range m.Deployments {
		dm := m.Deployment(d)
		p, err := s.provider(ctx, dm)
		if err != nil {
			return nil, fmt.Errorf("deployment %s: %w", d.Name, err)
		}
		// A simulated deployment is a model of its own in the simulator;
		// a vendor's knows its model id already.
		model := m.Name
		if dm.Provider == "sim" {
			model = dm.Name
		}
		deps[i] = deploy.Deployment{Name: d.Name, Model: model, Weight: d.Weight, Provider: p, Breaker: s.Breakers.GetOr(dm.Name, tierBreaker),
			Pressure: dm.Name}
		if d.TPM > 0 {
			deps[i].Quota = dm.Name
		}
	}
	var state deploy.State = deploy.NewMemory(nil)
	if s.Redis != nil {
		state = deploy.NewRedis(s.Redis, cfg.Fleet.KeyPrefix)
	}
	pool, err := deploy.New(m.Name, deps, m.Balance, state, nil, func(tier, dep, outcome string, latency time.Duration) {
		if s.Metrics != nil {
			s.Metrics.Deployment(tier, dep, outcome, latency)
		}
	})
	if err != nil {
		return nil, err
	}
	pool.WithQuota(deploymentQuota{s.Quota}, roughTokens)
	if s.Retrier != nil {
		pool.WithPressure(s.Retrier.Pressure)
	}
	return pool, nil
}

// deploymentQuota reserves a call on a deployment's own ceiling in the
// quota ledger. Its reservation is the tier's P0 class: the tier's own
// reservation has already decided the turn's priority.
type deploymentQuota struct{ ledger quota.Ledger }

func (q deploymentQuota) Reserve(ctx context.Context, model string, tokens int) (func(int), bool, error) {
	res, err := q.ledger.Reserve(ctx, model, quota.P0, tokens)
	if _, full := errors.AsType[*quota.SaturatedError](err); full {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func(n int) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if n < 0 {
			_ = res.Release(ctx)
			return
		}
		_ = res.Settle(ctx, n)
	}, true, nil
}

// roughTokens is a call's reservation on a deployment's ceiling: its
// granted output and its input at four bytes a token, counted without a
// tokenizer (the tier's reservation was estimated already; this one is
// settled to the billed tokens).
func roughTokens(r *provider.Request) int {
	n := len(r.System)
	for _, m := range r.Messages {
		n += len(m.Content)
	}
	return n/4 + r.MaxTokens
}

// serveDeployments answers GET /admin/deployments: each deployment of
// each tier that has several, with its breaker, calls in flight, average
// latency, throttle and pressure level.
func (s *Server) serveDeployments(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out := []deploy.Snapshot{}
	for _, p := range s.tiers.Load().pools {
		snaps, err := p.Snapshots(ctx)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, adminError("unavailable", "the deployments' shared state did not answer: "+err.Error()))
			return
		}
		out = append(out, snaps...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deployments": out})
}
