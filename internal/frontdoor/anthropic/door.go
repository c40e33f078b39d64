package anthropic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
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

// Pipeline is what the front door needs of the gateway.
type Pipeline interface {
	Run(ctx context.Context, t *gateway.Turn, out gateway.Output) (*gateway.Result, error)
	NewStreamOutput(ctx context.Context, s stream.Sender, requestID string) *gateway.StreamOutput
	Authenticate(r *http.Request, key, bodyUser string, t *gateway.Turn) error
	ResolveModel(name string) (config.Model, bool)
	Models() []config.Model
	CountTokens(ctx context.Context, t *gateway.Turn) (n int, estimated bool, err error)
}

// Options tune the door. The zero value is the default.
type Options struct {
	// MaxBodyBytes bounds a request body (the whole conversation).
	// Default DefaultMaxBodyBytes (4 MiB).
	MaxBodyBytes int64
	// Images bound the images a request may carry; zero fields are
	// vision's defaults.
	Images vision.Limits
}

// Response headers saying how an answer was served.
const (
	HeaderTier     = "x-fmgate-tier"
	HeaderDegraded = "x-fmgate-degraded"
	HeaderTraceID  = "x-fmgate-trace-id"
	// HeaderFeature, on a request, attributes the turn to a product
	// feature in events and cost views: up to 64 letters, digits, '.', '_'
	// or '-'; anything else, or none, is "chat".
	HeaderFeature = "x-fmgate-feature"
)

// New returns fmgate's Anthropic front door: POST /v1/messages runs each
// request through g's pipeline as a stateless turn and answers in the
// Messages API's JSON or SSE event sequence.
//
//   - model names where the turn starts: a tier, its modelId or an alias
//     (config.Config.ResolveModel); any other name starts at the first
//     tier. The turn falls down the cascade below it; the answer's model
//     field, and x-fmgate-tier, name who answered.
//   - The key comes from x-api-key, or Authorization: Bearer; the
//     anthropic-version and anthropic-beta headers are tolerated.
//   - system is appended to fmgate's own system prompt.
//   - messages bring the whole conversation; fmgate's session store is
//     neither read nor written.
//   - Refusals come in Anthropic's error shape and status: 400
//     invalid_request_error, 401 authentication_error, 402 billing_error
//     (budget exceeded), 404 not_found_error, 413 request_too_large, 429
//     rate_limit_error with retry-after, 529 overloaded_error (fmgate is
//     draining or the client was too slow), 500 api_error. A stream that
//     breaks after its first event ends with an `error` event.
func New(g Pipeline, opts Options) http.Handler {
	d := &door{g: g, maxBody: opts.MaxBodyBytes, images: opts.Images}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", d.serveMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", d.countTokens)
	mux.HandleFunc("GET /v1/models", d.listModels)
	mux.HandleFunc("GET /v1/models/{model}", d.getModel)
	return mux
}

type door struct {
	g       Pipeline
	maxBody int64
	images  vision.Limits
}

func (d *door) serveMessages(w http.ResponseWriter, r *http.Request) {
	req, werr := DecodeRequest(r.Body, d.maxBody, d.images)
	if werr != nil {
		WriteError(w, werr)
		return
	}
	// A name that no tier answers to starts at the first tier, as on every
	// door: the answer's model and x-fmgate-tier say what served it.
	m, _ := d.g.ResolveModel(req.Model)
	t := d.turn(r, req, m)
	traced(w.Header(), t)
	if err := d.authenticate(r, req.UserID, t); err != nil {
		writeGatewayError(w, err)
		return
	}
	if req.Stream {
		d.stream(w, r, t)
		return
	}
	out := &collector{}
	res, err := d.g.Run(r.Context(), t, out)
	if err != nil {
		writeGatewayError(w, err)
		return
	}
	servedBy(w.Header(), res.Tier, res.Degraded, res.TraceID)
	msg := NewMessage(t.RequestID, answeredBy(res.Tier, res.ModelID))
	msg.Content = Blocks(res.Thinking, out.text(), res.ToolCalls)
	msg.StopReason = Ptr(StopReason(res.StopReason))
	if res.StopSequence != "" {
		msg.StopSequence = Ptr(res.StopSequence)
	}
	msg.Usage = UsageOf(res.Usage)
	WriteMessage(w, msg)
}

