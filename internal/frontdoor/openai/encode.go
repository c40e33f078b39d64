package openai

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

// Finish reasons of a choice, as OpenAI names them.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "content_filter"
	FinishToolCalls     = "tool_calls"
)

// FinishReason maps a provider's stop reason (end_turn, max_tokens,
// stop_sequence, Bedrock's and OpenAI's own names) to OpenAI's.
func FinishReason(stop string) string {
	switch stop {
	case "max_tokens", "length", "model_context_window_exceeded":
		return FinishLength
	case "content_filter", "content_filtered", "guardrail_intervened", "refusal":
		return FinishContentFilter
	case provider.StopToolUse, "tool_calls":
		return FinishToolCalls
	}
	return FinishStop
}

// UsageOf is u, priced at cost, as an answer's usage.
func UsageOf(u provider.Usage, cost float64) Usage {
	return Usage{PromptTokens: u.Input(), CompletionTokens: u.OutputTokens, CachedTokens: u.CachedInputTokens,
		CacheWriteTokens: u.CacheWriteTokens, CacheWrite1hTokens: u.CacheWrite1hTokens, CostUSD: cost}
}

// Usage is the usage object of an answer.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// CachedTokens were read from the prompt cache (part of PromptTokens).
	CachedTokens int
	// CacheWriteTokens were written to the prompt cache of the model
	// behind (part of PromptTokens): OpenAI bills no writes, but a tier on
	// Anthropic or Bedrock does, and a client priced from this usage (an
	// fmgate in front of this one) needs them apart. Sent as
	// prompt_tokens_details.cache_write_tokens when positive.
	CacheWriteTokens int
	// CacheWrite1hTokens are the part of CacheWriteTokens written for one
	// hour, sent as prompt_tokens_details.cache_write_1h_tokens when
	// positive.
	CacheWrite1hTokens int
	// CostUSD is what fmgate priced the answer at, sent as usage.cost_usd
	// when positive (an extension field the SDKs keep as an extra).
	CostUSD float64
}

func (u Usage) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens+u.CompletionTokens), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	if u.CacheWriteTokens > 0 {
		dst = append(dst, `,"cache_write_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CacheWriteTokens), 10)
	}
	if u.CacheWrite1hTokens > 0 {
		dst = append(dst, `,"cache_write_1h_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CacheWrite1hTokens), 10)
	}
	dst = append(dst, `},"completion_tokens_details":{"reasoning_tokens":0}`...)
	if u.CostUSD > 0 && !math.IsInf(u.CostUSD, 0) {
		dst = append(dst, `,"cost_usd":`...)
		dst = strconv.AppendFloat(dst, u.CostUSD, 'g', -1, 64)
	}
	return append(dst, '}')
}

// Completion is a whole chat.completion answer.
type Completion struct {
	ID      string
	Created int64
	Model   string
	Text    string
	// ToolCalls the model made, after Text.
	ToolCalls []provider.ToolCall
	// FinishReason is one of the Finish constants.
	FinishReason string
	// StopSequence, when set, is the stop sequence that ended the answer,
	// sent as vLLM does, in the choice's stop_reason (OpenAI's own
	// answers say only "stop").
	StopSequence string
	Usage        Usage
}

// AppendJSON appends the chat.completion object.
func (c Completion) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, c.ID)
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = strconv.AppendInt(dst, c.Created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, c.Model)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if c.Text == "" && len(c.ToolCalls) > 0 {
		dst = append(dst, "null"...)
	} else {
		dst = appendString(dst, c.Text)
	}
	if len(c.ToolCalls) > 0 {
		dst = appendToolCalls(append(dst, ','), c.ToolCalls)
	}
	dst = append(dst, `,"refusal":null},"logprobs":null,"finish_reason":`...)
	dst = appendString(dst, c.FinishReason)
	dst = appendStopReason(dst, c.StopSequence)
	dst = append(dst, `}],"usage":`...)
	dst = c.Usage.appendJSON(dst)
	return append(dst, '}')
}

// chunkMeta is what every chunk of one stream repeats.
type chunkMeta struct {
	id           string
	created      int64
	model        string
	includeUsage bool
}

