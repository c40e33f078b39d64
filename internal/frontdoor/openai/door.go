package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/respstore"
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
}

// Options tune the front door; zero values are the defaults.
type Options struct {
	// MaxBodyBytes bounds a request body, the whole conversation included.
	// Default DefaultMaxBodyBytes (4 MiB).
	MaxBodyBytes int64
	// Images bound the images a request may carry; zero fields are
	// vision's defaults.
	Images vision.Limits
	// Now stamps the answers' created time; nil is time.Now.
	Now func() time.Time
	// Responses keeps the Responses API's stored responses (store: true)
	// for previous_response_id, GET and DELETE. Nil is a store in this
	// process's memory (respstore.NewMemory) of DefaultStoredResponses
	// responses, each kept DefaultStoreTTL.
	Responses ResponseStore
	// MaxStoredBytes bounds the conversation a stored response keeps (its
	// input and the conversation it continues; its own answer comes on
	// top): a request that would store more is refused. Default
	// MaxBodyBytes, what a client could send in one request.
	MaxStoredBytes int64
	// Log receives what the door cannot tell the client (a response it
	// could not store); nil discards it.
	Log *slog.Logger
}

// Defaults of the in-memory response store.
const (
	DefaultStoredResponses = 100_000
	DefaultStoreTTL        = 30 * time.Minute
)

// Response headers that say how an answer was served.
const (
	HeaderTier     = "X-Fmgate-Tier"
	HeaderDegraded = "X-Fmgate-Degraded"
	HeaderTraceID  = "X-Fmgate-Trace-Id"
	// HeaderFeature, on a request, attributes the turn to a product feature
	// (default "chat"), at most 64 bytes.
	HeaderFeature = "X-Fmgate-Feature"
)

// New is the OpenAI-compatible front door over g:
//
//	POST   /v1/chat/completions  a chat completion, JSON or SSE (stream:true)
//	POST   /v1/responses         a response (Responses API), JSON or SSE
//	GET    /v1/responses/{id}    a stored response, to its owner
//	DELETE /v1/responses/{id}    deletes a stored response, for its owner
//	GET    /v1/models            the model tiers
//	GET    /v1/models/{model}    one tier
//
// The caller's key is Authorization: Bearer, an auth.keys entry. "model"
// names a tier or its modelId and the turn starts there, falling down the
// cascade below it; any other model name starts at the primary tier, so an
// app keeps its model name and learns the tier that answered from the
// response's "model" and the X-Fmgate-* headers. The request carries the
// whole conversation: fmgate's session store is neither read nor written.
// System and developer messages follow fmgate's configured prompt. "user"
// names the end user when fmgate trusts a user header (no auth.keys).
//
// A response of the Responses API carries its conversation too: the
// request's input, after the conversation of the stored response it names
// in previous_response_id, which belongs to the caller that stored it.
func New(g Pipeline, opts Options) http.Handler {
	d := &door{g: g, maxBody: opts.MaxBodyBytes, images: opts.Images, now: opts.Now,
		store: opts.Responses, maxStored: opts.MaxStoredBytes, log: opts.Log}
	if d.maxBody <= 0 {
		d.maxBody = DefaultMaxBodyBytes
	}
	if d.now == nil {
		d.now = time.Now
	}
	if d.store == nil {
		d.store = respstore.NewMemory(DefaultStoredResponses, 0, DefaultStoreTTL, d.now)
	}
	if d.maxStored <= 0 {
		d.maxStored = d.maxBody
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", d.chat)
	mux.HandleFunc("POST /v1/responses", d.responses)
	mux.HandleFunc("GET /v1/responses/{id}", d.getResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", d.deleteResponse)
	mux.HandleFunc("GET /v1/models", d.models)
	mux.HandleFunc("GET /v1/models/{model}", d.model)
	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/responses": "POST",
		"/v1/responses/{id}": "GET, DELETE", "/v1/models": "GET", "/v1/models/{model}": "GET"} {
		mux.Handle(path, notAllowed(allow))
	}
	return mux
}

// notAllowed answers another method than allow on a route with a 405 in
// OpenAI's error shape, as OpenAI does, rather than the plain text an SDK
// would show as its message.
func notAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		(&Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
			Message: fmt.Sprintf("Invalid method for URL (%s %s): use %s.", r.Method, truncate(r.URL.Path, 200), allow)}).Write(w)
	})
}

