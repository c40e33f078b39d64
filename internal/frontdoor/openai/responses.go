package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

// ResponseStore keeps the stored responses of the Responses API, each
// under its id with its owner (the user its turn ran as): to any other
// caller a stored response does not exist. A record is opaque bytes;
// every one expires after the store's time to live.
type ResponseStore interface {
	Put(ctx context.Context, id, owner string, rec []byte) error
	// Get returns owner's record id; ok is false when there is none,
	// it expired or it is another caller's.
	Get(ctx context.Context, id, owner string) (rec []byte, ok bool, err error)
	// Delete removes owner's record id, reporting whether there was one.
	Delete(ctx context.Context, id, owner string) (bool, error)
}

// record is what a stored response keeps: its conversation, its own
// answer included, as input items (what the next request continues), and
// the response object (what GET answers).
type record struct {
	Items    []json.RawMessage `json:"items"`
	Response json.RawMessage   `json:"response"`
}

func appendRecord(dst []byte, items []json.RawMessage, response []byte) []byte {
	dst = append(dst, `{"items":[`...)
	for i, it := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, it...)
	}
	dst = append(dst, `],"response":`...)
	dst = append(dst, response...)
	return append(dst, '}')
}

func itemsSize(items []json.RawMessage) int64 {
	var n int64
	for _, it := range items {
		n += int64(len(it)) + 1
	}
	return n
}

// responses serves POST /v1/responses: the request's input, after the
// conversation of the response it continues, runs as one stateless turn;
// the answer is a response object, or its events with stream:true, and is
// stored for its caller unless store is false.
func (d *door) responses(w http.ResponseWriter, r *http.Request) {
	body := d.bufs.get()
	q, e := readResponses(r, d.maxBody, d.images, body)
	d.bufs.put(body) // q keeps none of its bytes
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
		Route:       "chat",
		Surface:     "openai.responses",
		TraceParent: r.Header.Get("traceparent"),
		// The turn's traceparent, set before the first byte of the answer.
		OnTraceparent:  func(tp string) { h.Set("traceparent", tp) },
		Feature:        feature,
		Stateless:      true,
		MaxOutput:      q.MaxOutputTokens,
		Temperature:    q.Temperature,
		TopP:           q.TopP,
		PromptCacheKey: q.PromptCacheKey,
		Tools:          q.Tools,
		ToolChoice:     q.ToolChoice,
		Format:         q.Format,
	}
	if m, ok := d.g.ResolveModel(q.Model); ok {
		t.StartTier = m.Name
	}
	key, _ := gateway.Bearer(r)
	if err := d.g.Authenticate(r, key, q.User, t); err != nil {
		fromGateway(err).Write(w)
		return
	}
	owner := t.UserID
	var prior []json.RawMessage
	if q.PreviousResponseID != "" {
		rec, e := d.load(r.Context(), q.PreviousResponseID, owner, "previous_response_id")
		if e != nil {
			e.Write(w)
			return
		}
		prior = rec.Items
	}
	if n := itemsSize(prior) + itemsSize(q.Items); q.Store && n > d.maxStored {
		param := "input"
		if q.PreviousResponseID != "" {
			param = "previous_response_id"
		}
		invalidRequest(param, "The conversation so far is %d bytes, and fmgate stores at most %d bytes of conversation per response: start a new conversation, or send the whole input with store: false.", n, d.maxStored).Write(w)
		return
	}
	system, history, last, e := q.Conversation(prior)
	if e != nil {
		e.Write(w)
		return
	}
	t.ClientSystem, t.History = system, history
	t.Message, t.ToolResults, t.Images = last.Content, last.ToolResults, last.Images

	conv := append(prior[:len(prior):len(prior)], q.Items...)
	keep := func(resp *Response) {
		if !q.Store {
			return
		}
		ctx := context.WithoutCancel(r.Context())
		resp.Stored = true
		rec := appendRecord(nil, append(conv, resp.OutputItems()...), resp.AppendJSON(nil))
		if err := d.store.Put(ctx, resp.ID, owner, rec); err != nil {
			resp.Stored = false
			d.log.WarnContext(ctx, "response not stored", "response", resp.ID, "err", err)
		}
	}
	w.Header().Set("X-Request-Id", id)
	resp := &Response{ID: "resp_" + id, CreatedAt: d.now().Unix(), Request: &q}
	if q.Stream {
		d.streamResponse(w, r, t, resp, keep)
		return
	}
	out := &collector{}
	res, err := d.g.Run(r.Context(), t, out)
	if err != nil {
		fromGateway(err).Write(w)
		return
	}
	servedBy(w.Header(), res.Tier, res.Degraded, res.TraceID)
	resp.Model = answeredBy(res.ModelID, res.Tier)
	resp.Text, resp.ToolCalls = out.buf.String(), res.ToolCalls
	u := usageOf(res)
	resp.Usage = &u
	resp.Finish(FinishReason(res.StopReason))
	resp.CompletedAt = d.now().Unix()
	keep(resp)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	d.writeJSON(w, resp.AppendJSON)
}

