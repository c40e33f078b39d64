package openai_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/server"
)

const (
	testKey    = "sk-fmgate-door-test"
	adminToken = "door-admin"
)

// gateway is a running fmgate whose tiers are the built-in simulator.
type gateway struct {
	t   *testing.T
	s   *server.Server
	srv *httptest.Server
}

func quickConfig(t testing.TB) config.Config {
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 5
		st.TokensPerSecond = 3000
		cfg.Sim.Models[name] = st
	}
	dir := t.TempDir()
	cfg.EventStore.Path = filepath.Join(dir, "events.db")
	cfg.Events.WAL.Dir = filepath.Join(dir, "wal")
	cfg.Auth.Keys = map[string]config.Caller{testKey: {UserID: "door-user", Tier: "standard", Priority: "P0"}}
	cfg.Auth.TrustUserHeader = false
	cfg.RateLimit.User = ratelimit.UserRules{}
	// A loaded test machine: the model tiers, not the deadlines, answer.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	sim.CountTokens("load the tokenizer before the first turn's deadline runs")
	return cfg
}

func startGateway(t *testing.T, cfg config.Config) *gateway {
	t.Helper()
	s, err := server.New(context.Background(), cfg, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler(adminToken))
	t.Cleanup(func() { srv.Close(); s.Close() })
	return &gateway{t: t, s: s, srv: srv}
}

// sim changes a simulated model's faults through the admin API.
func (g *gateway) sim(model, body string) {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPut, g.srv.URL+"/admin/sim/"+model, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		g.t.Fatalf("PUT /admin/sim/%s: %s", model, resp.Status)
	}
}

