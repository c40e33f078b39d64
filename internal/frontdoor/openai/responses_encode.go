package openai

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

// Statuses of a response, as the Responses API names them.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"
	StatusFailed     = "failed"
)

// Response is a Responses API response object.
type Response struct {
	// ID is "resp_" and a random suffix the output items' ids share.
	ID        string
	CreatedAt int64
	// CompletedAt is when the answer ended; 0 (null) while it runs.
	CompletedAt int64
	// Status is one of the Status constants.
	Status string
	// IncompleteReason says why an incomplete response stopped:
	// max_output_tokens or content_filter.
	IncompleteReason string
	// Error is why a failed response failed.
	Error *Error
	Model string
	// Text is the answer's text: one message item, present when there is
	// text or no tool call. ToolCalls are function_call items after it.
	Text      string
	ToolCalls []provider.ToolCall
	// Usage is nil (null) until the answer is in.
	Usage *Usage
	// Stored says whether the response is kept for previous_response_id
	// and GET ("store").
	Stored bool
	// Request is the request the response echoes (instructions, tools,
	// sampling, metadata …).
	Request *Responses
}

// Finish sets the response's status from an answer's finish reason (one
// of the Finish constants).
func (r *Response) Finish(reason string) {
	r.Status = StatusCompleted
	switch reason {
	case FinishLength:
		r.Status, r.IncompleteReason = StatusIncomplete, "max_output_tokens"
	case FinishContentFilter:
		r.Status, r.IncompleteReason = StatusIncomplete, "content_filter"
	}
}

// suffix is what the output items' ids add to their prefix.
func (r *Response) suffix() string { return strings.TrimPrefix(r.ID, "resp_") }

func (r *Response) messageID() string { return "msg_" + r.suffix() }

func (r *Response) callID(i int) string { return "fc_" + r.suffix() + "_" + strconv.Itoa(i) }

// hasMessage reports whether the output holds a message item.
func (r *Response) hasMessage() bool { return r.Text != "" || len(r.ToolCalls) == 0 }

// itemStatus is the status of the response's output items.
func (r *Response) itemStatus() string {
	switch r.Status {
	case StatusCompleted, StatusInProgress:
		return r.Status
	}
	return StatusIncomplete
}

// OutputItems are the response's output items, each a JSON object: a
// stored response keeps them with its input for the next request.
func (r *Response) OutputItems() []json.RawMessage {
	var items []json.RawMessage
	if r.hasMessage() {
		items = append(items, r.appendMessage(nil, r.itemStatus(), true))
	}
	for i, c := range r.ToolCalls {
		items = append(items, r.appendCall(nil, i, c, r.itemStatus(), true))
	}
	return items
}

// appendMessage appends the message item, with its text part when
// withText (an item just added to a stream has none yet).
func (r *Response) appendMessage(dst []byte, status string, withText bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.messageID())
	dst = append(dst, `,"type":"message","status":`...)
	dst = appendString(dst, status)
	dst = append(dst, `,"role":"assistant","content":[`...)
	if withText {
		dst = appendTextPart(dst, r.Text)
	}
	return append(dst, "]}"...)
}

func appendTextPart(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = appendString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

// appendCall appends the function_call item of call i, with its arguments
// when withArgs.
func (r *Response) appendCall(dst []byte, i int, c provider.ToolCall, status string, withArgs bool) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.callID(i))
	dst = append(dst, `,"type":"function_call","status":`...)
	dst = appendString(dst, status)
	dst = append(dst, `,"arguments":`...)
	if withArgs {
		dst = appendString(dst, string(c.Input))
	} else {
		dst = append(dst, `""`...)
	}
	dst = append(dst, `,"call_id":`...)
	dst = appendString(dst, c.ID)
	dst = append(dst, `,"name":`...)
	dst = appendString(dst, c.Name)
	return append(dst, '}')
}

