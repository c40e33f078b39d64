package bedrock

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
	"github.com/fmgate/fmgate/internal/vision"
)

// Pipeline is what the door needs of the gateway (*gateway.Gateway).
type Pipeline interface {
	Run(ctx context.Context, t *gateway.Turn, out gateway.Output) (*gateway.Result, error)
	NewStreamOutput(ctx context.Context, s stream.Sender, requestID string) *gateway.StreamOutput
	Authenticate(r *http.Request, key, bodyUser string, t *gateway.Turn) error
	AuthenticateSigned(r *http.Request, key string, t *gateway.Turn) error
	SigningSecret(akid string, getenv func(string) string) (secret string, known bool)
	ResolveModel(name string) (config.Model, bool)
	CountTokens(ctx context.Context, t *gateway.Turn) (n int, estimated bool, err error)
}

// Options tune the door. Zero values are the defaults.
type Options struct {
	// Now is the clock SigV4 dates are checked against; default time.Now.
	Now func() time.Time
	// Getenv reads a key's secret (config.Caller.SecretKeyEnv); default
	// os.Getenv, read on every request so a rotated secret applies at once.
	Getenv func(string) string
	// MaxBodyBytes bounds a request body; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Images bound the images a request may carry; zero fields are
	// vision's defaults.
	Images vision.Limits
}

// FeatureHeader names the product feature a turn is attributed to
// (default "chat").
const FeatureHeader = "X-Fmgate-Feature"

// Headers every answer carries, saying how it was served.
const (
	HeaderTier     = "X-Fmgate-Tier"
	HeaderDegraded = "X-Fmgate-Degraded"
	HeaderTraceID  = "X-Fmgate-Trace-Id"
)

// New is the Bedrock Runtime front door: POST /model/{modelId}/converse and
// /converse-stream in front of g's pipeline. Mount it at "POST /model/".
//
// Authentication: a SigV4-signed request's access key id must be an
// auth.keys entry with secretKeyEnv; its signature is recomputed with that
// secret (aws-sdk-go-v2's signer), its X-Amz-Date must be within 5 minutes,
// and a signed x-amz-content-sha256 must match the body. The signing region
// is the client's choice; the service must be "bedrock". A Bedrock API key
// (Authorization: Bearer) is accepted as an auth.keys key. With no
// auth.keys configured (the demo profile), the caller is the trusted
// X-User-Id header, as on /v1/chat, and signatures are not checked.
//
// The conversation comes whole in each request (turns are stateless). The
// path's model id names a tier or its modelId; the answer starts there and
// falls down the cascade; a degraded answer is still a 200 in Bedrock's
// shape, with X-Fmgate-Tier, X-Fmgate-Degraded and X-Fmgate-Trace-Id saying
// how it was served. The request's system blocks are appended to fmgate's
// own prompt. A toolConfig, toolUse and toolResult blocks pass to the turn;
// the model's tool calls come back as toolUse blocks after the text (in a
// stream, whole once the answer is in). Fields fmgate does not support get
// a ValidationException.
func New(g Pipeline, opts Options) http.Handler {
	d := &door{g: g, now: opts.Now, getenv: opts.Getenv, maxBody: opts.MaxBodyBytes, images: opts.Images}
	if d.now == nil {
		d.now = time.Now
	}
	if d.getenv == nil {
		d.getenv = os.Getenv
	}
	if d.maxBody <= 0 {
		d.maxBody = DefaultMaxBodyBytes
	}
	return d
}

type door struct {
	g       Pipeline
	now     func() time.Time
	getenv  func(string) string
	maxBody int64
	images  vision.Limits
}