// authenticate fills t's caller from x-api-key, or Authorization: Bearer
// (the SDKs send either), or in the demo profile from bodyUser.
func (d *door) authenticate(r *http.Request, bodyUser string, t *gateway.Turn) error {
	key := r.Header.Get("x-api-key")
	if key == "" {
		key, _ = gateway.Bearer(r)
	}
	return d.g.Authenticate(r, key, bodyUser, t)
}

// HeaderTokenCount says who counted a count_tokens answer: "vendor" (the
// tier's own count) or "estimate" (fmgate's, for a vendor that cannot
// count, or did not answer).
const HeaderTokenCount = "x-fmgate-token-count"

// RemoteImageCount refuses to count the tokens of images given by URL:
// counting is not a turn, so fmgate fetches nothing for it.
const RemoteImageCount = "messages: count_tokens counts images sent inline (base64) only: fmgate fetches an image from its URL only for a message it answers"

// countTokens answers count_tokens: the input tokens of a Messages request
// as the tier its model names would be sent it, fmgate's system prompt
// included (see gateway.Gateway.CountTokens); a key that may not use that
// tier gets the refusal /v1/messages would give it.
func (d *door) countTokens(w http.ResponseWriter, r *http.Request) {
	req, werr := DecodeCountTokens(r.Body, d.maxBody, d.images)
	if werr != nil {
		WriteError(w, werr)
		return
	}
	m, _ := d.g.ResolveModel(req.Model)
	t := d.turn(r, req, m)
	if err := d.authenticate(r, "", t); err != nil {
		writeGatewayError(w, err)
		return
	}
	if t.RemoteImages() > 0 {
		WriteError(w, invalid("%s", RemoteImageCount))
		return
	}
	n, estimated, err := d.g.CountTokens(r.Context(), t)
	if err != nil {
		// A key that may not use the tier is refused as on /v1/messages.
		writeGatewayError(w, err)
		return
	}
	w.Header().Set(HeaderTokenCount, map[bool]string{true: "estimate", false: "vendor"}[estimated])
	writeJSON(w, http.StatusOK, struct {
		InputTokens int `json:"input_tokens"`
	}{n})
}

// turn is the pipeline's turn for req: the last user message, the
// conversation before it, the client's system prompt and sampling.
func (d *door) turn(r *http.Request, req *Request, m config.Model) *gateway.Turn {
	id := "msg_" + newID()
	last := len(req.Messages) - 1 // the user's message; a prefill is apart
	feature := r.Header.Get(HeaderFeature)
	if !validFeature(feature) {
		feature = "chat"
	}
	return &gateway.Turn{
		RequestID:         id,
		SessionID:         id,
		Message:           req.Messages[last].Content,
		MessageCache:      req.Messages[last].Cache,
		History:           append([]provider.Message(nil), req.Messages[:last]...),
		Stateless:         true,
		StartTier:         m.Name,
		ClientSystem:      req.System,
		ClientSystemCache: req.SystemCache,
		MaxOutput:         req.MaxTokens,
		Temperature:       req.Temperature,
		TopP:              req.TopP,
		TopK:              req.TopK,
		Prefill:           req.Prefill,
		StopSequences:     req.StopSequences,
		Tools:             req.Tools,
		ToolChoice:        req.ToolChoice,
		Thinking:          req.Thinking,
		Format:            req.Format,
		ToolResults:       req.Messages[last].ToolResults,
		Images:            req.Messages[last].Images,
		Route:             "chat",
		Surface:           "anthropic",
		Feature:           feature,
		TraceParent:       r.Header.Get("traceparent"),
	}
}

func (d *door) stream(w http.ResponseWriter, r *http.Request, t *gateway.Turn) {
	if err := Stream(r.Context(), d.g, NewEvents(w), t); err != nil {
		writeGatewayError(w, err)
	}
}

