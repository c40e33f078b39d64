package server

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
	"github.com/fmgate/fmgate/internal/provider/openai"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/redishealth"
)

// embedders builds the backend of every embedding tier, each wrapped by
// wrap when it is set. Inputs are counted with the simulator's tokenizer
// where a vendor reports no usage.
func (s *Server) embedders(ctx context.Context, cfg config.Config, wrap func(string, provider.Embedder) provider.Embedder) (map[string]provider.Embedder, error) {
	out := make(map[string]provider.Embedder, len(cfg.Embeddings))
	for _, e := range cfg.Embeddings {
		p, err := s.embedder(ctx, e)
		if err != nil {
			return nil, fmt.Errorf("embeddings: %s: %w", e.Name, err)
		}
		if wrap != nil {
			p = wrap(e.Name, p)
		}
		out[e.Name] = p
	}
	return out, nil
}

// embedder builds one embedding tier's backend from its config; secrets
// come from the environment or the vendor's credential chain, as for a
// chat tier.
func (s *Server) embedder(ctx context.Context, e config.Embedding) (provider.Embedder, error) {
	if e.Provider == "sim" {
		return s.Sim, nil
	}
	conn := e.Connection()
	roots, err := conn.RootCAs()
	if err != nil {
		return nil, fmt.Errorf("caFile: %w", err)
	}
	switch e.Provider {
	case "openai":
		key := ""
		if e.APIKeyEnv != "" {
			key = os.Getenv(e.APIKeyEnv)
		}
		return openai.NewEmbedder(openai.EmbedderConfig{Config: openai.Config{Name: e.Name, ModelID: e.ModelID, BaseURL: e.Endpoint,
			APIKey: key, HTTPClient: trusting(openai.NewHTTPClient(), roots)}, Dimensions: e.Dimensions, CountTokens: sim.CountTokens})
	case "bedrock":
		return bedrock.NewEmbedder(ctx, conn, e.Dimensions, sim.CountTokens, bedrock.Options{RootCAs: roots})
	}
	return nil, fmt.Errorf("provider %q cannot serve embeddings", e.Provider)
}

// HoldCost implements gateway.CostBudgeter: the spending budgets alone —
// its user's, its key's, team's and feature's — for an embedding call
// priced before it runs.
func (b budgeter) HoldCost(ctx context.Context, t *gateway.Turn, usd float64) error {
	plan, err := b.enf.CheckCost(ctx, t.UserID, accounts(configOf(t, b.current), t), usd, true)
	if ex, ok := errors.AsType[*budget.ExceededError](err); ok {
		return budgetRefusal(t, ex)
	}
	if err != nil {
		return err
	}
	if plan.Hold.ID != "" {
		t.BudgetHold = plan.Hold
	}
	return nil
}

// RecordCost implements gateway.CostBudgeter: the call's cost goes to its
// user's and accounts' spend, settling the hold. An embedding call has no
// session: its tokens are no conversation's.
func (b budgeter) RecordCost(ctx context.Context, t *gateway.Turn, usd float64) error {
	hold, _ := t.BudgetHold.(budget.Hold)
	err := b.enf.Record(ctx, t.UserID, "", accounts(configOf(t, b.current), t), hold, 0, 0, usd)
	if err == nil {
		t.BudgetHold = nil // settled
	}
	if errors.Is(err, redishealth.ErrDown) {
		return nil // counters fail open while Redis is down; the outage was logged once
	}
	return err
}

// quotaTiers are the names and model ids of every tier the quota ledger
// keeps: the model tiers (each followed by its deployments with ceilings
// of their own), then the embedding tiers.
func quotaTiers(cfg config.Config) [][2]string {
	out := make([][2]string, 0, len(cfg.Models)+len(cfg.Embeddings))
	for _, m := range cfg.Models {
		out = append(out, [2]string{m.Name, m.ModelID})
		for _, d := range m.Deployments {
			if d.TPM > 0 { // a deployment with a ceiling of its own
				dm := m.Deployment(d)
				out = append(out, [2]string{dm.Name, dm.ModelID})
			}
		}
	}
	for _, e := range cfg.Embeddings {
		out = append(out, [2]string{e.Name, e.ModelID})
	}
	return out
}
