// Package bedrock is fmgate's AWS Bedrock Runtime provider: Converse and
// ConverseStream through aws-sdk-go-v2's bedrockruntime client.
//
// Credentials come from the SDK's default chain (AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared config files, web
// identity, the ECS or EC2 instance role); they are resolved once when the
// provider is built, within CredentialTimeout, so that a machine without
// credentials fails at start-up with one line naming what to set, not at
// the first turn. On a machine that is not on EC2, the instance-role probe
// (IMDS) is the slow part of that chain: it is bounded by the same timeout,
// and AWS_EC2_METADATA_DISABLED=true skips it.
//
// The SDK's own retries are off (fmgate's retry loop, retry budget and
// breakers own retrying); one pooled HTTP client per provider, with a
// connect timeout and a response-header timeout inside the turn's deadlines,
// which the call's context carries.
package bedrock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// Defaults of Options.
const (
	// DefaultCredentialTimeout bounds resolving credentials at start-up.
	DefaultCredentialTimeout = 5 * time.Second
	// DefaultConnectTimeout bounds dialling Bedrock.
	DefaultConnectTimeout = 3 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for response headers.
	// Converse sends its headers only with the whole answer, so this is an
	// outer guard; the turn's deadlines in the call's context are tighter.
	DefaultResponseHeaderTimeout = 60 * time.Second
)

// Options tune a Provider. Zero values are the defaults.
type Options struct {
	// Credentials replaces the SDK's default chain (tests use static keys).
	Credentials aws.CredentialsProvider
	// CredentialTimeout bounds resolving credentials in New.
	CredentialTimeout time.Duration
	// ConnectTimeout and ResponseHeaderTimeout bound the HTTP client.
	ConnectTimeout        time.Duration
	ResponseHeaderTimeout time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
	// RootCAs verifies the endpoint (models[].caFile); nil: the system's.
	RootCAs *x509.CertPool
}

// Provider calls one Bedrock model. It is safe for concurrent use.
type Provider struct {
	name    string // the gateway's model name
	modelID string
	client  *bedrockruntime.Client
	now     func() time.Time
	est     *budget.Estimator
	// hints prices the input of a stream cut before Bedrock reported its
	// usage: the cache reads of the last reported call with its prompt.
	hints *provider.CacheHints
}

var _ provider.Provider = (*Provider)(nil)

// ErrNoCredentials is returned by New and CheckCredentials when the SDK's
// default chain resolved no credentials.
var ErrNoCredentials = errors.New("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role (AWS_EC2_METADATA_DISABLED=true skips the instance-role probe off EC2)")

// New builds the provider of model tier m (provider: bedrock) and resolves
// its credentials, failing with ErrNoCredentials when there are none.
func New(ctx context.Context, m config.Model, opts Options) (*Provider, error) {
	if m.Region == "" {
		return nil, errors.New("bedrock: region is required")
	}
	cfg, err := loadConfig(ctx, m.Region, m.AWSProfile, opts)
	if err != nil {
		return nil, err
	}
	client := bedrockruntime.NewFromConfig(cfg, func(o *bedrockruntime.Options) {
		if m.Endpoint != "" {
			o.BaseEndpoint = aws.String(m.Endpoint)
		}
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 1
		o.HTTPClient = ownBody{o.HTTPClient}
	})
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Provider{name: m.Name, modelID: m.ModelID, client: client, now: now, est: budget.NewEstimator(),
		hints: provider.NewCacheHints(now)}, nil
}

// CheckCredentials resolves the AWS credentials m would use, within the
// credential timeout, for `fmgate validate`.
func CheckCredentials(ctx context.Context, m config.Model) error {
	_, err := loadConfig(ctx, m.Region, m.AWSProfile, Options{})
	return err
}

// loadConfig resolves the SDK's config for region, with the credentials of
// the shared config's profile when one is named.
func loadConfig(ctx context.Context, region, profile string, opts Options) (aws.Config, error) {
	timeout := opts.CredentialTimeout
	if timeout <= 0 {
		timeout = DefaultCredentialTimeout
	}
	load := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(region),
		awsconfig.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		awsconfig.WithHTTPClient(httpClient(opts)),
		// The SDK's own log lines (e.g. the instance-role probe falling back
		// to IMDSv1) would break the one-line report; failures surface as
		// errors instead.
		awsconfig.WithLogger(logging.Nop{}),
	}
	if profile != "" {
		load = append(load, awsconfig.WithSharedConfigProfile(profile))
	}
	if opts.Credentials != nil {
		load = append(load, awsconfig.WithCredentialsProvider(opts.Credentials))
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(cctx, load...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("bedrock: AWS config: %w", err)
	}
	if cfg.Credentials == nil {
		return aws.Config{}, ErrNoCredentials
	}
	creds, err := cfg.Credentials.Retrieve(cctx)
	if err != nil || !creds.HasKeys() {
		if profile != "" {
			return aws.Config{}, fmt.Errorf("bedrock: the AWS profile %q gives no credentials (is it in ~/.aws/config or credentials, or AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE?): %w", profile, ErrNoCredentials)
		}
		return aws.Config{}, ErrNoCredentials
	}
	return cfg, nil
}

