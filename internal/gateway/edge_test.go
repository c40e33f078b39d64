package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/config"
)

// TestWebSocketOversizeFrameKeepsConnection: a frame over the limit gets a
// too_large error frame and the connection stays open, as bad input does.
func TestWebSocketOversizeFrameKeepsConnection(t *testing.T) {
	_, srv := newTestGateway(t, both(&scriptProvider{answer: "ok "}), nil)
	c := dial(t, srv)
	big := `{"action":"sendMessage","requestId":"big","sessionId":"s","message":"` + strings.Repeat("a", 1<<20) + `"}`
	if err := c.Write(context.Background(), websocket.MessageText, []byte(big)); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, c); f.Type != "error" || f.Code != CodeTooLarge || !strings.Contains(f.Message, "bytes") {
		t.Fatalf("oversize frame: %+v, want a too_large error frame", f)
	}
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "ok", "sessionId": "s", "message": "hello"})
	if _, _, done := readAnswer(t, c); done.Type != "done" {
		t.Fatalf("after the oversize frame: %+v", done)
	}
}

// TestWebSocketErrorsNameNoServerTypes: a frame of the wrong JSON shape is
// explained in JSON's terms.
func TestWebSocketErrorsNameNoServerTypes(t *testing.T) {
	_, srv := newTestGateway(t, both(&scriptProvider{answer: "ok "}), nil)
	c := dial(t, srv)
	for _, give := range []string{`[1]`, `null`, `{"action":"sendMessage","requestId":"r","message":7}`} {
		if err := c.Write(context.Background(), websocket.MessageText, []byte(give)); err != nil {
			t.Fatal(err)
		}
		f := readFrame(t, c)
		if f.Type != "error" || f.Code != CodeInvalidRequest || strings.Contains(f.Message, "gateway.") || strings.Contains(f.Message, "clientFrame") {
			t.Fatalf("%s: %+v", give, f)
		}
	}
}

// TestStalledStreamIsCancelledUpstream: a provider that stops sending after
// the first tokens has its call cancelled after deadline.idle and the client
// gets an error frame, whichever provider it is.
func TestStalledStreamIsCancelledUpstream(t *testing.T) {
	p := &stallProvider{tokens: 3, canceled: make(chan struct{}, 1)}
	_, srv := newTestGateway(t, both(p), func(c *config.Config) { c.Deadline.Idle = 100 * time.Millisecond })
	c := dial(t, srv)
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "r", "sessionId": "s", "message": "hello"})
	_, chunks, last := readAnswer(t, c)
	if len(chunks) == 0 || last.Type != "error" || last.Code != CodeUpstream {
		t.Fatalf("chunks %d, last %+v; want text, then an upstream_failed error frame", len(chunks), last)
	}
	select {
	case <-p.canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled upstream call was never cancelled")
	}
}