// Runner runs turns into a stream.
type Runner interface {
	Run(ctx context.Context, t *gateway.Turn, out gateway.Output) (*gateway.Result, error)
	NewStreamOutput(ctx context.Context, s stream.Sender, requestID string) *gateway.StreamOutput
}

// Stream runs t through g and answers with the Messages API's event
// sequence, written by ev: message_start once the answer begins, the
// model's thinking blocks (thinking_delta and signature_delta pieces as
// the model wrote them, held until the answer's first text so that a
// failed attempt's reasoning never reaches the client), the text block
// and its deltas, pings while the model is silent, then the block's end,
// message_delta with the stop reason and the usage, and message_stop; a
// failure after the answer began ends it with an error event. A turn refused or failed before anything was sent returns its
// error, for the caller to answer in its own shape; otherwise nil.
func Stream(ctx context.Context, g Runner, ev *Events, t *gateway.Turn) error {
	ev.Hold() // each frame's events leave in one write; sender.SendFrame flushes them
	snd := &sender{ev: ev, id: t.RequestID}
	headers := t.OnTraceparent
	t.OnTraceparent = func(tp string) {
		if headers != nil {
			headers(tp)
		}
		snd.traceID = traceIDOf(tp) // before the first event: the turn's span starts first
	}
	so := g.NewStreamOutput(ctx, snd, t.RequestID)
	_, err := g.Run(ctx, t, &streamOutput{StreamOutput: so, snd: snd})
	so.Close() // the sender goroutine is done: the writer is the caller's again
	if err != nil && !snd.began() {
		return err
	}
	return nil
}

// streamOutput is the chunk aggregator, telling the sender which tier
// answers and the whole result (stop reason, every usage field) before the
// done frame goes out.
type streamOutput struct {
	*gateway.StreamOutput
	snd *sender
}

func (o *streamOutput) BeginTier(tier, modelID string, degraded bool) {
	o.snd.mu.Lock()
	o.snd.tier, o.snd.model, o.snd.degraded = tier, answeredBy(tier, modelID), degraded
	o.snd.mu.Unlock()
}

// Think holds a piece of the model's reasoning until the answer opens.
func (o *streamOutput) Think(d provider.ThinkingDelta) error {
	o.snd.mu.Lock()
	defer o.snd.mu.Unlock()
	o.snd.thinking = append(o.snd.thinking, d)
	return nil
}

// Discard drops the reasoning held with the text, before a retry or a
// fallback tier answers.
func (o *streamOutput) Discard() {
	o.StreamOutput.Discard()
	o.snd.mu.Lock()
	defer o.snd.mu.Unlock()
	if !o.snd.started {
		o.snd.thinking = nil
	}
}

func (o *streamOutput) Finish(res *gateway.Result) error {
	o.snd.mu.Lock()
	o.snd.res = res
	o.snd.mu.Unlock()
	return o.StreamOutput.Finish(res)
}

// sender is the stream's FrameSender: it transcodes the stream's frames
// into the Messages API's events, flushed once a frame. Headers go out
// with the first text (or the end of an empty answer), so a turn refused
// before it still gets a JSON error with its status. A heartbeat before
// then is dropped; after it, it is a ping.
type sender struct {
	ev      *Events
	id      string
	traceID string

	mu       sync.Mutex
	tier     string
	model    string
	degraded bool
	res      *gateway.Result
	started  bool
	text     bool // the text block is open, at index textAt
	textAt   int
	next     int // the index of the next content block
	// thinking is the reasoning held until the answer opens.
	thinking []provider.ThinkingDelta
}

func (s *sender) began() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Send implements stream.Sender for a frame in the contract's JSON.
func (s *sender) Send(ctx context.Context, frame []byte) error {
	return stream.SendDecoded(ctx, s, frame)
}