// load reads owner's stored response id; param names it in errors.
func (d *door) load(ctx context.Context, id, owner, param string) (record, *Error) {
	var rec record
	if len(id) > MaxResponseIDBytes {
		return rec, responseNotFound(id, param)
	}
	b, ok, err := d.store.Get(ctx, id, owner)
	switch {
	case err != nil:
		d.log.WarnContext(ctx, "stored response unreadable", "response", truncate(id, 64), "err", err)
		return rec, storeUnavailable()
	case !ok:
		return rec, responseNotFound(id, param)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		d.log.ErrorContext(ctx, "stored response corrupt", "response", truncate(id, 64), "err", err)
		return rec, storeUnavailable()
	}
	return rec, nil
}

func responseNotFound(id, param string) *Error {
	e := &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "not_found", Param: param,
		Message: fmt.Sprintf("No response found with id '%s'.", truncate(id, MaxResponseIDBytes))}
	if param == "previous_response_id" {
		e.Code = "previous_response_not_found"
		e.Message = fmt.Sprintf("Previous response with id '%s' not found.", truncate(id, MaxResponseIDBytes))
	}
	return e
}

func storeUnavailable() *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: gateway.CodeUnavailable, RetryAfter: time.Second,
		Message: "Stored responses cannot be read right now. Please try again shortly."}
}

// getResponse serves GET /v1/responses/{id}: the stored response, to its
// owner.
func (d *door) getResponse(w http.ResponseWriter, r *http.Request) {
	owner, e := d.caller(r)
	if e != nil {
		e.Write(w)
		return
	}
	query := r.URL.Query()
	for _, p := range []string{"stream", "starting_after", "include_obfuscation", "include", "include[]"} {
		if v := query.Get(p); query.Has(p) && !(p == "stream" && v == "false") {
			invalidRequest(p, "fmgate does not support '%s' when retrieving a response (a stored response is read whole); remove it from the request.", p).Write(w)
			return
		}
	}
	rec, e := d.load(r.Context(), r.PathValue("id"), owner, "")
	if e != nil {
		e.Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(rec.Response, '\n'))
}

// deleteResponse serves DELETE /v1/responses/{id}, for its owner.
func (d *door) deleteResponse(w http.ResponseWriter, r *http.Request) {
	owner, e := d.caller(r)
	if e != nil {
		e.Write(w)
		return
	}
	id := r.PathValue("id")
	if len(id) > MaxResponseIDBytes {
		responseNotFound(id, "").Write(w)
		return
	}
	ok, err := d.store.Delete(r.Context(), id, owner)
	switch {
	case err != nil:
		d.log.WarnContext(r.Context(), "stored response not deleted", "response", truncate(id, 64), "err", err)
		storeUnavailable().Write(w)
		return
	case !ok:
		responseNotFound(id, "").Write(w)
		return
	}
	body := appendString([]byte(`{"id":`), id)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, `,"object":"response.deleted","deleted":true}`+"\n"...))
}

// streamResponse runs the turn into the Responses API's events. A turn
// refused before any event gets an HTTP error; a failure after them ends
// the stream with an error event and response.failed.
func (d *door) streamResponse(w http.ResponseWriter, r *http.Request, t *gateway.Turn, resp *Response, keep func(*Response)) {
	buf := d.bufs.get()
	tx := &respTranscoder{w: w, rc: http.NewResponseController(w), st: &ResponseStream{R: resp}, keep: keep, now: d.now, buf: *buf}
	out := &respStreamOutput{tx: tx}
	out.StreamOutput = d.g.NewStreamOutput(r.Context(), tx, t.RequestID)
	defer func() {
		out.Close() // no frame is sent after this: the buffer is free
		*buf = tx.buf
		d.bufs.put(buf)
	}()
	if _, err := d.g.Run(r.Context(), t, out); err != nil {
		tx.refuse(err)
	}
}

