// Package anthropic is the provider of a model tier served by the Anthropic
// Messages API, through Anthropic's official Go SDK (anthropic-sdk-go):
// Messages.New for Complete, Messages.NewStreaming with the SDK's
// accumulator (Message.Accumulate) for Stream.
//
// The SDK's own retries are off: fmgate's retry loop, retry budget and
// breakers own retrying. Failures are normalised to provider kinds, keeping
// Anthropic's error type in provider.Error.Code:
//
//	429 rate_limit_error        throttled (retry-after-ms / retry-after honoured)
//	529 overloaded_error        unavailable: Anthropic as a whole is short of
//	                            capacity, not this key over its limit, so the
//	                            breaker counts it and the cascade moves on
//	500 api_error, other 5xx    unavailable
//	504 timeout_error           timeout
//	400 invalid_request_error   validation (413 request_too_large too)
//	401, 403, 402 billing_error access_denied
//	404 not_found_error         not_found
//	SSE error event             as its error type
//	stop_reason "refusal"       guardrail
//	connection dropped          unavailable
//
// Usage is Anthropic's own: input, output, cache-read and cache-write tokens
// from message_start and the final message_delta. A stream that breaks
// after text arrived but before its final usage returns what arrived, with
// the output tokens estimated and Usage.Estimated set; the estimate is calibrated on the
// usage Anthropic reported for this provider's completed answers.
package anthropic

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// Timeouts of the pooled HTTP client. The turn's context carries the real
// deadlines; these bound what the context cannot see.
const (
	// ConnectTimeout bounds a TCP (and TLS) connection to the API.
	ConnectTimeout = 5 * time.Second
	// ResponseHeaderTimeout bounds the wait for response headers. A
	// non-streamed answer sends its headers only when complete, so this is
	// generous; the turn's deadline is usually shorter.
	ResponseHeaderTimeout = 2 * time.Minute
)

// Provider calls one model on the Anthropic Messages API.
type Provider struct {
	client  sdk.Client
	name    string
	modelID string
	now     func() time.Time
	est     *budget.Estimator
}

var _ provider.Provider = (*Provider)(nil)

// New returns the provider of tier m. The API key is read from the
// environment variable m.APIKeyEnv with getenv (os.Getenv in production);
// m.Endpoint, when set, replaces Anthropic's base URL (e.g. `fmgate sim`,
// or another fmgate's Anthropic front door). A nil client gets a pooled
// client of its own (keep-alive, HTTP/2 over TLS).
func New(m config.Model, getenv func(string) string, client *http.Client) (*Provider, error) {
	if m.APIKeyEnv == "" {
		return nil, errors.New("anthropic: apiKeyEnv must name the environment variable holding the API key")
	}
	key := getenv(m.APIKeyEnv)
	if key == "" {
		return nil, fmt.Errorf("anthropic: set %s to the Anthropic API key", m.APIKeyEnv)
	}
	if client == nil {
		client = NewHTTPClient()
	}
	// The model's settings only: the SDK's defaults would add credentials
	// and a base URL from the environment (ANTHROPIC_AUTH_TOKEN as a Bearer
	// token beside the key, ANTHROPIC_BASE_URL, ANTHROPIC_PROFILE's files),
	// sent to whatever endpoint the model names.
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithAPIKey(key),
		option.WithHTTPClient(client),
		option.WithMaxRetries(0),
	}
	if m.Endpoint != "" {
		opts = append(opts, option.WithBaseURL(m.Endpoint))
	}
	return &Provider{
		client:  sdk.NewClient(opts...),
		name:    m.Name,
		modelID: m.ModelID,
		now:     time.Now,
		est:     budget.NewEstimator(),
	}, nil
}

// NewHTTPClient is the pooled client a provider uses by default: connect
// and response-header timeouts, keep-alive, HTTP/2 where the server offers
// it over TLS.
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = ConnectTimeout
	t.ResponseHeaderTimeout = ResponseHeaderTimeout
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.ForceAttemptHTTP2 = true
	return &http.Client{Transport: t}
}