// AppendJSON appends the response object.
func (r *Response) AppendJSON(dst []byte) []byte {
	q := r.Request
	if q == nil {
		q = &Responses{}
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, r.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, r.CreatedAt, 10)
	dst = append(dst, `,"status":`...)
	dst = appendString(dst, r.Status)
	dst = append(dst, `,"background":false,"completed_at":`...)
	if r.CompletedAt > 0 {
		dst = strconv.AppendInt(dst, r.CompletedAt, 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"error":`...)
	if r.Error != nil {
		dst = append(dst, `{"code":`...)
		dst = appendString(dst, orElse(r.Error.Code, "server_error"))
		dst = append(dst, `,"message":`...)
		dst = appendString(dst, r.Error.Message)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if r.IncompleteReason != "" {
		dst = append(dst, `{"reason":`...)
		dst = appendString(dst, r.IncompleteReason)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"instructions":`...)
	dst = appendOptString(dst, q.Instructions)
	dst = append(dst, `,"max_output_tokens":`...)
	dst = appendOptInt(dst, q.MaxOutputTokens)
	dst = append(dst, `,"max_tool_calls":null,"model":`...)
	dst = appendString(dst, r.Model)
	dst = append(dst, `,"output":[`...)
	if r.Status != StatusInProgress {
		for i, item := range r.OutputItems() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, item...)
		}
	}
	dst = append(dst, `],"parallel_tool_calls":`...)
	dst = strconv.AppendBool(dst, !q.ToolChoice.Sequential)
	dst = append(dst, `,"previous_response_id":`...)
	dst = appendNullable(dst, q.PreviousResponseID)
	dst = append(dst, `,"prompt_cache_key":`...)
	dst = appendNullable(dst, q.PromptCacheKey)
	dst = append(dst, `,"reasoning":null,"safety_identifier":null,"service_tier":null,"store":`...)
	dst = strconv.AppendBool(dst, r.Stored)
	dst = append(dst, `,"temperature":`...)
	dst = appendOptFloat(dst, q.Temperature)
	dst = append(dst, `,"text":{"format":`...)
	dst = appendFormat(dst, q.Format)
	dst = append(dst, `},"tool_choice":`...)
	dst = appendToolChoice(dst, q.ToolChoice)
	dst = append(dst, `,"tools":[`...)
	for i, t := range q.Tools {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendFunctionTool(dst, t)
	}
	dst = append(dst, `],"top_logprobs":0,"top_p":`...)
	dst = appendOptFloat(dst, q.TopP)
	// fmgate drops the oldest turns of a conversation over its input
	// budget, which is the API's "auto".
	dst = append(dst, `,"truncation":"auto","usage":`...)
	if r.Usage != nil {
		dst = r.Usage.appendResponsesJSON(dst)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"user":`...)
	dst = appendNullable(dst, q.User)
	dst = append(dst, `,"metadata":`...)
	if len(q.Metadata) > 0 {
		dst = appendCompact(dst, q.Metadata)
	} else {
		dst = append(dst, "{}"...)
	}
	return append(dst, '}')
}

// appendResponsesJSON appends the usage object of a response.
func (u Usage) appendResponsesJSON(dst []byte) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens), 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CachedTokens), 10)
	if u.CacheWriteTokens > 0 {
		dst = append(dst, `,"cache_write_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CacheWriteTokens), 10)
	}
	if u.CacheWrite1hTokens > 0 {
		dst = append(dst, `,"cache_write_1h_tokens":`...)
		dst = strconv.AppendInt(dst, int64(u.CacheWrite1hTokens), 10)
	}
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CompletionTokens), 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.PromptTokens+u.CompletionTokens), 10)
	if u.CostUSD > 0 && !math.IsInf(u.CostUSD, 0) {
		dst = append(dst, `,"cost_usd":`...)
		dst = strconv.AppendFloat(dst, u.CostUSD, 'g', -1, 64)
	}
	return append(dst, '}')
}

func appendFormat(dst []byte, f provider.Format) []byte {
	switch f.Kind {
	case provider.FormatJSONObject:
		return append(dst, `{"type":"json_object"}`...)
	case provider.FormatJSONSchema:
		dst = append(dst, `{"type":"json_schema","name":`...)
		dst = appendString(dst, f.Name)
		if f.Description != "" {
			dst = append(dst, `,"description":`...)
			dst = appendString(dst, f.Description)
		}
		dst = append(dst, `,"schema":`...)
		dst = appendCompact(dst, f.Schema)
		dst = append(dst, `,"strict":`...)
		dst = strconv.AppendBool(dst, f.Strict)
		return append(dst, '}')
	}
	return append(dst, `{"type":"text"}`...)
}

