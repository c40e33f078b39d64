// Package anthropic speaks the Anthropic Messages API (POST /v1/messages) on
// the server side: its request and response types, the decoder of a request
// (with Anthropic's own validation and error shapes), and the encoders of
// its JSON answer, its server-sent event sequence and its errors.
//
// Two servers share this wire code: fmgate's Anthropic front door (New,
// which runs each request through the gateway's pipeline) and the
// simulator's Anthropic endpoint in internal/simserver (which answers from
// the model simulator, faults in Anthropic's shape).
package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

// Anthropic's error types, sent in {"type":"error","error":{"type":…}}.
const (
	ErrInvalidRequest  = "invalid_request_error" // 400
	ErrAuthentication  = "authentication_error"  // 401
	ErrBilling         = "billing_error"         // 402
	ErrPermission      = "permission_error"      // 403
	ErrNotFound        = "not_found_error"       // 404
	ErrRequestTooLarge = "request_too_large"     // 413
	ErrRateLimit       = "rate_limit_error"      // 429
	ErrAPI             = "api_error"             // 500
	ErrTimeout         = "timeout_error"         // 504
	ErrOverloaded      = "overloaded_error"      // 529
)

// StatusOverloaded is Anthropic's own status for overloaded_error.
const StatusOverloaded = 529

// Stop reasons of a message.
const (
	StopEndTurn   = "end_turn"
	StopMaxTokens = "max_tokens"
	StopSequence  = "stop_sequence"
	StopRefusal   = "refusal"
)

// Limits of a decoded request.
const (
	// DefaultMaxBodyBytes bounds a request body when the server sets no
	// limit of its own: 4 MiB.
	DefaultMaxBodyBytes = 4 << 20
	// MaxMessages bounds the conversation of one request.
	MaxMessages = 1000
	// MaxStopSequences bounds stop_sequences; each is at most
	// MaxStopSequenceBytes long.
	MaxStopSequences     = 16
	MaxStopSequenceBytes = 256
	// MaxUserIDBytes bounds metadata.user_id.
	MaxUserIDBytes = 256
)

// Request is a decoded, validated Messages request.
type Request struct {
	Model string
	// System is the request's system prompt, text blocks joined by a blank
	// line; empty when none.
	System string
	// SystemCache marks where a system block with cache_control ends.
	SystemCache []provider.CacheMark
	// Messages alternate user and assistant (consecutive messages of one
	// role are joined, as Anthropic does) and end with a user message.
	Messages      []provider.Message
	MaxTokens     int
	StopSequences []string
	Temperature   *float64
	Stream        bool
	// UserID is metadata.user_id, empty when not given.
	UserID string
}

// ProviderRequest is r as a model call for the model named model.
func (r *Request) ProviderRequest(model string) *provider.Request {
	return &provider.Request{
		Model: model, System: r.System, SystemCache: slices.Clone(r.SystemCache), Messages: slices.Clone(r.Messages),
		MaxTokens: r.MaxTokens, Temperature: r.Temperature, StopSequences: slices.Clone(r.StopSequences),
	}
}

