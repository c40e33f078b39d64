package anthropic_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	provanthropic "github.com/fmgate/fmgate/internal/provider/anthropic"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/server"
)

const testKey = "sk-fmgate-app"

// testConfig is the MangaAssist profile with quick simulated models and one
// API key.
func testConfig(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 5
		st.TokensPerSecond = 3000
		cfg.Sim.Models[name] = st
	}
	cfg.Auth.Keys = map[string]config.Caller{testKey: {UserID: "app-1", Tier: "standard", Priority: "P0"}}
	cfg.Auth.TrustUserHeader = false
	// The tests assert outcomes, not timing: deadlines generous enough for
	// the race detector on a busy machine.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	dir := t.TempDir()
	cfg.EventStore.Path = filepath.Join(dir, "events.db")
	cfg.Events.WAL.Dir = filepath.Join(dir, "wal")
	return cfg
}

// gatewayServer starts a gateway for cfg and returns it with its URL.
func gatewayServer(t *testing.T, cfg config.Config) (*server.Server, string) {
	t.Helper()
	s, err := server.New(context.Background(), cfg, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler("admin-token"))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func setSim(t *testing.T, s *server.Server, model string, change func(*sim.Settings)) {
	t.Helper()
	st, _ := s.Sim.Settings(model)
	change(&st)
	if err := s.Sim.SetSettings(model, st); err != nil {
		t.Fatal(err)
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

type jsAnswer struct {
	Text, Deltas, Model, StopReason, Tier, Degraded, TraceID string
	Usage                                                    struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
	}
}

type jsFailure struct {
	Error, Type, RetryAfter, Message string
	Status                           int
}

// TestJavaScriptSDK drives the door with the official @anthropic-ai/sdk
// client: JSON and streamed answers in English and Japanese with x-api-key
// and with Authorization: Bearer, its own error classes for a wrong key, a
// rate limit, an unsupported field and an unknown model, and a degraded
// answer under a Sonnet outage.
func TestJavaScriptSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is required (scripts/test installs it): ", err)
	}
	sdkDir, _ := filepath.Abs("../testdata/sdk")
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@anthropic-ai", "sdk")); err != nil {
		t.Fatalf("@anthropic-ai/sdk is not installed; run scripts/test (npm ci in %s): %v", sdkDir, err)
	}
	_, base := gatewayServer(t, testConfig(t))

	limitedCfg := testConfig(t)
	limitedCfg.RateLimit.Routes = map[string]ratelimit.Rule{"chat": {Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}}
	_, limited := gatewayServer(t, limitedCfg)

	down, degraded := gatewayServer(t, testConfig(t))
	setSim(t, down, "sonnet", func(st *sim.Settings) { st.Outage = true })

	script, _ := filepath.Abs("testdata/sdk_client.cjs")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(sdkDir, "node_modules"),
		"BASE_URL="+base, "LIMITED_URL="+limited, "DEGRADED_URL="+degraded, "KEY="+testKey,
		"ANTHROPIC_API_KEY=", "ANTHROPIC_AUTH_TOKEN=", "ANTHROPIC_BASE_URL=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	var got struct {
		JSONEN, JSONJA, StreamEN, StreamJA, FirstLimited, DegradedJSON, DegradedStream jsAnswer
		ClaudeID, UnknownModel                                                         jsAnswer
		WrongKey, WrongToken, Unsupported, RateLimited, RateLimitedStream              jsFailure
		CountTokens                                                                    int
		Models                                                                         []string
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("script output %s: %v", outb, err)
	}

	answers := []struct {
		name    string
		give    jsAnswer
		wantJA  bool
		stream  bool
		tier    string
		degrade string
	}{
		{"json en (x-api-key)", got.JSONEN, false, false, "sonnet", "false"},
		{"json ja (bearer)", got.JSONJA, true, false, "sonnet", "false"},
		{"stream en (x-api-key)", got.StreamEN, false, true, "sonnet", "false"},
		{"stream ja (bearer)", got.StreamJA, true, true, "sonnet", "false"},
		{"rate-limited gateway's first turn", got.FirstLimited, false, false, "sonnet", "false"},
		{"an alias of sonnet (claude-3-5-sonnet-latest)", got.ClaudeID, false, false, "sonnet", "false"},
		{"a model no tier answers to, from the first tier", got.UnknownModel, false, false, "sonnet", "false"},
		{"degraded json", got.DegradedJSON, false, false, "haiku", "true"},
		{"degraded stream", got.DegradedStream, true, true, "haiku", "true"},
	}
	for _, tt := range answers {
		a := tt.give
		if a.Text == "" || hasJapanese(a.Text) != tt.wantJA {
			t.Errorf("%s: text %q, want Japanese=%v", tt.name, a.Text, tt.wantJA)
		}
		if tt.stream && a.Deltas != a.Text {
			t.Errorf("%s: text events %q differ from the final message %q", tt.name, a.Deltas, a.Text)
		}
		if a.Usage.Input == 0 || a.Usage.Output == 0 {
			t.Errorf("%s: usage %+v, want input and output tokens", tt.name, a.Usage)
		}
		if a.StopReason != "end_turn" {
			t.Errorf("%s: stop_reason %q", tt.name, a.StopReason)
		}
		if a.Tier != tt.tier || a.Degraded != tt.degrade || len(a.TraceID) != 32 {
			t.Errorf("%s: headers tier %q degraded %q trace %q, want %s %s and a trace id", tt.name, a.Tier, a.Degraded, a.TraceID, tt.tier, tt.degrade)
		}
		wantModel := "anthropic.claude-3-sonnet-20240229-v1:0"
		if tt.tier == "haiku" {
			wantModel = "anthropic.claude-3-haiku-20240307-v1:0"
		}
		if a.Model != wantModel {
			t.Errorf("%s: model %q, want the model that answered, %s", tt.name, a.Model, wantModel)
		}
	}

	failures := []struct {
		name      string
		give      jsFailure
		wantClass string
		wantType  string
		wantRetry bool
	}{
		{"wrong key (x-api-key)", got.WrongKey, "AuthenticationError", "authentication_error", false},
		{"wrong key (bearer)", got.WrongToken, "AuthenticationError", "authentication_error", false},
		{"thinking", got.Unsupported, "BadRequestError", "invalid_request_error", false},
		{"rate limited", got.RateLimited, "RateLimitError", "rate_limit_error", true},
		{"rate limited stream", got.RateLimitedStream, "RateLimitError", "rate_limit_error", true},
	}
	for _, tt := range failures {
		f := tt.give
		if f.Error != tt.wantClass || f.Type != tt.wantType || (f.RetryAfter != "") != tt.wantRetry {
			t.Errorf("%s: %+v, want %s with type %s (retry-after: %v)", tt.name, f, tt.wantClass, tt.wantType, tt.wantRetry)
		}
	}
	if got.CountTokens <= 0 {
		t.Errorf("messages.countTokens: %d input tokens", got.CountTokens)
	}
	if strings.Join(got.Models, ",") != "sonnet,haiku" {
		t.Errorf("models.list: %v", got.Models)
	}
	if !strings.Contains(got.Unsupported.Message, "thinking") {
		t.Errorf("the unsupported-field error %q does not name thinking", got.Unsupported.Message)
	}
}