func appendToolChoice(dst []byte, c provider.ToolChoice) []byte {
	switch c.Mode {
	case provider.ToolNone:
		return append(dst, `"none"`...)
	case provider.ToolAny:
		return append(dst, `"required"`...)
	case provider.ToolNamed:
		dst = append(dst, `{"type":"function","name":`...)
		dst = appendString(dst, c.Name)
		return append(dst, '}')
	}
	return append(dst, `"auto"`...)
}

func appendFunctionTool(dst []byte, t provider.Tool) []byte {
	dst = append(dst, `{"type":"function","name":`...)
	dst = appendString(dst, t.Name)
	dst = append(dst, `,"description":`...)
	dst = appendNullable(dst, t.Description)
	dst = append(dst, `,"parameters":`...)
	dst = appendCompact(dst, t.Schema)
	dst = append(dst, `,"strict":`...)
	dst = strconv.AppendBool(dst, t.Strict)
	return append(dst, '}')
}

// appendCompact appends raw JSON the decoder checked, without its
// whitespace.
func appendCompact(dst []byte, raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return append(dst, raw...)
	}
	return append(dst, b.Bytes()...)
}

func appendOptString(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return appendString(dst, *s)
}

func appendOptInt(dst []byte, n int) []byte {
	if n == 0 {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, int64(n), 10)
}

func appendOptFloat(dst []byte, f *float64) []byte {
	if f == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, *f, 'g', -1, 64)
}

// ResponseStream encodes a response as the Responses API's server-sent
// events, each numbered by its sequence_number: response.created and
// response.in_progress; the message item (output_item.added,
// content_part.added, output_text.delta …, output_text.done,
// content_part.done, output_item.done) once text comes; each tool call as
// a function_call item with its arguments in pieces; and the end,
// response.completed or response.incomplete, with the whole response. A
// failure after the first event ends the stream with an error event and
// response.failed.
type ResponseStream struct {
	// R is the response being streamed; Delta adds to its Text.
	R    *Response
	seq  int
	open bool // the message item is open
}

// event appends the start of one event of type typ, up to its members
// after type and sequence_number.
func (s *ResponseStream) event(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":"...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(s.seq), 10)
	s.seq++
	return dst
}

func endEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// withResponse appends an event that carries the whole response.
func (s *ResponseStream) withResponse(dst []byte, typ string) []byte {
	dst = s.event(dst, typ)
	dst = append(dst, `,"response":`...)
	dst = s.R.AppendJSON(dst)
	return endEvent(dst)
}

// Begin appends response.created and response.in_progress.
func (s *ResponseStream) Begin(dst []byte) []byte {
	s.R.Status = StatusInProgress
	dst = s.withResponse(dst, "response.created")
	return s.withResponse(dst, "response.in_progress")
}

// itemRef appends the members that place an event in the message's text.
func (s *ResponseStream) itemRef(dst []byte) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = appendString(dst, s.R.messageID())
	return append(dst, `,"output_index":0,"content_index":0`...)
}

