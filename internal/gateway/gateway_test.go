package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// scriptProvider streams a fixed answer word by word, or fails as told.
type scriptProvider struct {
	answer string
	delay  time.Duration // between deltas
	fail   error         // returned before the first delta
	failAt int           // fail after this many deltas (0 = never)

	mu       sync.Mutex
	calls    int
	canceled chan time.Time
}

func (p *scriptProvider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.Stream(ctx, req, func(string) error { return nil })
}

func (p *scriptProvider) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	resp := &provider.Response{ModelID: "test-" + req.Model, Usage: provider.Usage{InputTokens: 10}}
	if p.fail != nil {
		return resp, p.fail
	}
	for i, w := range strings.SplitAfter(strings.TrimSuffix(p.answer, " "), " ") {
		if p.failAt > 0 && i == p.failAt {
			return resp, &provider.Error{Kind: provider.KindUnavailable, Model: req.Model}
		}
		if p.delay > 0 {
			select {
			case <-ctx.Done():
				if p.canceled != nil {
					p.canceled <- time.Now()
				}
				return resp, ctx.Err()
			case <-time.After(p.delay):
			}
		}
		if err := emit(w); err != nil {
			return resp, err
		}
		resp.Text += w
		resp.Usage.OutputTokens++
	}
	return resp, nil
}

func newTestGateway(t *testing.T, providers map[string]provider.Provider, edit func(*config.Config)) (*Gateway, *httptest.Server) {
	t.Helper()
	cfg := config.Default()
	if edit != nil {
		edit(&cfg)
	}
	g, err := New(cfg, Deps{Providers: providers})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("admin-secret", nil))
	t.Cleanup(srv.Close)
	return g, srv
}

func both(p provider.Provider) map[string]provider.Provider {
	return map[string]provider.Provider{"sonnet": p, "haiku": p}
}

type frame struct {
	Type              string          `json:"type"`
	RequestID         string          `json:"requestId"`
	Index             int             `json:"index"`
	Text              string          `json:"text"`
	Tier              string          `json:"tier"`
	Degraded          bool            `json:"degraded"`
	Confidence        float64         `json:"confidence"`
	Tokens            map[string]int  `json:"tokens"`
	CostUSD           float64         `json:"costUsd"`
	Metrics           map[string]any  `json:"metrics"`
	TraceID           string          `json:"traceId"`
	Code              string          `json:"code"`
	Message           string          `json:"message"`
	RetryAfterSeconds int             `json:"retryAfterSeconds"`
	Raw               json.RawMessage `json:"-"`
}

func dial(t *testing.T, srv *httptest.Server) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

func readFrame(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		if f.Type != "heartbeat" {
			return f
		}
	}
}

func send(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// readAnswer reads frames of one request until done or error.
func readAnswer(t *testing.T, c *websocket.Conn) (text string, chunks []frame, last frame) {
	t.Helper()
	for {
		f := readFrame(t, c)
		switch f.Type {
		case "chunk":
			if len(chunks) > 0 && f.Index != chunks[len(chunks)-1].Index+1 {
				t.Fatalf("chunk index %d follows %d", f.Index, chunks[len(chunks)-1].Index)
			}
			chunks = append(chunks, f)
			text += f.Text
		case "done", "error":
			return text, chunks, f
		default:
			t.Fatalf("unexpected frame %+v", f)
		}
	}
}

func TestWebSocketStreamsAnswerThenDone(t *testing.T) {
	p := &scriptProvider{answer: "ワンピース は 人気 です。", delay: 30 * time.Millisecond}
	_, srv := newTestGateway(t, both(p), nil)
	c := dial(t, srv)
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "r1", "sessionId": "s1", "message": "おすすめは？", "locale": "ja"})
	text, chunks, done := readAnswer(t, c)
	if done.Type != "done" {
		t.Fatalf("ended with %+v", done)
	}
	if text != p.answer {
		t.Fatalf("streamed %q, want %q", text, p.answer)
	}
	if len(chunks) < 2 {
		t.Fatalf("answer arrived in %d chunk(s); want progressive chunks", len(chunks))
	}
	if done.RequestID != "r1" || done.Tier != "sonnet" || done.Degraded || done.Confidence != 1.0 {
		t.Fatalf("done %+v", done)
	}
	if done.Tokens["input"] != 10 || done.Tokens["output"] != 4 {
		t.Fatalf("tokens %v", done.Tokens)
	}
	wantCost := (10*3.0 + 4*15.0) / 1e6
	if diff := done.CostUSD - wantCost; diff > 1e-12 || diff < -1e-12 {
		t.Fatalf("cost %v, want %v", done.CostUSD, wantCost)
	}
	if int(done.Metrics["chunks"].(float64)) != len(chunks) {
		t.Fatalf("done says %v chunks, got %d", done.Metrics["chunks"], len(chunks))
	}
	for _, k := range []string{"ttft_ms", "total_ms", "tps"} {
		if _, ok := done.Metrics[k]; !ok {
			t.Fatalf("done metrics lack %s: %v", k, done.Metrics)
		}
	}
	if done.TraceID == "" {
		t.Fatal("done has no traceId")
	}
}

