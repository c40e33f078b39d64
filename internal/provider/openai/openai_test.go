package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/openai"
	"github.com/fmgate/fmgate/internal/provider/providertest"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

const modelID = "llama3-sim"

// upstream is the simulator on the OpenAI wire, with one model "local".
func upstream(t *testing.T, st sim.Settings) (*sim.Sim, string) {
	t.Helper()
	st.ModelID = modelID
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"local": st}}, sim.Options{
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(simserver.Handler(s))
	t.Cleanup(srv.Close)
	return s, srv.URL + "/v1"
}

func newProvider(t *testing.T, base string) *openai.Provider {
	t.Helper()
	p, err := openai.New(openai.Config{Name: "local", ModelID: modelID, BaseURL: base, APIKey: "sk-test",
		Estimate: func(req *provider.Request, out string) provider.Usage {
			return provider.Usage{InputTokens: sim.InputTokens(req), OutputTokens: sim.CountTokens(out)}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(msg string) *provider.Request {
	return &provider.Request{Model: "local", System: "You are the store assistant.", MaxTokens: 400,
		Messages: []provider.Message{{Role: provider.RoleUser, Content: "hi"}, {Role: provider.RoleAssistant, Content: "Hello!"}, {Role: provider.RoleUser, Content: msg}}}
}

func hasJapanese(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return true
		}
	}
	return false
}

func TestAnswersWithTheServersUsage(t *testing.T) {
	tests := []struct {
		name     string
		question string
		wantJA   bool
	}{
		{"en", "Recommend a fantasy manga series", false},
		{"ja", "おすすめのファンタジー漫画を教えて", true},
	}
	for _, tt := range tests {
		for _, streamed := range []bool{true, false} {
			name := tt.name + "/json"
			if streamed {
				name = tt.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				s, base := upstream(t, sim.Settings{})
				p := newProvider(t, base)
				req := request(tt.question)
				var deltas strings.Builder
				var resp *provider.Response
				var err error
				if streamed {
					resp, err = p.Stream(context.Background(), req, func(d string) error { deltas.WriteString(d); return nil })
				} else {
					resp, err = p.Complete(context.Background(), req)
					deltas.WriteString(resp.Text)
				}
				if err != nil {
					t.Fatal(err)
				}
				if resp.Text == "" || deltas.String() != resp.Text {
					t.Fatalf("text %q, deltas %q", resp.Text, deltas.String())
				}
				if hasJapanese(resp.Text) != tt.wantJA {
					t.Errorf("answer %q: Japanese = %v, want %v", resp.Text, !tt.wantJA, tt.wantJA)
				}
				if billed := s.Usage("local"); resp.Usage != billed {
					t.Errorf("usage %+v, the server billed %+v", resp.Usage, billed)
				}
				if resp.Usage.InputTokens != sim.InputTokens(req) {
					t.Errorf("input tokens %d, want %d: the system prompt or history did not reach the server", resp.Usage.InputTokens, sim.InputTokens(req))
				}
				if resp.StopReason != "end_turn" || resp.ModelID != modelID {
					t.Errorf("stop %q model %q, want end_turn %s", resp.StopReason, resp.ModelID, modelID)
				}
			})
		}
	}
}

func TestMaxTokensStopsAtLength(t *testing.T) {
	_, base := upstream(t, sim.Settings{})
	req := request("Recommend a fantasy manga series")
	req.MaxTokens = 5
	resp, err := newProvider(t, base).Stream(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "max_tokens" || resp.Usage.OutputTokens != 5 {
		t.Fatalf("stop %q, %d output tokens; want max_tokens after 5", resp.StopReason, resp.Usage.OutputTokens)
	}
}

func TestFaultsAreNormalised(t *testing.T) {
	tests := []struct {
		name       string
		settings   sim.Settings
		model      string
		wantKind   provider.Kind
		wantStatus int
		wantCode   string
		wantRetry  time.Duration
		wantText   bool // a cut keeps the text that arrived
	}{
		{name: "outage", settings: sim.Settings{Outage: true}, wantKind: provider.KindUnavailable, wantStatus: 503, wantCode: "server_error"},
		{name: "throttled", settings: sim.Settings{ErrorRate: map[provider.Kind]float64{provider.KindThrottled: 1}},
			wantKind: provider.KindThrottled, wantStatus: 429, wantCode: "rate_limit_exceeded", wantRetry: time.Second},
		{name: "unavailable", settings: sim.Settings{ErrorRate: map[provider.Kind]float64{provider.KindUnavailable: 1}},
			wantKind: provider.KindUnavailable, wantStatus: 503, wantCode: "server_error"},
		{name: "timeout", settings: sim.Settings{ErrorRate: map[provider.Kind]float64{provider.KindTimeout: 1}},
			wantKind: provider.KindTimeout, wantStatus: 504, wantCode: "timeout"},
		{name: "not ready", settings: sim.Settings{ErrorRate: map[provider.Kind]float64{provider.KindNotReady: 1}},
			wantKind: provider.KindNotReady, wantStatus: 503, wantCode: "model_not_ready"},
		{name: "guardrail", settings: sim.Settings{ErrorRate: map[provider.Kind]float64{provider.KindGuardrail: 1}},
			wantKind: provider.KindGuardrail, wantCode: "content_filter"},
		{name: "cut mid-stream", settings: sim.Settings{CutAfterTokens: 8}, wantKind: provider.KindUnavailable, wantText: true},
		{name: "unknown model", model: "gpt-nonexistent", wantKind: provider.KindNotFound, wantStatus: 404, wantCode: "model_not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, base := upstream(t, tt.settings)
			p := newProvider(t, base)
			if tt.model != "" {
				var err error
				if p, err = openai.New(openai.Config{Name: "local", ModelID: tt.model, BaseURL: base}); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := p.Stream(context.Background(), request("Recommend a fantasy manga series"), nil)
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want a *provider.Error", err, err)
			}
			if pe.Kind != tt.wantKind || pe.Status != tt.wantStatus || pe.Code != tt.wantCode || pe.Model != "local" {
				t.Errorf("got kind %s status %d code %q model %q; want %s %d %q local", pe.Kind, pe.Status, pe.Code, pe.Model, tt.wantKind, tt.wantStatus, tt.wantCode)
			}
			if pe.RetryAfter != tt.wantRetry {
				t.Errorf("retry after %v, want %v", pe.RetryAfter, tt.wantRetry)
			}
			if resp == nil {
				t.Fatal("nil response on failure")
			}
			if tt.wantText {
				if resp.Text == "" || !resp.Usage.Estimated {
					t.Errorf("cut stream: text %q, usage %+v; want the partial text and an estimated usage", resp.Text, resp.Usage)
				}
				if billed := s.Usage("local"); resp.Usage.InputTokens != billed.InputTokens || resp.Usage.OutputTokens != billed.OutputTokens {
					t.Errorf("estimate %+v, the server billed %+v", resp.Usage, billed)
				}
			}
		})
	}
}

func TestCancelledStreamKeepsWhatArrived(t *testing.T) {
	_, base := upstream(t, sim.Settings{StallAfterTokens: 6})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	resp, err := newProvider(t, base).Stream(ctx, request("Recommend a fantasy manga series"), func(string) error {
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	if provider.KindOf(err) != provider.KindCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want a cancellation", err)
	}
	if resp.Text == "" || !resp.Usage.Estimated || resp.Usage.InputTokens == 0 {
		t.Fatalf("text %q usage %+v: want the text so far and an estimate", resp.Text, resp.Usage)
	}
}

// A server's own error shapes: what the simulator never says.
func TestServerErrorsByStatus(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		header   map[string]string
		body     string
		wantKind provider.Kind
		wantCode string
		wantWait time.Duration
	}{
		{"bad key", 401, nil, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, provider.KindAccessDenied, "invalid_api_key", 0},
		{"forbidden", 403, nil, `{"error":{"message":"no access","type":"permission_error","param":null,"code":null}}`, provider.KindAccessDenied, "permission_error", 0},
		{"validation", 400, nil, `{"error":{"message":"bad","type":"invalid_request_error","param":"messages","code":null}}`, provider.KindValidation, "invalid_request_error", 0},
		{"azure content filter", 400, nil, `{"error":{"message":"filtered","type":null,"param":"prompt","code":"content_filter"}}`, provider.KindGuardrail, "content_filter", 0},
		{"retry-after-ms wins", 429, map[string]string{"Retry-After-Ms": "250", "Retry-After": "3"}, `{"error":{"message":"slow down","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, provider.KindThrottled, "rate_limit_exceeded", 250 * time.Millisecond},
		{"retry-after seconds", 429, map[string]string{"Retry-After": "2"}, `{"error":{"message":"slow down","type":"requests","param":null,"code":null}}`, provider.KindThrottled, "requests", 2 * time.Second},
		{"bad gateway", 502, nil, `not json`, provider.KindUnavailable, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
					t.Errorf("Authorization %q", got)
				}
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			_, err := newProvider(t, srv.URL+"/v1").Stream(context.Background(), request("hi"), nil)
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Kind != tt.wantKind || pe.Code != tt.wantCode || pe.RetryAfter != tt.wantWait || pe.Status != tt.status {
				t.Fatalf("error %+v, want kind %s code %q retry %v status %d", pe, tt.wantKind, tt.wantCode, tt.wantWait, tt.status)
			}
			if strings.Contains(err.Error(), "sk-test") {
				t.Fatalf("the error %q carries the API key", err)
			}
		})
	}
}

func TestNoKeyNoAuthorization(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, h := range []string{"Authorization", "OpenAI-Organization", "OpenAI-Project"} {
			if _, ok := r.Header[http.CanonicalHeaderKey(h)]; ok {
				t.Errorf("a provider without a key sent %s %q", h, r.Header.Get(h))
			}
		}
		w.WriteHeader(500)
	}))
	defer srv.Close()
	p, err := openai.New(openai.Config{Name: "local", ModelID: modelID, BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Stream(context.Background(), request("hi"), nil); provider.KindOf(err) != provider.KindUnavailable {
		t.Fatalf("error %v: want the configured server's 500, not a call elsewhere", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"none", http.Header{}, 0},
		{"ms", http.Header{"Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second},
		{"date", http.Header{"Retry-After": {now.Add(4 * time.Second).Format(http.TimeFormat)}}, 4 * time.Second},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
	}
	for _, tt := range tests {
		if got := openai.RetryAfter(tt.h, now); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The request on the wire: the route under the base URL, the key as a
// Bearer token and nothing else identifying, and every field of the call.
func TestRequestOnTheWire(t *testing.T) {
	type seen struct {
		path, auth, org, project, contentType string
		body                                  map[string]any
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.path, s.auth = r.URL.Path, r.Header.Get("Authorization")
		s.org, s.project = r.Header.Get("OpenAI-Organization"), r.Header.Get("OpenAI-Project")
		s.contentType = r.Header.Get("Content-Type")
		if err := json.NewDecoder(r.Body).Decode(&s.body); err != nil {
			t.Errorf("request body: %v", err)
		}
		got <- s
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"model\":\"m-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-from-env")
	p := newProvider(t, srv.URL+"/v1/")
	temp := 0.25
	req := request("Recommend a \"fantasy\" manga\n")
	req.Temperature = &temp
	req.StopSequences = []string{"END", "終"}
	req.CacheKey = "mangaassist-ja"
	resp, err := p.Stream(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.path != "/v1/chat/completions" || s.auth != "Bearer sk-test" || s.org != "" || s.project != "" || s.contentType != "application/json" {
		t.Errorf("path %q, Authorization %q, organization %q, project %q, content type %q", s.path, s.auth, s.org, s.project, s.contentType)
	}
	want := map[string]any{
		"model": modelID,
		"messages": []any{
			map[string]any{"role": "system", "content": "You are the store assistant."},
			map[string]any{"role": "user", "content": "hi"},
			map[string]any{"role": "assistant", "content": "Hello!"},
			map[string]any{"role": "user", "content": "Recommend a \"fantasy\" manga\n"},
		},
		"max_tokens":       400.0,
		"temperature":      0.25,
		"stop":             []any{"END", "終"},
		"prompt_cache_key": "mangaassist-ja",
		"stream":           true,
		"stream_options":   map[string]any{"include_usage": true},
	}
	if !reflect.DeepEqual(s.body, want) {
		t.Errorf("body %v\nwant %v", s.body, want)
	}
	if resp.Text != "ok" || resp.ModelID != "m-1" || resp.Usage != (provider.Usage{InputTokens: 7, OutputTokens: 1}) || resp.StopReason != "end_turn" {
		t.Errorf("response %+v", resp)
	}
}

// What a server may put in a stream, read as the Chat Completions wire says.
func TestStreamWire(t *testing.T) {
	const done = "data: [DONE]\n\n"
	tests := []struct {
		name      string
		body      string
		wantText  string
		wantUsage provider.Usage
		wantStop  string
		wantKind  provider.Kind
		wantCode  string
	}{
		{name: "CRLF, comments, event names and ids",
			body: ": keep-alive\r\n\r\nevent: message\r\nid: 1\r\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":1}}}\r\n\r\n" + done,
			wantText: "ab", wantUsage: provider.Usage{InputTokens: 2, OutputTokens: 2, CachedInputTokens: 1}, wantStop: "max_tokens"},
		{name: "escapes and a data field over two lines",
			body: "data: {\"choices\":[{\"index\":0,\n" + "data: \"delta\":{\"content\":\"\\u3053\\u3093 \\\"x\\\"\\n\"},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":4}}\n\n" + done,
			wantText: "こん \"x\"\n", wantUsage: provider.Usage{InputTokens: 1, OutputTokens: 4}, wantStop: "end_turn"},
		{name: "other choices are not the answer",
			body: "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"no\"}},{\"index\":0,\"delta\":{\"content\":\"yes\"},\"finish_reason\":\"stop\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n" + done,
			wantText: "yes", wantUsage: provider.Usage{InputTokens: 1, OutputTokens: 1}, wantStop: "end_turn"},
		{name: "no usage chunk: the estimate",
			body:     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"12345678\"},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n" + done,
			wantText: "12345678", wantUsage: provider.Usage{InputTokens: 2, OutputTokens: 8, Estimated: true}, wantStop: "end_turn"},
		{name: "an error event mid-stream",
			body:     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n" + "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\",\"code\":\"rate_limit_exceeded\"}}\n\n",
			wantText: "par", wantUsage: provider.Usage{InputTokens: 2, OutputTokens: 3, Estimated: true}, wantKind: provider.KindThrottled, wantCode: "rate_limit_exceeded"},
		{name: "an error event with a type only",
			body:      "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n",
			wantUsage: provider.Usage{InputTokens: 2, Estimated: true}, wantKind: provider.KindUnavailable, wantCode: "server_error"},
		{name: "a chunk that is not JSON",
			body:     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n" + "data: {\"choices\":[\n\n",
			wantText: "a", wantUsage: provider.Usage{InputTokens: 2, OutputTokens: 1, Estimated: true}, wantKind: provider.KindUnavailable},
		{name: "cut before the finish",
			body:     "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"abcd\"}}]}\n\n" + "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ef\"}}]}",
			wantText: "abcd", wantUsage: provider.Usage{InputTokens: 2, OutputTokens: 4, Estimated: true}, wantKind: provider.KindUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			p, err := openai.New(openai.Config{Name: "local", ModelID: modelID, BaseURL: srv.URL,
				Estimate: func(_ *provider.Request, out string) provider.Usage {
					return provider.Usage{InputTokens: 2, OutputTokens: len(out)}
				}})
			if err != nil {
				t.Fatal(err)
			}
			var deltas strings.Builder
			resp, err := p.Stream(context.Background(), request("hi"), func(d string) error { deltas.WriteString(d); return nil })
			if provider.KindOf(err) != tt.wantKind {
				t.Fatalf("error %v, want kind %q", err, tt.wantKind)
			}
			if pe := (*provider.Error)(nil); errors.As(err, &pe) && pe.Code != tt.wantCode {
				t.Errorf("code %q, want %q", pe.Code, tt.wantCode)
			}
			if resp.Text != tt.wantText || deltas.String() != tt.wantText {
				t.Errorf("text %q, deltas %q; want %q", resp.Text, deltas.String(), tt.wantText)
			}
			if resp.Usage != tt.wantUsage {
				t.Errorf("usage %+v, want %+v", resp.Usage, tt.wantUsage)
			}
			if err == nil && resp.StopReason != tt.wantStop {
				t.Errorf("stop %q, want %q", resp.StopReason, tt.wantStop)
			}
		})
	}
}

// An event over MaxEventBytes fails the call instead of growing without bound.
func TestStreamEventBound(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"")
		_, _ = io.WriteString(w, strings.Repeat("x", openai.MaxEventBytes+1))
		_, _ = io.WriteString(w, "\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	_, err := newProvider(t, srv.URL).Stream(context.Background(), request("hi"), nil)
	if provider.KindOf(err) != provider.KindUnavailable || !strings.Contains(err.Error(), "over") {
		t.Fatalf("error %v, want an unavailable failure for the oversized event", err)
	}
}

// Streams read to their end leave their connection to the next call.
func TestStreamsReuseTheConnection(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n")
		// The body's end (the last, empty chunk) comes on its own, after [DONE].
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	p := newProvider(t, srv.URL)
	for range 5 {
		if resp, err := p.Stream(context.Background(), request("hi"), nil); err != nil || resp.Text != "t0 t1 t2 " {
			t.Fatalf("text %q, error %v", resp.Text, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 5 sequential streams, want 1", n)
	}
}

func TestCompleteOnTheWire(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		if _, ok := body["stream"]; ok || r.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("a complete call sent stream=%v, Authorization %q", body["stream"], r.Header.Get("Authorization"))
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c","model":"m-2","choices":[{"index":0,"message":{"role":"assistant","content":"\u3042 done"},"finish_reason":"length"}],"usage":{"prompt_tokens":9,"completion_tokens":2}}`)
	}))
	defer srv.Close()
	resp, err := newProvider(t, srv.URL).Complete(context.Background(), request("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "あ done" || resp.ModelID != "m-2" || resp.StopReason != "max_tokens" || resp.Usage != (provider.Usage{InputTokens: 9, OutputTokens: 2}) {
		t.Fatalf("response %+v", resp)
	}
}

