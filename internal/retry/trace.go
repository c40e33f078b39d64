package retry

import (
	"context"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// Trace observes a Retrier's waits, as net/http/httptrace observes a
// request: attach it to the context passed to Do.
type Trace struct {
	// Waiting is called before Do waits to retry. It must not block.
	Waiting func(Wait)
}

// Wait describes a wait before a retry.
type Wait struct {
	// Attempt is the attempt about to be made, from 1 (so at least 2 here);
	// Of is the most attempts the policy allows at the current level.
	Attempt, Of int
	// Delay is how long Do waits before it.
	Delay time.Duration
	// Kind is the class of the failure being retried.
	Kind provider.Kind
}

type traceKey struct{}

// WithTrace returns ctx carrying tr.
func WithTrace(ctx context.Context, tr *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, tr)
}

func traceWaiting(ctx context.Context, w Wait) {
	if tr, _ := ctx.Value(traceKey{}).(*Trace); tr != nil && tr.Waiting != nil {
		tr.Waiting(w)
	}
}