// openMessage appends the message item's start and its text part's.
func (s *ResponseStream) openMessage(dst []byte) []byte {
	if s.open {
		return dst
	}
	s.open = true
	dst = s.event(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":0,"item":`...)
	dst = s.R.appendMessage(dst, StatusInProgress, false)
	dst = endEvent(dst)
	dst = s.event(dst, "response.content_part.added")
	dst = s.itemRef(dst)
	dst = append(dst, `,"part":`...)
	dst = appendTextPart(dst, "")
	return endEvent(dst)
}

// Delta appends a piece of the answer's text.
func (s *ResponseStream) Delta(dst []byte, text string) []byte {
	return appendOutputTextDelta(s, dst, text)
}

// appendOutputTextDelta is s.Delta for text held as a string or as bytes
// (the stream's buffer, which the door encodes without copying).
func appendOutputTextDelta[T ~string | ~[]byte](s *ResponseStream, dst []byte, text T) []byte {
	if len(text) == 0 {
		return dst
	}
	dst = s.openMessage(dst)
	s.R.Text += string(text)
	dst = s.event(dst, "response.output_text.delta")
	dst = s.itemRef(dst)
	dst = append(dst, `,"delta":`...)
	dst = stream.AppendJSONString(dst, text)
	dst = append(dst, `,"logprobs":[]`...)
	return endEvent(dst)
}

// closeMessage appends the end of the message item.
func (s *ResponseStream) closeMessage(dst []byte) []byte {
	dst = s.event(dst, "response.output_text.done")
	dst = s.itemRef(dst)
	dst = append(dst, `,"text":`...)
	dst = appendString(dst, s.R.Text)
	dst = append(dst, `,"logprobs":[]`...)
	dst = endEvent(dst)
	dst = s.event(dst, "response.content_part.done")
	dst = s.itemRef(dst)
	dst = append(dst, `,"part":`...)
	dst = appendTextPart(dst, s.R.Text)
	dst = endEvent(dst)
	dst = s.event(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":0,"item":`...)
	dst = s.R.appendMessage(dst, s.R.itemStatus(), true)
	return endEvent(dst)
}

// appendCallEvents appends the events of tool call i at output index n:
// its item, its arguments in pieces of at most argumentsPiece bytes (each
// whole UTF-8, as the text deltas are), and its end.
func (s *ResponseStream) appendCallEvents(dst []byte, n, i int, c provider.ToolCall) []byte {
	ref := func(dst []byte) []byte {
		dst = append(dst, `,"item_id":`...)
		dst = appendString(dst, s.R.callID(i))
		dst = append(dst, `,"output_index":`...)
		return strconv.AppendInt(dst, int64(n), 10)
	}
	dst = s.event(dst, "response.output_item.added")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, `,"item":`...)
	dst = s.R.appendCall(dst, i, c, StatusInProgress, false)
	dst = endEvent(dst)
	for args := string(c.Input); args != ""; {
		k := min(argumentsPiece, len(args))
		for k < len(args) && !utf8.RuneStart(args[k]) {
			k++
		}
		dst = s.event(dst, "response.function_call_arguments.delta")
		dst = ref(dst)
		dst = append(dst, `,"delta":`...)
		dst = appendString(dst, args[:k])
		dst = endEvent(dst)
		args = args[k:]
	}
	dst = s.event(dst, "response.function_call_arguments.done")
	dst = ref(dst)
	dst = append(dst, `,"name":`...)
	dst = appendString(dst, c.Name)
	dst = append(dst, `,"arguments":`...)
	dst = appendString(dst, string(c.Input))
	dst = endEvent(dst)
	dst = s.event(dst, "response.output_item.done")
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, `,"item":`...)
	dst = s.R.appendCall(dst, i, c, s.R.itemStatus(), true)
	return endEvent(dst)
}

// End appends the rest of the output and the final event, once R holds
// the whole answer (status, tool calls, usage).
func (s *ResponseStream) End(dst []byte) []byte {
	n := 0
	if s.R.hasMessage() {
		dst = s.closeMessage(s.openMessage(dst))
		n = 1
	}
	for i, c := range s.R.ToolCalls {
		dst = s.appendCallEvents(dst, n+i, i, c)
	}
	typ := "response.completed"
	if s.R.Status == StatusIncomplete {
		typ = "response.incomplete"
	}
	return s.withResponse(dst, typ)
}

// Fail appends the error event and response.failed, for an answer that
// failed after the stream began.
func (s *ResponseStream) Fail(dst []byte, e *Error) []byte {
	s.R.Status, s.R.Error = StatusFailed, e
	dst = s.event(dst, "error")
	dst = append(dst, `,"code":`...)
	dst = appendNullable(dst, e.Code)
	dst = append(dst, `,"message":`...)
	dst = appendString(dst, e.Message)
	dst = append(dst, `,"param":null`...)
	dst = endEvent(dst)
	return s.withResponse(dst, "response.failed")
}