// Error is a request refused in Anthropic's error shape.
type Error struct {
	Status  int
	Type    string
	Message string
	// RetryAfter is sent as retry-after (whole seconds, rounded up) when set.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: ErrInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// supported are the request fields this server honours. Every other field
// Anthropic defines (tools, tool_choice, thinking, top_k, top_p, service_tier,
// container, mcp_servers, …) is refused by name, never silently dropped.
var supported = []string{"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "stream", "metadata"}

// DecodeRequest reads and validates a Messages request of at most maxBytes
// (DefaultMaxBodyBytes when <= 0). A refusal is an *Error in Anthropic's
// shape: 413 request_too_large, or 400 invalid_request_error naming the
// field and what to do about it.
func DecodeRequest(body io.Reader, maxBytes int64) (*Request, *Error) {
	fields, werr := readFields(body, maxBytes, supported)
	if werr != nil {
		return nil, werr
	}
	return decodeWithModel(fields)
}

// decodeWithModel decodes a body whose model is required.
func decodeWithModel(fields map[string]json.RawMessage) (*Request, *Error) {
	r := &Request{}
	if err := decodeString(fields, "model", &r.Model); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, invalid("model: Field required")
	}
	if err := r.decode(fields); err != nil {
		return nil, err
	}
	return r, nil
}

// countFields are the fields of a count_tokens body fmgate counts.
var countFields = []string{"model", "messages", "system"}

// DecodeCountTokens reads a count_tokens body: model, messages and system,
// refused as DecodeRequest refuses them (tools, thinking… by name).
func DecodeCountTokens(body io.Reader, maxBytes int64) (*Request, *Error) {
	fields, werr := readFields(body, maxBytes, countFields)
	if werr != nil {
		return nil, werr
	}
	fields["max_tokens"] = json.RawMessage("1") // counting asks for no answer
	return decodeWithModel(fields)
}

// BedrockVersion is the anthropic_version of a Messages body sent to
// Bedrock's InvokeModel.
const BedrockVersion = "bedrock-2023-05-31"

// invokeFields are the fields of a Messages body on Bedrock's InvokeModel:
// the model is in the path and streaming is the route's, not the body's.
var invokeFields = []string{"anthropic_version", "messages", "max_tokens", "system", "stop_sequences", "temperature", "metadata"}

// DecodeInvokeBody reads and validates the Messages body of a Bedrock
// InvokeModel call (anthropic_version bedrock-2023-05-31, no model): the
// same fields as DecodeRequest, refused the same way.
func DecodeInvokeBody(body io.Reader, maxBytes int64) (*Request, *Error) {
	fields, werr := readFields(body, maxBytes, nil)
	if werr != nil {
		return nil, werr
	}
	if _, ok := fields["anthropic_version"]; !ok {
		return nil, invalid("InvokeModel here takes Anthropic Claude's Messages body (anthropic_version %q, messages, max_tokens, …); other model families' bodies (Titan, Llama, Mistral, …) are not served", BedrockVersion)
	}
	if werr := checkKeys(fields, invokeFields); werr != nil {
		return nil, werr
	}
	var version string
	if err := decodeString(fields, "anthropic_version", &version); err != nil {
		return nil, err
	}
	if version != BedrockVersion {
		return nil, invalid("anthropic_version: must be %q (got %q)", BedrockVersion, version)
	}
	r := &Request{}
	if err := r.decode(fields); err != nil {
		return nil, err
	}
	return r, nil
}

// readFields reads a JSON object of at most maxBytes (DefaultMaxBodyBytes
// when <= 0) whose keys are all in allowed (any key when allowed is nil).
func readFields(body io.Reader, maxBytes int64, allowed []string) (map[string]json.RawMessage, *Error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	raw, err := io.ReadAll(io.LimitReader(body, maxBytes+1))
	if err != nil {
		return nil, invalid("could not read the request body: %v", err)
	}
	if int64(len(raw)) > maxBytes {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Type: ErrRequestTooLarge,
			Message: fmt.Sprintf("the request body exceeds %d bytes", maxBytes)}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, invalid("the request body must be a JSON object: %s", jsonProblem(err))
	}
	if fields == nil {
		return nil, invalid("the request body must be a JSON object")
	}
	if allowed != nil {
		if werr := checkKeys(fields, allowed); werr != nil {
			return nil, werr
		}
	}
	return fields, nil
}

