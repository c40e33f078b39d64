package anthropic_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/anthropic"
	"github.com/fmgate/fmgate/internal/provider/providertest"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

const modelID = "claude-3-5-haiku-latest"

// upstream is the simulator on Anthropic's wire, answering at once.
func upstream(t *testing.T) (*sim.Sim, string) { return upstreamB(t) }

func upstreamB(t testing.TB) (*sim.Sim, string) {
	t.Helper()
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"haiku": {ModelID: modelID}}}, sim.Options{
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
		Rand:  rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(simserver.Handler(s))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func newProvider(t *testing.T, endpoint string) *anthropic.Provider { return newProviderB(t, endpoint) }

func newProviderB(t testing.TB, endpoint string) *anthropic.Provider {
	t.Helper()
	p, err := anthropic.New(config.Model{Name: "haiku", Provider: "anthropic", ModelID: modelID,
		APIKeyEnv: "TEST_ANTHROPIC_KEY", Endpoint: endpoint},
		func(string) string { return "sk-test" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func request(msg string) *provider.Request {
	return &provider.Request{
		Model: "haiku", System: "You are MangaAssist.", MaxTokens: 512,
		Messages: []provider.Message{{Role: provider.RoleUser, Content: msg}},
	}
}

func hasJapanese(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return true
		}
	}
	return false
}

// call runs req as a stream or a JSON answer and returns the text emitted
// (for a stream) with the response.
func call(ctx context.Context, p *anthropic.Provider, req *provider.Request, stream bool) (string, *provider.Response, error) {
	if !stream {
		resp, err := p.Complete(ctx, req)
		if resp == nil {
			return "", nil, err
		}
		return resp.Text, resp, err
	}
	var got strings.Builder
	resp, err := p.Stream(ctx, req, func(s string) error { got.WriteString(s); return nil })
	return got.String(), resp, err
}

func TestAnswersInBothLanguagesWithTheSimulatorsUsage(t *testing.T) {
	tests := []struct {
		name   string
		give   string
		stream bool
		wantJA bool
	}{
		{"ja streamed", "おすすめの漫画を教えてください", true, true},
		{"en streamed", "Can you recommend a fantasy manga?", true, false},
		{"ja json", "ワンピースの最新巻はいつ発売ですか？", false, true},
		{"en json", "When does the next volume of One Piece come out?", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := upstream(t)
			p := newProvider(t, url)
			got, resp, err := call(context.Background(), p, request(tt.give), tt.stream)
			if err != nil {
				t.Fatalf("call: %v", err)
			}
			if got == "" || resp.Text != got {
				t.Fatalf("emitted %q, response text %q", got, resp.Text)
			}
			if hasJapanese(got) != tt.wantJA {
				t.Errorf("answer %q: Japanese=%v, want %v", got, hasJapanese(got), tt.wantJA)
			}
			if resp.StopReason != "end_turn" || resp.ModelID != modelID {
				t.Errorf("stop %q model %q, want end_turn %s", resp.StopReason, resp.ModelID, modelID)
			}
			want := s.Usage("haiku")
			if resp.Usage != want {
				t.Errorf("usage %+v, the simulator billed %+v", resp.Usage, want)
			}
		})
	}
}

func TestFaultsAreNormalised(t *testing.T) {
	tests := []struct {
		name      string
		give      sim.Settings
		stream    bool
		wantKind  provider.Kind
		wantCode  string
		wantRetry bool
		wantText  bool // part of the answer arrived before the failure
	}{
		{name: "outage", give: sim.Settings{Outage: true}, wantKind: provider.KindUnavailable, wantCode: "api_error"},
		{name: "outage streamed", give: sim.Settings{Outage: true}, stream: true, wantKind: provider.KindUnavailable, wantCode: "api_error"},
		{name: "throttled", give: rate(provider.KindThrottled), wantKind: provider.KindThrottled, wantCode: "rate_limit_error", wantRetry: true},
		{name: "throttled streamed", give: rate(provider.KindThrottled), stream: true, wantKind: provider.KindThrottled, wantCode: "rate_limit_error", wantRetry: true},
		{name: "tpm ceiling", give: sim.Settings{TPMCeiling: 1}, stream: true, wantKind: provider.KindThrottled, wantCode: "rate_limit_error", wantRetry: true},
		{name: "overloaded 529", give: rate(provider.KindUnavailable), wantKind: provider.KindUnavailable, wantCode: "overloaded_error"},
		{name: "overloaded sse error event", give: rate(provider.KindUnavailable), stream: true, wantKind: provider.KindUnavailable, wantCode: "overloaded_error"},
		{name: "timeout", give: rate(provider.KindTimeout), wantKind: provider.KindTimeout, wantCode: "timeout_error"},
		{name: "timeout streamed", give: rate(provider.KindTimeout), stream: true, wantKind: provider.KindTimeout, wantCode: "timeout_error"},
		{name: "not ready", give: rate(provider.KindNotReady), stream: true, wantKind: provider.KindUnavailable, wantCode: "api_error"},
		{name: "guardrail", give: rate(provider.KindGuardrail), wantKind: provider.KindGuardrail, wantCode: "refusal"},
		{name: "guardrail streamed", give: rate(provider.KindGuardrail), stream: true, wantKind: provider.KindGuardrail, wantCode: "refusal"},
		{name: "cut mid-stream", give: sim.Settings{CutAfterTokens: 5}, stream: true, wantKind: provider.KindUnavailable, wantText: true},
		{name: "cut json", give: sim.Settings{CutAfterTokens: 5}, wantKind: provider.KindUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := upstream(t)
			tt.give.ModelID = modelID
			if err := s.SetSettings("haiku", tt.give); err != nil {
				t.Fatal(err)
			}
			got, resp, err := call(context.Background(), newProvider(t, url), request("Recommend a manga"), tt.stream)
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want a *provider.Error", err, err)
			}
			if pe.Kind != tt.wantKind || pe.Code != tt.wantCode || pe.Model != "haiku" {
				t.Errorf("kind %q code %q model %q, want %q %q haiku (%v)", pe.Kind, pe.Code, pe.Model, tt.wantKind, tt.wantCode, err)
			}
			if (pe.RetryAfter > 0) != tt.wantRetry {
				t.Errorf("retry after %v, want one: %v", pe.RetryAfter, tt.wantRetry)
			}
			if resp == nil {
				t.Fatal("nil response")
			}
			if (got != "") != tt.wantText {
				t.Errorf("text before the failure %q, want some: %v", got, tt.wantText)
			}
			if tt.wantText && (!resp.Usage.Estimated || resp.Usage.OutputTokens == 0 || resp.Usage.InputTokens != s.Usage("haiku").InputTokens) {
				t.Errorf("usage of a cut stream %+v: want the reported input (%d) and an estimated output", resp.Usage, s.Usage("haiku").InputTokens)
			}
		})
	}
}

