package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/slots"
)

// slotTTL is how long a turn's slot lasts when its instance dies before
// giving it back: longer than any turn.
const slotTTL = 10 * time.Minute

// slotTimeout bounds the shared store's answer; without one the turn goes
// on (the cap fails open, like the rate limits' store).
const slotTimeout = 100 * time.Millisecond

// takeSlot holds one of the slots of t's API key (auth.keys.*.concurrent)
// for the turn; with none free the turn is refused, to come back when one
// of the key's turns ends.
func (g *Gateway) takeSlot(ctx context.Context, t *Turn) error {
	if t.KeyConcurrent <= 0 || t.KeyHash == "" {
		return nil
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	sctx, cancel := g.slotCtx(ctx)
	ok, err := g.slots.Acquire(sctx, t.KeyHash, id, t.KeyConcurrent, slotTTL)
	cancel()
	switch {
	case err != nil:
		g.log.WarnContext(ctx, "key concurrency not checked: its store did not answer", "err", err)
	case !ok:
		msg := fmt.Sprintf("This API key already has %d requests in progress, its limit. Please try again when one has finished.", t.KeyConcurrent)
		if t.Locale == "ja" {
			msg = fmt.Sprintf("このAPIキーで処理中のリクエストが上限（%d件）に達しています。いずれかが終わってから、もう一度お試しください。", t.KeyConcurrent)
		}
		return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, RetryAfter: time.Second, Message: msg,
			Err: fmt.Errorf("key concurrency cap %d", t.KeyConcurrent)}
	default:
		t.slot = id
	}
	return nil
}

// giveSlot gives t's slot back, whatever the client did.
func (g *Gateway) giveSlot(ctx context.Context, t *Turn) {
	if t.slot == "" {
		return
	}
	sctx, cancel := g.slotCtx(context.WithoutCancel(ctx))
	defer cancel()
	if err := g.slots.Release(sctx, t.KeyHash, t.slot); err != nil {
		g.log.WarnContext(ctx, "key concurrency slot not given back: it lapses", "err", err, "after", slotTTL)
	}
	t.slot = ""
}

func (g *Gateway) slotCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, local := g.slots.(*slots.Memory); local {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, slotTimeout)
}