func (m chunkMeta) appendStart(dst []byte) []byte {
	dst = append(dst, `data: {"id":`...)
	dst = appendString(dst, m.id)
	dst = append(dst, `,"object":"chat.completion.chunk","created":`...)
	dst = strconv.AppendInt(dst, m.created, 10)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, m.model)
	return dst
}

func (m chunkMeta) appendEnd(dst []byte) []byte {
	if m.includeUsage {
		dst = append(dst, `,"usage":null`...)
	}
	return append(dst, "}\n\n"...)
}

// appendDelta appends a content chunk event; the first one carries the role.
func (m chunkMeta) appendDelta(dst []byte, text string, first bool) []byte {
	return appendContentDelta(m, dst, text, first)
}

// appendContentDelta is appendDelta for text held as a string or as bytes
// (the stream's buffer, which a door encodes without copying).
func appendContentDelta[T ~string | ~[]byte](m chunkMeta, dst []byte, text T, first bool) []byte {
	dst = m.appendStart(dst)
	dst = append(dst, `,"choices":[{"index":0,"delta":{`...)
	if first {
		dst = append(dst, `"role":"assistant",`...)
	}
	dst = append(dst, `"content":`...)
	dst = stream.AppendJSONString(dst, text)
	dst = append(dst, `},"logprobs":null,"finish_reason":null}]`...)
	return m.appendEnd(dst)
}

// argumentsPiece is the most bytes of a tool call's arguments one chunk
// carries: the arguments arrive in pieces, as OpenAI sends them.
const argumentsPiece = 48

// appendToolCall appends the chunks of one tool call: its id and name,
// then its arguments in pieces, each whole UTF-8.
func (m chunkMeta) appendToolCall(dst []byte, index int, c provider.ToolCall, first bool) []byte {
	dst = m.appendStart(dst)
	dst = append(dst, `,"choices":[{"index":0,"delta":{`...)
	if first {
		dst = append(dst, `"role":"assistant","content":null,`...)
	}
	dst = append(dst, `"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	dst = append(dst, `,"id":`...)
	dst = appendString(dst, c.ID)
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendString(dst, c.Name)
	dst = append(dst, `,"arguments":""}}]},"logprobs":null,"finish_reason":null}]`...)
	dst = m.appendEnd(dst)
	for args := string(c.Input); args != ""; {
		n := min(argumentsPiece, len(args))
		for n < len(args) && !utf8.RuneStart(args[n]) {
			n++
		}
		dst = m.appendStart(dst)
		dst = append(dst, `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":`...)
		dst = strconv.AppendInt(dst, int64(index), 10)
		dst = append(dst, `,"function":{"arguments":`...)
		dst = appendString(dst, args[:n])
		dst = append(dst, `}}]},"logprobs":null,"finish_reason":null}]`...)
		dst = m.appendEnd(dst)
		args = args[n:]
	}
	return dst
}

// appendFinish appends the events that end a stream: the chunk with the
// finish reason, the usage chunk when asked for, and [DONE].
func (m chunkMeta) appendFinish(dst []byte, finish, stopSequence string, u Usage, first bool) []byte {
	dst = m.appendStart(dst)
	dst = append(dst, `,"choices":[{"index":0,"delta":{`...)
	if first {
		dst = append(dst, `"role":"assistant","content":""`...)
	}
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = appendString(dst, finish)
	dst = appendStopReason(dst, stopSequence)
	dst = append(dst, "}]"...)
	dst = m.appendEnd(dst)
	if m.includeUsage {
		dst = m.appendStart(dst)
		dst = append(dst, `,"choices":[],"usage":`...)
		dst = u.appendJSON(dst)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...)
}

// appendStopReason appends vLLM's stop_reason, the stop sequence that
// ended the answer, when one did.
func appendStopReason(dst []byte, stopSequence string) []byte {
	if stopSequence == "" {
		return dst
	}
	return appendString(append(dst, `,"stop_reason":`...), stopSequence)
}