// httpClient is the provider's pooled client: keep-alive, HTTP/2 where the
// endpoint offers it over TLS, bounded connect and response-header waits.
func httpClient(opts Options) *awshttp.BuildableClient {
	connect := opts.ConnectTimeout
	if connect <= 0 {
		connect = DefaultConnectTimeout
	}
	header := opts.ResponseHeaderTimeout
	if header <= 0 {
		header = DefaultResponseHeaderTimeout
	}
	return awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = connect }).
		WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = header
			t.TLSHandshakeTimeout = connect
			t.MaxIdleConnsPerHost = 64
			t.ForceAttemptHTTP2 = true
			if opts.RootCAs != nil {
				if t.TLSClientConfig == nil {
					t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
				}
				t.TLSClientConfig.RootCAs = opts.RootCAs
			}
		})
}

// ownBody is the HTTP client the SDK calls: it gives the transport a copy
// of each request's body. The SDK closes its body as soon as the response's
// headers are in, while net/http may still be reading that body past its
// length to check it holds no more; a body closed then reads as an error,
// and net/http drops the connection, cutting the event stream being read
// from it (seen against a plain-HTTP endpoint answering at once). A copy
// the SDK does not hold cannot be closed under the transport.
type ownBody struct{ c bedrockruntime.HTTPClient }