func TestWebSocketBadInputKeepsConnection(t *testing.T) {
	p := &scriptProvider{answer: "ok "}
	_, srv := newTestGateway(t, both(p), func(c *config.Config) { c.Server.MaxMessageBytes = 64 })
	c := dial(t, srv)
	tests := []struct {
		name     string
		give     []byte
		binary   bool
		wantCode string
	}{
		{name: "malformed json", give: []byte(`{"action":`), wantCode: CodeInvalidRequest},
		{name: "unknown action", give: []byte(`{"action":"fly","requestId":"x"}`), wantCode: CodeInvalidRequest},
		{name: "missing message", give: []byte(`{"action":"sendMessage","requestId":"x1","sessionId":"s"}`), wantCode: CodeInvalidRequest},
		{name: "oversized message", give: []byte(`{"action":"sendMessage","requestId":"x2","sessionId":"s","message":"` + strings.Repeat("あ", 30) + `"}`), wantCode: CodeTooLarge},
		{name: "invalid utf8", give: []byte("{\"action\":\"sendMessage\",\"requestId\":\"x3\",\"sessionId\":\"s\",\"message\":\"\xc3\x28\"}"), wantCode: CodeInvalidRequest},
		{name: "binary frame", give: []byte{1, 2, 3}, binary: true, wantCode: CodeInvalidRequest},
		{name: "unsupported locale", give: []byte(`{"action":"sendMessage","requestId":"x4","sessionId":"s","message":"hi","locale":"fr"}`), wantCode: CodeInvalidRequest},
	}
	for _, tt := range tests {
		typ := websocket.MessageText
		if tt.binary {
			typ = websocket.MessageBinary
		}
		if err := c.Write(context.Background(), typ, tt.give); err != nil {
			t.Fatal(err)
		}
		f := readFrame(t, c)
		if f.Type != "error" || f.Code != tt.wantCode || f.Message == "" {
			t.Fatalf("%s: got %+v, want error %s", tt.name, f, tt.wantCode)
		}
	}
	// The connection survived all of it.
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "ok", "sessionId": "s", "message": "hello"})
	if _, _, done := readAnswer(t, c); done.Type != "done" {
		t.Fatalf("after bad input: %+v", done)
	}
}

func TestWebSocketDuplicateRequestID(t *testing.T) {
	p := &scriptProvider{answer: "a b c d e f ", delay: 50 * time.Millisecond}
	_, srv := newTestGateway(t, both(p), nil)
	c := dial(t, srv)
	msg := map[string]string{"action": "sendMessage", "requestId": "same", "sessionId": "s", "message": "hello"}
	send(t, c, msg)
	send(t, c, msg)
	var dupSeen, doneSeen bool
	for !(dupSeen && doneSeen) {
		f := readFrame(t, c)
		switch {
		case f.Type == "error" && f.Code == CodeDuplicate:
			dupSeen = true
		case f.Type == "done":
			doneSeen = true
		case f.Type == "error":
			t.Fatalf("unexpected error %+v", f)
		}
	}
}

func TestDisconnectCancelsUpstream(t *testing.T) {
	p := &scriptProvider{answer: strings.Repeat("word ", 200), delay: 20 * time.Millisecond, canceled: make(chan time.Time, 1)}
	_, srv := newTestGateway(t, both(p), nil)
	c := dial(t, srv)
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "r", "sessionId": "s", "message": "hello"})
	if f := readFrame(t, c); f.Type != "chunk" {
		t.Fatalf("first frame %+v", f)
	}
	closed := time.Now()
	c.CloseNow()
	select {
	case at := <-p.canceled:
		t.Logf("upstream cancelled %v after the client disconnected", at.Sub(closed))
	case <-time.After(2 * time.Second):
		t.Fatal("upstream call still running 2s after the client disconnected")
	}
}

