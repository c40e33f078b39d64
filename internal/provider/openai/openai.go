// Package openai is the provider adapter for OpenAI and any server that
// speaks the OpenAI Chat Completions API (vLLM, Ollama, LM Studio, another
// fmgate's front door), through the official openai-go SDK's client: its
// client.Post carries the base URL, the Bearer key, the headers and the
// error statuses, while the request body and the streamed chunks are
// written and read by hand (wire.go, with internal/jsonscan) instead of through the SDK's
// reflective types, which cost most of a streamed answer.
//
// Answers stream with stream_options.include_usage, so usage is the
// server's own, from the final usage chunk; no tokenizer runs while the
// server reports usage. The SDK's retries are off (fmgate's retry loop,
// budget and breakers own retrying), and one pooled keep-alive HTTP client
// serves every call of a provider. Failures are normalised to provider
// kinds with the server's error code kept: 429 throttled (retry-after-ms /
// retry-after honoured), 5xx unavailable, 504/408 timeout, 400 validation,
// 401/403 access denied, 404 not found, and a content_filter finish (or
// error code) guardrail. A stream that ends without its finish reason — a
// dropped connection — is an unavailable failure carrying the text so far.
package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fmgate/fmgate/internal/provider"
)

// Defaults of the pooled HTTP client.
const (
	// ConnectTimeout bounds dialling the server (and the TLS handshake).
	ConnectTimeout = 5 * time.Second
	// ResponseHeaderTimeout bounds the wait for the response headers of one
	// call; streamed calls get their headers at once, and the turn's context
	// carries the tighter deadlines.
	ResponseHeaderTimeout = 60 * time.Second
	// MaxIdleConnsPerHost keeps this many keep-alive connections per server.
	MaxIdleConnsPerHost = 256
	// DrainWait bounds the wait for the end of a streamed body after its
	// [DONE] event: reading it keeps the connection for the next call.
	DrainWait = 100 * time.Millisecond
)

// Config configures one model tier served by an OpenAI-compatible server.
type Config struct {
	// Name is the gateway's model name (e.g. "local"), carried by errors.
	Name string
	// ModelID is the server's model id, sent as "model".
	ModelID string
	// BaseURL is the server's API root, e.g. "http://127.0.0.1:11434/v1";
	// empty is OpenAI's own, https://api.openai.com/v1.
	BaseURL string
	// APIKey is sent as Authorization: Bearer; empty sends none (local
	// servers). The environment's OPENAI_* variables are never read.
	APIKey string
	// HTTPClient, when set, replaces the provider's own pooled client.
	HTTPClient *http.Client
	// Estimate counts the tokens of a call whose stream ended before the
	// server reported usage (a cut or cancelled stream); output is the text
	// received. Nil estimates about four bytes per token.
	Estimate func(req *provider.Request, output string) provider.Usage
	// Now is the clock for time to first token; nil is time.Now.
	Now func() time.Time
}

// Provider calls one model on an OpenAI-compatible server.
type Provider struct {
	cfg    Config
	client sdk.Client
	// maxCompletion sends max_completion_tokens (OpenAI's own API, whose
	// newer models refuse max_tokens) instead of max_tokens, which every
	// compatible server understands.
	maxCompletion bool
	// hints prices the input of a stream cut before the server reported
	// its usage: the cache reads of the last reported call with its prompt.
	hints *provider.CacheHints
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for cfg.
func New(cfg Config) (*Provider, error) {
	if cfg.ModelID == "" {
		return nil, errors.New("openai: a model id is required")
	}
	base := cfg.BaseURL
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: endpoint %q is not an http(s) URL", base)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = NewHTTPClient()
	}
	if cfg.Estimate == nil {
		cfg.Estimate = roughEstimate
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// The client carries these options only: NewClient would add the
	// OPENAI_* environment (a key, an organization, a base URL, extra
	// headers) under every model's own settings, and re-apply its defaults
	// on every call.
	client := sdk.Client{Options: []option.RequestOption{
		option.WithBaseURL(strings.TrimSuffix(base, "/") + "/"),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
		option.WithMiddleware(sendWhole),
	}}
	client.Embeddings = sdk.NewEmbeddingService(client.Options...)
	return &Provider{cfg: cfg, client: client, maxCompletion: u.Host == "api.openai.com", hints: provider.NewCacheHints(cfg.Now)}, nil
}

// NewHTTPClient is the pooled client a provider uses by default: keep-alive
// connections (HTTP/2 where the server offers it over TLS), ConnectTimeout
// to dial and ResponseHeaderTimeout for the headers. It sets no overall
// timeout: the call's context bounds it.
func NewHTTPClient() *http.Client {
	dialer := &net.Dialer{Timeout: ConnectTimeout, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * MaxIdleConnsPerHost,
		MaxIdleConnsPerHost:   MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   ConnectTimeout,
		ResponseHeaderTimeout: ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
	}}
}

