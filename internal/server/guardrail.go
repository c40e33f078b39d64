package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

// guardrailBreaker is the name of the remote guardrail check's breaker.
const guardrailBreaker = "guardrail"

// remoteGuardrail is the check of guardrails.bedrock behind its breaker,
// its credentials resolved now (the AWS SDK's default chain, as for the
// bedrock tiers); nil when it is off.
func (s *Server) remoteGuardrail(ctx context.Context, cfg config.Config) (guardrail.Checker, error) {
	bc := cfg.Guardrails.Bedrock
	if !bc.Enabled() {
		return nil, nil
	}
	g, err := bedrock.NewGuardrail(ctx, bc, bedrock.Options{})
	if err != nil {
		return nil, fmt.Errorf("guardrails.bedrock: %w", err)
	}
	return breakerCheck{check: g, br: s.Breakers.Get(guardrailBreaker)}, nil
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