func rate(k provider.Kind) sim.Settings {
	return sim.Settings{ErrorRate: map[provider.Kind]float64{k: 1}}
}

func TestCallerGoneReturnsTheTextSoFar(t *testing.T) {
	_, url := upstream(t)
	p := newProvider(t, url)
	gone := errors.New("client gone")
	n := 0
	resp, err := p.Stream(context.Background(), request("Recommend a long fantasy manga series and explain why"), func(string) error {
		if n++; n == 3 {
			return gone
		}
		return nil
	})
	if !errors.Is(err, gone) {
		t.Fatalf("error %v, want the emit error", err)
	}
	if resp.Text == "" || !resp.Usage.Estimated || resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 {
		t.Fatalf("response %+v: want the text so far and an estimated usage", resp)
	}
}

func TestCancelledCallIsCanceled(t *testing.T) {
	s, url := upstream(t)
	if err := s.SetSettings("haiku", sim.Settings{ModelID: modelID, StallAfterTokens: 2}); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := p.Stream(ctx, request("Recommend a manga"), func(string) error { cancel(); return nil })
	if k := provider.KindOf(err); k != provider.KindCanceled {
		t.Fatalf("kind %q (%v), want canceled", k, err)
	}
	if resp.Text == "" {
		t.Fatal("the text before the cancel was lost")
	}
}