// CountTokens implements provider.TokenCounter with Anthropic's
// count_tokens.
func (p *Provider) CountTokens(ctx context.Context, req *provider.Request) (int, error) {
	params := p.params(req)
	cp := sdk.MessageCountTokensParams{Model: params.Model, Messages: params.Messages}
	if len(params.System) > 0 {
		cp.System = sdk.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}
	}
	n, err := p.client.Messages.CountTokens(ctx, cp)
	if err != nil {
		return 0, p.normalise(ctx, err)
	}
	return int(n.InputTokens), nil
}

func (p *Provider) params(req *provider.Request) sdk.MessageNewParams {
	msgs := make([]sdk.MessageParam, 0, len(req.Messages))
	for _, m := range req.Messages {
		var blocks []sdk.ContentBlockParamUnion
		// An assistant's reasoning goes back first and unchanged, as
		// Anthropic checks its signature.
		for _, th := range m.Thinking {
			if th.Redacted != "" {
				blocks = append(blocks, sdk.NewRedactedThinkingBlock(th.Redacted))
				continue
			}
			blocks = append(blocks, sdk.NewThinkingBlock(th.Signature, th.Text))
		}
		for _, r := range m.ToolResults {
			blocks = append(blocks, sdk.NewToolResultBlock(provider.ToolID(r.CallID, provider.MaxToolIDClaude), r.Content, r.IsError))
		}
		// Images come before the text, as Anthropic recommends.
		for _, im := range m.Images {
			blocks = append(blocks, sdk.NewImageBlockBase64(im.MediaType, base64.StdEncoding.EncodeToString(im.Data)))
		}
		toolOnly := m.Content == "" && len(m.ToolResults)+len(m.ToolCalls)+len(m.Images)+len(m.Thinking) > 0
		if !toolOnly {
			for _, b := range textBlocks(m.Content, m.Cache) {
				blocks = append(blocks, sdk.ContentBlockParamUnion{OfText: &b})
			}
		}
		for _, c := range m.ToolCalls {
			blocks = append(blocks, sdk.NewToolUseBlock(provider.ToolID(c.ID, provider.MaxToolIDClaude), c.Input, c.Name))
		}
		if toolOnly && len(m.Cache) > 0 {
			// No text to end the prefix in: the last tool block ends it.
			markBlock(blocks[len(blocks)-1], m.Cache[len(m.Cache)-1])
		}
		if m.Role == provider.RoleAssistant {
			msgs = append(msgs, sdk.NewAssistantMessage(blocks...))
		} else {
			msgs = append(msgs, sdk.NewUserMessage(blocks...))
		}
	}
	params := sdk.MessageNewParams{
		Model:     sdk.Model(p.modelID),
		MaxTokens: int64(req.MaxTokens),
		Messages:  msgs,
	}
	if req.System != "" {
		params.System = textBlocks(req.System, req.SystemCache)
	}
	if req.Temperature != nil {
		params.Temperature = sdk.Float(*req.Temperature)
	}
	if req.TopP != nil {
		params.TopP = sdk.Float(*req.TopP)
	}
	if req.TopK != nil {
		params.TopK = sdk.Int(int64(*req.TopK))
	}
	if len(req.StopSequences) > 0 {
		params.StopSequences = req.StopSequences
	}
	if len(req.Tools) > 0 {
		params.Tools, params.ToolChoice = tools(req.Tools, req.ToolChoice)
	}
	if req.Thinking != nil {
		params.Thinking = sdk.ThinkingConfigParamOfEnabled(int64(req.Thinking.BudgetTokens))
	}
	return params
}