func TestFailureAfterFirstChunkEndsWithErrorFrame(t *testing.T) {
	p := &scriptProvider{answer: strings.Repeat("w ", 50), delay: 30 * time.Millisecond, failAt: 10}
	_, srv := newTestGateway(t, both(p), nil)
	c := dial(t, srv)
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "r", "sessionId": "s", "message": "hello"})
	_, chunks, last := readAnswer(t, c)
	if len(chunks) == 0 {
		t.Fatal("no chunk before the failure")
	}
	if last.Type != "error" || last.Code != CodeUpstream {
		t.Fatalf("stream ended with %+v, want an upstream_failed error frame", last)
	}
	if p.calls != 1 {
		t.Fatalf("provider called %d times; a stream that reached the client must not be retried", p.calls)
	}
}

func TestChatJSONAndSSE(t *testing.T) {
	p := &scriptProvider{answer: "Try One Piece.", delay: 5 * time.Millisecond}
	_, srv := newTestGateway(t, both(p), nil)

	resp, err := http.Post(srv.URL+"/v1/chat", "application/json", strings.NewReader(`{"sessionId":"s","message":"recommend something","locale":"en"}`))
	if err != nil {
		t.Fatal(err)
	}
	var got chatAnswer
	json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || got.Text != p.answer || got.Tier != "sonnet" || got.RequestID == "" || got.TraceID == "" || got.Usage.Output != 3 {
		t.Fatalf("status %d, answer %+v", resp.StatusCode, got)
	}

	resp, err = http.Post(srv.URL+"/v1/chat", "application/json", strings.NewReader(`{"sessionId":"s","message":"recommend something","locale":"en","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var text string
	var done frame
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		var f frame
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &f); err != nil {
			t.Fatal(err)
		}
		if f.Type == "chunk" {
			text += f.Text
		}
		if f.Type == "done" {
			done = f
		}
	}
	if text != p.answer || done.Tier != "sonnet" {
		t.Fatalf("sse text %q done %+v", text, done)
	}
}

func TestChatErrors(t *testing.T) {
	p := &scriptProvider{answer: "x "}
	_, srv := newTestGateway(t, both(p), nil)
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
	}{
		{"malformed", `{"message":`, 400, CodeInvalidRequest},
		{"empty message", `{"sessionId":"s","message":"  "}`, 400, CodeInvalidRequest},
		{"unknown field", `{"sessionId":"s","message":"hi","temperature":2}`, 400, CodeInvalidRequest},
		{"too large", `{"sessionId":"s","message":"` + strings.Repeat("a", 9000) + `"}`, 413, CodeTooLarge},
	}
	for _, tt := range tests {
		resp, err := http.Post(srv.URL+"/v1/chat", "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		var eb errorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != tt.wantStatus || eb.Error.Code != tt.wantCode || eb.Error.Message == "" {
			t.Errorf("%s: status %d body %+v", tt.name, resp.StatusCode, eb)
		}
	}
}

func TestModelFailureFallsBackToGracefulMessage(t *testing.T) {
	p := &scriptProvider{fail: &provider.Error{Kind: provider.KindUnavailable, Model: "x"}}
	_, srv := newTestGateway(t, both(p), nil)
	resp, err := http.Post(srv.URL+"/v1/chat", "application/json", strings.NewReader(`{"sessionId":"s","message":"hello","locale":"en"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got chatAnswer
	json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != 200 || !got.Degraded || got.Tier == "sonnet" || got.Text == "" {
		t.Fatalf("status %d answer %+v: a failed model must give a degraded 200", resp.StatusCode, got)
	}
}

func TestDrainRefusesNewTurnsAndFinishesInFlight(t *testing.T) {
	p := &scriptProvider{answer: strings.Repeat("w ", 20), delay: 20 * time.Millisecond}
	g, srv := newTestGateway(t, both(p), nil)
	c := dial(t, srv)
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "r", "sessionId": "s", "message": "hello"})
	if f := readFrame(t, c); f.Type != "chunk" {
		t.Fatalf("first frame %+v", f)
	}
	drained := make(chan error, 1)
	go func() { drained <- g.Drain(context.Background()) }()
	for g.Ready() {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz %d while draining", resp.StatusCode)
	}
	resp, err = http.Post(srv.URL+"/v1/chat", "application/json", strings.NewReader(`{"sessionId":"s","message":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	var eb errorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != 503 || eb.Error.Code != CodeShuttingDown {
		t.Fatalf("new turn while draining: %d %+v", resp.StatusCode, eb)
	}
	if _, _, last := readAnswer(t, c); last.Type != "done" {
		t.Fatalf("in-flight stream ended with %+v", last)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}

func TestAdminNeedsToken(t *testing.T) {
	cfg := config.Default()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/ping", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("pong")) })
	g, err := New(cfg, Deps{Providers: both(&scriptProvider{}), AdminRoutes: mux})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("s3cret", nil))
	defer srv.Close()
	for _, tt := range []struct {
		auth string
		want int
	}{{"", 401}, {"Bearer wrong", 401}, {"Bearer s3cret", 200}} {
		req, _ := http.NewRequest("GET", srv.URL+"/admin/ping", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("auth %q: status %d, want %d", tt.auth, resp.StatusCode, tt.want)
		}
	}
}

var _ = errors.New

// goneOutput is a client that leaves just before the done frame.
type goneOutput struct{}

func (goneOutput) Write(string) error   { return nil }
func (goneOutput) Started() bool        { return true }
func (goneOutput) Discard()             {}
func (goneOutput) Finish(*Result) error { return errors.New("client gone") }
func (goneOutput) Fail(*Error) error    { return nil }

// A request id is the client's to choose and may carry anything: the log
// lines about a turn name it by its keyed hash only.
func TestLogsNameTheRequestByItsHash(t *testing.T) {
	var logs bytes.Buffer
	g, err := New(config.Default(), Deps{Providers: both(&scriptProvider{answer: "hello there"}),
		Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const id = "req-jane.doe@example.com"
	turn := &Turn{RequestID: id, SessionID: "s1", Message: "hello", Locale: "en", Route: "chat", Surface: "http", UserID: "u1"}
	if _, err := g.Run(context.Background(), turn, goneOutput{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "client gone before done") {
		t.Fatalf("no log line for the client that left: %s", logs.String())
	}
	if strings.Contains(logs.String(), "jane.doe") || !strings.Contains(logs.String(), `"request_id_hash":"`+turn.RequestHash+`"`) {
		t.Fatalf("logs = %s; want the request id hashed as %s", logs.String(), turn.RequestHash)
	}
}

// queueReserver holds every turn as a saturated quota queue would, until
// its context ends (or the test does).
type queueReserver struct{ waiting, release chan struct{} }

func (r queueReserver) Reserve(ctx context.Context, _ *Turn, _ string) (Lease, error) {
	r.waiting <- struct{}{}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.release:
		return nil, errors.New("test over")
	}
}

func TestDrainEndsTurnsWaitingForQuota(t *testing.T) {
	cfg := config.Default()
	cfg.Auth.Keys = map[string]config.Caller{"k-partner": {UserID: "partner", Priority: "P1"}} // a class that queues
	waiting := make(chan struct{}, 2)
	p := &scriptProvider{answer: "never sent"}
	release := make(chan struct{})
	g, err := New(cfg, Deps{Providers: both(p), Reserver: queueReserver{waiting: waiting, release: release}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("admin-secret", nil))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: lets srv.Close return

	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	c, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer k-partner"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "ws", "sessionId": "s", "message": "hello"})
	jsonDone := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(`{"sessionId":"s2","message":"hello"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer k-partner")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		jsonDone <- resp
	}()
	for range 2 {
		select {
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatal("turns never reached the quota step")
		}
	}

	// The drain would wait its whole timeout for the queued turns; they end at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := g.Drain(ctx); err != nil {
		t.Fatalf("drain: %v after %s", err, time.Since(start))
	}
	_, chunks, last := readAnswer(t, c)
	if len(chunks) != 0 || last.Type != "error" || last.Code != CodeShuttingDown || last.RetryAfterSeconds <= 0 {
		t.Fatalf("queued WebSocket turn ended with %d chunks and %+v, want a retryable shutting_down error", len(chunks), last)
	}
	resp := <-jsonDone
	if resp == nil {
		return
	}
	var eb errorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || eb.Error.Code != CodeShuttingDown || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("queued JSON turn: %d %+v (Retry-After %q), want 503 shutting_down", resp.StatusCode, eb, resp.Header.Get("Retry-After"))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.calls != 0 {
		t.Fatalf("the provider was called %d times for turns that never left the queue", p.calls)
	}
}

// A page cannot set Authorization on a WebSocket: its API key comes as a
// subprotocol, "fmgate.bearer." + base64url(key), beside "fmgate.v1", which
// the gateway selects. A wrong key is refused like a wrong bearer key.
func TestWebSocketKeyAsSubprotocol(t *testing.T) {
	_, srv := newTestGateway(t, both(&scriptProvider{answer: "hello there "}), func(c *config.Config) {
		c.Auth.TrustUserHeader = false
		c.Auth.Keys = map[string]config.Caller{"k-page": {UserID: "page-user"}}
	})
	turn := func(key string) frame {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{
			Subprotocols: []string{WSProtocol, KeyProtocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(key))}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != WSProtocol || c.Subprotocol() != WSProtocol {
			t.Fatalf("selected subprotocol %q; want %q (never the key)", got, WSProtocol)
		}
		send(t, c, map[string]string{"action": "sendMessage", "requestId": "r1", "sessionId": "s1", "message": "hello"})
		for {
			f := readFrame(t, c)
			if f.Type == "done" || f.Type == "error" {
				return f
			}
		}
	}
	if f := turn("k-page"); f.Type != "done" {
		t.Fatalf("with the page's key: %+v", f)
	}
	if f := turn("k-wrong"); f.Type != "error" || f.Code != CodeUnauthorized {
		t.Fatalf("with a wrong key: %+v; want unauthorized", f)
	}
}

// TestImageTurnNeedsVision: a turn whose message or history carries an
// image is offered only to the tiers that can see; the others are left out
// of its cascade.
func TestImageTurnNeedsVision(t *testing.T) {
	g, _ := newTestGateway(t, both(&scriptProvider{answer: "ok"}), func(c *config.Config) {
		c.Models[0].Capabilities = []string{config.CapabilityText, config.CapabilityTools}
	})
	img := []provider.Image{{MediaType: provider.ImagePNG, Width: 8, Height: 8}}
	sonnet, haiku := g.Config().Models[0].Name, g.Config().Models[1].Name
	tests := []struct {
		name string
		give Turn
		want []string
	}{
		{"text", Turn{}, []string{sonnet, haiku}},
		{"image in the message", Turn{Images: img}, []string{haiku}},
		{"image in the history", Turn{History: []provider.Message{{Role: provider.RoleUser, Images: img}}}, []string{haiku}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := g.tiersFor(&tt.give); !slices.Equal(got, tt.want) {
				t.Fatalf("tiers %v, want %v", got, tt.want)
			}
		})
	}
}

// TestJSONTurnNeedsTheJSONCapability: a turn that asks for a JSON answer
// is offered only to the tiers that can give one: those with json, and
// for a Claude tier, which is asked through the answer tool, tools too.
func TestJSONTurnNeedsTheJSONCapability(t *testing.T) {
	g, _ := newTestGateway(t, both(&scriptProvider{answer: "{}"}), func(c *config.Config) {
		c.Models[0].Capabilities = []string{config.CapabilityText, config.CapabilityTools}
		c.Models[1].Provider, c.Models[1].APIKeyEnv = "anthropic", "FMGATE_TEST_ANTHROPIC_KEY"
		c.Models[1].Capabilities = []string{config.CapabilityText, config.CapabilityJSON}
	})
	sonnet := g.Config().Models[0].Name
	tests := []struct {
		name string
		give Turn
		want []string
	}{
		{"text", Turn{}, []string{sonnet, g.Config().Models[1].Name}},
		{"json object", Turn{Format: provider.Format{Kind: provider.FormatJSONObject}}, []string{}},
		{"tools, no json", Turn{Tools: []provider.Tool{{Name: "a", Schema: []byte(`{"type":"object"}`)}}}, []string{sonnet}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := g.tiersFor(&tt.give); !slices.Equal(got, tt.want) {
				t.Fatalf("tiers %v, want %v", got, tt.want)
			}
		})
	}
	if !(config.Model{Provider: "bedrock"}).Can(config.CapabilityJSON) {
		t.Fatal("a tier that lists no capabilities cannot answer in JSON")
	}
}