func TestUnknownModelIsNotFound(t *testing.T) {
	_, url := upstream(t)
	p, err := anthropic.New(config.Model{Name: "opus", ModelID: "claude-opus-nowhere", APIKeyEnv: "K", Endpoint: url},
		func(string) string { return "k" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Complete(context.Background(), request("hi"))
	if k := provider.KindOf(err); k != provider.KindNotFound {
		t.Fatalf("kind %q (%v), want not_found", k, err)
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, _, err := call(context.Background(), newProvider(t, url), request("hi"), true)
	if k := provider.KindOf(err); k != provider.KindUnavailable {
		t.Fatalf("kind %q (%v), want unavailable", k, err)
	}
}

func TestMissingKeyNamesTheVariable(t *testing.T) {
	_, err := anthropic.New(config.Model{Name: "haiku", ModelID: modelID, APIKeyEnv: "MY_ANTHROPIC_KEY"},
		func(string) string { return "" }, nil)
	if err == nil || !strings.Contains(err.Error(), "MY_ANTHROPIC_KEY") {
		t.Fatalf("error %v, want one naming MY_ANTHROPIC_KEY", err)
	}
}

// TestRequestReachesTheWire checks what the SDK sends: the key, the model
// id, system, temperature and stop sequences.
func TestRequestReachesTheWire(t *testing.T) {
	var got *http.Request
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := new(strings.Builder)
		_, _ = io.Copy(b, r.Body)
		got, body = r, b.String()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"m","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],` +
			`"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":7,"output_tokens":2,"cache_read_input_tokens":3,"cache_creation_input_tokens":4}}`))
	}))
	defer srv.Close()
	temp := 0.2
	req := request("hi")
	req.Temperature = &temp
	req.StopSequences = []string{"END"}
	resp, err := newProvider(t, srv.URL).Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Header.Get("X-Api-Key") != "sk-test" {
		t.Errorf("x-api-key %q", got.Header.Get("X-Api-Key"))
	}
	for _, want := range []string{`"model":"` + modelID + `"`, `"temperature":0.2`, `"stop_sequences":["END"]`, `"You are MangaAssist."`, `"max_tokens":512`} {
		if !strings.Contains(body, want) {
			t.Errorf("request body %s lacks %s", body, want)
		}
	}
	want := provider.Usage{InputTokens: 7, OutputTokens: 2, CachedInputTokens: 3, CacheWriteTokens: 4}
	if resp.Usage != want || resp.StopReason != "stop_sequence" || resp.ModelID != "claude-x" {
		t.Errorf("response %+v, want usage %+v, stop_sequence, claude-x", resp, want)
	}
}

// A call's headers and its body leave in one write, streamed or whole (the
// SDK hands net/http its in-memory body as is).
func TestACallIsOneWrite(t *testing.T) {
	_, endpoint := upstream(t)
	hc := anthropic.NewHTTPClient()
	writes := providertest.CountWrites(hc)
	p, err := anthropic.New(config.Model{Name: "haiku", Provider: "anthropic", ModelID: modelID,
		APIKeyEnv: "TEST_ANTHROPIC_KEY", Endpoint: endpoint},
		func(string) string { return "sk-test" }, hc)
	if err != nil {
		t.Fatal(err)
	}
	providertest.OneWritePerCall(t, p, request("Recommend a fantasy manga series"), writes)
}

// The model's settings are the provider's only source: credentials and
// addresses the SDK would pick up from the environment (a token, a
// profile, a base URL) never reach the configured endpoint.
func TestEnvironmentDoesNotReachTheCall(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"api key":    {"ANTHROPIC_API_KEY": "sk-from-env", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"},
		"auth token": {"ANTHROPIC_AUTH_TOKEN": "token-from-env"},
		"profile":    {"ANTHROPIC_PROFILE": "nowhere", "ANTHROPIC_CONFIG_DIR": t.TempDir()},
	} {
		t.Run(name, func(t *testing.T) {
			for k, v := range env {
				t.Setenv(k, v)
			}
			var got http.Header
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got = r.Header.Clone()
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"id":"m","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],` +
					`"stop_reason":"end_turn","usage":{"input_tokens":7,"output_tokens":1}}`))
			}))
			defer srv.Close()
			if _, err := newProvider(t, srv.URL).Complete(context.Background(), request("hi")); err != nil {
				t.Fatal(err)
			}
			if got.Get("X-Api-Key") != "sk-test" || got.Get("Authorization") != "" {
				t.Errorf("x-api-key %q, authorization %q: want the model's key alone", got.Get("X-Api-Key"), got.Get("Authorization"))
			}
		})
	}
}
