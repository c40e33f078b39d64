package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

type errorReply struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func do(t *testing.T, method, url, body string) (*http.Response, errorReply) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if method != "GET" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-User-Id", "edge-user")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e errorReply
	_ = json.NewDecoder(resp.Body).Decode(&e)
	return resp, e
}

// TestBadPathsAre400: a path that is not UTF-8 once unescaped is the
// client's mistake, on the pages and the dashboard alike.
func TestBadPathsAre400(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	for _, p := range []string{"/%ff", "/dashboard/%ff", "/v1/batch/%ff", "/dashboard/app.js%c3"} {
		resp, e := do(t, "GET", srv.URL+p, "")
		if resp.StatusCode != http.StatusBadRequest || e.Error.Code != "invalid_request" {
			t.Errorf("GET %s: %d %+v, want 400 invalid_request", p, resp.StatusCode, e)
		}
	}
}

// TestWrongMethodIsJSON405: every method-restricted route answers another
// method with a JSON 405 and the Allow header, not the pages' 404.
func TestWrongMethodIsJSON405(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	tests := []struct {
		method, path, allow string
	}{
		{"GET", "/v1/chat", "POST"},
		{"PUT", "/v1/chat", "POST"},
		{"GET", "/v1/batch", "POST"},
		{"DELETE", "/v1/batch/b-1", "GET, HEAD"},
		{"POST", "/ws", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
		{"POST", "/metrics", "GET, HEAD"},
	}
	for _, tt := range tests {
		resp, e := do(t, tt.method, srv.URL+tt.path, "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tt.allow || e.Error.Code != "method_not_allowed" {
			t.Errorf("%s %s: %d Allow %q %+v, want 405 Allow %q", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), e, tt.allow)
		}
	}
}

// TestJSONErrorsNameNoServerTypes: a body of the wrong shape gets a message
// in the client's terms (JSON's), never the server's Go type names.
func TestJSONErrorsNameNoServerTypes(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	tests := []struct {
		body, want string
	}{
		{`null`, "body is null"},
		{`[1,2]`, "must be a JSON object, not an array"},
		{`"hello"`, "must be a JSON object, not a string"},
		{`{"message":5,"sessionId":"s"}`, `field "message" must be a string, not a number`},
		{`{"message":"hi","sessionId":"s","stream":"yes"}`, `field "stream" must be true or false, not a string`},
	}
	for _, tt := range tests {
		for _, path := range []string{"/v1/chat", "/v1/batch"} {
			resp, e := do(t, "POST", srv.URL+path, tt.body)
			if path == "/v1/batch" && strings.Contains(tt.body, "message") {
				continue // a chat body is a batch body with unknown fields
			}
			if resp.StatusCode != 400 || !strings.Contains(e.Error.Message, tt.want) || strings.Contains(e.Error.Message, "gateway.") {
				t.Errorf("POST %s %s: %d %q, want 400 saying %q", path, tt.body, resp.StatusCode, e.Error.Message, tt.want)
			}
		}
	}
}

// TestSlowBodyIsCut: a client sending its body a byte at a time is cut at
// server.bodyTimeout with a 408, while a normal request on the same server
// is served.
func TestSlowBodyIsCut(t *testing.T) {
	cfg := fastConfig()
	cfg.Server.BodyTimeout = 300 * time.Millisecond
	_, srv := startServer(t, cfg)
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"sessionId":"s","message":"hello","locale":"en"}`
	fmt.Fprintf(conn, "POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-User-Id: slow\r\nContent-Length: %d\r\n\r\n", len(body))
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 100 ms, as a slow-loris client does, then nothing
		for i := 0; i < len(body)/2; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("the slow body was never cut: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "request_timeout") {
		t.Fatalf("slow body: %d %s, want 408 request_timeout", resp.StatusCode, b)
	}
	if st, a := jsonTurn(t, srv, "fast", "hello", 10*time.Second); st != http.StatusOK || a.Text == "" {
		t.Fatalf("a normal turn: %d %+v", st, a)
	}
}

// TestBodyDeadlineSparesLongStreams: the body deadline ends with the body,
// so an SSE answer streaming for longer than server.bodyTimeout is whole.
func TestBodyDeadlineSparesLongStreams(t *testing.T) {
	cfg := fastConfig()
	cfg.Server.BodyTimeout = 200 * time.Millisecond
	for name, st := range cfg.Sim.Models {
		st.TokensPerSecond = 40 // an answer of a second or more
		cfg.Sim.Models[name] = st
	}
	_, srv := startServer(t, cfg)
	start := time.Now()
	frames := sseTurn(t, srv, "long-sse", "Recommend a long fantasy manga series and explain why", 20*time.Second)
	if last := frames[len(frames)-1]; last.Type != "done" {
		t.Fatalf("frames %+v, want a whole answer", frames)
	}
	if took := time.Since(start); took < cfg.Server.BodyTimeout {
		t.Fatalf("the answer took %v, shorter than the body deadline: the test proves nothing", took)
	}
}

// A path under /v1/ that fmgate does not serve gets a JSON 404 an SDK can
// show, naming what is served; the gateway's own /v1 routes still answer.
func TestUnknownAPIPathsAnswerJSON(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	for _, path := range []string{"/v1/embeddings", "/v1/responses", "/v1/messages/count_tokens"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Type, Message string }
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || err != nil || body.Error.Type != "not_found_error" ||
			!strings.Contains(body.Error.Message, path) || !strings.Contains(body.Error.Message, "/v1/chat/completions") {
			t.Fatalf("POST %s: %d %+v (%v); want a JSON 404 naming what is served", path, resp.StatusCode, body, err)
		}
	}
	if resp, _ := do(t, "POST", srv.URL+"/v1/chat", `{"sessionId":"s","message":"hello"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", srv.URL+"/v1/batch/none", ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /v1/batch/none: %d; want the batch route's own 404", resp.StatusCode)
	}
}