// TestGoSDK drives the door with anthropic-sdk-go: a JSON answer, a stream
// accumulated by the SDK, and Anthropic's error types.
func TestGoSDK(t *testing.T) {
	_, base := gatewayServer(t, testConfig(t))
	client := sdk.NewClient(option.WithBaseURL(base), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	params := sdk.MessageNewParams{
		Model: "anthropic.claude-3-haiku-20240307-v1:0", MaxTokens: 300,
		System:   []sdk.TextBlockParam{{Text: "Answer in the user's language."}},
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Recommend a manga")), sdk.NewAssistantMessage(sdk.NewTextBlock("Which genre?")), sdk.NewUserMessage(sdk.NewTextBlock("ファンタジーがいいです"))},
	}
	ctx := context.Background()
	msg, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Model) != "anthropic.claude-3-haiku-20240307-v1:0" || !hasJapanese(msg.Content[0].Text) || msg.Usage.InputTokens == 0 || msg.StopReason != sdk.StopReasonEndTurn {
		t.Errorf("JSON answer %+v", msg)
	}

	st := client.Messages.NewStreaming(ctx, params)
	var acc sdk.Message
	var deltas strings.Builder
	for st.Next() {
		ev := st.Current()
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == "content_block_delta" {
			deltas.WriteString(ev.Delta.Text)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text == "" || acc.Content[0].Text != deltas.String() || acc.Usage.InputTokens == 0 || acc.Usage.OutputTokens == 0 {
		t.Errorf("accumulated %+v (deltas %q)", acc, deltas.String())
	}

	bad := sdk.NewClient(option.WithBaseURL(base), option.WithAPIKey("sk-nope"), option.WithMaxRetries(0))
	_, err = bad.Messages.New(ctx, params)
	var ae *sdk.Error
	if !errors.As(err, &ae) || ae.StatusCode != 401 || ae.Type() != "authentication_error" {
		t.Errorf("wrong key: %v, want a 401 authentication_error", err)
	}

	limitedCfg := testConfig(t)
	limitedCfg.RateLimit.Routes = map[string]ratelimit.Rule{"chat": {Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}}
	_, limited := gatewayServer(t, limitedCfg)
	lc := sdk.NewClient(option.WithBaseURL(limited), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	if _, err := lc.Messages.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	_, err = lc.Messages.New(ctx, params)
	if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Type() != "rate_limit_error" || ae.Response.Header.Get("Retry-After") == "" {
		t.Errorf("rate limited: %v, want a 429 rate_limit_error with retry-after", err)
	}
}

// TestProviderThroughAnotherGateway points fmgate's own anthropic provider
// at a gateway's door: fmgate fronting fmgate.
func TestProviderThroughAnotherGateway(t *testing.T) {
	front, base := gatewayServer(t, testConfig(t))
	p, err := provanthropic.New(config.Model{Name: "upstream", ModelID: "sonnet", APIKeyEnv: "K", Endpoint: base},
		func(string) string { return testKey }, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &provider.Request{Model: "upstream", MaxTokens: 400, Messages: []provider.Message{{Role: provider.RoleUser, Content: "おすすめの漫画は？"}}}
	var got strings.Builder
	resp, err := p.Stream(context.Background(), req, func(s string) error { got.WriteString(s); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !hasJapanese(got.String()) || resp.ModelID != "anthropic.claude-3-sonnet-20240229-v1:0" {
		t.Errorf("answer %q from %q", got.String(), resp.ModelID)
	}
	if billed := front.Sim.Usage("sonnet"); resp.Usage.InputTokens != billed.InputTokens || resp.Usage.OutputTokens != billed.OutputTokens || resp.Usage.Estimated {
		t.Errorf("usage through the door %+v, the upstream simulator billed %+v", resp.Usage, billed)
	}

	setSim(t, front, "sonnet", func(st *sim.Settings) { st.CutAfterTokens = 3 })
	setSim(t, front, "haiku", func(st *sim.Settings) { st.CutAfterTokens = 3 })
	_, err = p.Stream(context.Background(), req, func(string) error { return nil })
	if k := provider.KindOf(err); k != provider.KindUnavailable {
		t.Errorf("a stream broken upstream: kind %q (%v), want unavailable", k, err)
	}
}

// sse reads a raw event stream: the event names in order and each data.
func sse(t *testing.T, r io.Reader) (names []string, data []string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			names = append(names, strings.TrimPrefix(line, "event: "))
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	return names, data
}

func post(t *testing.T, url, body string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestStreamEventSequence(t *testing.T) {
	_, base := gatewayServer(t, testConfig(t))
	resp := post(t, base, `{"model":"sonnet","max_tokens":200,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"Recommend a manga"}]}]}`,
		map[string]string{"x-api-key": testKey})
	if resp.StatusCode != 200 || resp.Header.Get("x-fmgate-tier") != "sonnet" || resp.Header.Get("x-fmgate-degraded") != "false" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	names, data := sse(t, resp.Body)
	if len(names) < 6 || names[0] != "message_start" || names[1] != "content_block_start" || names[2] != "content_block_delta" ||
		names[len(names)-3] != "content_block_stop" || names[len(names)-2] != "message_delta" || names[len(names)-1] != "message_stop" {
		t.Fatalf("events %v", names)
	}
	var delta struct {
		Delta struct {
			StopReason string `json:"stop_reason"`
		}
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(data[len(data)-2]), &delta); err != nil || delta.Delta.StopReason != "end_turn" || delta.Usage.InputTokens == 0 || delta.Usage.OutputTokens == 0 {
		t.Fatalf("message_delta %s (%v)", data[len(data)-2], err)
	}
}

// TestMidStreamFailureEndsWithAnErrorEvent: a model connection dropped after
// the first text ends the stream with Anthropic's error event, never
// message_stop.
func TestMidStreamFailureEndsWithAnErrorEvent(t *testing.T) {
	s, base := gatewayServer(t, testConfig(t))
	setSim(t, s, "sonnet", func(st *sim.Settings) { st.CutAfterTokens = 20 })
	resp := post(t, base, `{"model":"sonnet","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"Recommend a long fantasy manga series and explain why"}]}`,
		map[string]string{"Authorization": "Bearer " + testKey})
	names, data := sse(t, resp.Body)
	if len(names) < 3 || names[len(names)-1] != "error" {
		t.Fatalf("events %v, want the stream to end with an error event", names)
	}
	for _, n := range names {
		if n == "message_stop" || n == "message_delta" {
			t.Fatalf("events %v: a broken stream must not look finished", names)
		}
	}
	if !strings.Contains(data[len(data)-1], `"type":"error"`) || !strings.Contains(data[len(data)-1], `"api_error"`) {
		t.Fatalf("error event %s", data[len(data)-1])
	}
}

func TestRefusalsInAnthropicsShape(t *testing.T) {
	_, base := gatewayServer(t, testConfig(t))
	key := map[string]string{"x-api-key": testKey}
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		wantStatus int
		wantType   string
		wantIn     string
	}{
		{"max_tokens required", `{"model":"sonnet","messages":[{"role":"user","content":"hi"}]}`, key, 400, "invalid_request_error", "max_tokens"},
		{"service_tier", `{"model":"sonnet","max_tokens":10,"service_tier":"auto","messages":[{"role":"user","content":"hi"}]}`, key, 400, "invalid_request_error", "service_tier"},
		{"thinking", `{"model":"sonnet","max_tokens":10,"thinking":{"type":"enabled"},"messages":[{"role":"user","content":"hi"}]}`, key, 400, "invalid_request_error", "thinking"},
		{"image without a source type", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, key, 400, "invalid_request_error", "messages.0.content.0.source.type"},
		{"image from a URL", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}`, key, 400, "invalid_request_error", "remote image URLs are off"},
		{"prefill ending in a space", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure "}]}`, key, 400, "invalid_request_error", "trailing whitespace"},
		{"not json", `{"model":`, key, 400, "invalid_request_error", "JSON"},
		{"no key", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, nil, 401, "authentication_error", ""},
		{"wrong key", `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, map[string]string{"x-api-key": "sk-x"}, 401, "authentication_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, base, tt.body, tt.header)
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != tt.wantStatus || e.Type != "error" || e.Error.Type != tt.wantType || !strings.Contains(e.Error.Message, tt.wantIn) {
				t.Fatalf("status %d body %+v, want %d %s mentioning %q", resp.StatusCode, e, tt.wantStatus, tt.wantType, tt.wantIn)
			}
		})
	}
}

// TestGatewayErrorsMapToAnthropicTypes covers the mapping of every pipeline
// refusal the door can meet.
func TestGatewayErrorsMapToAnthropicTypes(t *testing.T) {
	tests := []struct {
		give       *gateway.Error
		wantStatus int
		wantType   string
	}{
		{&gateway.Error{Status: 429, Code: gateway.CodeRateLimited, RetryAfter: 2 * time.Second}, 429, "rate_limit_error"},
		{&gateway.Error{Status: 429, Code: gateway.CodeQuotaExhausted}, 429, "rate_limit_error"},
		{&gateway.Error{Status: 402, Code: gateway.CodeBudgetExceeded}, 402, "billing_error"},
		{&gateway.Error{Status: 413, Code: gateway.CodeTooLarge}, 413, "request_too_large"},
		{&gateway.Error{Status: 401, Code: gateway.CodeUnauthorized}, 401, "authentication_error"},
		{&gateway.Error{Status: 503, Code: gateway.CodeShuttingDown}, 529, "overloaded_error"},
		{&gateway.Error{Status: 502, Code: gateway.CodeUpstream}, 500, "api_error"},
		{&gateway.Error{Status: 409, Code: gateway.CodeDuplicate}, 409, "invalid_request_error"},
	}
	for _, tt := range tests {
		t.Run(tt.give.Code, func(t *testing.T) {
			rec := httptest.NewRecorder()
			door := newDoorWith(newFakePipeline(t, tt.give))
			door.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages",
				strings.NewReader(`{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)))
			var e struct{ Error struct{ Type string } }
			_ = json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != tt.wantStatus || e.Error.Type != tt.wantType {
				t.Fatalf("status %d type %q, want %d %s", rec.Code, e.Error.Type, tt.wantStatus, tt.wantType)
			}
			if tt.give.RetryAfter > 0 && rec.Header().Get("retry-after") != "2" {
				t.Fatalf("retry-after %q, want 2", rec.Header().Get("retry-after"))
			}
		})
	}
}

// FuzzDoor: whatever the body, the door answers 200 or Anthropic's 4xx
// error shape, never a 5xx, and returns.
func FuzzDoor(f *testing.F) {
	f.Add([]byte(`{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"sonnet","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"nope","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"sonnet","max_tokens":-1,"tools":[1]}`))
	door := newDoorWith(newFakePipeline(f, nil))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		door.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", bytes.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		if rec.Code != 200 {
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
				t.Fatalf("status %d body %q is not Anthropic's error shape", rec.Code, rec.Body.String())
			}
		}
	})
}