func (g *gateway) client(key string) *sdk.Client {
	c := sdk.NewClient(option.WithBaseURL(g.srv.URL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

func hasJapanese(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return true
		}
	}
	return false
}

func params(model, question string) sdk.ChatCompletionNewParams {
	return sdk.ChatCompletionNewParams{
		Model: model,
		Messages: []sdk.ChatCompletionMessageParamUnion{
			sdk.SystemMessage("Answer briefly."),
			sdk.UserMessage("hello"),
			sdk.AssistantMessage("Hello! How can I help?"),
			sdk.UserMessage(question),
		},
		MaxCompletionTokens: sdk.Int(300),
	}
}

func TestGoSDKAnswersJSONAndStream(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	c := g.client(testKey)
	for _, q := range []struct{ lang, text string }{{"en", "Recommend a fantasy manga series"}, {"ja", "おすすめのファンタジー漫画を教えて"}} {
		t.Run(q.lang+"/json", func(t *testing.T) {
			var raw *http.Response
			cc, err := c.Chat.Completions.New(context.Background(), params("sonnet", q.text), option.WithResponseInto(&raw))
			if err != nil {
				t.Fatal(err)
			}
			text := cc.Choices[0].Message.Content
			if text == "" || hasJapanese(text) != (q.lang == "ja") {
				t.Fatalf("answer %q to a %s question", text, q.lang)
			}
			if cc.Usage.PromptTokens == 0 || cc.Usage.CompletionTokens == 0 || cc.Usage.TotalTokens != cc.Usage.PromptTokens+cc.Usage.CompletionTokens {
				t.Errorf("usage %+v", cc.Usage)
			}
			if cc.Choices[0].FinishReason != "stop" || cc.Model != modelIDOf(t, g, "sonnet") {
				t.Errorf("finish %q model %q", cc.Choices[0].FinishReason, cc.Model)
			}
			if raw.Header.Get("X-Fmgate-Tier") != "sonnet" || raw.Header.Get("X-Fmgate-Degraded") != "false" || raw.Header.Get("X-Fmgate-Trace-Id") == "" {
				t.Errorf("headers %v", raw.Header)
			}
		})
		t.Run(q.lang+"/stream", func(t *testing.T) {
			p := params("sonnet", q.text)
			p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
			var raw *http.Response
			s := c.Chat.Completions.NewStreaming(context.Background(), p, option.WithResponseInto(&raw))
			var acc sdk.ChatCompletionAccumulator
			chunks := 0
			for s.Next() {
				acc.AddChunk(s.Current())
				chunks++
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			text := acc.Choices[0].Message.Content
			if text == "" || hasJapanese(text) != (q.lang == "ja") {
				t.Fatalf("answer %q to a %s question", text, q.lang)
			}
			if acc.Usage.PromptTokens == 0 || acc.Usage.CompletionTokens == 0 {
				t.Errorf("no usage chunk: %+v", acc.Usage)
			}
			if acc.Choices[0].FinishReason != "stop" || chunks < 3 {
				t.Errorf("finish %q after %d chunks", acc.Choices[0].FinishReason, chunks)
			}
			if raw.Header.Get("X-Fmgate-Tier") != "sonnet" || raw.Header.Get("X-Fmgate-Trace-Id") == "" {
				t.Errorf("headers %v", raw.Header)
			}
		})
	}
}

func modelIDOf(t *testing.T, g *gateway, tier string) string {
	m, ok := g.s.Gateway.ResolveModel(tier)
	if !ok {
		t.Fatalf("no tier %s", tier)
	}
	return m.ModelID
}

func TestGoSDKSeesDegradedAnswerUnderOutage(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	g.sim("sonnet", `{"outage":true}`)
	var raw *http.Response
	cc, err := g.client(testKey).Chat.Completions.New(context.Background(), params("sonnet", "Recommend a manga"), option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if raw.StatusCode != 200 || raw.Header.Get("X-Fmgate-Degraded") != "true" || raw.Header.Get("X-Fmgate-Tier") != "haiku" {
		t.Fatalf("status %d headers %v", raw.StatusCode, raw.Header)
	}
	if cc.Model != modelIDOf(t, g, "haiku") || cc.Choices[0].Message.Content == "" {
		t.Fatalf("model %q text %q: want haiku's answer", cc.Model, cc.Choices[0].Message.Content)
	}
}

func TestGoSDKErrors(t *testing.T) {
	cfg := quickConfig(t)
	cfg.RateLimit.Routes = map[string]ratelimit.Rule{"chat": {Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}}
	g := startGateway(t, cfg)
	tests := []struct {
		name       string
		key        string
		params     sdk.ChatCompletionNewParams
		wantStatus int
		wantCode   string
		wantParam  string
	}{
		{name: "tool choice naming no tool", key: testKey, params: func() sdk.ChatCompletionNewParams {
			p := params("sonnet", "hi")
			p.Tools = []sdk.ChatCompletionToolUnionParam{sdk.ChatCompletionFunctionTool(sdk.FunctionDefinitionParam{Name: "lookup"})}
			p.ToolChoice = sdk.ToolChoiceOptionFunctionToolChoice(sdk.ChatCompletionNamedToolChoiceFunctionParam{Name: "other"})
			return p
		}(), wantStatus: 400, wantParam: "tool_choice"},
		{name: "n>1", key: testKey, params: func() sdk.ChatCompletionNewParams { p := params("sonnet", "hi"); p.N = sdk.Int(2); return p }(), wantStatus: 400, wantParam: "n"},
		{name: "wrong key", key: "sk-wrong", params: params("sonnet", "hi"), wantStatus: 401, wantCode: "invalid_api_key"},
		{name: "first call passes the limit", key: testKey, params: params("sonnet", "hi"), wantStatus: 200},
		{name: "rate limited", key: testKey, params: params("sonnet", "hi"), wantStatus: 429, wantCode: "rate_limited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var raw *http.Response
			_, err := g.client(tt.key).Chat.Completions.New(context.Background(), tt.params, option.WithResponseInto(&raw))
			if tt.wantStatus == 200 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var apiErr *sdk.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v, want an API error", err)
			}
			if apiErr.StatusCode != tt.wantStatus || (tt.wantCode != "" && apiErr.Code != tt.wantCode) || apiErr.Param != tt.wantParam || apiErr.Message == "" {
				t.Fatalf("got %d code %q param %q message %q; want %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Param, apiErr.Message, tt.wantStatus, tt.wantCode, tt.wantParam)
			}
			if tt.wantStatus == 429 && (raw.Header.Get("Retry-After") == "" || raw.Header.Get("Retry-After-Ms") == "") {
				t.Errorf("429 without retry headers: %v", raw.Header)
			}
		})
	}
}

func TestMidStreamFailureIsAnErrorEvent(t *testing.T) {
	cfg := quickConfig(t)
	g := startGateway(t, cfg)
	g.sim("sonnet", `{"cutAfterTokens":20}`)
	p := params("sonnet", "Recommend a long fantasy manga series and explain why")
	s := g.client(testKey).Chat.Completions.NewStreaming(context.Background(), p)
	text := ""
	for s.Next() {
		for _, c := range s.Current().Choices {
			text += c.Delta.Content
			if c.FinishReason != "" {
				t.Fatalf("a cut stream finished with %q", c.FinishReason)
			}
		}
	}
	var se *ssestream.StreamError
	if !errors.As(s.Err(), &se) || text == "" {
		t.Fatalf("error %v after %q; want the stream's error event after some text", s.Err(), text)
	}

	// On the wire: an error event, and no [DONE] after it.
	req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"sonnet","stream":true,"messages":[{"role":"user","content":"Recommend a long fantasy manga series and explain why"}]}`))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `data: {"error":{"message":`) || strings.Contains(string(body), "[DONE]") {
		t.Fatalf("stream:\n%s", body)
	}
}

// fmgate in front of fmgate: a tier on the openai provider pointed at
// another gateway's front door.
func TestFmgateFrontsFmgate(t *testing.T) {
	upstream := startGateway(t, quickConfig(t))
	t.Setenv("UPSTREAM_FMGATE_KEY", testKey)
	cfg := quickConfig(t)
	cfg.Models[0].Provider = "openai"
	cfg.Models[0].ModelID = "sonnet"
	cfg.Models[0].Endpoint = upstream.srv.URL + "/v1"
	cfg.Models[0].APIKeyEnv = "UPSTREAM_FMGATE_KEY"
	front := startGateway(t, cfg)

	p := params("sonnet", "Recommend a fantasy manga series")
	p.StreamOptions = sdk.ChatCompletionStreamOptionsParam{IncludeUsage: sdk.Bool(true)}
	s := front.client(testKey).Chat.Completions.NewStreaming(context.Background(), p)
	var acc sdk.ChatCompletionAccumulator
	var details sdk.CompletionUsagePromptTokensDetails // the accumulator drops cache_write_tokens
	for s.Next() {
		acc.AddChunk(s.Current())
		if u := s.Current().Usage; u.PromptTokens > 0 {
			details = u.PromptTokensDetails
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content == "" || acc.Usage.PromptTokens == 0 {
		t.Fatalf("answer %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}
	// The front gateway's sonnet is the upstream's whole pipeline: its
	// simulator billed what the front reports (the prompts add up: the
	// front's configured prompt and the upstream's; prompt_tokens counts
	// every input token, whether the upstream's vendor read it from its
	// prompt cache, wrote it there, or neither).
	up := upstream.s.Sim.Usage("sonnet")
	if up.OutputTokens != int(acc.Usage.CompletionTokens) || up.Input() != int(acc.Usage.PromptTokens) {
		t.Fatalf("front reports %+v, the upstream's simulator billed %+v", acc.Usage, up)
	}
	// The upstream's own prompt is long enough to be cached by its model:
	// the tokens it wrote reach the front apart, priced as writes.
	if int(details.CachedTokens) != up.CachedInputTokens || int(details.CacheWriteTokens) != up.CacheWriteTokens {
		t.Errorf("front reports %d cached and %d written tokens, the upstream's simulator billed %d and %d",
			details.CachedTokens, details.CacheWriteTokens, up.CachedInputTokens, up.CacheWriteTokens)
	}
	// A stream names the tier's configured model id from its first chunk;
	// a JSON answer names the model the upstream reported.
	if acc.Model != "sonnet" {
		t.Errorf("stream's model %q, want the tier's modelId", acc.Model)
	}
	cc, err := front.client(testKey).Chat.Completions.New(context.Background(), params("sonnet", "おすすめの漫画は？"))
	if err != nil {
		t.Fatal(err)
	}
	if want := modelIDOf(t, upstream, "sonnet"); cc.Model != want || !hasJapanese(cc.Choices[0].Message.Content) {
		t.Errorf("model %q answer %q; want %s in Japanese", cc.Model, cc.Choices[0].Message.Content, want)
	}
}

// max_tokens reaches the model: the answer stops at the limit with
// finish_reason "length".
func TestMaxTokensEndsWithLength(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	p := params("sonnet", "Recommend a long fantasy manga series and explain why")
	p.MaxCompletionTokens = sdk.Int(7)
	cc, err := g.client(testKey).Chat.Completions.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Choices[0].FinishReason != "length" || cc.Usage.CompletionTokens != 7 {
		t.Fatalf("finish %q after %d tokens; want length after 7", cc.Choices[0].FinishReason, cc.Usage.CompletionTokens)
	}
}

func TestModelsListsTheTiers(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	page, err := g.client(testKey).Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "sonnet,haiku" {
		t.Fatalf("models %v, want the tiers in cascade order", ids)
	}
	if _, err := g.client(testKey).Models.Get(context.Background(), "gpt-unknown"); err == nil {
		t.Fatal("an unknown model was found")
	}
	if m, err := g.client(testKey).Models.Get(context.Background(), "claude-3-5-haiku-latest"); err != nil || m.ID != "haiku" {
		t.Fatalf("an alias of haiku: %+v, %v; want the haiku tier", m, err)
	}
	if _, err := g.client("sk-wrong").Models.List(context.Background()); err == nil {
		t.Fatal("a wrong key listed the models")
	}
}

// BenchmarkDoor is one turn through the front door and the whole pipeline,
// the simulator answering at once: the door's and the pipeline's own cost.
func BenchmarkDoor(b *testing.B) {
	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "json", true: "stream"}[stream]
		b.Run(name, func(b *testing.B) {
			cfg := quickConfig(b)
			for n, st := range cfg.Sim.Models {
				st.TTFTMs, st.TokensPerSecond = 0, 0
				cfg.Sim.Models[n] = st
			}
			cfg.RateLimit.Global = ratelimit.Rule{Limit: ratelimit.PerSecond(1_000_000, 1_000_000)}
			cfg.RateLimit.Routes = nil
			cfg.EventStore.Path = ""
			// The catalog search (and its question's embedding, a
			// simulated model call with a latency of its own) is the
			// profile's feature, measured by BenchmarkPipeline.
			cfg.Catalog.Enabled = false
			s, err := server.New(context.Background(), cfg, server.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			srv := httptest.NewServer(s.Handler(adminToken))
			defer srv.Close()
			body := `{"model":"sonnet","max_tokens":64,"stream":` + map[bool]string{false: "false", true: `true,"stream_options":{"include_usage":true}`}[stream] +
				`,"messages":[{"role":"user","content":"Recommend a fantasy manga series"}]}`
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := srv.Client().Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

// capture records the requests a tier's provider gets.
type capture struct {
	provider.Provider
	mu   sync.Mutex
	reqs []provider.Request
}

func (c *capture) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, *req)
	c.mu.Unlock()
	return c.Provider.Stream(ctx, req, emit)
}

// Complete records a request asked for its whole answer (a JSON client's,
// on the tiers' default upstream).
func (c *capture) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, *req)
	c.mu.Unlock()
	return c.Provider.Complete(ctx, req)
}

// The request's conversation, system prompt, limits and stops reach the
// model: the client's system messages after fmgate's configured prompt.
func TestRequestReachesTheModel(t *testing.T) {
	cfg := quickConfig(t)
	cfg.Prompt.System, cfg.Prompt.File = "You are the store assistant.", ""
	cfg.Catalog.Enabled = false // no catalog context: the system prompt is exactly the two parts
	c := &capture{}
	s, err := server.New(context.Background(), cfg, server.Options{WrapProvider: func(model string, p provider.Provider) provider.Provider {
		if model != "sonnet" {
			return p
		}
		c.Provider = p
		return c
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler(adminToken))
	t.Cleanup(func() { srv.Close(); s.Close() })
	g := &gateway{t: t, s: s, srv: srv}
	p := params("sonnet", "Recommend a manga")
	p.Temperature = sdk.Float(0.3)
	p.Stop = sdk.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"END"}}
	if _, err := g.client(testKey).Chat.Completions.New(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if len(c.reqs) != 1 {
		t.Fatalf("%d model calls", len(c.reqs))
	}
	got := c.reqs[0]
	if got.System != "You are the store assistant.\n\nAnswer briefly." {
		t.Errorf("system %q", got.System)
	}
	if len(got.Messages) != 3 || got.Messages[0].Content != "hello" || got.Messages[1].Role != provider.RoleAssistant || got.Messages[2].Content != "Recommend a manga" {
		t.Errorf("messages %+v", got.Messages)
	}
	if got.MaxTokens != 300 || got.Temperature == nil || *got.Temperature != 0.3 || len(got.StopSequences) != 1 || got.StopSequences[0] != "END" {
		t.Errorf("max %d temperature %v stop %v", got.MaxTokens, got.Temperature, got.StopSequences)
	}
}
