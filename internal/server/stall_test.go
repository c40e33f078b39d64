package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/config"
)

// wireFrame is a frame of the contract as a client reads it.
type wireFrame struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Tier     string `json:"tier"`
	Degraded bool   `json:"degraded"`
	Code     string `json:"code"`
	Message  string `json:"message"`
}

// wsTurn sends one message on a new WebSocket and returns its frames up to
// done or error. A turn that does not end within limit fails the test.
func wsTurn(t *testing.T, srv *httptest.Server, user, message string, limit time.Duration) []wireFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"X-User-Id": {user}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	b, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": "r1", "sessionId": "s-" + user, "message": message, "locale": "en"})
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	var frames []wireFrame
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("WebSocket turn did not end within %v: %v (frames so far: %+v)", limit, err, frames)
		}
		var f wireFrame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		if f.Type == "heartbeat" {
			continue
		}
		frames = append(frames, f)
		if f.Type == "done" || f.Type == "error" {
			return frames
		}
	}
}

// sseTurn posts one streaming /v1/chat and returns its frames up to done or
// error.
func sseTurn(t *testing.T, srv *httptest.Server, user, message string, limit time.Duration) []wireFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	body := fmt.Sprintf(`{"sessionId":"s-%s","message":%q,"locale":"en","stream":true}`, user, message)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var frames []wireFrame
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var f wireFrame
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		if f.Type == "heartbeat" {
			continue
		}
		frames = append(frames, f)
		if f.Type == "done" || f.Type == "error" {
			return frames
		}
	}
	t.Fatalf("SSE turn did not end within %v: %v (frames so far: %+v)", limit, sc.Err(), frames)
	return nil
}

// jsonTurn posts one /v1/chat and returns its status and answer.
func jsonTurn(t *testing.T, srv *httptest.Server, user, message string, limit time.Duration) (int, answer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	body := fmt.Sprintf(`{"sessionId":"s-%s","message":%q,"locale":"en"}`, user, message)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("JSON turn did not end within %v: %v", limit, err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, a
}

// stallConfig is a quick simulator whose models both stall after a few
// tokens, with a short idle deadline so the test runs in about a second.
func stallConfig() config.Config {
	cfg := fastConfig()
	for name, st := range cfg.Sim.Models {
		st.StallAfterTokens = 5
		cfg.Sim.Models[name] = st
	}
	cfg.Deadline.Idle = 300 * time.Millisecond
	return cfg
}

// TestStalledModelEndsEveryEntryPoint: a model that stops sending tokens
// part-way ends the turn on every front door instead of hanging it. Streams
// that already showed text end with an error frame; the JSON answer and the
// batch item, which showed nothing yet, fall back to a degraded answer.
func TestStalledModelEndsEveryEntryPoint(t *testing.T) {
	_, srv := startServer(t, stallConfig())
	const limit = 10 * time.Second
	const msg = "Recommend a long fantasy manga series and explain why"

	t.Run("websocket", func(t *testing.T) {
		frames := wsTurn(t, srv, "ws-user", msg, limit)
		last := frames[len(frames)-1]
		if len(frames) < 2 || frames[0].Type != "chunk" || last.Type != "error" || last.Code != "upstream_failed" {
			t.Fatalf("frames %+v, want chunks then an upstream_failed error frame", frames)
		}
	})
	t.Run("sse", func(t *testing.T) {
		frames := sseTurn(t, srv, "sse-user", msg, limit)
		last := frames[len(frames)-1]
		if len(frames) < 2 || frames[0].Type != "chunk" || last.Type != "error" || last.Code != "upstream_failed" {
			t.Fatalf("frames %+v, want chunks then an upstream_failed error frame", frames)
		}
	})
	t.Run("json", func(t *testing.T) {
		status, a := jsonTurn(t, srv, "json-user", msg, limit)
		if status != http.StatusOK || !a.Degraded || a.Text == "" {
			t.Fatalf("status %d %+v, want a degraded 200 from the fallback cascade", status, a)
		}
	})
	t.Run("batch", func(t *testing.T) {
		id := submitBatch(t, srv, "batch-user", []string{msg, msg})
		st := waitBatch(t, srv, "batch-user", id, limit)
		if st.Completed+st.Failed != 2 {
			t.Fatalf("batch %+v, want both items ended", st)
		}
	})
}

// TestMaxDurationCancelsUpstream: stream.maxDuration cancels the model call
// itself, not only the next write: a model that falls silent just before the
// cap (inside deadline.idle) is cut off at the cap with a stream_timeout
// error frame instead of holding the stream open.
func TestMaxDurationCancelsUpstream(t *testing.T) {
	cfg := fastConfig()
	for name, st := range cfg.Sim.Models {
		st.TokensPerSecond = 20 // a token every 50 ms...
		st.StallAfterTokens = 4 // ...then silence from about 250 ms
		cfg.Sim.Models[name] = st
	}
	cfg.Stream.MaxDuration = 700 * time.Millisecond
	cfg.Deadline.Idle = 650 * time.Millisecond
	_, srv := startServer(t, cfg)
	frames := wsTurn(t, srv, "long-user", "Recommend a long fantasy manga series and explain why in detail", 10*time.Second)
	last := frames[len(frames)-1]
	if last.Type != "error" || last.Code != "stream_timeout" {
		t.Fatalf("frames %+v, want an error frame stream_timeout", frames)
	}
}

// A client taking its answer whole sees nothing while the model streams:
// when the primary stalls mid-answer, the turn moves to the next tier once
// the first-byte budget is spent, instead of holding the client for the
// whole idle bound and then falling to a canned answer.
func TestAStallMovesAWholeAnswerToTheNextTier(t *testing.T) {
	cfg := fastConfig()
	st := cfg.Sim.Models["sonnet"]
	st.StallAfterTokens = 5
	cfg.Sim.Models["sonnet"] = st
	cfg.Deadline.Idle = 30 * time.Second // far beyond the test's limit: only the first-byte rule can end the stall
	_, srv := startServer(t, cfg)
	status, a := jsonTurn(t, srv, "json-stall", "Recommend a long fantasy manga series and explain why", 20*time.Second)
	if status != http.StatusOK || a.Tier != "haiku" || a.Text == "" {
		t.Fatalf("status %d %+v; want haiku's answer after sonnet stalled", status, a)
	}
}