// tools are the request's tools and tool_choice as Anthropic's.
func tools(ts []provider.Tool, c provider.ToolChoice) ([]sdk.ToolUnionParam, sdk.ToolChoiceUnionParam) {
	out := make([]sdk.ToolUnionParam, len(ts))
	for i, t := range ts {
		tp := &sdk.ToolParam{Name: t.Name, InputSchema: inputSchema(t.Schema)}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		out[i] = sdk.ToolUnionParam{OfTool: tp}
	}
	var choice sdk.ToolChoiceUnionParam
	sequential := param.Opt[bool]{}
	if c.Sequential {
		sequential = sdk.Bool(true)
	}
	switch c.Mode {
	case provider.ToolNone:
		choice.OfNone = &sdk.ToolChoiceNoneParam{}
	case provider.ToolAny:
		choice.OfAny = &sdk.ToolChoiceAnyParam{DisableParallelToolUse: sequential}
	case provider.ToolNamed:
		choice.OfTool = &sdk.ToolChoiceToolParam{Name: c.Name, DisableParallelToolUse: sequential}
	default:
		choice.OfAuto = &sdk.ToolChoiceAutoParam{DisableParallelToolUse: sequential}
	}
	return out, choice
}

// inputSchema is a JSON Schema object as the SDK's input_schema: its
// properties and required list, and every other keyword as is.
func inputSchema(raw json.RawMessage) sdk.ToolInputSchemaParam {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	var s sdk.ToolInputSchemaParam
	for k, v := range m {
		switch k {
		case "type":
		case "properties":
			s.Properties = v
		case "required":
			_ = json.Unmarshal(v, &s.Required)
		default:
			if s.ExtraFields == nil {
				s.ExtraFields = map[string]any{}
			}
			s.ExtraFields[k] = v
		}
	}
	return s
}

// toolCalls are the tool_use blocks of an answer.
func toolCalls(content []sdk.ContentBlockUnion) []provider.ToolCall {
	var calls []provider.ToolCall
	for _, c := range content {
		if c.Type == "tool_use" {
			input := c.Input
			if len(input) == 0 {
				input = json.RawMessage("{}")
			}
			calls = append(calls, provider.ToolCall{ID: c.ID, Name: c.Name, Input: input})
		}
	}
	return calls
}

// thinkingOf is the thinking and redacted_thinking blocks of an answer.
func thinkingOf(content []sdk.ContentBlockUnion) []provider.ThinkingBlock {
	var out []provider.ThinkingBlock
	for _, c := range content {
		switch c.Type {
		case "thinking":
			out = append(out, provider.ThinkingBlock{Text: c.Thinking, Signature: c.Signature})
		case "redacted_thinking":
			out = append(out, provider.ThinkingBlock{Redacted: c.Data})
		}
	}
	return out
}

// output is what the model wrote of resp, for the estimate of its output
// tokens: its reasoning, which Anthropic bills as output, and its text.
func output(resp *provider.Response) string {
	var b strings.Builder
	for _, th := range resp.Thinking {
		b.WriteString(th.Text)
	}
	b.WriteString(resp.Text)
	return b.String()
}

// textBlocks is text as Anthropic's text blocks, one ending at each cache
// mark with its cache_control.
func textBlocks(text string, marks []provider.CacheMark) []sdk.TextBlockParam {
	segs := provider.Segments(text, marks)
	out := make([]sdk.TextBlockParam, len(segs))
	for i, s := range segs {
		out[i].Text = s.Text
		if s.Mark != nil {
			out[i].CacheControl = sdk.NewCacheControlEphemeralParam()
			if s.Mark.TTL >= provider.CacheTTLLong {
				out[i].CacheControl.TTL = sdk.CacheControlEphemeralTTLTTL1h
			}
		}
	}
	return out
}

// markBlock sets a tool or image block's cache_control from mark.
func markBlock(b sdk.ContentBlockParamUnion, mark provider.CacheMark) {
	cc := sdk.NewCacheControlEphemeralParam()
	if mark.TTL >= provider.CacheTTLLong {
		cc.TTL = sdk.CacheControlEphemeralTTLTTL1h
	}
	switch {
	case b.OfToolResult != nil:
		b.OfToolResult.CacheControl = cc
	case b.OfToolUse != nil:
		b.OfToolUse.CacheControl = cc
	case b.OfImage != nil:
		b.OfImage.CacheControl = cc
	}
}

