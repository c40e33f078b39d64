package server

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/fallback"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

// saying is a model tier that answers with pieces, streamed one by one
// with a pause between them, whatever it is asked.
type saying struct {
	provider.Provider
	pieces []string
	pause  time.Duration
	// asked gets each request's messages.
	asked chan<- []provider.Message
}

func (p saying) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	select {
	case p.asked <- req.Messages:
	default:
	}
	var text strings.Builder
	for _, piece := range p.pieces {
		if err := emit(piece); err != nil {
			return nil, err
		}
		text.WriteString(piece)
		select {
		case <-time.After(p.pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &provider.Response{Text: text.String(), ModelID: "saying", StopReason: "end_turn",
		Usage: provider.Usage{InputTokens: 10, OutputTokens: 10}}, nil
}

func (p saying) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.Stream(ctx, req, func(string) error { return nil })
}

// guardedAnswers serves cfg with every model tier answering pieces.
func guardedAnswers(t *testing.T, cfg guardrail.Config, pieces ...string) (*scenario, string, <-chan []provider.Message) {
	t.Helper()
	c := quickConfig()
	c.Guardrails = guardrail.Policy{Config: cfg}
	spans := filepath.Join(t.TempDir(), "events.jsonl")
	c.Events.Sinks.JSONL.Path = spans
	asked := make(chan []provider.Message, 16)
	s, err := New(context.Background(), isolate(t, c), Options{WrapProvider: func(_ string, p provider.Provider) provider.Provider {
		return saying{Provider: p, pieces: pieces, pause: 30 * time.Millisecond, asked: asked}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(srv.Close)
	return &scenario{t: t, s: s, srv: srv}, spans, asked
}

// A phone number and an address the model streams, split across pieces
// anyhow, reach neither the client nor the session: their placeholders
// do, streamed or whole.
func TestAnswersAreRedactedOnTheirWay(t *testing.T) {
	sc, spans, asked := guardedAnswers(t, guardrail.Config{Phone: guardrail.Redact, Email: guardrail.Redact},
		"Call our desk at ０３－１２", "３４－５６７８ or mail help@exam", "ple.jp, and enjoy One Piece vol. 105.")
	want := "Call our desk at [PHONE] or mail [EMAIL], and enjoy One Piece vol. 105."
	frames := sseFrames(t, sc.srv.URL, "streamer", "how do I reach you", "en")
	var text strings.Builder
	for _, f := range frames {
		if f.Type == stream.TypeChunk {
			if strings.ContainsAny(f.Chunk.Text, "１２３４５６７８") || strings.Contains(f.Chunk.Text, "help@") {
				t.Fatalf("a chunk let part of a finding through: %q", f.Chunk.Text)
			}
			text.WriteString(f.Chunk.Text)
		}
	}
	if last := frames[len(frames)-1]; last.Type != stream.TypeDone || text.String() != want {
		t.Fatalf("streamed %q ending %v, want %q and done", text.String(), last.Type, want)
	}
	a := sc.chat("whole", "how do I reach you", "en")
	if a.Status != 200 || a.Text != want {
		t.Fatalf("whole answer %d %q, want %q", a.Status, a.Text, want)
	}
	for len(asked) > 0 {
		<-asked
	}
	sc.chat("whole", "thanks", "en")
	if h := <-asked; len(h) != 3 || h[1].Content != want {
		t.Fatalf("the next turn is sent the history %v, want the redacted answer in it", h)
	}
	sc.s.Close()
	found := false
	for _, e := range readSpans(t, spans) {
		if strings.Contains(e.PromptExcerpt, "help@example.jp") {
			t.Fatalf("span %s kept the address", e.Name)
		}
		found = found || e.Name == "guard_answer" && e.Outcome.ErrorCode == "guardrail_checked:phone,email"
	}
	if !found {
		t.Error("no guard_answer span names what was redacted")
	}
}

// An answer that starts with a card number to block gets the redirect
// answer; one that reaches it mid-stream ends with an error frame, the
// card never sent.
func TestAnswersAreBlockedBeforeTheFinding(t *testing.T) {
	t.Run("before the first byte", func(t *testing.T) {
		sc, _, _ := guardedAnswers(t, guardrail.Config{Card: guardrail.Block}, "4111 1111 1111 1111 is the card on file.")
		a := sc.chat("u", "which card do I use", "en")
		if a.Status != 200 || !a.Degraded || a.Text != fallback.Redirect("en") {
			t.Fatalf("answer %+v, want the redirect message, degraded", a)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		long := strings.Repeat("One Piece is a long-running pirate adventure. ", 100)
		sc, _, _ := guardedAnswers(t, guardrail.Config{Card: guardrail.Block}, long, "Your card 4111 1111 ", "1111 1111 was used.")
		frames := sseFrames(t, sc.srv.URL, "streamer", "tell me about my order", "en")
		var text strings.Builder
		for _, f := range frames {
			if f.Type == stream.TypeChunk {
				text.WriteString(f.Chunk.Text)
			}
		}
		last := frames[len(frames)-1]
		if strings.Contains(text.String(), "4111") || !strings.HasPrefix(text.String(), "One Piece") ||
			last.Type != stream.TypeError || last.Error.Code != "answer_withheld" {
			t.Fatalf("streamed %d bytes ending %+v; want the prose, no card, and an answer_withheld error frame", text.Len(), last)
		}
	})
}