// checkKeys refuses the first key of fields, in order, not in allowed.
func checkKeys(fields map[string]json.RawMessage, allowed []string) *Error {
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(allowed, k) {
			return invalid("%s: not supported by this server (it serves text conversations: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// decode fills r from the fields every Messages body shares.
func (r *Request) decode(fields map[string]json.RawMessage) *Error {
	mt, ok := fields["max_tokens"]
	if !ok || isNull(mt) {
		return invalid("max_tokens: Field required")
	}
	if err := json.Unmarshal(mt, &r.MaxTokens); err != nil || r.MaxTokens < 1 {
		return invalid("max_tokens: must be a positive integer")
	}
	if v, ok := fields["stream"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &r.Stream); err != nil {
			return invalid("stream: must be true or false")
		}
	}
	if v, ok := fields["temperature"]; ok && !isNull(v) {
		var t float64
		if err := json.Unmarshal(v, &t); err != nil || math.IsNaN(t) || t < 0 || t > 1 {
			return invalid("temperature: must be a number between 0 and 1")
		}
		r.Temperature = &t
	}
	if v, ok := fields["stop_sequences"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &r.StopSequences); err != nil {
			return invalid("stop_sequences: must be a list of strings")
		}
		if len(r.StopSequences) > MaxStopSequences {
			return invalid("stop_sequences: at most %d are supported", MaxStopSequences)
		}
		for i, s := range r.StopSequences {
			if s == "" || len(s) > MaxStopSequenceBytes || !utf8.ValidString(s) {
				return invalid("stop_sequences.%d: must be non-empty UTF-8 text of at most %d bytes", i, MaxStopSequenceBytes)
			}
		}
	}
	if v, ok := fields["metadata"]; ok && !isNull(v) {
		uid, err := decodeMetadata(v)
		if err != nil {
			return err
		}
		r.UserID = uid
	}
	if v, ok := fields["system"]; ok && !isNull(v) {
		sys, marks, err := decodeContent(v, "system")
		if err != nil {
			return err
		}
		r.System, r.SystemCache = sys, marks
	}
	msgs, merr := decodeMessages(fields["messages"])
	if merr != nil {
		return merr
	}
	r.Messages = msgs
	if n := r.ProviderRequest("").CacheMarks(); n > provider.MaxCacheMarks {
		return invalid("A maximum of %d blocks with cache_control may be provided. Found %d.", provider.MaxCacheMarks, n)
	}
	return nil
}

func decodeString(fields map[string]json.RawMessage, name string, dst *string) *Error {
	v, ok := fields[name]
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return invalid("%s: must be a string", name)
	}
	if !utf8.ValidString(*dst) {
		return invalid("%s: must be valid UTF-8", name)
	}
	return nil
}

func decodeMetadata(v json.RawMessage) (string, *Error) {
	var md map[string]json.RawMessage
	if err := json.Unmarshal(v, &md); err != nil {
		return "", invalid("metadata: must be an object")
	}
	for _, k := range sortedKeys(md) {
		if k != "user_id" {
			return "", invalid("metadata.%s: not supported (only metadata.user_id is)", k)
		}
	}
	var uid string
	if err := decodeString(md, "user_id", &uid); err != nil {
		return "", err
	}
	if len(uid) > MaxUserIDBytes {
		return "", invalid("metadata.user_id: must be at most %d bytes", MaxUserIDBytes)
	}
	return uid, nil
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func decodeMessages(v json.RawMessage) ([]provider.Message, *Error) {
	if v == nil || isNull(v) {
		return nil, invalid("messages: Field required")
	}
	var wm []json.RawMessage
	if err := json.Unmarshal(v, &wm); err != nil {
		return nil, invalid("messages: must be a list of messages")
	}
	if len(wm) == 0 {
		return nil, invalid("messages: at least one message is required")
	}
	if len(wm) > MaxMessages {
		return nil, invalid("messages: at most %d messages are supported", MaxMessages)
	}
	out := make([]provider.Message, 0, len(wm))
	for i, raw := range wm {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, invalid("messages.%d: must be an object with role and content", i)
		}
		for _, k := range sortedKeys(fields) {
			if k != "role" && k != "content" {
				return nil, invalid("messages.%d.%s: not supported", i, k)
			}
		}
		var m wireMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, invalid("messages.%d: must be an object with role and content", i)
		}
		role := provider.Role(m.Role)
		if role != provider.RoleUser && role != provider.RoleAssistant {
			return nil, invalid("messages.%d.role: must be \"user\" or \"assistant\"", i)
		}
		text, marks, err := decodeContent(m.Content, fmt.Sprintf("messages.%d.content", i))
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			prev := &out[n-1]
			shift := len(prev.Content) + len("\n\n")
			for _, mk := range marks {
				prev.Cache = append(prev.Cache, provider.CacheMark{At: mk.At + shift, TTL: mk.TTL})
			}
			prev.Content += "\n\n" + text
			continue
		}
		out = append(out, provider.Message{Role: role, Content: text, Cache: marks})
	}
	last := out[len(out)-1]
	if last.Role != provider.RoleUser {
		return nil, invalid("messages: the last message must have role \"user\" (prefilling the assistant's answer is not supported)")
	}
	if strings.TrimSpace(last.Content) == "" {
		return nil, invalid("messages: the last user message must not be empty")
	}
	return out, nil
}