// Complete asks for the whole answer in one JSON response.
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	start := p.now()
	msg, err := p.client.Messages.New(ctx, p.params(req), traced(ctx)...)
	if err != nil {
		return &provider.Response{ModelID: p.modelID}, p.normalise(ctx, err)
	}
	resp := &provider.Response{
		Text:         textOf(msg),
		Usage:        usageOf(msg.Usage),
		StopReason:   string(msg.StopReason),
		StopSequence: msg.StopSequence,
		ToolCalls:    toolCalls(msg.Content),
		Thinking:     thinkingOf(msg.Content),
		ModelID:      p.answeredBy(msg.Model),
		TTFT:         p.now().Sub(start),
	}
	return resp, p.refused(msg.StopReason)
}

// Stream asks for the answer as server-sent events and emits each text
// delta, and each piece of the model's reasoning to the thinking hook of
// ctx (provider.WithThinking). The SDK's accumulator builds the message;
// its final usage comes from message_delta.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(text string) error) (*provider.Response, error) {
	start := p.now()
	resp := &provider.Response{ModelID: p.modelID}
	st := p.client.Messages.NewStreaming(ctx, p.params(req), traced(ctx)...)
	defer st.Close()

	var (
		acc              sdk.Message
		text             strings.Builder
		started, usageIn bool
		stopped          bool
		thoughts         = map[int64]int{} // a thinking block's index in the message → its number
	)
	think := func(index int64, d provider.ThinkingDelta) error {
		n, ok := thoughts[index]
		if !ok {
			n = len(thoughts)
			thoughts[index] = n
		}
		d.Block = n
		return provider.EmitThinking(ctx, d)
	}
	finish := func(err error) (*provider.Response, error) {
		resp.Text = text.String()
		resp.Thinking = thinkingOf(acc.Content)
		if started {
			resp.ModelID = p.answeredBy(acc.Model)
		}
		resp.StopReason, resp.StopSequence = string(acc.StopReason), acc.StopSequence
		if stopped {
			resp.ToolCalls = toolCalls(acc.Content)
		}
		resp.Usage = usageOf(acc.Usage)
		if !usageIn {
			resp.Usage = p.estimate(acc, started, output(resp))
		} else if out := output(resp); out != "" {
			p.est.Observe(p.outputKey(), budget.Count(out), resp.Usage.OutputTokens)
		}
		return resp, err
	}
	for st.Next() {
		ev := st.Current()
		if err := acc.Accumulate(ev); err != nil {
			return finish(&provider.Error{Kind: provider.KindUnavailable, Model: p.name, Err: fmt.Errorf("anthropic: stream: %w", err)})
		}
		switch ev.Type {
		case "message_start":
			started = true
		case "message_delta":
			usageIn = true
		case "message_stop":
			stopped = true
		case "content_block_start":
			if ev.ContentBlock.Type == "redacted_thinking" {
				if err := think(ev.Index, provider.ThinkingDelta{Redacted: ev.ContentBlock.Data}); err != nil {
					return finish(err)
				}
			}
		case "content_block_delta":
			var err error
			switch ev.Delta.Type {
			case "thinking_delta":
				err = think(ev.Index, provider.ThinkingDelta{Text: ev.Delta.Thinking})
			case "signature_delta":
				err = think(ev.Index, provider.ThinkingDelta{Signature: ev.Delta.Signature})
			}
			if err != nil {
				return finish(err)
			}
			if ev.Delta.Type != "text_delta" || ev.Delta.Text == "" {
				continue
			}
			if text.Len() == 0 {
				resp.TTFT = p.now().Sub(start)
			}
			text.WriteString(ev.Delta.Text)
			if err := emit(ev.Delta.Text); err != nil {
				return finish(err)
			}
		}
	}
	if err := st.Err(); err != nil {
		return finish(p.normalise(ctx, err))
	}
	if !stopped {
		if ctx.Err() != nil {
			return finish(p.normalise(ctx, ctx.Err()))
		}
		return finish(&provider.Error{Kind: provider.KindUnavailable, Model: p.name,
			Err: errors.New("anthropic: stream ended before message_stop (connection dropped)")})
	}
	return finish(p.refused(acc.StopReason))
}

