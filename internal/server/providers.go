package server

import (
	"context"
	"fmt"
	"os"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/anthropic"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
	"github.com/fmgate/fmgate/internal/provider/openai"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// provider builds the backend of one model tier from its config. Each
// vendor's adapter lives in its own package under internal/provider; secrets
// come from the environment or the vendor's credential chain.
func (s *Server) provider(ctx context.Context, m config.Model) (provider.Provider, error) {
	switch m.Provider {
	case "sim":
		return s.Sim, nil
	case "openai":
		key := ""
		if m.APIKeyEnv != "" {
			key = os.Getenv(m.APIKeyEnv)
		}
		return openai.New(openai.Config{Name: m.Name, ModelID: m.ModelID, BaseURL: m.Endpoint, APIKey: key, Estimate: estimateTokens})
	case "anthropic":
		return anthropic.New(m, os.Getenv, nil)
	case "bedrock":
		return bedrock.New(ctx, m, bedrock.Options{})
	}
	return nil, fmt.Errorf("provider %q is not available in this build", m.Provider)
}

// estimateTokens counts a call's tokens with the cl100k_base tokenizer when
// a vendor's stream ended before it reported usage (a cut or a cancelled
// stream); answers that complete are billed with the vendor's own figures.
func estimateTokens(req *provider.Request, output string) provider.Usage {
	return provider.Usage{InputTokens: sim.InputTokens(req), OutputTokens: sim.CountTokens(output)}
}
