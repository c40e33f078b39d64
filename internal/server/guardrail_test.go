package server

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
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

// TestGuardrailBlockInEachVendorsWords: a message the guardrails block
// gets the redirect answer on every vendor door, marked degraded, with
// the stop reason that vendor gives a filtered answer — so a client of
// the vendor's SDK sees a content filter, not an ordinary end of turn.
func TestGuardrailBlockInEachVendorsWords(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{shopKey: {UserID: "shop"}}
	cfg.Guardrails = guardrail.Policy{Config: guardrail.Config{Email: guardrail.Block}}
	sc := newScenario(t, cfg)
	const ask = "mail taro@example.com"
	for _, d := range []struct{ door, path, body, want string }{
		{"openai", "/v1/chat/completions", `{"model":"sonnet","messages":[{"role":"user","content":"` + ask + `"}]}`, `"finish_reason":"content_filter"`},
		{"openai stream", "/v1/chat/completions", `{"model":"sonnet","stream":true,"messages":[{"role":"user","content":"` + ask + `"}]}`, `"finish_reason":"content_filter"`},
		{"responses", "/v1/responses", `{"model":"sonnet","input":"` + ask + `"}`, `"incomplete_details":{"reason":"content_filter"}`},
		{"anthropic", "/v1/messages", `{"model":"sonnet","max_tokens":100,"messages":[{"role":"user","content":"` + ask + `"}]}`, `"stop_reason":"refusal"`},
		{"bedrock", "/model/sonnet/converse", `{"messages":[{"role":"user","content":[{"text":"` + ask + `"}]}]}`, `"stopReason":"guardrail_intervened"`},
	} {
		status, body := keyPost(t, sc.srv.URL, shopKey, d.path, d.body)
		if status != http.StatusOK || !strings.Contains(body, d.want) || !strings.Contains(body, "I cannot help with that request") {
			t.Errorf("%s: %d %s; want 200 with the redirect answer and %s", d.door, status, body, d.want)
		}
	}
	for name, c := range sc.upstream {
		if n := c.calls.Load(); n != 0 {
			t.Fatalf("%s called %d times for blocked messages", name, n)
		}
	}
}