// answeredBy is the model id Anthropic reports, or the configured one.
func (p *Provider) answeredBy(model sdk.Model) string {
	if model != "" {
		return string(model)
	}
	return p.modelID
}

func (p *Provider) refused(reason sdk.StopReason) error {
	if reason != sdk.StopReasonRefusal {
		return nil
	}
	return &provider.Error{Kind: provider.KindGuardrail, Model: p.name, Code: string(reason),
		Err: errors.New("anthropic: the model refused to answer (stop_reason refusal)")}
}

// estimate is the usage of a stream that ended before its final usage. A
// stream that never began (refused, or unreachable) billed nothing. One that
// began bills the input Anthropic reported in message_start, and for the
// text received the larger of the output it reported and an estimate, then
// flagged as estimated.
func (p *Provider) estimate(acc sdk.Message, started bool, text string) provider.Usage {
	if !started {
		return provider.Usage{}
	}
	u := usageOf(acc.Usage)
	if text != "" {
		u.OutputTokens = max(u.OutputTokens, int(p.est.Tokens(p.outputKey(), budget.Count(text))+0.5))
		u.Estimated = true
	}
	return u
}

// outputKey calibrates the estimate of answers apart from that of requests:
// each completed stream teaches it the vendor's count of the text received.
func (p *Provider) outputKey() string { return p.name + ":output" }

func usageOf(u sdk.Usage) provider.Usage {
	return provider.Usage{
		InputTokens:       int(u.InputTokens),
		OutputTokens:      int(u.OutputTokens),
		CachedInputTokens: int(u.CacheReadInputTokens),
		CacheWriteTokens:  int(u.CacheCreationInputTokens),
		// The breakdown by TTL; an older answer without it wrote for five
		// minutes.
		CacheWrite1hTokens: int(u.CacheCreation.Ephemeral1hInputTokens),
	}
}

func textOf(m *sdk.Message) string {
	var b strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// normalise maps an SDK or transport failure to a *provider.Error.
func (p *Provider) normalise(ctx context.Context, err error) error {
	pe := &provider.Error{Model: p.name, Err: fmt.Errorf("anthropic: %w", err)}
	var ae *sdk.Error
	switch {
	case errors.As(err, &ae):
		pe.Code = string(ae.Type())
		if ae.StatusCode != http.StatusOK { // 200: an error event inside a stream
			pe.Status = ae.StatusCode
		}
		pe.Kind = kindOf(pe.Code, pe.Status)
		if ae.Response != nil {
			pe.RetryAfter = retryAfter(ae.Response.Header, p.now())
		}
	case errors.Is(err, context.Canceled) || ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
		pe.Kind = provider.KindCanceled
	case errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil:
		pe.Kind = provider.KindTimeout
	default:
		pe.Kind = provider.KindUnavailable // connection refused, reset or dropped
	}
	return pe
}

// kindOf decides by Anthropic's error type, and by status when the type is
// unknown.
func kindOf(errType string, status int) provider.Kind {
	switch errType {
	case "rate_limit_error":
		return provider.KindThrottled
	case "overloaded_error", "api_error":
		return provider.KindUnavailable
	case "timeout_error":
		return provider.KindTimeout
	case "invalid_request_error", "request_too_large":
		return provider.KindValidation
	case "authentication_error", "permission_error", "billing_error":
		return provider.KindAccessDenied
	case "not_found_error":
		return provider.KindNotFound
	}
	if status == 529 {
		return provider.KindUnavailable
	}
	if status == 0 {
		return provider.KindUnavailable
	}
	return provider.KindFromStatus(status)
}

// retryAfter reads retry-after-ms, then retry-after (seconds or an HTTP
// date); zero when neither is usable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("retry-after")
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

// traced sends the model attempt's traceparent with a call.
func traced(ctx context.Context) []option.RequestOption {
	if tp := provider.Traceparent(ctx); tp != "" {
		return []option.RequestOption{option.WithHeader("traceparent", tp)}
	}
	return nil
}