type door struct {
	g         Pipeline
	maxBody   int64
	images    vision.Limits
	now       func() time.Time
	store     ResponseStore
	maxStored int64
	log       *slog.Logger
	bufs      bufPool // request bodies, JSON answers, event streams
}

func (d *door) chat(w http.ResponseWriter, r *http.Request) {
	body := d.bufs.get()
	c, e := readChat(r, d.maxBody, d.images, body)
	d.bufs.put(body) // c keeps none of its bytes
	if e != nil {
		e.Write(w)
		return
	}
	feature, e := featureOf(r)
	if e != nil {
		e.Write(w)
		return
	}
	id := newID()
	h := w.Header()
	t := &gateway.Turn{
		RequestID:   id,
		SessionID:   id,
		Message:     c.Message,
		Route:       "chat",
		Surface:     "openai",
		TraceParent: r.Header.Get("traceparent"),
		// The turn's traceparent, set before the first byte of the answer.
		OnTraceparent:  func(tp string) { h.Set("traceparent", tp) },
		Feature:        feature,
		Stateless:      true,
		History:        c.History,
		ClientSystem:   c.System,
		MaxOutput:      c.MaxTokens,
		Temperature:    c.Temperature,
		TopP:           c.TopP,
		Seed:           c.Seed,
		StopSequences:  c.Stop,
		PromptCacheKey: c.PromptCacheKey,
		Tools:          c.Tools,
		ToolChoice:     c.ToolChoice,
		ToolResults:    c.ToolResults,
		Images:         c.Images,
		Format:         c.Format,
	}
	if m, ok := d.g.ResolveModel(c.Model); ok {
		t.StartTier = m.Name
	}
	key, _ := gateway.Bearer(r)
	if err := d.g.Authenticate(r, key, c.User, t); err != nil {
		fromGateway(err).Write(w)
		return
	}
	w.Header().Set("X-Request-Id", id)
	meta := chunkMeta{id: "chatcmpl-" + id, created: d.now().Unix(), includeUsage: c.IncludeUsage}
	if c.Stream {
		d.stream(w, r, t, meta)
		return
	}
	out := &collector{}
	res, err := d.g.Run(r.Context(), t, out)
	if err != nil {
		fromGateway(err).Write(w)
		return
	}
	servedBy(w.Header(), res.Tier, res.Degraded, res.TraceID)
	answer := Completion{
		ID: meta.id, Created: meta.created, Model: answeredBy(res.ModelID, res.Tier), Text: out.buf.String(),
		ToolCalls: res.ToolCalls, FinishReason: FinishReason(res.StopReason), StopSequence: res.StopSequence, Usage: usageOf(res),
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	d.writeJSON(w, answer.AppendJSON)
}

// writeJSON writes the JSON that appendJSON appends, and a newline, as the
// response body, encoded in a pooled buffer.
func (d *door) writeJSON(w http.ResponseWriter, appendJSON func([]byte) []byte) {
	b := d.bufs.get()
	*b = append(appendJSON(*b), '\n')
	_, _ = w.Write(*b)
	d.bufs.put(b)
}

// stream runs the turn into chat.completion.chunk events. A turn refused
// before any text gets an HTTP error; a failure after text ends the stream
// with an error event and no [DONE].
func (d *door) stream(w http.ResponseWriter, r *http.Request, t *gateway.Turn, meta chunkMeta) {
	buf := d.bufs.get()
	tx := &transcoder{ev: newEvents(w, meta)}
	tx.ev.buf = *buf
	out := &streamOutput{tx: tx}
	out.StreamOutput = d.g.NewStreamOutput(r.Context(), tx, t.RequestID)
	defer func() {
		out.Close() // no frame is sent after this: the buffer is free
		*buf = tx.ev.buf
		d.bufs.put(buf)
	}()
	if _, err := d.g.Run(r.Context(), t, out); err != nil {
		tx.refuse(err)
	}
}

// streamOutput is the pipeline's chunk aggregator, telling the transcoder
// which tier writes and how the answer ended.
type streamOutput struct {
	*gateway.StreamOutput
	tx *transcoder
}

func (o *streamOutput) BeginTier(tier, modelID string, degraded bool) {
	o.tx.mu.Lock()
	defer o.tx.mu.Unlock()
	o.tx.tier, o.tx.degraded = tier, degraded
	o.tx.ev.meta.model = answeredBy(modelID, tier)
}

func (o *streamOutput) BeginTrace(traceID string) {
	o.tx.mu.Lock()
	defer o.tx.mu.Unlock()
	o.tx.traceID = traceID
}

func (o *streamOutput) Finish(res *gateway.Result) error {
	o.tx.mu.Lock()
	o.tx.finish, o.tx.usage, o.tx.toolCalls = FinishReason(res.StopReason), usageOf(res), res.ToolCalls
	o.tx.ev.stopSequence = res.StopSequence
	o.tx.mu.Unlock()
	return o.StreamOutput.Finish(res)
}

// transcoder is the stream's FrameSender: it turns the stream's frames
// into OpenAI's events, written and flushed once a frame.
type transcoder struct {
	mu       sync.Mutex
	ev       *events
	tier     string
	degraded bool
	traceID  string
	finish   string
	usage    Usage
	// toolCalls are sent whole, once the model's answer is in: the
	// gateway checks them before the client can act on them.
	toolCalls []provider.ToolCall
	closed    bool // the response went out as an HTTP error
}

// refuse answers a turn that failed before any event with an HTTP error;
// the stream sends nothing after it.
func (tx *transcoder) refuse(err error) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.ev.wrote || tx.closed {
		return // the error event, if any, went out in the stream
	}
	tx.closed = true
	fromGateway(err).Write(tx.ev.w)
}