// Error is a failure in OpenAI's shape:
// {"error":{"message","type","param","code"}} with its HTTP status.
type Error struct {
	Status  int
	Message string
	// Type is OpenAI's error type: invalid_request_error,
	// authentication_error, rate_limit_exceeded, server_error, ….
	Type string
	// Code and Param are sent as null when empty.
	Code  string
	Param string
	// RetryAfter, when positive, is sent as retry-after (whole seconds,
	// rounded up) and retry-after-ms, which the OpenAI SDKs honour.
	RetryAfter time.Duration
	// Header holds extra response headers (RateLimit-Policy …).
	Header http.Header
}

func (e *Error) Error() string {
	return fmt.Sprintf("openai: %d %s: %s", e.Status, e.Type, e.Message)
}

func invalidRequest(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Message: fmt.Sprintf(format, args...)}
}

// AppendJSON appends the error object {"error":{…}}.
func (e *Error) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = appendString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"param":`...)
	dst = appendNullable(dst, e.Param)
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	return append(dst, "}}"...)
}

// Write sends e as the response, with its status and retry headers.
func (e *Error) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range e.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	if e.RetryAfter > 0 {
		secs := max(int64((e.RetryAfter+time.Second-1)/time.Second), 1)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(max(e.RetryAfter.Milliseconds(), 1), 10))
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(e.AppendJSON(make([]byte, 0, 256)), '\n'))
}

// events writes a chat.completion.chunk stream. Headers go out with the
// first event, so a request that fails before any text still gets an HTTP
// error with its status. The add methods append events to buf; flush
// writes them in one write and flushes the connection once, so the events
// of one frame of the stream (a tool call's pieces, the finish, the usage
// and [DONE]) leave together.
type events struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	meta   chunkMeta
	buf    []byte
	wrote  bool // headers and at least one event are out
	deltas int
	// stopSequence is sent with the finish reason (appendStopReason).
	stopSequence string
}

func newEvents(w http.ResponseWriter, meta chunkMeta) *events {
	return &events{w: w, rc: http.NewResponseController(w), meta: meta}
}

// begin sends the stream's headers.
func (e *events) begin() {
	if e.wrote {
		return
	}
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
	e.wrote = true
}

// delta sends a content chunk.
func (e *events) delta(text string) error {
	e.buf = e.meta.appendDelta(e.buf, text, e.deltas == 0)
	e.deltas++
	return e.flush()
}

// addDelta adds a content chunk of the stream's text.
func (e *events) addDelta(text []byte) {
	e.buf = appendContentDelta(e.meta, e.buf, text, e.deltas == 0)
	e.deltas++
}

// toolCalls sends the answer's tool calls.
func (e *events) toolCalls(calls []provider.ToolCall) error {
	e.addToolCalls(calls)
	return e.flush()
}

func (e *events) addToolCalls(calls []provider.ToolCall) {
	for i, c := range calls {
		e.buf = e.meta.appendToolCall(e.buf, i, c, e.deltas == 0)
		e.deltas++
	}
}

// finish sends the end of the stream: the finish reason, the usage when
// asked for, and [DONE].
func (e *events) finish(reason string, u Usage) error {
	e.addFinish(reason, u)
	return e.flush()
}

func (e *events) addFinish(reason string, u Usage) {
	e.buf = e.meta.appendFinish(e.buf, reason, e.stopSequence, u, e.deltas == 0)
}

// addFail ends the stream with an error event, which the OpenAI SDKs raise
// as an APIError; no [DONE] follows it.
func (e *events) addFail(err *Error) {
	e.buf = append(err.AppendJSON(append(e.buf, "data: "...)), "\n\n"...)
}

// addComment keeps an idle connection open; clients ignore it.
func (e *events) addComment() {
	e.buf = append(e.buf, ": keep-alive\n\n"...)
}

// flush writes the events added, after the headers on the first call, and
// flushes the connection.
func (e *events) flush() error {
	e.begin()
	err := stream.WriteFlush(e.w, e.rc, e.buf)
	e.buf = e.buf[:0]
	return err
}

func appendNullable(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return appendString(dst, s)
}

// appendString appends s as a JSON string, as the stream's frames are
// written: invalid UTF-8 becomes U+FFFD, U+2028 and U+2029 are escaped.
func appendString(dst []byte, s string) []byte { return stream.AppendJSONString(dst, s) }