// decodeContent reads a string, or a list of text blocks joined by a blank
// line, with a cache mark where a block with cache_control ends.
func decodeContent(v json.RawMessage, path string) (string, []provider.CacheMark, *Error) {
	if v == nil || isNull(v) {
		return "", nil, invalid("%s: Field required", path)
	}
	if bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", nil, invalid("%s: must be a string or a list of text blocks", path)
		}
		if !utf8.ValidString(s) {
			return "", nil, invalid("%s: must be valid UTF-8", path)
		}
		return s, nil, nil
	}
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(v, &blocks); err != nil {
		return "", nil, invalid("%s: must be a string or a list of text blocks", path)
	}
	var (
		text  strings.Builder
		marks []provider.CacheMark
	)
	for i, b := range blocks {
		var typ string
		if t, ok := b["type"]; !ok || json.Unmarshal(t, &typ) != nil {
			return "", nil, invalid("%s.%d.type: Field required", path, i)
		}
		if typ != "text" {
			return "", nil, invalid("%s.%d: content blocks of type %q are not supported (only text is)", path, i, typ)
		}
		for _, k := range sortedKeys(b) {
			if k != "type" && k != "text" && k != "cache_control" {
				return "", nil, invalid("%s.%d.%s: not supported", path, i, k)
			}
		}
		var t string
		if err := decodeString(b, "text", &t); err != nil {
			return "", nil, invalid("%s.%d.text: must be a string", path, i)
		}
		if i > 0 {
			text.WriteString("\n\n")
		}
		text.WriteString(t)
		if cc, ok := b["cache_control"]; ok && !isNull(cc) {
			ttl, err := decodeCacheControl(cc, fmt.Sprintf("%s.%d.cache_control", path, i))
			if err != nil {
				return "", nil, err
			}
			marks = append(marks, provider.CacheMark{At: text.Len(), TTL: ttl})
		}
	}
	return text.String(), marks, nil
}

// decodeCacheControl reads {"type": "ephemeral", "ttl": "5m" | "1h"}.
func decodeCacheControl(v json.RawMessage, path string) (time.Duration, *Error) {
	var cc map[string]json.RawMessage
	if err := json.Unmarshal(v, &cc); err != nil || cc == nil {
		return 0, invalid("%s: must be an object like {\"type\": \"ephemeral\"}", path)
	}
	for _, k := range sortedKeys(cc) {
		if k != "type" && k != "ttl" {
			return 0, invalid("%s.%s: not supported", path, k)
		}
	}
	var typ, ttl string
	if err := decodeString(cc, "type", &typ); err != nil || typ != "ephemeral" {
		return 0, invalid("%s.type: must be \"ephemeral\"", path)
	}
	if _, ok := cc["ttl"]; !ok {
		return provider.CacheTTL, nil
	}
	if err := decodeString(cc, "ttl", &ttl); err != nil {
		return 0, invalid("%s.ttl: must be \"5m\" or \"1h\"", path)
	}
	switch ttl {
	case "5m":
		return provider.CacheTTL, nil
	case "1h":
		return provider.CacheTTLLong, nil
	}
	return 0, invalid("%s.ttl: must be \"5m\" or \"1h\" (got %q)", path, ttl)
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	return "invalid JSON"
}