func (d *door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := d.now()
	w.Header().Set("X-Amzn-RequestId", newRequestID())
	modelID, op, err := ParsePath(r.URL.EscapedPath())
	if err != nil {
		// Not an operation Bedrock Runtime has here: its 404, in its shape.
		WriteException(w, Exception{Status: http.StatusNotFound, Type: UnknownOperationException, Message: err.Error()})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		WriteException(w, Exception{Status: http.StatusMethodNotAllowed, Type: ValidationException,
			Message: fmt.Sprintf("%s %s: Bedrock Runtime operations are POST requests", r.Method, r.URL.Path)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, d.maxBody))
	if err != nil {
		WriteException(w, Validation(fmt.Sprintf("the request body could not be read or exceeds %d bytes", d.maxBody)))
		return
	}
	t := &gateway.Turn{
		RequestID:   newRequestID(),
		Route:       "chat",
		Surface:     "bedrock",
		Feature:     r.Header.Get(FeatureHeader),
		TraceParent: r.Header.Get("traceparent"),
		Stateless:   true,
	}
	h := w.Header()
	// The turn's traceparent and trace id go out as headers as soon as its
	// span starts, before the first byte. A client without a traceparent
	// gets a new trace, sampled as the gateway samples.
	t.OnTraceparent = func(tp string) {
		h.Set("traceparent", tp)
		if id := traceIDOf(tp); id != "" {
			h.Set(HeaderTraceID, id)
		}
	}
	if ex, ok := d.authenticate(r, body, t); !ok {
		WriteException(w, ex)
		return
	}
	switch op {
	case OpInvoke, OpInvokeStream:
		d.invoke(w, r, t, modelID, body, op == OpInvokeStream, start)
		return
	case OpCountTokens:
		d.countTokens(w, r, t, modelID, body)
		return
	}
	req, err := Decode(modelID, body, d.images)
	if err != nil {
		WriteException(w, Validation(err.Error()))
		return
	}
	// A model id that no tier answers to starts at the first tier, as on
	// every door: x-fmgate-tier says what served it.
	tier, _ := d.g.ResolveModel(req.ModelID)
	last := len(req.Messages) - 1
	t.SessionID = "bedrock:" + t.RequestID
	t.Message = req.Messages[last].Content
	t.MessageCache = req.Messages[last].Cache
	t.ToolResults = req.Messages[last].ToolResults
	t.Images = req.Messages[last].Images
	t.History = req.Messages[:last]
	t.Tools, t.ToolChoice = req.Tools, req.ToolChoice
	t.Thinking, t.Format, t.Metadata = req.Thinking, req.Format, req.Metadata
	t.Guardrail = req.Guardrail
	t.ClientSystem, t.ClientSystemCache = req.System, req.SystemCache
	t.StartTier = tier.Name
	t.MaxOutput = req.MaxTokens
	t.Temperature, t.TopP, t.Prefill = req.Temperature, req.TopP, req.Prefill
	t.StopSequences = req.StopSequences
	if op == OpConverse {
		if req.Guardrail != nil && req.Guardrail.StreamMode != "" {
			WriteException(w, Validation("guardrailConfig.streamProcessingMode applies to converse-stream only; remove it from a converse request"))
			return
		}
		d.converse(w, r, t, start)
		return
	}
	d.converseStream(w, r, t, start)
}

// authenticate fills t's caller; on refusal it returns the exception.
func (d *door) authenticate(r *http.Request, body []byte, t *gateway.Turn) (Exception, bool) {
	key := ""
	if IsSigV4(r) {
		akid, err := accessKeyID(r)
		if err != nil {
			return Exception{Status: http.StatusForbidden, Type: InvalidSignatureException, Message: err.Error()}, false
		}
		if secret, found := d.g.SigningSecret(akid, d.getenv); found {
			if secret == "" {
				return Exception{Status: http.StatusForbidden, Type: UnrecognizedClientException,
					Message: "This access key has no secret configured for signed requests (auth.keys secretKeyEnv)."}, false
			}
			if err := verifySigV4(r.Context(), r, body, secret, d.now()); err != nil {
				return Exception{Status: http.StatusForbidden, Type: InvalidSignatureException, Message: err.Error()}, false
			}
			if err := d.g.AuthenticateSigned(r, akid, t); err != nil {
				return exceptionFor(err), false
			}
			return Exception{}, true
		}
		key = akid
	} else if k, ok := gateway.Bearer(r); ok {
		key = k
	}
	if err := d.g.Authenticate(r, key, "", t); err != nil {
		return exceptionFor(err), false
	}
	return Exception{}, true
}

// converse answers with one JSON body.
func (d *door) converse(w http.ResponseWriter, r *http.Request, t *gateway.Turn, start time.Time) {
	out := &collector{}
	res, err := d.g.Run(r.Context(), t, out)
	if err != nil {
		WriteException(w, exceptionFor(err))
		return
	}
	setServedHeaders(w.Header(), res.Tier, res.Degraded, res.TraceID)
	WriteConverse(w, res.Thinking, out.text.String(), bedrockIDs(res.ToolCalls), stopReason(res.StopReason), res.Usage, d.now().Sub(start), res.GuardrailTrace)
}

// converseStream answers with the event stream: the pipeline's frames,
// transcoded by eventSender.
func (d *door) converseStream(w http.ResponseWriter, r *http.Request, t *gateway.Turn, start time.Time) {
	es := &eventSender{w: w, ew: NewEventWriter(w)}
	es.ew.Hold() // each frame's events leave in one write; the sender flushes them
	headers := t.OnTraceparent
	t.OnTraceparent = func(tp string) {
		headers(tp)
		es.traceID = traceIDOf(tp) // before the first event: the turn's span starts first
	}
	so := d.g.NewStreamOutput(r.Context(), es, t.RequestID)
	res, err := d.g.Run(r.Context(), t, &tierOutput{StreamOutput: so, s: es})
	so.Close() // no frame is sent after this
	switch {
	case err != nil && !es.ew.Started():
		WriteException(w, exceptionFor(err))
	case err != nil:
		if !es.failed {
			e := exceptionFor(err)
			_ = es.flushed(es.ew.Exception(streamException(e.Type), e.Message))
		}
	default:
		_ = es.finish(res, d.now().Sub(start))
	}
}

// stopReason is the model's stop reason, or end_turn for the tiers below
// the models (cache, FAQ, graceful message).
func stopReason(s string) string {
	if s == "" {
		return StopEndTurn
	}
	return s
}

// collector holds a JSON answer's text until the end.
type collector struct{ text strings.Builder }

func (c *collector) Write(s string) error         { c.text.WriteString(s); return nil }
func (c *collector) Started() bool                { return false }
func (c *collector) Discard()                     { c.text.Reset() }
func (c *collector) Finish(*gateway.Result) error { return nil }
func (c *collector) Fail(*gateway.Error) error    { return nil }
func (c *collector) WholeAnswer() bool            { return true }

// tierOutput is the stream's Output, telling the sender which tier writes.
type tierOutput struct {
	*gateway.StreamOutput
	s *eventSender
}

func (o *tierOutput) BeginTier(tier, _ string, degraded bool) { o.s.beginTier(tier, degraded) }

// Think holds a piece of the model's reasoning until the answer opens, so
// that a failed attempt's reasoning never reaches the client.
func (o *tierOutput) Think(d provider.ThinkingDelta) error {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	o.s.thinking = append(o.s.thinking, d)
	return nil
}

// Discard drops the reasoning held with the text.
func (o *tierOutput) Discard() {
	o.StreamOutput.Discard()
	if !o.StreamOutput.Started() {
		o.s.mu.Lock()
		o.s.thinking = nil
		o.s.mu.Unlock()
	}
}

// eventSender is the stream's FrameSender: it turns the pipeline's frames
// into Converse stream events, flushed once a frame. Chunks become
// contentBlockDelta events; an error frame after the first delta becomes
// an event-stream exception. The done frame is left to converseStream,
// which knows the stop reason and the full usage (finish).
type eventSender struct {
	w       http.ResponseWriter
	ew      *EventWriter
	traceID string

	mu       sync.Mutex
	tier     string
	degraded bool
	failed   bool
	// thinking is the reasoning held until the answer opens.
	thinking []provider.ThinkingDelta
}

func (s *eventSender) beginTier(tier string, degraded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tier, s.degraded = tier, degraded
}

// begin sends the headers, naming the tier that writes, messageStart and
// the reasoning held, as reasoningContent deltas.
func (s *eventSender) begin() error {
	if s.ew.Started() {
		return nil
	}
	s.mu.Lock()
	tier, degraded, thinking := s.tier, s.degraded, s.thinking
	s.thinking = nil
	s.mu.Unlock()
	setServedHeaders(s.w.Header(), tier, degraded, s.traceID)
	if err := s.ew.Start(); err != nil {
		return err
	}
	for _, d := range thinking {
		if err := s.ew.Reasoning(d); err != nil {
			return err
		}
	}
	return nil
}

// finish ends a successful answer, in one write: its tool calls, whole,
// after the text (the gateway has checked them before the client can act
// on them), then messageStop and the metadata event.
func (s *eventSender) finish(res *gateway.Result, latency time.Duration) error {
	return s.flushed(s.end(res, latency))
}

func (s *eventSender) end(res *gateway.Result, latency time.Duration) error {
	if err := s.begin(); err != nil {
		return err
	}
	if len(res.ToolCalls) > 0 {
		if err := s.ew.ToolCalls(bedrockIDs(res.ToolCalls)); err != nil {
			return err
		}
	}
	return s.ew.Stop(stopReason(res.StopReason), res.Usage, latency, res.GuardrailTrace)
}

// flushed writes the events held, those sent before a failure err
// included, and returns the first error.
func (s *eventSender) flushed(err error) error {
	if ferr := s.ew.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Send implements stream.Sender for a frame in the contract's JSON.
func (s *eventSender) Send(ctx context.Context, b []byte) error {
	return stream.SendDecoded(ctx, s, b)
}

// SendFrame implements stream.FrameSender.
func (s *eventSender) SendFrame(ctx context.Context, f *stream.Frame, text []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	switch f.Type {
	case stream.TypeChunk:
		if err := s.begin(); err != nil {
			return s.flushed(err)
		}
		return s.flushed(delta(s.ew, text))
	case stream.TypeError:
		if !s.ew.Started() {
			return nil // converseStream sends the HTTP error
		}
		s.failed = true
		return s.flushed(s.ew.Exception(streamException(exceptionForCode(f.Error.Code).Type), f.Error.Message))
	}
	return nil // heartbeats have no Bedrock event; done is sent by converseStream
}

func setServedHeaders(h http.Header, tier string, degraded bool, traceID string) {
	h.Set(HeaderTier, tier)
	h.Set(HeaderDegraded, strconv.FormatBool(degraded))
	if traceID != "" {
		h.Set(HeaderTraceID, traceID)
	}
}

// exceptionFor maps a refusal of the pipeline to Bedrock's exception.
func exceptionFor(err error) Exception {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		return Exception{Status: http.StatusInternalServerError, Type: InternalServerException,
			Message: "Something went wrong on our side. Please try again."}
	}
	e := exceptionForCode(ge.Code)
	e.Message, e.RetryAfter = ge.Message, ge.RetryAfter
	return e
}

func exceptionForCode(code string) Exception {
	switch code {
	case gateway.CodeInvalidRequest, gateway.CodeTooLarge, gateway.CodeDuplicate:
		return Exception{Status: http.StatusBadRequest, Type: ValidationException}
	case gateway.CodeUnauthorized:
		return Exception{Status: http.StatusForbidden, Type: UnrecognizedClientException}
	case gateway.CodeModelForbidden:
		return Exception{Status: http.StatusForbidden, Type: AccessDeniedException}
	case gateway.CodeRateLimited, gateway.CodeQuotaExhausted, gateway.CodeQueueFull, gateway.CodeQueueTimeout:
		return Exception{Status: http.StatusTooManyRequests, Type: ThrottlingException}
	case gateway.CodeBudgetExceeded:
		return Exception{Status: http.StatusBadRequest, Type: ServiceQuotaExceededException}
	case gateway.CodeShuttingDown, gateway.CodeGuardrailUnavailable:
		return Exception{Status: http.StatusServiceUnavailable, Type: ServiceUnavailableException}
	case gateway.CodeStreamTimeout:
		return Exception{Status: http.StatusRequestTimeout, Type: ModelTimeoutException}
	case gateway.CodeUpstream, gateway.CodeSlowClient, gateway.CodeCanceled:
		return Exception{Status: http.StatusServiceUnavailable, Type: ModelStreamErrorException}
	}
	return Exception{Status: http.StatusInternalServerError, Type: InternalServerException}
}

// streamException is the event-stream member of an exception type.
func streamException(exType string) string {
	switch exType {
	case ThrottlingException, ServiceQuotaExceededException:
		return "throttlingException"
	case ValidationException:
		return "validationException"
	case ServiceUnavailableException:
		return "serviceUnavailableException"
	case InternalServerException:
		return "internalServerException"
	}
	return "modelStreamErrorException"
}

func traceIDOf(tp string) string {
	if tc, ok := events.ParseTraceparent(tp); ok {
		return hex.EncodeToString(tc.TraceID[:])
	}
	return ""
}

// bedrockIDs are calls with ids a Bedrock client sends back unrefused: a
// tier of another vendor may have made ids Bedrock would not (an
// OpenAI-compatible server's "functions.get_weather:0").
func bedrockIDs(calls []provider.ToolCall) []provider.ToolCall {
	out := make([]provider.ToolCall, len(calls))
	for i, c := range calls {
		c.ID = provider.ToolID(c.ID, maxToolUseIDBytes)
		out[i] = c
	}
	return out
}