// SendFrame implements stream.FrameSender: the frame's events go out in
// one write and one flush, those sent before a failure included.
func (s *sender) SendFrame(ctx context.Context, f *stream.Frame, text []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		s.ev.SetWriteDeadline(dl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.sendLocked(f, text)
	if ferr := s.ev.Flush(); err == nil {
		err = ferr
	}
	return err
}

func (s *sender) sendLocked(f *stream.Frame, text []byte) error {
	switch f.Type {
	case stream.TypeChunk:
		if err := s.openLocked(true); err != nil {
			return err
		}
		return s.ev.textDelta(s.textAt, text)
	case stream.TypeHeartbeat:
		if !s.started {
			return nil
		}
		return s.ev.Ping()
	case stream.TypeDone:
		s.tier, s.degraded = f.Done.Tier, f.Done.Degraded
		var calls []provider.ToolCall
		if s.res != nil {
			calls = s.res.ToolCalls
		}
		if err := s.openLocked(len(calls) == 0); err != nil {
			return err
		}
		tk := f.Done.Tokens
		stop, usage := StopEndTurn, UsageOf(provider.Usage{InputTokens: tk.Input - tk.CacheRead - tk.CacheWrite,
			CachedInputTokens: tk.CacheRead, CacheWriteTokens: tk.CacheWrite, OutputTokens: tk.Output})
		var seq *string
		if s.res != nil {
			stop, usage = StopReason(s.res.StopReason), UsageOf(s.res.Usage)
			if s.res.StopSequence != "" {
				seq = Ptr(s.res.StopSequence)
			}
		}
		if s.text {
			if err := s.ev.BlockStop(s.textAt); err != nil {
				return err
			}
		}
		for i, c := range calls {
			if err := s.ev.ToolUse(s.next+i, c); err != nil {
				return err
			}
		}
		if err := s.ev.MessageDelta(stop, seq, usage); err != nil {
			return err
		}
		return s.ev.MessageStop()
	case stream.TypeError:
		if !s.started {
			return nil // the door answers with the error's status instead
		}
		e := errorFor(f.Error.Code, statusOfCode(f.Error.Code), f.Error.Message, 0)
		return s.ev.Error(e.Type, e.Message)
	}
	return nil
}

// openLocked sends the headers, message_start and the reasoning held, and
// with text the text block's start (an answer of tool calls alone has no
// text block).
func (s *sender) openLocked(text bool) error {
	if !s.started {
		s.started = true
		servedBy(s.ev.w.Header(), s.tier, s.degraded, s.traceID)
		if err := s.ev.MessageStart(NewMessage(s.id, s.model)); err != nil {
			return err
		}
		if err := s.thinkLocked(); err != nil {
			return err
		}
	}
	if !text || s.text {
		return nil
	}
	s.text, s.textAt = true, s.next
	s.next++
	return s.ev.BlockStart(s.textAt)
}

// thinkLocked sends the reasoning held: each thinking block's start, its
// pieces and its signature, and its stop; a redacted block whole.
func (s *sender) thinkLocked() error {
	open, at := -1, 0 // the block being sent, by the model's number, and its index
	stop := func() error {
		if open < 0 {
			return nil
		}
		open = -1
		return s.ev.BlockStop(at)
	}
	for _, d := range s.thinking {
		if d.Redacted != "" {
			if err := stop(); err != nil {
				return err
			}
			if err := s.ev.RedactedThinking(s.next, d.Redacted); err != nil {
				return err
			}
			s.next++
			continue
		}
		if d.Block != open {
			if err := stop(); err != nil {
				return err
			}
			open, at = d.Block, s.next
			s.next++
			if err := s.ev.ThinkingStart(at); err != nil {
				return err
			}
		}
		if d.Text != "" {
			if err := s.ev.ThinkingDelta(at, d.Text); err != nil {
				return err
			}
		}
		if d.Signature != "" {
			if err := s.ev.SignatureDelta(at, d.Signature); err != nil {
				return err
			}
		}
	}
	s.thinking = nil
	return stop()
}

func servedBy(h http.Header, tier string, degraded bool, traceID string) {
	if tier != "" {
		h.Set(HeaderTier, tier)
	}
	h.Set(HeaderDegraded, strconv.FormatBool(degraded))
	if traceID != "" {
		h.Set(HeaderTraceID, traceID)
	}
}

// validFeature accepts a short name of letters, digits, '.', '_' and '-':
// it is stored in every event of the turn.
func validFeature(f string) bool {
	if f == "" || len(f) > 64 {
		return false
	}
	for _, c := range f {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// traced has the turn's traceparent and trace id sent as response headers
// as soon as its span starts, before the first byte of an answer. A client
// without a traceparent gets a new trace, sampled as the gateway samples.
func traced(h http.Header, t *gateway.Turn) {
	t.OnTraceparent = func(tp string) {
		h.Set("traceparent", tp)
		if id := traceIDOf(tp); id != "" {
			h.Set(HeaderTraceID, id)
		}
	}
}

func traceIDOf(tp string) string {
	if tc, ok := events.ParseTraceparent(tp); ok {
		return tc.TraceHex()
	}
	return ""
}

// answeredBy is the model field of an answer: the provider's model id, or
// for the tiers below the models (cache, faq, graceful) the tier's name.
func answeredBy(tier, modelID string) string {
	if modelID != "" {
		return modelID
	}
	return tier
}

// writeGatewayError sends a pipeline refusal in Anthropic's shape.
func writeGatewayError(w http.ResponseWriter, err error) {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		WriteError(w, &Error{Status: http.StatusInternalServerError, Type: ErrAPI,
			Message: "Something went wrong on our side. Please try again."})
		return
	}
	for k, vs := range ge.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	WriteError(w, errorFor(ge.Code, ge.Status, ge.Message, ge.RetryAfter))
}

// errorFor maps a pipeline refusal (status and code) to Anthropic's type
// and status. 503s (draining, slow client, shutting down) become 529
// overloaded_error, which Anthropic's SDKs retry after a pause.
func errorFor(code string, status int, message string, retryAfter time.Duration) *Error {
	e := &Error{Status: status, Message: message, RetryAfter: retryAfter}
	switch {
	case status == http.StatusUnauthorized:
		e.Type = ErrAuthentication
	case status == http.StatusPaymentRequired:
		e.Type = ErrBilling
	case status == http.StatusForbidden:
		e.Type = ErrPermission
	case status == http.StatusNotFound:
		e.Type = ErrNotFound
	case status == http.StatusRequestEntityTooLarge:
		e.Type = ErrRequestTooLarge
	case status == http.StatusTooManyRequests:
		e.Type = ErrRateLimit
	case status == http.StatusServiceUnavailable:
		e.Status, e.Type = StatusOverloaded, ErrOverloaded
	case status == http.StatusGatewayTimeout:
		e.Type = ErrTimeout
	case status == 499: // the client went away; nobody reads this
		e.Status, e.Type = http.StatusBadRequest, ErrInvalidRequest
	case status >= 500:
		e.Status, e.Type = http.StatusInternalServerError, ErrAPI
	default:
		e.Type = ErrInvalidRequest
	}
	if code == gateway.CodeDuplicate {
		e.Type = ErrInvalidRequest
	}
	return e
}

// statusOfCode is the status of a pipeline error code carried by an error
// frame, which has no status of its own.
func statusOfCode(code string) int {
	switch code {
	case gateway.CodeInvalidRequest:
		return http.StatusBadRequest
	case gateway.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case gateway.CodeUnauthorized:
		return http.StatusUnauthorized
	case gateway.CodeBudgetExceeded:
		return http.StatusPaymentRequired
	case gateway.CodeRateLimited, gateway.CodeQuotaExhausted, gateway.CodeQueueFull:
		return http.StatusTooManyRequests
	case gateway.CodeShuttingDown, gateway.CodeSlowClient, gateway.CodeStreamTimeout:
		return http.StatusServiceUnavailable
	case gateway.CodeQueueTimeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// collector is the Output of a JSON answer: it holds the text until the end.
type collector struct{ buf strings.Builder }

func (c *collector) Write(text string) error { c.buf.WriteString(text); return nil }
func (c *collector) Started() bool           { return false }
func (c *collector) Discard()                { c.buf.Reset() }
func (c *collector) WholeAnswer() bool       { return true }
func (c *collector) Finish(*gateway.Result) error {
	return nil
}
func (c *collector) Fail(*gateway.Error) error { return nil }
func (c *collector) text() string              { return c.buf.String() }

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