// Send implements stream.Sender for a frame in the contract's JSON.
func (tx *transcoder) Send(ctx context.Context, frame []byte) error {
	return stream.SendDecoded(ctx, tx, frame)
}

// SendFrame implements stream.FrameSender.
func (tx *transcoder) SendFrame(ctx context.Context, f *stream.Frame, text []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.closed {
		return stream.ErrClientGone
	}
	if f.Type == stream.TypeHeartbeat && !tx.ev.wrote {
		return nil // nothing to keep alive yet; the status is still open
	}
	if f.Type == stream.TypeError && !tx.ev.wrote {
		return nil // the door answers with an HTTP error instead
	}
	if !tx.ev.wrote {
		servedBy(tx.ev.w.Header(), tx.tier, tx.degraded, tx.traceID)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = tx.ev.rc.SetWriteDeadline(dl)
	}
	switch f.Type {
	case stream.TypeChunk:
		tx.ev.addDelta(text)
	case stream.TypeDone:
		u := tx.usage
		if u == (Usage{}) {
			u = Usage{PromptTokens: f.Done.Tokens.Input, CompletionTokens: f.Done.Tokens.Output, CostUSD: f.Done.CostUSD,
				CachedTokens: f.Done.Tokens.CacheRead, CacheWriteTokens: f.Done.Tokens.CacheWrite}
		}
		tx.ev.addToolCalls(tx.toolCalls)
		tx.ev.addFinish(orElse(tx.finish, FinishStop), u)
	case stream.TypeError:
		tx.ev.addFail(fromFrame(f.Error))
	case stream.TypeHeartbeat:
		tx.ev.addComment()
	default:
		return nil
	}
	return tx.ev.flush()
}

// collector is the Output of a JSON answer.
type collector struct{ buf strings.Builder }

func (c *collector) Write(text string) error      { c.buf.WriteString(text); return nil }
func (c *collector) Started() bool                { return false }
func (c *collector) Discard()                     { c.buf.Reset() }
func (c *collector) Finish(*gateway.Result) error { return nil }
func (c *collector) Fail(*gateway.Error) error    { return nil }
func (c *collector) WholeAnswer() bool            { return true }

