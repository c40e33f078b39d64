package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
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
	fmt.Fprintf(conn, "POST /v1/chat HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-User-Id: slow\r\nContent-Length: %d\r\n\r\n", len(body))
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
// show, naming what is served, and a vendor route asked with another
// method a JSON 405; the gateway's own /v1 routes still answer.
func TestUnknownAPIPathsAnswerJSON(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	for _, path := range []string{"/v1/audio/speech", "/v1/responses/resp_1/cancel", "/v1/messages/batches"} {
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
			!strings.Contains(body.Error.Message, path) || !strings.Contains(body.Error.Message, "/v1/chat/completions") ||
			!strings.Contains(body.Error.Message, "POST /v1/responses") {
			t.Fatalf("POST %s: %d %+v (%v); want a JSON 404 naming what is served", path, resp.StatusCode, body, err)
		}
	}
	// Another method on a vendor route: a JSON 405 naming the method to use.
	for _, tt := range []struct{ method, path, allow string }{
		{"GET", "/v1/embeddings", "POST"}, {"PUT", "/v1/chat/completions", "POST"}, {"GET", "/v1/responses", "POST"},
		{"PUT", "/v1/responses/resp_1", "GET, DELETE"}, {"GET", "/v1/messages", "POST"},
		{"GET", "/v1/messages/count_tokens", "POST"}, {"DELETE", "/v1/models", "GET"},
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Type, Message string }
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || err != nil || resp.Header.Get("Allow") != tt.allow ||
			body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, "use "+tt.allow) {
			t.Fatalf("%s %s: %d, Allow %q, %+v (%v); want a JSON 405 naming %s", tt.method, tt.path, resp.StatusCode,
				resp.Header.Get("Allow"), body, err, tt.allow)
		}
	}
	if resp, _ := do(t, "POST", srv.URL+"/v1/chat", `{"sessionId":"s","message":"hello"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat: %d", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", srv.URL+"/v1/batch/none", ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /v1/batch/none: %d; want the batch route's own 404", resp.StatusCode)
	}
	// Outside /v1/ too, and other methods on the OpenAI door's routes: JSON,
	// never Go's plain text; the chat page is still a page.
	for _, tt := range []struct{ method, path string }{
		{"POST", "/nothing"}, {"GET", "/nothing.html"}, {"POST", "/"}, {"POST", "/guardrail/gr-1/version/1/apply"},
		{"POST", "/async-invoke"}, {"GET", "/v1/chat/completions"}, {"POST", "/v1/models"}, {"DELETE", "/v1/models/sonnet"},
		{"GET", "/v1/embeddings"},
	} {
		req, _ := http.NewRequest(tt.method, srv.URL+tt.path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error struct{ Message string } }
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed || err != nil || body.Error.Message == "" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Fatalf("%s %s: %d %s %+v (%v); want a JSON 404 or 405 with a message", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
		}
	}
	page, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(page.Body)
	page.Body.Close()
	if page.StatusCode != http.StatusOK || !strings.Contains(string(html), "<html") {
		t.Fatalf("GET /: %d; want the chat page", page.StatusCode)
	}
	// An AWS SDK's call of an operation fmgate does not serve gets
	// Bedrock's shape, which the SDK raises as its own exception.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/guardrail/gr-1/version/1/apply", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Amz-Date", "20260101T000000Z")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var bedrockBody struct{ Message string }
	err = json.NewDecoder(resp.Body).Decode(&bedrockBody)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Amzn-ErrorType") != "UnknownOperationException" || err != nil ||
		!strings.Contains(bedrockBody.Message, "/guardrail/") {
		t.Fatalf("signed ApplyGuardrail: %d %s %+v (%v); want Bedrock's UnknownOperationException", resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), bedrockBody, err)
	}
}

// TestHostIsChecked: a page on a name rebound to the gateway's address
// (DNS rebinding) cannot reach a demo gateway, which trusts X-User-Id:
// without server.allowedHosts the demo profile answers loopback names only,
// a gateway with API keys any name, and with server.allowedHosts only the
// names it lists. Probes are answered whatever the host.
func TestHostIsChecked(t *testing.T) {
	demo := fastConfig()
	keyed := fastConfig()
	keyed.Auth.Keys = map[string]config.Caller{"sk-1": {UserID: "u1"}}
	listed := fastConfig()
	listed.Server.AllowedHosts = []string{"gw.example.com", "*.shop.example", "[::1]"}
	tests := []struct {
		name string
		cfg  config.Config
		host string
		path string
		want int
	}{
		{"demo: localhost", demo, "localhost:8080", "/v1/chat", 200},
		{"demo: loopback address", demo, "127.0.0.1:8080", "/v1/chat", 200},
		{"demo: IPv6 loopback", demo, "[::1]:8080", "/v1/chat", 200},
		{"demo: a .localhost name", demo, "app.localhost", "/v1/chat", 200},
		{"demo: upper case", demo, "LOCALHOST:8080", "/v1/chat", 200},
		{"demo: a rebound name", demo, "rebind.evil.example:8080", "/v1/chat", 421},
		{"demo: a rebound name on the WebSocket", demo, "rebind.evil.example", "/ws", 421},
		{"demo: a name ending in localhost", demo, "evillocalhost", "/v1/chat", 421},
		{"demo: another address", demo, "10.0.0.5:8080", "/", 421},
		{"demo: no host", demo, "", "/v1/chat", 421},
		{"demo: liveness by address", demo, "10.0.0.5:8080", "/healthz", 200},
		{"demo: readiness by address", demo, "10.0.0.5:8080", "/readyz", 200},
		{"keys: any name", keyed, "gw.example.com", "/v1/chat", 200},
		{"listed: the name", listed, "gw.example.com:443", "/v1/chat", 200},
		{"listed: a pattern", listed, "www.shop.example", "/v1/chat", 200},
		{"listed: an IPv6 address", listed, "[::1]:8080", "/v1/chat", 200},
		{"listed: localhost is not listed", listed, "localhost:8080", "/v1/chat", 421},
		{"listed: another name", listed, "evil.example", "/admin/breakers", 421},
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			req.Host = tt.host
			rec := httptest.NewRecorder()
			guardHost(tt.cfg.HostPatterns(), ok).ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("Host %q %s: status %d, want %d", tt.host, tt.path, rec.Code, tt.want)
			}
			if tt.want == http.StatusMisdirectedRequest {
				var e errorReply
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code != "misdirected_request" || !strings.Contains(e.Error.Message, "server.allowedHosts") {
					t.Fatalf("refusal %q, want misdirected_request naming server.allowedHosts", rec.Body)
				}
			}
		})
	}

	// The running demo gateway: its own test address passes, a rebound
	// name does not.
	_, srv := startServer(t, demo)
	if resp, e := do(t, "POST", srv.URL+"/v1/chat", `{"sessionId":"s","message":"hello","locale":"en"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat at %s: %d %+v", srv.URL, resp.StatusCode, e)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(`{"sessionId":"s","message":"hello","locale":"en"}`))
	req.Host = "rebind.evil.example"
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "victim")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("POST /v1/chat for a rebound name: %d, want 421", resp.StatusCode)
	}
}
