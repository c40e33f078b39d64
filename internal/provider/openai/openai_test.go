package openai_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/openai"
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
