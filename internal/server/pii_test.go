package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/events"
)

// syncBuffer is a log destination safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPIINeverLeaves injects probe PII — user ids, session ids, e-mail
// addresses, a phone number and a card number — through every entry point
// (JSON chat, SSE, WebSocket, batch, refused requests, fallback turns) and
// asserts that none of it appears in any event, log line, metric label,
// live figure, cost report or file the gateway writes.
func TestPIINeverLeaves(t *testing.T) {
	dir := t.TempDir()
	cfg := quickConfig()
	cfg.EventStore.Path = filepath.Join(dir, "events.db")
	cfg.Events.WAL.Dir = filepath.Join(dir, "wal")
	cfg.Events.Sinks.JSONL.Path = filepath.Join(dir, "jsonl", "events.jsonl")
	logs := &syncBuffer{}
	log := slog.New(events.NewLogHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	s, err := New(context.Background(), cfg, Options{Log: log, Catalog: sharedCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler(testAdminToken))
	defer srv.Close()

	const (
		email = "leak.probe@example.net"
		phone = "090-8765-4321"
		card  = "4242 4242 4242 4242"
	)
	message := func(n int) string {
		return fmt.Sprintf("Hi, I'm writing from %s, phone %s, card %s — recommend manga #%d please", email, phone, card, n)
	}
	post := func(path, user, body string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if user != "" {
			req.Header.Set("X-User-Id", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	jsonBody := func(v map[string]any) string { b, _ := json.Marshal(v); return string(b) }

	// JSON chat, user in the header; SSE, user in the body.
	if st := post("/v1/chat", "pii-json-user@example.com", jsonBody(map[string]any{
		"sessionId": "pii-session-json@example.com", "message": message(1), "locale": "en"})); st != 200 {
		t.Fatalf("JSON chat: %d", st)
	}
	if st := post("/v1/chat", "", jsonBody(map[string]any{"userId": "pii-sse-user@example.com",
		"sessionId": "pii-session-sse", "message": message(2), "locale": "en", "stream": true})); st != 200 {
		t.Fatalf("SSE chat: %d", st)
	}
	// WebSocket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	frame, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": "pii-req-" + phone,
		"sessionId": "pii-session-ws", "userId": "pii-ws-user@example.com", "message": message(3), "locale": "en"})
	if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
		t.Fatal(err)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("ws: %v", err)
		}
		if strings.Contains(string(data), `"type":"done"`) {
			break
		}
	}
	c.Close(websocket.StatusNormalClosure, "")
	// Batch.
	if st := post("/v1/batch", "pii-batch-user@example.com", jsonBody(map[string]any{"messages": []map[string]string{
		{"sessionId": "pii-session-batch", "message": message(4), "locale": "en"}}})); st != http.StatusAccepted {
		t.Fatalf("batch: %d", st)
	}
	// Refused requests: an unsupported locale and an empty session.
	post("/v1/chat", "pii-refused-user@example.com", jsonBody(map[string]any{"sessionId": "s", "message": message(5), "locale": "xx"}))
	post("/v1/chat", "pii-refused-user@example.com", jsonBody(map[string]any{"message": message(6), "locale": "en"}))
	// Fallback turns: primary down, then both down (cache, FAQ, graceful).
	adminPut(t, srv, "/admin/sim/sonnet", `{"outage":true}`)
	post("/v1/chat", "pii-fallback-user@example.com", jsonBody(map[string]any{"sessionId": "pii-session-fb", "message": message(7), "locale": "en"}))
	adminPut(t, srv, "/admin/sim/haiku", `{"outage":true}`)
	post("/v1/chat", "pii-fallback-user@example.com", jsonBody(map[string]any{"sessionId": "pii-session-fb", "message": message(7), "locale": "en"}))

	// Wait for the batch job and for the spans to be stored.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(adminGet(t, srv.URL+"/admin/cost?by=turn&from=-1h"), `"turns"`) ||
		!strings.Contains(adminGet(t, srv.URL+"/metrics"), `route="batch"`) {
		if time.Now().After(deadline) {
			t.Fatal("the batch turn never reached the metrics and the store")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What the gateway exposes...
	surfaces := map[string]string{
		"GET /metrics":             adminGet(t, srv.URL+"/metrics"),
		"GET /admin/live/snapshot": adminGet(t, srv.URL+"/admin/live/snapshot"),
		"GET /admin/cost?by=user":  adminGet(t, srv.URL+"/admin/cost?by=user&from=-1h"),
		"GET /admin/cost?by=turn":  adminGet(t, srv.URL+"/admin/cost?by=turn&from=-1h"),
	}
	// ...and, after a clean stop, every file it wrote, and its logs.
	srv.Close()
	s.Close()
	files := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		surfaces["file "+strings.TrimPrefix(path, dir)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	surfaces["logs"] = logs.String()
	if files < 2 || !strings.Contains(surfaces["logs"], "trace_id") {
		t.Fatalf("audit saw %d files and logs without trace ids; the probes were not exercised", files)
	}

	probes := []string{"pii-", "example.com", "example.net", "leak.probe", "8765-4321", "87654321", "4242 4242", "4242424242424242", "recommend manga #"}
	for where, text := range surfaces {
		for _, p := range probes {
			if i := strings.Index(text, p); i >= 0 {
				lo, hi := max(0, i-80), min(len(text), i+80)
				t.Errorf("probe %q found in %s: …%q…", p, where, text[lo:hi])
			}
		}
	}
}
