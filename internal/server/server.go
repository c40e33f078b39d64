// Package server builds a running fmgate from its config: the providers, the
// policies of each pipeline step (in memory, or in Redis in fleet mode), the
// gateway and its HTTP routes. cmd/fmgate and the end-to-end tests both start
// the gateway through it.
package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/webui"
)

// Options are what a Server needs besides its config. Zero values are the
// defaults.
type Options struct {
	Log *slog.Logger
	Now func() time.Time
	// SimOptions lets tests pace the simulator.
	SimOptions sim.Options
}

// Server is an assembled gateway.
type Server struct {
	Gateway *gateway.Gateway
	Sim     *sim.Sim
	cfg     config.Config
	log     *slog.Logger
	admin   *http.ServeMux
	closers []func()
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
	s := &Server{cfg: cfg, log: log, admin: http.NewServeMux()}

	simCfg := sim.Config{Models: make(map[string]sim.Settings, len(cfg.Sim.Models))}
	for name, st := range cfg.Sim.Models {
		simCfg.Models[name] = st
	}
	for _, m := range cfg.Models {
		if m.Provider != "sim" {
			continue
		}
		st, ok := simCfg.Models[m.Name]
		if !ok {
			st = sim.DefaultConfig().Models["haiku"]
		}
		if st.ModelID == "" {
			st.ModelID = m.ModelID
		}
		simCfg.Models[m.Name] = st
	}
	sm, err := sim.New(simCfg, opts.SimOptions)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s.Sim = sm
	s.admin.Handle("/admin/sim/", sm.Handler())

	providers := make(map[string]provider.Provider, len(cfg.Models))
	for _, m := range cfg.Models {
		providers[m.Name] = sm
	}

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	gw, err := gateway.New(cfg, gateway.Deps{
		Providers:   providers,
		Log:         log,
		Now:         opts.Now,
		UserHashKey: key,
		AdminRoutes: s.admin,
	})
	if err != nil {
		return nil, err
	}
	s.Gateway = gw
	return s, nil
}

// Handler is the gateway's HTTP routes with the embedded pages.
func (s *Server) Handler(adminToken string) http.Handler {
	return s.Gateway.Handler(adminToken, webui.Handler())
}

// Close releases what New opened.
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}
