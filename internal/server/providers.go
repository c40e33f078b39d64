package server

import (
	"context"
	"fmt"
	"os"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/anthropic"
)

// provider builds the backend of one model tier from its config. Each
// vendor's adapter lives in its own package under internal/provider; secrets
// come from the environment or the vendor's credential chain.
func (s *Server) provider(_ context.Context, m config.Model) (provider.Provider, error) {
	switch m.Provider {
	case "sim":
		return s.Sim, nil
	case "anthropic":
		return anthropic.New(m, os.Getenv, nil)
	}
	return nil, fmt.Errorf("provider %q is not available in this build", m.Provider)
}
