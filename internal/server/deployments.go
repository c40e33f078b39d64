package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/deploy"
	"github.com/fmgate/fmgate/internal/provider"
)

// tierProvider is the provider of tier m: its one provider, or the pool
// over its deployments, each with a provider and a breaker of its own
// ("<tier>@<deployment>", fleet-shared like the tier's) and the pool's
// state in Redis in fleet mode.
func (s *Server) tierProvider(ctx context.Context, cfg config.Config, m config.Model) (provider.Provider, error) {
	if len(m.Deployments) == 0 {
		return s.provider(ctx, m)
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
		deps[i] = deploy.Deployment{Name: d.Name, Model: model, Weight: d.Weight, Provider: p, Breaker: s.Breakers.Get(dm.Name)}
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
	s.pools = append(s.pools, pool)
	return pool, nil
}

// serveDeployments answers GET /admin/deployments: each deployment of
// each tier that has several, with its breaker, calls in flight, average
// latency and throttle.
func (s *Server) serveDeployments(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	out := []deploy.Snapshot{}
	for _, p := range s.pools {
		snaps, err := p.Snapshots(ctx)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, adminError("unavailable", "the deployments' shared state did not answer: "+err.Error()))
			return
		}
		out = append(out, snaps...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deployments": out})
}
