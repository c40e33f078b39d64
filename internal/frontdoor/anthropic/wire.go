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
	"unicode"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
	"github.com/fmgate/fmgate/internal/vision"
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
	Messages []provider.Message
	// Prefill is a trailing assistant message's text: the start of the
	// answer, which the model continues.
	Prefill       string
	MaxTokens     int
	StopSequences []string
	Temperature   *float64
	TopP          *float64
	TopK          *int
	Stream        bool
	// UserID is metadata.user_id, empty when not given.
	UserID string
	// Tools the model may call, and tool_choice.
	Tools      []provider.Tool
	ToolChoice provider.ToolChoice
	// Thinking is thinking {type: enabled, budget_tokens}; nil when
	// absent or disabled.
	Thinking *provider.Thinking
	// Format is the answer's shape: output_config.format (or the beta's
	// output_format) json_schema; the zero value is free text.
	Format provider.Format
}

// ProviderRequest is r as a model call for the model named model.
func (r *Request) ProviderRequest(model string) *provider.Request {
	msgs := slices.Clone(r.Messages)
	if r.Prefill != "" {
		msgs = append(msgs, provider.Message{Role: provider.RoleAssistant, Content: r.Prefill})
	}
	return &provider.Request{
		Model: model, System: r.System, SystemCache: slices.Clone(r.SystemCache), Messages: msgs,
		MaxTokens: r.MaxTokens, Temperature: r.Temperature, TopP: r.TopP, TopK: r.TopK, StopSequences: slices.Clone(r.StopSequences),
		Tools: r.Tools, ToolChoice: r.ToolChoice, Thinking: r.Thinking, Format: r.Format,
	}
}

// Error is a request refused in Anthropic's error shape.
type Error struct {
	Status  int
	Type    string
	Message string
	// RetryAfter is sent as retry-after (whole seconds, rounded up) when set.
	RetryAfter time.Duration
	// Details, when set, is the error's machine-readable details object.
	Details map[string]any
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

func invalid(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: ErrInvalidRequest, Message: fmt.Sprintf(format, args...)}
}

// supported are the request fields this server honours. Every other field
// Anthropic defines (service_tier, container, mcp_servers, …) is refused
// by name, never silently dropped.
var supported = []string{"model", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "top_k", "stream", "metadata", "tools", "tool_choice", "thinking", "output_config", "output_format"}

// DecodeRequest reads and validates a Messages request of at most maxBytes
// (DefaultMaxBodyBytes when <= 0). A refusal is an *Error in Anthropic's
// shape: 413 request_too_large, or 400 invalid_request_error naming the
// field and what to do about it.
//
// Its images are bounded by images (zero fields: vision's defaults).
func DecodeRequest(body io.Reader, maxBytes int64, images vision.Limits) (*Request, *Error) {
	fields, werr := readFields(body, maxBytes, supported)
	if werr != nil {
		return nil, werr
	}
	return decodeWithModel(fields, images)
}

// decodeWithModel decodes a body whose model is required.
func decodeWithModel(fields map[string]json.RawMessage, images vision.Limits) (*Request, *Error) {
	r := &Request{}
	if err := decodeString(fields, "model", &r.Model); err != nil {
		return nil, err
	}
	if r.Model == "" {
		return nil, invalid("model: Field required")
	}
	if err := r.decode(fields, images); err != nil {
		return nil, err
	}
	return r, nil
}

// countFields are the fields of a count_tokens body fmgate counts.
var countFields = []string{"model", "messages", "system", "tools", "tool_choice", "thinking"}

// DecodeCountTokens reads a count_tokens body: model, messages, system,
// tools and thinking, refused as DecodeRequest refuses them.
func DecodeCountTokens(body io.Reader, maxBytes int64, images vision.Limits) (*Request, *Error) {
	fields, werr := readFields(body, maxBytes, countFields)
	if werr != nil {
		return nil, werr
	}
	fields["max_tokens"] = json.RawMessage("1") // counting asks for no answer
	if th, ok := fields["thinking"]; ok && !isNull(th) {
		// Its budget is checked as a request's would be, against a
		// max_tokens above it: counting asks for no answer.
		var b struct {
			BudgetTokens int `json:"budget_tokens"`
		}
		if json.Unmarshal(th, &b) == nil && b.BudgetTokens > 0 {
			fields["max_tokens"] = json.RawMessage(strconv.Itoa(b.BudgetTokens + 1))
		}
	}
	return decodeWithModel(fields, images)
}