// models lists the model tiers the caller's API key may use.
func (d *door) models(w http.ResponseWriter, r *http.Request) {
	key, _ := gateway.Bearer(r)
	var t gateway.Turn
	if err := d.g.Authenticate(r, key, "", &t); err != nil {
		fromGateway(err).Write(w)
		return
	}
	buf := append(make([]byte, 0, 256), `{"object":"list","data":[`...)
	n := 0
	for _, m := range d.g.Models() {
		if !t.MayUse(m.Name) {
			continue
		}
		if n > 0 {
			buf = append(buf, ',')
		}
		buf = appendModel(buf, m.Name)
		n++
	}
	buf = append(buf, "]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf)
}

func (d *door) model(w http.ResponseWriter, r *http.Request) {
	if e := d.authenticate(r); e != nil {
		e.Write(w)
		return
	}
	m, ok := d.g.ResolveModel(r.PathValue("model"))
	if !ok {
		modelNotFound(r.PathValue("model")).Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(appendModel(nil, m.Name), '\n'))
}

func (d *door) authenticate(r *http.Request) *Error {
	_, e := d.caller(r)
	return e
}

// caller authenticates a request that runs no turn, returning the user
// it comes from.
func (d *door) caller(r *http.Request) (string, *Error) {
	key, _ := gateway.Bearer(r)
	var t gateway.Turn
	if err := d.g.Authenticate(r, key, "", &t); err != nil {
		return "", fromGateway(err)
	}
	return t.UserID, nil
}

// featureOf is the product feature a request's turn is attributed to.
func featureOf(r *http.Request) (string, *Error) {
	feature := r.Header.Get(HeaderFeature)
	if len(feature) > 64 {
		return "", invalidRequest("", "The %s header must be at most 64 bytes.", HeaderFeature)
	}
	return feature, nil
}

func appendModel(dst []byte, name string) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, name)
	return append(dst, `,"object":"model","created":0,"owned_by":"fmgate"}`...)
}

// servedBy sets the headers that say how an answer was served.
// The header names are canonical, so the values go in directly, in one
// allocation; each is capped at its length, so an Add copies it.
func servedBy(h http.Header, tier string, degraded bool, traceID string) {
	v := [...]string{tier, strconv.FormatBool(degraded), traceID}
	vals := v[:]
	if traceID == "" {
		vals = v[:2]
	}
	vals = slices.Clone(vals)
	h[HeaderTier] = vals[0:1:1]
	h[HeaderDegraded] = vals[1:2:2]
	if traceID != "" {
		h[HeaderTraceID] = vals[2:3:3]
	}
}

// answeredBy is the response's "model": the provider's model id, or the
// name of the fallback tier (cache, faq, graceful) that answered.
func answeredBy(modelID, tier string) string {
	return orElse(modelID, tier)
}

func usageOf(res *gateway.Result) Usage { return UsageOf(res.Usage, res.CostUSD) }

// fromGateway is the OpenAI error for a turn the gateway refused or failed.
func fromGateway(err error) *Error {
	var ge *gateway.Error
	if !errors.As(err, &ge) {
		return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: gateway.CodeInternal,
			Message: "Something went wrong on our side. Please try again."}
	}
	e := &Error{Status: ge.Status, Message: ge.Message, Code: ge.Code, RetryAfter: ge.RetryAfter, Header: ge.Header, Type: errorType(ge.Status, ge.Code)}
	switch {
	case ge.Status == http.StatusUnauthorized:
		e.Code = "invalid_api_key"
	case ge.Status == 499: // the client went away
		e.Status = http.StatusBadRequest
	}
	return e
}

// fromFrame is the error event for an error frame mid-stream.
func fromFrame(f stream.ErrorFrame) *Error {
	e := &Error{Message: f.Message, Code: f.Code, Type: errorType(http.StatusInternalServerError, f.Code)}
	if f.RetryAfterSeconds > 0 {
		e.RetryAfter = time.Duration(f.RetryAfterSeconds) * time.Second
	}
	return e
}

// errorType is OpenAI's error type for a status.
func errorType(status int, code string) string {
	switch {
	case status == http.StatusUnauthorized:
		return "invalid_request_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusPaymentRequired:
		return "insufficient_quota"
	case status == http.StatusTooManyRequests && code == gateway.CodeQuotaExhausted:
		return "tokens"
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func orElse(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