// Message is the Messages API's answer object.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        Usage          `json:"usage"`
}

// NewMessage is an assistant message with id and model, no content yet.
func NewMessage(id, model string) Message {
	return Message{ID: id, Type: "message", Role: "assistant", Model: model, Content: []ContentBlock{}}
}

// ContentBlock is a text block of an answer.
type ContentBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Usage is Anthropic's usage object. InputTokens excludes the tokens read
// from or written to the prompt cache, which are counted apart;
// CacheCreation splits the written ones by TTL.
type Usage struct {
	InputTokens              int            `json:"input_tokens"`
	CacheCreationInputTokens int            `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int            `json:"cache_read_input_tokens"`
	CacheCreation            *CacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int            `json:"output_tokens"`
}

// CacheCreation is the tokens written to the prompt cache for each TTL.
type CacheCreation struct {
	Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
}

// UsageOf is u in Anthropic's fields.
func UsageOf(u provider.Usage) Usage {
	out := Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CachedInputTokens, CacheCreationInputTokens: u.CacheWriteTokens}
	if u.CacheWriteTokens > 0 {
		long := min(u.CacheWrite1hTokens, u.CacheWriteTokens)
		out.CacheCreation = &CacheCreation{Ephemeral5m: u.CacheWriteTokens - long, Ephemeral1h: long}
	}
	return out
}

// StopReason maps a provider's stop reason to Anthropic's; anything it does
// not know ends the turn.
func StopReason(s string) string {
	switch s {
	case StopEndTurn, StopMaxTokens, StopSequence, StopRefusal:
		return s
	}
	return StopEndTurn
}

// Ptr returns a pointer to s, for the nullable fields.
func Ptr(s string) *string { return &s }

type errorEnvelope struct {
	Type  string      `json:"type"`
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// ErrorJSON is e as Anthropic's error body.
func ErrorJSON(errType, message string) []byte {
	b, _ := json.Marshal(errorEnvelope{Type: "error", Error: errorDetail{Type: errType, Message: message}})
	return b
}

// WriteError sends e as Anthropic does: its status, retry-after when set and
// {"type":"error","error":{"type","message"}}.
func WriteError(w http.ResponseWriter, e *Error) {
	if s := retrySeconds(e.RetryAfter); s > 0 {
		w.Header().Set("retry-after", strconv.Itoa(s))
	}
	writeJSON(w, e.Status, json.RawMessage(ErrorJSON(e.Type, e.Message)))
}

// WriteMessage sends m as a 200 JSON answer.
func WriteMessage(w http.ResponseWriter, m Message) { writeJSON(w, http.StatusOK, m) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func retrySeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return max(int((d+time.Second-1)/time.Second), 1)
}

// Events writes the Messages API's server-sent event sequence:
// message_start, content_block_start, content_block_delta…,
// content_block_stop, message_delta (stop reason and usage), message_stop;
// ping any time after message_start, error to end a broken stream. Every
// event is flushed.
type Events struct {
	w           http.ResponseWriter
	rc          *http.ResponseController
	contentType string
	frame       Framer
	began       bool
	buf         []byte
}

// Framer appends the wire form of the event named name, whose JSON is
// data, to dst.
type Framer func(dst []byte, name string, data []byte) ([]byte, error)

// NewEvents writes events to w as server-sent events, the Messages API's
// stream. Headers go out with the first event.
func NewEvents(w http.ResponseWriter) *Events {
	return NewFramedEvents(w, "text/event-stream; charset=utf-8", sseFrame)
}

// NewFramedEvents writes the same events to w framed by frame, under
// contentType: the Messages stream carried by another protocol (Bedrock's
// InvokeModelWithResponseStream).
func NewFramedEvents(w http.ResponseWriter, contentType string, frame Framer) *Events {
	return &Events{w: w, rc: http.NewResponseController(w), contentType: contentType, frame: frame}
}

func sseFrame(dst []byte, name string, data []byte) ([]byte, error) {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...), nil
}

// Began reports whether the 200 and the first event were sent.
func (e *Events) Began() bool { return e.began }

// SetWriteDeadline bounds the next writes; zero clears the bound.
func (e *Events) SetWriteDeadline(t time.Time) { _ = e.rc.SetWriteDeadline(t) }

func (e *Events) send(name string, v any) error {
	if !e.began {
		h := e.w.Header()
		h.Set("Content-Type", e.contentType)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		e.w.WriteHeader(http.StatusOK)
		e.began = true
	}
	data, err := marshal(v)
	if err != nil {
		return err
	}
	if e.buf, err = e.frame(e.buf[:0], name, data); err != nil {
		return err
	}
	if _, err := e.w.Write(e.buf); err != nil {
		return err
	}
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// The events' bodies, "type" first as Anthropic sends them.
type (
	messageStartEvent struct {
		Type    string  `json:"type"`
		Message Message `json:"message"`
	}
	blockStartEvent struct {
		Type         string       `json:"type"`
		Index        int          `json:"index"`
		ContentBlock ContentBlock `json:"content_block"`
	}
	textDelta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	blockDeltaEvent struct {
		Type  string    `json:"type"`
		Index int       `json:"index"`
		Delta textDelta `json:"delta"`
	}
	indexEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	stopDelta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	messageDeltaEvent struct {
		Type  string    `json:"type"`
		Delta stopDelta `json:"delta"`
		Usage Usage     `json:"usage"`
	}
	typeOnly struct {
		Type string `json:"type"`
	}
)

// MessageStart opens the stream with m (no content, null stop reason).
func (e *Events) MessageStart(m Message) error {
	m.Content = []ContentBlock{}
	m.StopReason, m.StopSequence = nil, nil
	return e.send("message_start", messageStartEvent{Type: "message_start", Message: m})
}

// BlockStart opens text block index.
func (e *Events) BlockStart(index int) error {
	return e.send("content_block_start", blockStartEvent{Type: "content_block_start", Index: index,
		ContentBlock: ContentBlock{Type: "text", Text: ""}})
}

// TextDelta appends text to block index.
func (e *Events) TextDelta(index int, text string) error {
	return e.send("content_block_delta", blockDeltaEvent{Type: "content_block_delta", Index: index,
		Delta: textDelta{Type: "text_delta", Text: text}})
}

// BlockStop closes block index.
func (e *Events) BlockStop(index int) error {
	return e.send("content_block_stop", indexEvent{Type: "content_block_stop", Index: index})
}

// MessageDelta carries the stop reason and the message's final, cumulative
// usage.
func (e *Events) MessageDelta(stopReason string, stopSequence *string, u Usage) error {
	return e.send("message_delta", messageDeltaEvent{Type: "message_delta",
		Delta: stopDelta{StopReason: stopReason, StopSequence: stopSequence}, Usage: u})
}

// MessageStop ends the stream.
func (e *Events) MessageStop() error { return e.send("message_stop", typeOnly{Type: "message_stop"}) }

// Ping keeps the connection alive.
func (e *Events) Ping() error { return e.send("ping", typeOnly{Type: "ping"}) }

// Error ends a broken stream with Anthropic's error event.
func (e *Events) Error(errType, message string) error {
	return e.send("error", json.RawMessage(ErrorJSON(errType, message)))
}