// BedrockVersion is the anthropic_version of a Messages body sent to
// Bedrock's InvokeModel.
const BedrockVersion = "bedrock-2023-05-31"

// invokeFields are the fields of a Messages body on Bedrock's InvokeModel:
// the model is in the path and streaming is the route's, not the body's.
var invokeFields = []string{"anthropic_version", "messages", "max_tokens", "system", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice", "thinking", "output_config", "output_format"}

// DecodeInvokeBody reads and validates the Messages body of a Bedrock
// InvokeModel call (anthropic_version bedrock-2023-05-31, no model): the
// same fields as DecodeRequest, refused the same way.
func DecodeInvokeBody(body io.Reader, maxBytes int64, images vision.Limits) (*Request, *Error) {
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
	if err := r.decode(fields, images); err != nil {
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
// A message thread (the beta "thread" field: the server keeps the
// conversation) is refused in the form the SDKs read to send the whole
// conversation again without one.
func checkKeys(fields map[string]json.RawMessage, allowed []string) *Error {
	if v, ok := fields["thread"]; ok && !isNull(v) {
		e := invalid("thread: message threads are not supported by this server; send the whole conversation in messages")
		e.Details = map[string]any{"error_code": "thread_unsupported_request", "unsupported": []string{"thread"}}
		return e
	}
	for _, k := range sortedKeys(fields) {
		if !slices.Contains(allowed, k) {
			return invalid("%s: not supported by this server (it serves text conversations: %s)", k, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// decode fills r from the fields every Messages body shares.
func (r *Request) decode(fields map[string]json.RawMessage, images vision.Limits) *Error {
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
	if v, ok := fields["top_p"]; ok && !isNull(v) {
		var p float64
		if err := json.Unmarshal(v, &p); err != nil || math.IsNaN(p) || p < 0 || p > 1 {
			return invalid("top_p: must be a number between 0 and 1")
		}
		r.TopP = &p
	}
	if v, ok := fields["top_k"]; ok && !isNull(v) {
		var k int
		if err := json.Unmarshal(v, &k); err != nil || k < 1 {
			return invalid("top_k: must be a positive integer")
		}
		r.TopK = &k
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
	var werr *Error
	if r.Tools, werr = decodeTools(fields["tools"]); werr != nil {
		return werr
	}
	if r.ToolChoice, werr = decodeToolChoice(fields["tool_choice"], r.Tools); werr != nil {
		return werr
	}
	msgs, merr := decodeMessages(fields["messages"], vision.NewReader(images))
	if merr != nil {
		return merr
	}
	r.Messages = msgs
	if n := len(msgs); n >= 2 && msgs[n-1].Role == provider.RoleAssistant {
		r.Messages, r.Prefill = msgs[:n-1], msgs[n-1].Content
	}
	if r.Thinking, werr = decodeThinking(fields["thinking"], r); werr != nil {
		return werr
	}
	if r.Format, werr = decodeOutputFormat(fields); werr != nil {
		return werr
	}
	if r.Format.Kind != provider.FormatText && r.Thinking != nil {
		// Claude tiers are asked for the format through a tool they must
		// call, which thinking does not allow.
		return invalid("output_config.format: not supported together with thinking by this server; ask for one or the other")
	}
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

func decodeMessages(v json.RawMessage, rd *vision.Reader) ([]provider.Message, *Error) {
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
		c, err := decodeBlocks(m.Content, fmt.Sprintf("messages.%d.content", i), role, rd)
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			prev := &out[n-1]
			shift := 0
			if prev.Content != "" && c.text != "" {
				shift = len(prev.Content) + len("\n\n")
				prev.Content += "\n\n"
			} else {
				shift = len(prev.Content)
			}
			for _, mk := range c.marks {
				prev.Cache = append(prev.Cache, provider.CacheMark{At: mk.At + shift, TTL: mk.TTL})
			}
			prev.Content += c.text
			prev.ToolCalls = append(prev.ToolCalls, c.calls...)
			prev.ToolResults = append(prev.ToolResults, c.results...)
			prev.Images = append(prev.Images, c.images...)
			prev.Thinking = append(prev.Thinking, c.thinking...)
			continue
		}
		out = append(out, provider.Message{Role: role, Content: c.text, Cache: c.marks, ToolCalls: c.calls, ToolResults: c.results, Images: c.images, Thinking: c.thinking})
	}
	last := out[len(out)-1]
	if last.Role == provider.RoleAssistant {
		// A prefill: the start of the answer, which the model continues.
		switch {
		case len(out) < 2:
			return nil, invalid("messages: the first message must have role \"user\"")
		case len(last.ToolCalls) > 0:
			return nil, invalid("messages: the last message may not hold tool_use blocks (a tool call needs its result in a user message)")
		case len(last.Thinking) > 0:
			return nil, invalid("messages: a final assistant message (a prefill) cannot contain thinking or redacted_thinking blocks")
		case strings.TrimSpace(last.Content) == "":
			return nil, invalid("messages: a final assistant message (a prefill) must not be empty")
		case strings.TrimRightFunc(last.Content, unicode.IsSpace) != last.Content:
			return nil, invalid("messages: final assistant content cannot end with trailing whitespace")
		case len(last.Cache) > 0:
			return nil, invalid("messages: cache_control is not supported on a final assistant message (a prefill)")
		}
		last = out[len(out)-2]
	}
	if strings.TrimSpace(last.Content) == "" && len(last.ToolResults) == 0 && len(last.Images) == 0 {
		return nil, invalid("messages: the last user message must not be empty")
	}
	if err := provider.CheckToolPairing(out); err != nil {
		return nil, invalid("messages: %v (every tool_use block must be answered by a tool_result block in the next user message)", err)
	}
	return out, nil
}

// decodeContent reads a string, or a list of text blocks joined by a blank
// line, with a cache mark where a block with cache_control ends.
func decodeContent(v json.RawMessage, path string) (string, []provider.CacheMark, *Error) {
	c, err := decodeBlocks(v, path, "", nil)
	if err != nil {
		return "", nil, err
	}
	return c.text, c.marks, nil
}

// content is a message's content: its text blocks joined by a blank line,
// the cache marks in it, its tool blocks, its images and its thinking.
type content struct {
	text     string
	marks    []provider.CacheMark
	calls    []provider.ToolCall
	results  []provider.ToolResult
	images   []provider.Image
	thinking []provider.ThinkingBlock
}

// decodeBlocks reads a string, or a list of blocks: text, and tool_use
// blocks for an assistant message (role), tool_result and image blocks for
// a user message (rd reads the images). A block's cache_control marks where it ends; a tool block's
// mark is placed at the end of the text before it (the tool blocks of a
// message travel around its text: results before, calls after).
func decodeBlocks(v json.RawMessage, path string, role provider.Role, rd *vision.Reader) (content, *Error) {
	var c content
	if v == nil || isNull(v) {
		return c, invalid("%s: Field required", path)
	}
	if bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
		if err := json.Unmarshal(v, &c.text); err != nil {
			return c, invalid("%s: must be a string or a list of content blocks", path)
		}
		if !utf8.ValidString(c.text) {
			return c, invalid("%s: must be valid UTF-8", path)
		}
		return c, nil
	}
	var blocks []map[string]json.RawMessage
	if err := json.Unmarshal(v, &blocks); err != nil {
		return c, invalid("%s: must be a string or a list of content blocks", path)
	}
	var text strings.Builder
	texts := 0
	for i, b := range blocks {
		bp := fmt.Sprintf("%s.%d", path, i)
		var typ string
		if t, ok := b["type"]; !ok || json.Unmarshal(t, &typ) != nil {
			return c, invalid("%s.type: Field required", bp)
		}
		switch {
		case typ == "text":
			if err := onlyKeys(b, bp, "type", "text", "cache_control", "citations"); err != nil {
				return c, err
			}
			if cit, ok := b["citations"]; ok && !isNull(cit) && !bytes.Equal(bytes.TrimSpace(cit), []byte("[]")) {
				return c, invalid("%s.citations: not supported", bp)
			}
			var t string
			if err := decodeString(b, "text", &t); err != nil {
				return c, invalid("%s.text: must be a string", bp)
			}
			if texts > 0 {
				text.WriteString("\n\n")
			}
			texts++
			text.WriteString(t)
		case typ == "tool_use" && role == provider.RoleAssistant:
			call, err := decodeToolUse(b, bp)
			if err != nil {
				return c, err
			}
			c.calls = append(c.calls, call)
		case typ == "tool_result" && role == provider.RoleUser:
			r, err := decodeToolResult(b, bp)
			if err != nil {
				return c, err
			}
			c.results = append(c.results, r)
		case typ == "image" && role == provider.RoleUser && rd != nil:
			im, err := decodeImage(b, bp, rd)
			if err != nil {
				return c, err
			}
			c.images = append(c.images, im)
		case typ == "image":
			return c, invalid("%s: image blocks are supported in user messages only (not in system prompts, tool results or assistant messages)", bp)
		case (typ == "thinking" || typ == "redacted_thinking") && role == provider.RoleAssistant:
			th, err := decodeThinkingBlock(b, bp, typ)
			if err != nil {
				return c, err
			}
			c.thinking = append(c.thinking, th)
		case typ == "thinking" || typ == "redacted_thinking":
			return c, invalid("%s: %s blocks belong in assistant messages", bp, typ)
		case typ == "tool_use" || typ == "tool_result":
			return c, invalid("%s: %s blocks belong in %s messages", bp, typ, map[string]string{"tool_use": "assistant", "tool_result": "user"}[typ])
		default:
			return c, invalid("%s: content blocks of type %q are not supported (text, image, tool_use, tool_result, thinking and redacted_thinking are)", bp, typ)
		}
		if cc, ok := b["cache_control"]; ok && !isNull(cc) {
			ttl, err := decodeCacheControl(cc, bp+".cache_control")
			if err != nil {
				return c, err
			}
			c.marks = append(c.marks, provider.CacheMark{At: text.Len(), TTL: ttl})
		}
	}
	c.text = text.String()
	return c, nil
}

// decodeImage reads an image block: its source base64 data of a media
// type, or a url the gateway fetches once the caller is admitted (when the
// operator allows its host). A file source is refused: fmgate holds no
// Files API.
func decodeImage(b map[string]json.RawMessage, path string, rd *vision.Reader) (provider.Image, *Error) {
	if err := onlyKeys(b, path, "type", "source", "cache_control"); err != nil {
		return provider.Image{}, err
	}
	var src map[string]json.RawMessage
	if err := json.Unmarshal(b["source"], &src); err != nil || src == nil {
		return provider.Image{}, invalid("%s.source: Field required (an object with type base64, media_type and data)", path)
	}
	var typ, mediaType, data string
	if err := decodeString(src, "type", &typ); err != nil {
		return provider.Image{}, invalid("%s.source.type: must be a string", path)
	}
	switch typ {
	case "base64":
	case "url":
		return decodeImageURL(src, path, rd)
	case "file":
		return provider.Image{}, invalid("%s.source.type: file sources are not supported (fmgate holds no Files API); send the image base64-encoded", path)
	default:
		return provider.Image{}, invalid("%s.source.type: must be \"base64\" (got %q)", path, typ)
	}
	if err := onlyKeys(src, path+".source", "type", "media_type", "data"); err != nil {
		return provider.Image{}, err
	}
	if decodeString(src, "media_type", &mediaType) != nil || decodeString(src, "data", &data) != nil {
		return provider.Image{}, invalid("%s.source: media_type and data must be strings", path)
	}
	im, err := rd.Base64(mediaType, data)
	if err != nil {
		return provider.Image{}, invalid("%s.source: %v", path, err)
	}
	return im, nil
}

// decodeImageURL reads an image source {"type": "url", "url": "https://…"}.
func decodeImageURL(src map[string]json.RawMessage, path string, rd *vision.Reader) (provider.Image, *Error) {
	if err := onlyKeys(src, path+".source", "type", "url"); err != nil {
		return provider.Image{}, err
	}
	var url string
	if decodeString(src, "url", &url) != nil || url == "" {
		return provider.Image{}, invalid("%s.source.url: Field required (a string)", path)
	}
	if strings.HasPrefix(url, "data:") {
		return provider.Image{}, invalid("%s.source.url: send a data URL's image as a base64 source", path)
	}
	im, err := rd.Remote(url)
	if err != nil {
		if errors.Is(err, vision.ErrRemote) {
			return provider.Image{}, invalid("%s.source.type: %v", path, err)
		}
		return provider.Image{}, invalid("%s.source.url: %v", path, err)
	}
	return im, nil
}

// onlyKeys refuses the first key of block b not among keys.
func onlyKeys(b map[string]json.RawMessage, path string, keys ...string) *Error {
	for _, k := range sortedKeys(b) {
		if !slices.Contains(keys, k) {
			return invalid("%s.%s: not supported", path, k)
		}
	}
	return nil
}

// decodeToolUse reads a tool_use block of an assistant message.
func decodeToolUse(b map[string]json.RawMessage, path string) (provider.ToolCall, *Error) {
	var call provider.ToolCall
	if err := onlyKeys(b, path, "type", "id", "name", "input", "cache_control"); err != nil {
		return call, err
	}
	if err := decodeString(b, "id", &call.ID); err != nil || call.ID == "" {
		return call, invalid("%s.id: Field required", path)
	}
	if err := decodeString(b, "name", &call.Name); err != nil {
		return call, err
	}
	if err := provider.CheckToolName(call.Name); err != nil {
		return call, invalid("%s.name: %v", path, err)
	}
	call.Input = b["input"]
	if !provider.IsJSONObject(call.Input) {
		return call, invalid("%s.input: must be an object", path)
	}
	return call, nil
}

// decodeToolResult reads a tool_result block of a user message: its
// content a string or text blocks.
func decodeToolResult(b map[string]json.RawMessage, path string) (provider.ToolResult, *Error) {
	var r provider.ToolResult
	if err := onlyKeys(b, path, "type", "tool_use_id", "content", "is_error", "cache_control"); err != nil {
		return r, err
	}
	if err := decodeString(b, "tool_use_id", &r.CallID); err != nil || r.CallID == "" {
		return r, invalid("%s.tool_use_id: Field required", path)
	}
	if v, ok := b["is_error"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &r.IsError); err != nil {
			return r, invalid("%s.is_error: must be true or false", path)
		}
	}
	if v, ok := b["content"]; ok && !isNull(v) {
		c, err := decodeBlocks(v, path+".content", "", nil)
		if err != nil {
			return r, err
		}
		if len(c.marks) > 0 {
			return r, invalid("%s.content: cache_control is not supported inside a tool result (mark the tool_result block)", path)
		}
		r.Content = c.text
	}
	return r, nil
}

// decodeThinkingBlock reads an assistant's thinking block (its thinking
// text and signature) or redacted_thinking block (its data), to be sent
// back to the model unchanged.
func decodeThinkingBlock(b map[string]json.RawMessage, path, typ string) (provider.ThinkingBlock, *Error) {
	var th provider.ThinkingBlock
	if typ == "redacted_thinking" {
		if err := onlyKeys(b, path, "type", "data"); err != nil {
			return th, err
		}
		if err := decodeString(b, "data", &th.Redacted); err != nil || th.Redacted == "" {
			return th, invalid("%s.data: Field required", path)
		}
		return th, nil
	}
	if err := onlyKeys(b, path, "type", "thinking", "signature"); err != nil {
		return th, err
	}
	if _, ok := b["thinking"]; !ok {
		return th, invalid("%s.thinking: Field required", path)
	}
	if err := decodeString(b, "thinking", &th.Text); err != nil {
		return th, invalid("%s.thinking: must be a string", path)
	}
	if err := decodeString(b, "signature", &th.Signature); err != nil || th.Signature == "" {
		return th, invalid("%s.signature: Field required", path)
	}
	return th, nil
}

// decodeThinking reads thinking, {"type": "enabled", "budget_tokens": N}
// or {"type": "disabled"}, and checks what Anthropic checks of a request
// that thinks: a budget of at least provider.MinThinkingBudget and below
// max_tokens, no forced tool, no prefill, temperature 1 if set, top_p of
// at least 0.95 if set, no top_k. Adaptive thinking is refused by name.
func decodeThinking(v json.RawMessage, r *Request) (*provider.Thinking, *Error) {
	if v == nil || isNull(v) {
		return nil, nil
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(v, &f); err != nil || f == nil {
		return nil, invalid("thinking: must be an object like {\"type\": \"enabled\", \"budget_tokens\": 2048}")
	}
	var typ string
	if err := decodeString(f, "type", &typ); err != nil {
		return nil, invalid("thinking.type: must be a string")
	}
	switch typ {
	case "disabled":
		if err := onlyKeys(f, "thinking", "type"); err != nil {
			return nil, err
		}
		return nil, nil
	case "enabled":
	case "":
		return nil, invalid("thinking.type: Field required")
	default:
		return nil, invalid("thinking.type: %q is not supported by this server (\"enabled\" with budget_tokens, and \"disabled\", are)", typ)
	}
	if err := onlyKeys(f, "thinking", "type", "budget_tokens"); err != nil {
		return nil, err
	}
	raw, ok := f["budget_tokens"]
	if !ok || isNull(raw) {
		return nil, invalid("thinking.enabled.budget_tokens: Field required")
	}
	th := &provider.Thinking{}
	if err := json.Unmarshal(raw, &th.BudgetTokens); err != nil {
		return nil, invalid("thinking.enabled.budget_tokens: must be an integer")
	}
	switch {
	case th.BudgetTokens < provider.MinThinkingBudget:
		return nil, invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to %d", provider.MinThinkingBudget)
	case r.MaxTokens <= th.BudgetTokens:
		return nil, invalid("max_tokens: must be greater than thinking.budget_tokens (%d): the reasoning counts within max_tokens", th.BudgetTokens)
	case r.ToolChoice.Forced():
		return nil, invalid("tool_choice: Thinking may not be enabled when tool_choice forces tool use (use \"auto\" or \"none\")")
	case r.Prefill != "":
		return nil, invalid("messages: a final assistant message (a prefill) cannot be used when thinking is enabled")
	case r.Temperature != nil && *r.Temperature != 1:
		return nil, invalid("temperature: may only be set to 1 when thinking is enabled")
	case r.TopP != nil && *r.TopP < 0.95:
		return nil, invalid("top_p: must be at least 0.95, or unset, when thinking is enabled")
	case r.TopK != nil:
		return nil, invalid("top_k: is not compatible with thinking")
	}
	return th, nil
}

// decodeTools reads tools: client tools with a name, a description and an
// input_schema. Anthropic's server tools (web search, code execution, …)
// are refused by name.
func decodeTools(v json.RawMessage) ([]provider.Tool, *Error) {
	if v == nil || isNull(v) {
		return nil, nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(v, &list); err != nil {
		return nil, invalid("tools: must be a list of tools")
	}
	tools := make([]provider.Tool, 0, len(list))
	for i, b := range list {
		path := fmt.Sprintf("tools.%d", i)
		var typ string
		if err := decodeString(b, "type", &typ); err != nil {
			return nil, err
		}
		if typ != "" && typ != "custom" {
			return nil, invalid("%s.type: %q tools are not supported (client tools with a name and an input_schema are)", path, typ)
		}
		if err := onlyKeys(b, path, "type", "name", "description", "input_schema", "strict"); err != nil {
			return nil, err
		}
		var t provider.Tool
		if v, ok := b["strict"]; ok && !isNull(v) {
			if err := json.Unmarshal(v, &t.Strict); err != nil {
				return nil, invalid("%s.strict: must be true or false", path)
			}
		}
		if err := decodeString(b, "name", &t.Name); err != nil {
			return nil, err
		}
		if err := decodeString(b, "description", &t.Description); err != nil {
			return nil, err
		}
		t.Schema = b["input_schema"]
		if !provider.IsJSONObject(t.Schema) {
			return nil, invalid("%s.input_schema: Field required (a JSON Schema object)", path)
		}
		tools = append(tools, t)
	}
	if err := provider.CheckTools(tools, provider.ToolChoice{}); err != nil {
		return nil, invalid("tools: %v", err)
	}
	return tools, nil
}

// decodeToolChoice reads tool_choice: auto, any, tool (with a name) or
// none, each with disable_parallel_tool_use.
func decodeToolChoice(v json.RawMessage, tools []provider.Tool) (provider.ToolChoice, *Error) {
	var c provider.ToolChoice
	if v == nil || isNull(v) {
		return c, nil
	}
	var tc struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tc); err != nil {
		return c, invalid("tool_choice: must be an object like {\"type\": \"auto\"} (%s)", jsonProblem(err))
	}
	switch tc.Type {
	case "auto":
	case "any":
		c.Mode = provider.ToolAny
	case "tool":
		c.Mode, c.Name = provider.ToolNamed, tc.Name
	case "none":
		c.Mode = provider.ToolNone
	default:
		return c, invalid("tool_choice.type: must be \"auto\", \"any\", \"tool\" or \"none\"")
	}
	c.Sequential = tc.DisableParallelToolUse
	if err := provider.CheckTools(tools, c); err != nil {
		return c, invalid("tool_choice: %v", err)
	}
	return c, nil
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

// ContentBlock is a block of an answer: text, a tool_use, or the model's
// reasoning before them (thinking, redacted_thinking).
type ContentBlock struct {
	Type string
	Text string
	// ID, Name and Input are a tool_use block's.
	ID    string
	Name  string
	Input json.RawMessage
	// Thinking and Signature are a thinking block's; Data is a
	// redacted_thinking block's.
	Thinking  string
	Signature string
	Data      string
}

// MarshalJSON writes the block's fields for its type.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case "tool_use":
		input := b.Input
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		return json.Marshal(struct {
			Type  string          `json:"type"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}{b.Type, b.ID, b.Name, input})
	case "thinking":
		return json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	case "redacted_thinking":
		return json.Marshal(struct {
			Type string `json:"type"`
			Data string `json:"data"`
		}{b.Type, b.Data})
	}
	return json.Marshal(struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{b.Type, b.Text})
}

// UnmarshalJSON reads a text, tool_use, thinking or redacted_thinking
// block.
func (b *ContentBlock) UnmarshalJSON(data []byte) error {
	var v struct {
		Type      string          `json:"type"`
		Text      string          `json:"text"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		Thinking  string          `json:"thinking"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*b = ContentBlock{Type: v.Type, Text: v.Text, ID: v.ID, Name: v.Name, Input: v.Input,
		Thinking: v.Thinking, Signature: v.Signature, Data: v.Data}
	return nil
}

// ThinkingBlock is th as an answer's block: thinking, or
// redacted_thinking.
func ThinkingBlock(th provider.ThinkingBlock) ContentBlock {
	if th.Redacted != "" {
		return ContentBlock{Type: "redacted_thinking", Data: th.Redacted}
	}
	return ContentBlock{Type: "thinking", Thinking: th.Text, Signature: th.Signature}
}

// Blocks is an answer's content: the model's thinking blocks, its text,
// then a tool_use block for each call. The text block is left out when
// the answer is only tool calls.
func Blocks(thinking []provider.ThinkingBlock, text string, calls []provider.ToolCall) []ContentBlock {
	out := make([]ContentBlock, 0, len(thinking)+1+len(calls))
	for _, th := range thinking {
		out = append(out, ThinkingBlock(th))
	}
	if text != "" || len(calls) == 0 {
		out = append(out, ContentBlock{Type: "text", Text: text})
	}
	for _, c := range calls {
		out = append(out, ContentBlock{Type: "tool_use", ID: c.ID, Name: c.Name, Input: c.Input})
	}
	return out
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
	case StopEndTurn, StopMaxTokens, StopSequence, StopRefusal, provider.StopToolUse:
		return s
	case "guardrail_intervened", "content_filtered", "content_filter":
		return StopRefusal // a guardrail's or a content filter's redirect answer
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
	Type    string         `json:"type"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
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
	writeJSON(w, e.Status, errorEnvelope{Type: "error", Error: errorDetail{Type: e.Type, Message: e.Message, Details: e.Details}})
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
// event is flushed as it is sent, or after Hold, with the others held, by
// Flush.
type Events struct {
	w           http.ResponseWriter
	rc          *http.ResponseController
	contentType string
	frame       Framer
	began       bool
	held        bool
	buf         []byte // framed events not yet written
	data        []byte // the JSON of the event being framed
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

// Hold keeps the events sent from now on until Flush, which writes them in
// one write and flushes once: the events one frame of the pipeline's
// stream becomes (message_start and the first delta; the end's blocks,
// message_delta and message_stop) leave together.
func (e *Events) Hold() { e.held = true }

// Flush writes the events held and flushes the connection; it does nothing
// when none is held.
func (e *Events) Flush() error {
	if len(e.buf) == 0 {
		return nil
	}
	err := stream.WriteFlush(e.w, e.rc, e.buf)
	e.buf = e.buf[:0]
	return err
}

func (e *Events) send(name string, v any) error {
	data, err := marshal(v)
	if err != nil {
		return err
	}
	return e.emit(name, data)
}

// emit frames the event named name, whose JSON is data, sending the
// headers before the first; it writes it at once unless events are held.
func (e *Events) emit(name string, data []byte) error {
	if !e.began {
		h := e.w.Header()
		h.Set("Content-Type", e.contentType)
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		e.w.WriteHeader(http.StatusOK)
		e.began = true
	}
	buf, err := e.frame(e.buf, name, data)
	if err != nil {
		return err
	}
	e.buf = buf
	if e.held {
		return nil
	}
	return e.Flush()
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
	jsonDelta struct {
		Type        string `json:"type"`
		PartialJSON string `json:"partial_json"`
	}
	thinkingDelta struct {
		Type     string `json:"type"`
		Thinking string `json:"thinking"`
	}
	signatureDelta struct {
		Type      string `json:"type"`
		Signature string `json:"signature"`
	}
	anyDeltaEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta any    `json:"delta"`
	}
	jsonDeltaEvent struct {
		Type  string    `json:"type"`
		Index int       `json:"index"`
		Delta jsonDelta `json:"delta"`
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
	e.data = appendTextDelta(e.data[:0], index, text)
	return e.emit("content_block_delta", e.data)
}

// textDelta is TextDelta for the stream's text, held in its buffer.
func (e *Events) textDelta(index int, text []byte) error {
	e.data = appendTextDelta(e.data[:0], index, text)
	return e.emit("content_block_delta", e.data)
}

// appendTextDelta appends a text delta event's JSON, written by hand
// (the event of every chunk of an answer) as encoding/json writes the
// other events: "type" first, no HTML escaping.
func appendTextDelta[T ~string | ~[]byte](dst []byte, index int, text T) []byte {
	dst = append(dst, `{"type":"content_block_delta","index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	dst = append(dst, `,"delta":{"type":"text_delta","text":`...)
	dst = stream.AppendMarshaledString(dst, text, false)
	return append(dst, "}}"...)
}

// inputPiece is the most bytes of a tool call's input one
// input_json_delta carries: the input arrives in pieces, as Anthropic
// streams it.
const inputPiece = 48

// ToolUse sends call as block index: its start, its input in pieces (each
// whole UTF-8) and its stop.
func (e *Events) ToolUse(index int, call provider.ToolCall) error {
	if err := e.send("content_block_start", blockStartEvent{Type: "content_block_start", Index: index,
		ContentBlock: ContentBlock{Type: "tool_use", ID: call.ID, Name: call.Name, Input: json.RawMessage("{}")}}); err != nil {
		return err
	}
	for input := string(call.Input); input != ""; {
		n := min(inputPiece, len(input))
		for n < len(input) && !utf8.RuneStart(input[n]) {
			n++
		}
		if err := e.send("content_block_delta", jsonDeltaEvent{Type: "content_block_delta", Index: index,
			Delta: jsonDelta{Type: "input_json_delta", PartialJSON: input[:n]}}); err != nil {
			return err
		}
		input = input[n:]
	}
	return e.BlockStop(index)
}

// ThinkingStart opens thinking block index, its text and signature to
// come in ThinkingDelta and SignatureDelta.
func (e *Events) ThinkingStart(index int) error {
	return e.send("content_block_start", blockStartEvent{Type: "content_block_start", Index: index,
		ContentBlock: ContentBlock{Type: "thinking"}})
}

// ThinkingDelta appends text to thinking block index.
func (e *Events) ThinkingDelta(index int, text string) error {
	return e.send("content_block_delta", anyDeltaEvent{Type: "content_block_delta", Index: index,
		Delta: thinkingDelta{Type: "thinking_delta", Thinking: text}})
}

// SignatureDelta sends the signature of thinking block index, before its
// stop.
func (e *Events) SignatureDelta(index int, signature string) error {
	return e.send("content_block_delta", anyDeltaEvent{Type: "content_block_delta", Index: index,
		Delta: signatureDelta{Type: "signature_delta", Signature: signature}})
}

// RedactedThinking sends a redacted_thinking block whole, as block index:
// its start, with its data, and its stop.
func (e *Events) RedactedThinking(index int, data string) error {
	if err := e.send("content_block_start", blockStartEvent{Type: "content_block_start", Index: index,
		ContentBlock: ContentBlock{Type: "redacted_thinking", Data: data}}); err != nil {
		return err
	}
	return e.BlockStop(index)
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
