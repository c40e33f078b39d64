package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
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
	if m.Provider == "sim" {
		return s.Sim, nil
	}
	roots, err := m.RootCAs()
	if err != nil {
		return nil, fmt.Errorf("caFile: %w", err)
	}
	switch m.Provider {
	case "openai":
		key := ""
		if m.APIKeyEnv != "" {
			key = os.Getenv(m.APIKeyEnv)
		}
		return openai.New(openai.Config{Name: m.Name, ModelID: m.ModelID, BaseURL: m.Endpoint, APIKey: key, Estimate: estimateTokens,
			HTTPClient: trusting(openai.NewHTTPClient(), roots)})
	case "anthropic":
		return anthropic.New(m, os.Getenv, trusting(anthropic.NewHTTPClient(), roots))
	case "bedrock":
		return bedrock.New(ctx, m, bedrock.Options{RootCAs: roots})
	}
	return nil, fmt.Errorf("provider %q is not available in this build", m.Provider)
}

// trusting is c verifying servers with roots (nil: the system's).
func trusting(c *http.Client, roots *x509.CertPool) *http.Client {
	if t, ok := c.Transport.(*http.Transport); ok && roots != nil {
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		t.TLSClientConfig.RootCAs = roots
	}
	return c
}

// estimateTokens counts a call's tokens with the cl100k_base tokenizer when
// a vendor's stream ended before it reported usage (a cut or a cancelled
// stream); answers that complete are billed with the vendor's own figures.
func estimateTokens(req *provider.Request, output string) provider.Usage {
	return provider.Usage{InputTokens: sim.InputTokens(req), OutputTokens: sim.CountTokens(output)}
}
