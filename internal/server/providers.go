package server

import (
	"context"
	"fmt"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

// provider builds the backend of one model tier from its config. Each
// vendor's adapter lives in its own package under internal/provider; secrets
// come from the environment or the vendor's credential chain.
func (s *Server) provider(ctx context.Context, m config.Model) (provider.Provider, error) {
	switch m.Provider {
	case "sim":
		return s.Sim, nil
	case "bedrock":
		return bedrock.New(ctx, m, bedrock.Options{})
	}
	return nil, fmt.Errorf("provider %q is not available in this build", m.Provider)
}