func (o ownBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return o.c.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("bedrock: request body: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return o.c.Do(req)
}

// Complete answers req with one Converse call.
func (p *Provider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	start := p.now()
	resp := &provider.Response{ModelID: p.modelID}
	parts, err := p.input(req)
	if err != nil {
		return resp, err
	}
	in := &bedrockruntime.ConverseInput{ModelId: aws.String(p.modelID), System: parts.system, Messages: parts.messages,
		InferenceConfig: parts.inference, ToolConfig: parts.tools, AdditionalModelRequestFields: parts.additional,
		GuardrailConfig: guardrailConfig(req.Guardrail), RequestMetadata: req.Metadata}
	out, err := p.client.Converse(ctx, in, traced(ctx))
	if err != nil {
		return resp, p.normalise(ctx, err)
	}
	if msg, ok := out.Output.(*types.ConverseOutputMemberMessage); ok {
		var text strings.Builder
		for _, b := range msg.Value.Content {
			if t, ok := b.(*types.ContentBlockMemberText); ok {
				text.WriteString(t.Value)
			}
		}
		resp.Text = text.String()
		resp.Thinking = thinkingOf(msg.Value.Content)
		if resp.ToolCalls, err = toolCallsOf(msg.Value.Content); err != nil {
			return resp, p.malformed(err)
		}
	}
	resp.TTFT = p.now().Sub(start)
	resp.StopReason, resp.StopSequence = string(out.StopReason), stopSequence(req, out.StopReason)
	resp.Usage = usageOf(out.Usage)
	if out.Trace != nil {
		resp.GuardrailTrace = traceJSON(out.Trace.Guardrail)
	}
	p.learn(req, thoughtText(resp.Thinking)+resp.Text+callsText(resp.ToolCalls), resp.Usage)
	return resp, p.stopError(req, resp.StopReason)
}

func thoughtText(thinking []provider.ThinkingBlock) string {
	s := thinkingStream{blocks: thinking}
	return s.text()
}

// Stream answers req with ConverseStream, emitting each text delta, and
// each reasoningContent delta to the thinking hook of ctx
// (provider.WithThinking). Tool calls and thinking blocks arrive in resp
// once the stream is complete. Usage is the
// metadata event's; a stream that ends without it (cut, cancelled) is
// billed an estimate flagged Usage.Estimated.
func (p *Provider) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	start := p.now()
	resp := &provider.Response{ModelID: p.modelID}
	parts, err := p.input(req)
	if err != nil {
		return resp, err
	}
	in := &bedrockruntime.ConverseStreamInput{ModelId: aws.String(p.modelID), System: parts.system, Messages: parts.messages,
		InferenceConfig: parts.inference, ToolConfig: parts.tools, AdditionalModelRequestFields: parts.additional,
		GuardrailConfig: guardrailStreamConfig(req.Guardrail), RequestMetadata: req.Metadata}
	out, err := p.client.ConverseStream(ctx, in, ownCodec, traced(ctx))
	if err != nil {
		return resp, p.normalise(ctx, err)
	}
	es := out.GetStream()
	defer es.Close()

	var (
		text     strings.Builder
		tools    toolStream
		thoughts thinkingStream
		gotUsage bool
		started  bool
		readErr  error
	)
	first := func() {
		if !started {
			started, resp.TTFT = true, p.now().Sub(start)
		}
	}
	for ev := range es.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockStart:
			if u, ok := v.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				first()
				tools.start(aws.ToInt32(v.Value.ContentBlockIndex), u.Value)
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			switch d := v.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				if d.Value == "" {
					continue
				}
				first()
				text.WriteString(d.Value)
				if emit != nil {
					readErr = emit(d.Value)
				}
			case *types.ContentBlockDeltaMemberToolUse:
				if err := tools.delta(aws.ToInt32(v.Value.ContentBlockIndex), aws.ToString(d.Value.Input)); err != nil {
					readErr = p.malformed(err)
				}
			case *types.ContentBlockDeltaMemberReasoningContent:
				if td, ok := thoughts.delta(aws.ToInt32(v.Value.ContentBlockIndex), d.Value); ok {
					first()
					readErr = provider.EmitThinking(ctx, td)
				}
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
			if td, ok := thoughts.stop(aws.ToInt32(v.Value.ContentBlockIndex)); ok {
				readErr = provider.EmitThinking(ctx, td)
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			resp.StopReason, resp.StopSequence = string(v.Value.StopReason), stopSequence(req, v.Value.StopReason)
		case *types.ConverseStreamOutputMemberMetadata:
			resp.Usage, gotUsage = usageOf(v.Value.Usage), true
			if v.Value.Trace != nil {
				resp.GuardrailTrace = traceJSON(v.Value.Trace.Guardrail)
			}
			p.learn(req, thoughts.text()+text.String()+tools.text(), resp.Usage)
		}
		if readErr != nil {
			break
		}
	}
	resp.Text = text.String()
	resp.Thinking = thoughts.blocks
	err = readErr
	if err == nil {
		if serr := es.Err(); serr != nil {
			err = p.normalise(ctx, serr)
		} else if ctx.Err() != nil {
			err = p.normalise(ctx, ctx.Err())
		} else if !gotUsage || resp.StopReason == "" {
			err = &provider.Error{Kind: provider.KindUnavailable, Model: p.name, Code: "IncompleteStream",
				Err: errors.New("bedrock: the event stream ended before messageStop and metadata")}
		}
	}
	if !gotUsage {
		resp.Usage = p.estimate(req, thoughts.text()+resp.Text+tools.text())
	}
	if err != nil {
		return resp, err
	}
	if resp.ToolCalls, err = tools.done(); err != nil {
		return resp, p.malformed(err)
	}
	return resp, p.stopError(req, resp.StopReason)
}

// malformed is the failure of an answer whose tool calls cannot be read:
// the tier's failure, tried again or elsewhere.
func (p *Provider) malformed(err error) error {
	return &provider.Error{Kind: provider.KindUnavailable, Model: p.name, Code: "MalformedToolUse", Err: fmt.Errorf("bedrock: %w", err)}
}

// ownCodec gives a ConverseStream call a protocol of its own: the SDK's
// shared protocol keeps its event-stream decoder state on one codec for
// every stream of the client, which concurrent streams race on
// (aws/smithy-go#714).
func ownCodec(o *bedrockruntime.Options) {
	o.Protocol = restjson1.New(schemas.AmazonBedrockFrontendService)
}

// cachePoint is a cache mark as Bedrock's cachePoint block.
func cachePoint(m provider.CacheMark) types.CachePointBlock {
	cp := types.CachePointBlock{Type: types.CachePointTypeDefault}
	if m.TTL >= provider.CacheTTLLong {
		cp.Ttl = types.CacheTTLOneHour
	}
	return cp
}

// converseParts are the parts of a Converse input a provider request maps to.
type converseParts struct {
	system    []types.SystemContentBlock
	messages  []types.Message
	inference *types.InferenceConfiguration
	tools     *types.ToolConfiguration
	// additional holds what Converse has no field for: Claude's top_k and
	// thinking.
	additional document.Interface
}