// respStreamOutput is the pipeline's chunk aggregator, telling the
// transcoder which tier writes and how the answer ended.
type respStreamOutput struct {
	*gateway.StreamOutput
	tx *respTranscoder
}

func (o *respStreamOutput) BeginTier(tier, modelID string, degraded bool) {
	o.tx.mu.Lock()
	defer o.tx.mu.Unlock()
	o.tx.tier, o.tx.degraded = tier, degraded
	o.tx.st.R.Model = answeredBy(modelID, tier)
}

func (o *respStreamOutput) BeginTrace(traceID string) {
	o.tx.mu.Lock()
	defer o.tx.mu.Unlock()
	o.tx.traceID = traceID
}

func (o *respStreamOutput) Finish(res *gateway.Result) error {
	u := usageOf(res)
	o.tx.mu.Lock()
	o.tx.finish, o.tx.usage, o.tx.calls = FinishReason(res.StopReason), &u, res.ToolCalls
	o.tx.mu.Unlock()
	return o.StreamOutput.Finish(res)
}

// respTranscoder is the stream's FrameSender: it turns the stream's
// frames into the Responses API's events, written and flushed once a
// frame. Headers go out with the first event, so a turn refused before
// the answer begins still gets an HTTP error with its status.
type respTranscoder struct {
	mu       sync.Mutex
	w        http.ResponseWriter
	rc       *http.ResponseController
	buf      []byte
	st       *ResponseStream
	keep     func(*Response)
	now      func() time.Time
	tier     string
	degraded bool
	traceID  string
	finish   string
	usage    *Usage
	// calls are sent whole, once the model's answer is in: the gateway
	// checks them before the client can act on them.
	calls  []provider.ToolCall
	wrote  bool // headers and the first events are out
	closed bool // the response went out as an HTTP error
}

// refuse answers a turn that failed before any event with an HTTP error.
func (tx *respTranscoder) refuse(err error) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.wrote || tx.closed {
		return // the failure, if any, went out in the stream
	}
	tx.closed = true
	fromGateway(err).Write(tx.w)
}

// begin sends the headers, response.created and response.in_progress.
func (tx *respTranscoder) begin(dst []byte) []byte {
	if tx.wrote {
		return dst
	}
	tx.wrote = true
	h := tx.w.Header()
	servedBy(h, tx.tier, tx.degraded, tx.traceID)
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	tx.w.WriteHeader(http.StatusOK)
	return tx.st.Begin(dst)
}

// Send implements stream.Sender for a frame in the contract's JSON.
func (tx *respTranscoder) Send(ctx context.Context, frame []byte) error {
	return stream.SendDecoded(ctx, tx, frame)
}

// SendFrame implements stream.FrameSender.
func (tx *respTranscoder) SendFrame(ctx context.Context, f *stream.Frame, text []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.closed {
		return stream.ErrClientGone
	}
	if !tx.wrote && (f.Type == stream.TypeHeartbeat || f.Type == stream.TypeError) {
		return nil // nothing to keep alive yet; an error is the door's HTTP error
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = tx.rc.SetWriteDeadline(dl)
	}
	buf := tx.buf[:0]
	switch f.Type {
	case stream.TypeChunk:
		buf = appendOutputTextDelta(tx.st, tx.begin(buf), text)
	case stream.TypeDone:
		buf = tx.begin(buf)
		r := tx.st.R
		u := Usage{PromptTokens: f.Done.Tokens.Input, CompletionTokens: f.Done.Tokens.Output, CostUSD: f.Done.CostUSD,
			CachedTokens: f.Done.Tokens.CacheRead, CacheWriteTokens: f.Done.Tokens.CacheWrite}
		if tx.usage != nil {
			u = *tx.usage
		}
		r.ToolCalls, r.Usage = tx.calls, &u
		r.Finish(orElse(tx.finish, FinishStop))
		r.CompletedAt = tx.now().Unix()
		tx.keep(r)
		buf = tx.st.End(buf)
	case stream.TypeError:
		buf = tx.st.Fail(buf, fromFrame(f.Error))
	case stream.TypeHeartbeat:
		buf = append(buf, ": keep-alive\n\n"...)
	default:
		return nil
	}
	tx.buf = buf
	if _, err := tx.w.Write(buf); err != nil {
		return err
	}
	if err := tx.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
