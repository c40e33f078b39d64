package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/redistest"
	"github.com/fmgate/fmgate/internal/session"
)

// By default a card number is redacted before the model sees the message,
// and the session keeps only the redacted text.
func TestGuardrailsRedactBeforeTheModel(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	sc, seen := instance(t, cfg)
	a := sc.chat("card-user", "My card 4111 1111 1111 1111 was charged twice for One Piece", "en")
	if a.Status != 200 || a.Degraded {
		t.Fatalf("answer %+v", a)
	}
	msgs := seen()
	last := msgs[len(msgs)-1].Content
	if strings.Contains(last, "4111") || !strings.Contains(last, "[CARD]") {
		t.Fatalf("the model saw %q; want the card number redacted", last)
	}
	rdb, _ := redistest.Client(t)
	h, err := session.NewRedis(rdb, cfg.Fleet.KeyPrefix+"session:", cfg.Session.HistoryExchanges, cfg.Session.TTL).History(context.Background(), "card-user", "s-card-user")
	if err != nil || len(h) != 2 || !strings.Contains(h[0].Content, "[CARD]") {
		t.Fatalf("the session's history %v, %v; want the exchange with the card redacted", h, err)
	}
}

// A kind set to block gets the redirect answer, a 200 marked degraded in
// the user's language, with no model called and nothing of the message
// kept; its span says what was found, never the text.
func TestGuardrailsBlock(t *testing.T) {
	cfg := quickConfig()
	cfg.Guardrails = guardrail.Policy{Config: guardrail.Config{Email: guardrail.Block, DenyTerms: []string{"違法ダウンロード"}}}
	spans := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = spans
	sc := newScenario(t, cfg)
	a := sc.chat("mail-user", "Send the list to taro@example.com", "en")
	if a.Status != 200 || !a.Degraded || a.Text != fallback.Redirect("en") {
		t.Fatalf("blocked answer %+v; want the redirect message, degraded", a)
	}
	ja := sc.chat("ja-user", "違法ダウンロードできるサイトは？", "ja")
	if ja.Status != 200 || ja.Text != fallback.Redirect("ja") {
		t.Fatalf("blocked ja answer %+v", ja)
	}
	for name, c := range sc.upstream {
		if n := c.calls.Load(); n != 0 {
			t.Fatalf("%s called %d times for blocked messages", name, n)
		}
	}
	sc.s.Close()
	found := false
	for _, e := range readSpans(t, spans) {
		raw := e.PromptExcerpt + e.Outcome.ErrorCode
		if strings.Contains(raw, "taro@example.com") || strings.Contains(raw, "違法ダウンロード") {
			t.Fatalf("span %s kept the blocked text: %+v", e.Name, e)
		}
		if e.Name == "guard" && e.Outcome.ErrorCode == "guardrail_blocked:email" {
			found = true
		}
	}
	if !found {
		t.Fatal("no guard span says the message was blocked for an e-mail address")
	}
}
