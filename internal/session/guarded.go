package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/provider"
)

// Guarded puts a Store behind a circuit breaker (the session_store breaker):
// while the store keeps failing, calls are refused at once instead of each
// waiting for its timeout, so a turn loses its history but not its time.
// A refusal, like any failure of the store, matches ErrUnavailable.
//
// A call cancelled by its caller records no outcome: a client that left
// says nothing about the store's health. Nor does a call refused at once by
// another breaker (breaker.ErrUnavailable: Redis's own health, which knows
// Redis is down): it never reached the store, and counting it would keep
// this breaker open long after that one saw Redis back.
type Guarded struct {
	Store   Store
	Breaker breaker.Breaker
}

// History implements Store.
func (g Guarded) History(ctx context.Context, owner, sessionID string) ([]provider.Message, error) {
	var h []provider.Message
	err := g.guard(ctx, func() (err error) {
		h, err = g.Store.History(ctx, owner, sessionID)
		return err
	})
	return h, err
}

// Append implements Store.
func (g Guarded) Append(ctx context.Context, owner, sessionID, user, assistant string) error {
	return g.guard(ctx, func() error { return g.Store.Append(ctx, owner, sessionID, user, assistant) })
}

func (g Guarded) guard(ctx context.Context, call func() error) error {
	permit, err := g.Breaker.Allow(ctx)
	if errors.Is(err, breaker.ErrOpen) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// Any other error: the breaker's own state is unknown; call anyway.
	err = call()
	switch {
	case err == nil:
		permit.Done(ctx, true)
	case ctx.Err() != nil, errors.Is(err, breaker.ErrUnavailable):
		permit.Release(ctx) // the caller left, or the call was never made: no verdict on the store
	default:
		permit.Done(ctx, false)
	}
	return err
}