// A server that never ends its body after [DONE] costs the call DrainWait,
// not the rest of its deadline.
func TestStreamDoesNotWaitForABodyThatNeverEnds(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	start := time.Now()
	resp, err := newProvider(t, srv.URL).Stream(context.Background(), request("hi"), nil)
	if err != nil || resp.Text != "ok" {
		t.Fatalf("text %q, error %v", resp.Text, err)
	}
	if took := time.Since(start); took > 10*openai.DrainWait {
		t.Fatalf("the call took %v after its answer was complete", took)
	}
}

// TestStopSequenceThatEndedTheAnswer: a server that says which stop
// sequence ended an answer (vLLM's stop_reason, which the simulator sends
// too) gives stop_sequence and the sequence, JSON and streamed; a plain
// "stop" — OpenAI's own, or vLLM's stop token — stays end_turn.
func TestStopSequenceThatEndedTheAnswer(t *testing.T) {
	_, base := upstream(t, sim.Settings{TTFTMs: 1, TokensPerSecond: 5000})
	p := newProvider(t, base)
	req := request("What manga do you recommend?")
	req.StopSequences = []string{"\n", "END"}
	for name, call := range map[string]func() (*provider.Response, error){
		"json":   func() (*provider.Response, error) { return p.Complete(context.Background(), req) },
		"stream": func() (*provider.Response, error) { return p.Stream(context.Background(), req, nil) },
	} {
		resp, err := call()
		if err != nil || resp.StopReason != "stop_sequence" || resp.StopSequence != "\n" || strings.Contains(resp.Text, "\n") {
			t.Fatalf("%s: %+v (%v); want the first line, ended by the newline", name, resp, err)
		}
	}
	for _, stopReason := range []string{`null`, `128009`, `"not asked for"`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop","stop_reason":`+stopReason+`}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
		}))
		resp, err := newProvider(t, srv.URL+"/v1").Complete(context.Background(), req)
		srv.Close()
		if err != nil || resp.StopReason != "end_turn" || resp.StopSequence != "" {
			t.Fatalf("stop_reason %s: %+v (%v); want end_turn", stopReason, resp, err)
		}
	}
}

// A call's headers and its body leave in one write (one system call and,
// on a quiet link, one segment), streamed or whole.
func TestACallIsOneWrite(t *testing.T) {
	_, base := upstream(t, sim.Settings{})
	hc := openai.NewHTTPClient()
	writes := providertest.CountWrites(hc)
	p, err := openai.New(openai.Config{Name: "local", ModelID: modelID, BaseURL: base, APIKey: "sk-test", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	providertest.OneWritePerCall(t, p, request("Recommend a fantasy manga series"), writes)
}