// input maps a provider request to Converse's system, messages, inference
// configuration and tool configuration. It fails, as a validation error,
// only on a tool schema or call input that is not a JSON object.
func (p *Provider) input(req *provider.Request) (converseParts, error) {
	var parts converseParts
	if req.System != "" {
		for _, seg := range provider.Segments(req.System, req.SystemCache) {
			parts.system = append(parts.system, &types.SystemContentBlockMemberText{Value: seg.Text})
			if seg.Mark != nil {
				parts.system = append(parts.system, &types.SystemContentBlockMemberCachePoint{Value: cachePoint(*seg.Mark)})
			}
		}
	}
	parts.messages = make([]types.Message, 0, len(req.Messages))
	for _, m := range req.Messages {
		role := types.ConversationRoleUser
		if m.Role == provider.RoleAssistant {
			role = types.ConversationRoleAssistant
		}
		blocks, err := content(m)
		if err != nil {
			return parts, p.invalid(err)
		}
		parts.messages = append(parts.messages, types.Message{Role: role, Content: blocks})
	}
	ic := &types.InferenceConfiguration{StopSequences: req.StopSequences}
	if req.MaxTokens > 0 {
		ic.MaxTokens = aws.Int32(int32(min(req.MaxTokens, math.MaxInt32)))
	}
	if req.Temperature != nil {
		ic.Temperature = aws.Float32(float32(*req.Temperature))
	}
	if req.TopP != nil {
		ic.TopP = aws.Float32(float32(*req.TopP))
	}
	additional := map[string]any{}
	if req.TopK != nil {
		additional["top_k"] = *req.TopK
	}
	if req.Thinking != nil {
		additional["thinking"] = thinkingConfig(req.Thinking)
	}
	if len(additional) > 0 {
		parts.additional = document.NewLazyDocument(additional)
	}
	parts.inference = ic
	tools, err := toolConfig(req)
	if err != nil {
		return parts, p.invalid(err)
	}
	parts.tools = tools
	return parts, nil
}

func (p *Provider) invalid(err error) error {
	return &provider.Error{Kind: provider.KindValidation, Model: p.name, Err: fmt.Errorf("bedrock: %w", err)}
}

// stopSequence is the stop sequence that ended an answer stopped by one:
// Converse does not say which, so it is known only when req asked for one.
func stopSequence(req *provider.Request, stop types.StopReason) string {
	if stop != types.StopReasonStopSequence || len(req.StopSequences) != 1 {
		return ""
	}
	return req.StopSequences[0]
}

// stopError turns a guardrail's or content filter's stop into a guardrail
// failure; the response keeps the usage to bill. The stop of the
// guardrail the request itself named is its answer: the client reads it
// as Bedrock sent it.
func (p *Provider) stopError(req *provider.Request, stop string) error {
	if req.Guardrail != nil && stop == string(types.StopReasonGuardrailIntervened) {
		return nil
	}
	switch stop {
	case string(types.StopReasonGuardrailIntervened), string(types.StopReasonContentFiltered):
		return &provider.Error{Kind: provider.KindGuardrail, Model: p.name, Code: stop,
			Err: fmt.Errorf("bedrock: the answer stopped with %s", stop)}
	}
	return nil
}

func usageOf(u *types.TokenUsage) provider.Usage {
	if u == nil {
		return provider.Usage{}
	}
	out := provider.Usage{
		InputTokens:       int(aws.ToInt32(u.InputTokens)),
		OutputTokens:      int(aws.ToInt32(u.OutputTokens)),
		CachedInputTokens: int(aws.ToInt32(u.CacheReadInputTokens)),
		CacheWriteTokens:  int(aws.ToInt32(u.CacheWriteInputTokens)),
	}
	for _, d := range u.CacheDetails {
		if d.Ttl == types.CacheTTLOneHour {
			out.CacheWrite1hTokens += int(aws.ToInt32(d.InputTokens))
		}
	}
	return out
}

// CountTokens implements provider.TokenCounter with Bedrock's CountTokens,
// for the Converse form of req.
func (p *Provider) CountTokens(ctx context.Context, req *provider.Request) (int, error) {
	parts, err := p.input(req)
	if err != nil {
		return 0, err
	}
	in := types.ConverseTokensRequest{System: parts.system, Messages: parts.messages, ToolConfig: parts.tools}
	out, err := p.client.CountTokens(ctx, &bedrockruntime.CountTokensInput{ModelId: aws.String(p.modelID),
		Input: &types.CountTokensInputMemberConverse{Value: in}}, traced(ctx))
	if err != nil {
		return 0, p.normalise(ctx, err)
	}
	return int(aws.ToInt32(out.InputTokens)), nil
}

