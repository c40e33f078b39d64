package gateway

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/fmgate/fmgate/internal/retry"
	"github.com/fmgate/fmgate/internal/stream"
)

// Status is a notice to a client whose answer has not started: the turn is
// waiting on a retry, a fallback to the next model tier, or the priority
// queue.
type Status struct {
	// State is stream.StateRetrying, StateFallingBack or StateQueued.
	State string
	// Attempt (from 1) of Of: the model call or tier about to be tried.
	Attempt, Of int
	// RetryIn is the wait before the retry.
	RetryIn time.Duration
	// Message is in the user's language.
	Message string
}

// StatusAware is an optional Output that can show the client a Status
// before the first text. The WebSocket and /v1/chat SSE outputs send it as
// a status frame; outputs that speak a vendor's protocol do not implement
// it, so their clients see nothing outside that protocol.
type StatusAware interface {
	Status(s Status)
}

type statusKey struct{}

// withStatus returns ctx through which the waits of the turn's model calls
// (the retry loop, the priority queue) reach out as status notices, in the
// turn's locale. Nothing is sent once text reached the client.
func withStatus(ctx context.Context, t *Turn, out Output) context.Context {
	sa, ok := unwrapOutput(out).(StatusAware)
	if !ok {
		return ctx
	}
	notify := func(s Status) {
		if out.Started() {
			return
		}
		s.Message = statusMessage(t.Locale, s)
		sa.Status(s)
	}
	ctx = context.WithValue(ctx, statusKey{}, notify)
	return retry.WithTrace(ctx, &retry.Trace{Waiting: func(w retry.Wait) {
		notify(Status{State: stream.StateRetrying, Attempt: w.Attempt, Of: w.Of, RetryIn: w.Delay})
	}})
}

// NotifyStatus tells the client of ctx's turn that it is waiting (policies
// call it, e.g. before a wait in the priority queue). It does nothing when
// the turn's output cannot show a status.
func NotifyStatus(ctx context.Context, s Status) {
	if notify, ok := ctx.Value(statusKey{}).(func(Status)); ok {
		notify(s)
	}
}

// unwrapOutput sees through the tracing wrapper to the front door's Output.
func unwrapOutput(out Output) Output {
	if o, ok := out.(*tracedOutput); ok {
		return o.Output
	}
	return out
}

func statusMessage(locale string, s Status) string {
	secs := int(math.Ceil(s.RetryIn.Seconds()))
	ja := locale == "ja"
	switch s.State {
	case stream.StateRetrying:
		if ja {
			return fmt.Sprintf("混み合っているため、%d秒後にもう一度お試しします（%d/%d回目）。", secs, s.Attempt, s.Of)
		}
		return fmt.Sprintf("The assistant is busy. Trying again in %ds (attempt %d of %d)…", secs, s.Attempt, s.Of)
	case stream.StateFallingBack:
		if ja {
			return "別のモデルに切り替えて回答を準備しています…"
		}
		return "Switching to a backup model to answer you…"
	}
	if ja {
		return "ただいま順番待ちです。まもなく回答を始めます…"
	}
	return "You're in line. Your answer will start shortly…"
}

// Status implements StatusAware once EnableStatus was called.
func (o *StreamOutput) Status(s Status) {
	if !o.status.Load() {
		return
	}
	o.s.Status(stream.StatusFrame{State: s.State, Attempt: s.Attempt, Of: s.Of,
		RetryInSeconds: int(math.Ceil(s.RetryIn.Seconds())), Message: s.Message})
}

// EnableStatus makes the output send status frames while the answer waits
// (the contract's WebSocket and SSE streams). Vendor front doors, which
// re-encode frames in their own protocol, leave it off.
func (o *StreamOutput) EnableStatus() { o.status.Store(true) }