// The models list answers an Anthropic client in Anthropic's shape
// (through the real SDK), and an OpenAI client, on the same path, in
// OpenAI's.
func TestModelsInTheAskingVendorsShape(t *testing.T) {
	_, base := gatewayServer(t, testConfig(t))
	client := sdk.NewClient(option.WithBaseURL(base), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	ctx := context.Background()
	page, err := client.Models.List(ctx, sdk.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		if m.Type != "model" || m.CreatedAt.IsZero() || m.DisplayName == "" {
			t.Fatalf("model %+v", m)
		}
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "sonnet,haiku" || page.HasMore {
		t.Fatalf("models %v (has_more %v)", ids, page.HasMore)
	}
	m, err := client.Models.Get(ctx, "anthropic.claude-3-haiku-20240307-v1:0", sdk.ModelGetParams{})
	if err != nil || m.ID != "haiku" {
		t.Fatalf("a model by its id: %+v, %v", m, err)
	}
	if _, err := client.Models.Get(ctx, "claude-none", sdk.ModelGetParams{}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("an unknown model: %v", err)
	}
	resp := get(t, base+"/v1/models", map[string]string{"Authorization": "Bearer " + testKey})
	var oai struct {
		Object string `json:"object"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&oai); err != nil || oai.Object != "list" {
		t.Fatalf("an OpenAI client's list: %+v, %v", oai, err)
	}
}

func get(t *testing.T, url string, header map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