// Complete asks for the whole answer in one response.
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	resp := &provider.Response{ModelID: p.cfg.ModelID}
	body, err := p.body(req, false)
	if err != nil {
		return resp, p.fail(provider.KindValidation, 0, "", err)
	}
	start := p.cfg.Now()
	var raw []byte
	if err := p.client.Post(ctx, chatPath, body, &raw, traced(ctx)...); err != nil {
		if !refused(err) {
			resp.Usage = p.estimate(req, "") // the server may have started
		}
		return resp, p.failure(ctx, err)
	}
	resp.TTFT = p.cfg.Now().Sub(start)
	c, err := decodeCompletion(raw)
	if err != nil {
		resp.Usage = p.estimate(req, "")
		return resp, p.fail(provider.KindUnavailable, 0, "", err)
	}
	if c.model != "" {
		resp.ModelID = c.model
	}
	if c.reported {
		resp.Usage = c.usage
		p.hints.Learn(req, c.usage)
	} else {
		resp.Usage = p.estimate(req, c.text)
	}
	if !c.answered {
		return resp, p.fail(provider.KindUnavailable, 0, "", errors.New("the answer has no choices"))
	}
	resp.Text = c.text
	if resp.ToolCalls, err = c.calls.done(); err != nil {
		return resp, p.fail(provider.KindUnavailable, 0, "", err)
	}
	return resp, p.finish(req, resp, c.finish, c.stopped)
}

// Stream streams the answer, delta by delta.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(text string) error) (*provider.Response, error) {
	if emit == nil {
		emit = func(string) error { return nil }
	}
	resp := &provider.Response{ModelID: p.cfg.ModelID}
	body, err := p.body(req, true)
	if err != nil {
		return resp, p.fail(provider.KindValidation, 0, "", err)
	}
	start := p.cfg.Now()
	// callCtx lets the end of the body be waited for a bounded time only.
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var raw *http.Response
	if err := p.client.Post(callCtx, chatPath, body, &raw, traced(ctx)...); err != nil {
		if !refused(err) {
			resp.Usage = p.estimate(req, "") // the server may have started
		}
		return resp, p.failure(ctx, err)
	}
	defer raw.Body.Close()

	var (
		text     strings.Builder
		usage    provider.Usage
		reported bool
		finish   string
		stopped  string
		calls    callParts
		c        = chunk{calls: &calls}
	)
	// settle fills the response with what arrived, or the estimate.
	settle := func() {
		resp.Text = text.String()
		if reported {
			resp.Usage = usage
			p.hints.Learn(req, usage)
		} else {
			resp.Usage = p.estimate(req, resp.Text)
		}
	}
	events := newEventReader(raw.Body)
	for {
		data, err := events.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			settle()
			return resp, p.failure(ctx, err)
		}
		if strings.HasPrefix(data, "[DONE]") {
			// Read the body's end, so that its HTTP/1.1 connection is
			// reused, waiting DrainWait at most for a server slow to end it.
			t := time.AfterFunc(DrainWait, cancel)
			_, _ = io.CopyN(io.Discard, raw.Body, 4096)
			t.Stop()
			break
		}
		if err := c.decode(data); err != nil {
			settle()
			if se := (*streamError)(nil); errors.As(err, &se) {
				return resp, p.streamFailure(se)
			}
			return resp, p.fail(provider.KindUnavailable, 0, "", err)
		}
		if c.model != "" {
			resp.ModelID = c.model
		}
		if c.reported {
			usage, reported = c.usage, true
		}
		if c.finish != "" {
			finish, stopped = c.finish, c.stopped
		}
		if d := c.content; d != "" {
			if text.Len() == 0 {
				resp.TTFT = p.cfg.Now().Sub(start)
			}
			text.WriteString(d)
			if err := emit(d); err != nil {
				settle()
				return resp, err
			}
		}
	}
	settle()
	if finish == "" {
		if ctx.Err() != nil {
			return resp, p.failure(ctx, ctx.Err())
		}
		return resp, p.fail(provider.KindUnavailable, 0, "", errors.New("the stream ended before the answer did (connection dropped)"))
	}
	if resp.ToolCalls, err = calls.done(); err != nil {
		return resp, p.fail(provider.KindUnavailable, 0, "", err)
	}
	return resp, p.finish(req, resp, finish, stopped)
}

