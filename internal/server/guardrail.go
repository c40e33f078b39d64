package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

// guardrailBreaker is the name of the top level's remote guardrail
// check's breaker; a profile's is "guardrail:<profile>", configured as
// this one.
const guardrailBreaker = "guardrail"

// remoteGuardrails are the checks of guardrails.bedrock and of each
// profile's bedrock, by profile ("" for the top level), each behind its
// own breaker, their credentials resolved now (the AWS SDK's default
// chain, as for the bedrock tiers).
func (s *Server) remoteGuardrails(ctx context.Context, cfg config.Config) (map[string]guardrail.Checker, error) {
	remotes := cfg.Guardrails.Remotes()
	out := make(map[string]guardrail.Checker, len(remotes))
	for _, profile := range slices.Sorted(maps.Keys(remotes)) {
		field, breakerName := "guardrails.bedrock", guardrailBreaker
		if profile != "" {
			field, breakerName = "guardrails.profiles."+profile+".bedrock", guardrailBreaker+":"+profile
		}
		g, err := bedrock.NewGuardrail(ctx, remotes[profile], bedrock.Options{})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		bcfg, ok := cfg.Breakers[guardrailBreaker]
		if !ok {
			bcfg = breaker.DefaultConfig()
		}
		br := s.Breakers.GetOr(breakerName, bcfg)
		out[profile] = breakerCheck{check: g, br: br}
	}
	return out, nil
}

// breakerCheck runs a remote check behind its breaker: refused at once,
// wrapping gateway.ErrGuardrailOpen, while the breaker is open. A check
// the caller abandoned (cancelled) says nothing of the service's health.
type breakerCheck struct {
	check guardrail.Checker
	br    breaker.Breaker
}

func (b breakerCheck) Check(ctx context.Context, text string) (guardrail.Verdict, error) {
	permit, err := b.br.Allow(ctx)
	if errors.Is(err, breaker.ErrOpen) {
		return guardrail.Verdict{}, fmt.Errorf("%w: %w", gateway.ErrGuardrailOpen, err)
	}
	v, err := b.check.Check(ctx, text)
	// The outcome is recorded even when the check's deadline has passed.
	owed := context.WithoutCancel(ctx)
	if errors.Is(ctx.Err(), context.Canceled) {
		permit.Release(owed)
	} else {
		permit.Done(owed, err == nil)
	}
	return v, err
}