// estimate is the usage of a stream that ended before Bedrock reported it:
// the input and the text received counted by an estimator calibrated on
// Bedrock's own reports (learn) and the images at provider.ImageTokens,
// the input split by the cache reads the last report for the same prompt
// had.
func (p *Provider) estimate(req *provider.Request, text string) provider.Usage {
	out := 0
	if text != "" {
		out = int(math.Ceil(p.est.Tokens(p.outputKey(), budget.Count(text))))
	}
	in := int(math.Ceil(p.est.Tokens(p.name, inputCounts(req)))) + imageTokens(req)
	return p.hints.Split(req, provider.Usage{InputTokens: in, OutputTokens: out, Estimated: true})
}

// imageTokens estimates the input tokens of req's images.
func imageTokens(req *provider.Request) int {
	n := 0
	for i := range req.Messages {
		n += req.Messages[i].ImageTokens()
	}
	return n
}

// learn calibrates the estimate with a usage Bedrock reported for req and
// its answer text.
func (p *Provider) learn(req *provider.Request, text string, u provider.Usage) {
	p.hints.Learn(req, u)
	// Images are billed by Bedrock's own measure: a request with any
	// would skew the text's calibration.
	if n := u.Input(); n > 0 && provider.CountImages(req.Messages) == 0 {
		p.est.Observe(p.name, inputCounts(req), n)
	}
	if text != "" && u.OutputTokens > 0 {
		p.est.Observe(p.outputKey(), budget.Count(text), u.OutputTokens)
	}
}

// outputKey calibrates the estimate of answers apart from that of requests.
func (p *Provider) outputKey() string { return p.name + ":output" }

func inputCounts(req *provider.Request) budget.ScriptCounts {
	in := budget.Count(req.System).Add(budget.Count(provider.ToolsText(req.Tools)))
	for i := range req.Messages {
		in = in.Add(budget.Count(req.Messages[i].Content)).Add(budget.Count(req.Messages[i].ToolText()))
	}
	return in
}

// kinds maps Bedrock's exception names to fmgate's failure kinds.
var kinds = map[string]provider.Kind{
	"ThrottlingException":           provider.KindThrottled,
	"ServiceQuotaExceededException": provider.KindThrottled,
	"ServiceUnavailableException":   provider.KindUnavailable,
	"InternalServerException":       provider.KindUnavailable,
	"ModelStreamErrorException":     provider.KindUnavailable,
	"ModelErrorException":           provider.KindUnavailable,
	"ModelNotReadyException":        provider.KindNotReady,
	"ModelTimeoutException":         provider.KindTimeout,
	"ValidationException":           provider.KindValidation,
	"AccessDeniedException":         provider.KindAccessDenied,
	"UnrecognizedClientException":   provider.KindAccessDenied,
	"InvalidSignatureException":     provider.KindAccessDenied,
	"ExpiredTokenException":         provider.KindAccessDenied,
	"ResourceNotFoundException":     provider.KindNotFound,
}

// normalise turns an SDK error into a *provider.Error: the kind from
// Bedrock's exception name (or the HTTP status, or the context), the
// exception name in Code, Retry-After in RetryAfter.
func (p *Provider) normalise(ctx context.Context, err error) error {
	pe := &provider.Error{Kind: provider.KindUnavailable, Model: p.name, Err: fmt.Errorf("bedrock: %w", err)}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		pe.Status = re.HTTPStatusCode()
		pe.RetryAfter = retryAfter(re.Response.Header, p.now())
		pe.Kind = provider.KindFromStatus(pe.Status)
	}
	var ae smithy.APIError
	switch {
	case ctx.Err() != nil:
		pe.Kind = provider.KindOf(ctx.Err())
		if c := context.Cause(ctx); c != nil {
			pe.Kind = provider.KindOf(c)
		}
	case errors.As(err, &ae):
		pe.Code = ae.ErrorCode()
		if k, ok := kinds[pe.Code]; ok {
			pe.Kind = k
		}
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		pe.Code = "ConnectionDropped"
	}
	if pe.Kind == provider.KindUnknown {
		pe.Kind = provider.KindUnavailable
	}
	return pe
}

// retryAfter reads Retry-After (seconds or an HTTP date) or retry-after-ms.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if ms, err := strconv.Atoi(h.Get("Retry-After-Ms")); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		return max(time.Duration(s)*time.Second, 0)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// traced sends the model attempt's traceparent with a call.
func traced(ctx context.Context) func(*bedrockruntime.Options) {
	tp := provider.Traceparent(ctx)
	return func(o *bedrockruntime.Options) {
		if tp != "" {
			o.APIOptions = append(o.APIOptions, smithyhttp.AddHeaderValue("traceparent", tp))
		}
	}
}