// finish records the finish reason as the stop reason, or fails a
// content-filtered answer as a guardrail intervention. A "stop" ended by
// one of req's stop sequences is "stop_sequence" when the server says
// which one (vLLM's stop_reason); OpenAI does not, and its stops read as
// end_turn.
func (p *Provider) finish(req *provider.Request, resp *provider.Response, reason, stopped string) error {
	switch reason {
	case "content_filter":
		return p.fail(provider.KindGuardrail, 0, "content_filter", errors.New("the server's content filter stopped the answer"))
	case "length":
		resp.StopReason = "max_tokens"
	case "stop":
		resp.StopReason = "end_turn"
		if stopped != "" && slices.Contains(req.StopSequences, stopped) {
			resp.StopReason, resp.StopSequence = "stop_sequence", stopped
		}
	case "tool_calls", "function_call":
		resp.StopReason = provider.StopToolUse
	default:
		resp.StopReason = reason
	}
	return nil
}

func (p *Provider) estimate(req *provider.Request, output string) provider.Usage {
	u := p.cfg.Estimate(req, output)
	u.Estimated = true
	return p.hints.Split(req, u)
}

func (p *Provider) fail(kind provider.Kind, status int, code string, err error) *provider.Error {
	return &provider.Error{Kind: kind, Model: p.cfg.Name, Status: status, Code: code, Err: fmt.Errorf("openai: %w", err)}
}

// failure normalises an error of the SDK or of the connection.
func (p *Provider) failure(ctx context.Context, err error) error {
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		code := apiErr.Code
		if code == "" {
			code = apiErr.Type
		}
		pe := p.fail(kindOf(apiErr.StatusCode, code), apiErr.StatusCode, code,
			fmt.Errorf("%d %s: %s", apiErr.StatusCode, code, apiErr.Message))
		if apiErr.Response != nil {
			pe.RetryAfter = RetryAfter(apiErr.Response.Header, p.cfg.Now())
		}
		return pe
	}
	if cerr := ctx.Err(); cerr != nil {
		kind := provider.KindCanceled
		if errors.Is(cerr, context.DeadlineExceeded) {
			kind = provider.KindTimeout
		}
		return &provider.Error{Kind: kind, Model: p.cfg.Name, Err: fmt.Errorf("openai: %w", errors.Join(cerr, err))}
	}
	// The connection failed: refused, reset or dropped mid-answer.
	return p.fail(provider.KindUnavailable, 0, "", err)
}

// streamFailure normalises an error event the server sent mid-stream:
// {"error":{"message","type","code"}}.
func (p *Provider) streamFailure(se *streamError) error {
	code := se.code
	if code == "" {
		code = se.typ
	}
	kind := kindOf(0, code)
	if kind == provider.KindUnknown {
		kind = provider.KindUnavailable
	}
	return p.fail(kind, 0, code, fmt.Errorf("error event mid-stream: %s", se.message))
}

// refused reports whether err is the server's error status, which bills
// nothing, rather than a call that broke after it started.
func refused(err error) bool {
	var apiErr *sdk.Error
	return errors.As(err, &apiErr)
}

// kindOf classifies a failure by its HTTP status and the server's code.
func kindOf(status int, code string) provider.Kind {
	switch code {
	case "content_filter", "content_policy_violation":
		return provider.KindGuardrail
	case "rate_limit_exceeded", "rate_limit_error", "requests", "tokens":
		return provider.KindThrottled
	case "model_not_ready":
		return provider.KindNotReady
	case "timeout":
		return provider.KindTimeout
	case "server_error", "service_unavailable", "overloaded_error":
		if status == 0 {
			return provider.KindUnavailable
		}
	}
	if status == 0 {
		return provider.KindUnknown
	}
	return provider.KindFromStatus(status)
}

// RetryAfter reads a server's retry hint: retry-after-ms (milliseconds, as
// OpenAI sends it), else retry-after in seconds or as an HTTP date. Zero
// when there is none.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// roughEstimate is about four bytes per token, plus a few tokens per
// message for the chat template.
func roughEstimate(req *provider.Request, output string) provider.Usage {
	in := 0
	if req.System != "" {
		in += len(req.System)/4 + 4
	}
	for _, m := range req.Messages {
		in += len(m.Content)/4 + 4
	}
	return provider.Usage{InputTokens: in, OutputTokens: (len(output) + 3) / 4}
}

// sendWhole writes each call's headers and body in one write.
func sendWhole(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	provider.SendWhole(req)
	return next(req)
}

// traced sends the model attempt's traceparent with a call.
func traced(ctx context.Context) []option.RequestOption {
	if tp := provider.Traceparent(ctx); tp != "" {
		return []option.RequestOption{option.WithHeader("traceparent", tp)}
	}
	return nil
}
