// Package provider defines the small interface every model backend implements
// (the built-in simulator, Bedrock, Anthropic, OpenAI-compatible servers) and
// the normalised errors the rest of the gateway branches on.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/events"
)

// Role of a message in a conversation.
type Role string

// Roles a conversation message may carry.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one entry of the conversation sent to a model.
type Message struct {
	Role    Role
	Content string
	// Cache marks the ends of prompt prefixes within Content, in order.
	Cache []CacheMark
	// Thinking, on an assistant message, is the reasoning the model wrote
	// before its text and tool calls, passed back to the vendor unchanged
	// (signatures and redacted data intact).
	Thinking []ThinkingBlock
	// ToolCalls, on an assistant message, are the tools it called, after
	// its text.
	ToolCalls []ToolCall
	// ToolResults, on a user message, answer the tool calls of the
	// assistant message before it; they come before its text.
	ToolResults []ToolResult
	// Images, on a user message, are pictures the user sent with it; they
	// come before its text, as Anthropic recommends. Only tiers with the
	// vision capability are sent a request that carries any.
	Images []Image
}

// CacheMark ends a prompt prefix the vendor may cache and read back on a
// later call that starts with the same prefix (Anthropic's cache_control,
// Bedrock's cachePoint): everything before it, the system prompt and then
// the messages in order, up to byte At of the text it is in. OpenAI caches
// long prefixes by itself and takes no mark; its adapter sends none.
type CacheMark struct {
	At int
	// TTL is how long the vendor keeps the prefix: CacheTTL (its default)
	// or CacheTTLLong.
	TTL time.Duration
}

// Prompt cache lifetimes the vendors offer, and the most marks one request
// may carry (Anthropic's and Bedrock's limit).
const (
	CacheTTL      = 5 * time.Minute
	CacheTTLLong  = time.Hour
	MaxCacheMarks = 4
)

// CacheMarks counts the marks of req.
func (req *Request) CacheMarks() int {
	n := len(req.SystemCache)
	for _, m := range req.Messages {
		n += len(m.Cache)
	}
	return n
}

// Request is a model call. Model is the gateway's model name (e.g. "sonnet");
// the provider maps it to its own model id.
type Request struct {
	Model     string
	System    string
	Messages  []Message
	MaxTokens int
	// Locale is a hint ("ja", "en") a provider may use; real providers ignore it.
	Locale string
	// Temperature, TopP and TopK, when set, are passed to the vendor; nil
	// leaves its default. TopK reaches only vendors that have it
	// (Anthropic, Claude on Bedrock): a tier on another is not offered a
	// turn that sets it.
	Temperature *float64
	TopP        *float64
	TopK        *int
	// Seed asks for a repeatable answer (OpenAI's seed): reaches only
	// vendors that have it, like TopK.
	Seed *int64
	// StopSequences end the answer when the model produces one of them.
	StopSequences []string
	// SystemCache marks the ends of prompt prefixes within System, in order.
	SystemCache []CacheMark
	// CacheKey is the client's OpenAI prompt_cache_key: a hint that routes
	// requests sharing a prefix to the same cache. The openai provider
	// sends it; Anthropic and Bedrock cache by marks and have no such hint.
	CacheKey string
	// Tools the model may call, and whether it must.
	Tools      []Tool
	ToolChoice ToolChoice
	// Format is the answer's required shape; the zero value is free text.
	Format Format
	// Thinking, when set, asks the model to reason before it answers.
	Thinking *Thinking
	// Guardrail, when set, is the vendor's own guardrail the call asks the
	// vendor to apply (Bedrock's guardrailConfig); only providers of
	// tiers with the guardrails capability get one.
	Guardrail *Guardrail
	// Metadata is Bedrock's requestMetadata, key-value pairs for the
	// vendor's invocation logs: the bedrock provider sends it; the other
	// vendors keep no such logs of a call, and it changes no answer.
	Metadata map[string]string
}

// Guardrail is a guardrail the vendor applies to a model call: Amazon
// Bedrock Guardrails, by identifier and version.
type Guardrail struct {
	ID, Version string
	// Trace is "enabled", "enabled_full" or "disabled" ("": the vendor's
	// default, disabled).
	Trace string
	// StreamMode is "sync" or "async" for a streamed call ("": the
	// vendor's default, sync).
	StreamMode string
}

// TokenCounter is a provider whose vendor counts a request's input tokens
// without running it (Anthropic's count_tokens, Bedrock's CountTokens): the
// count the vendor would bill that input at.
type TokenCounter interface {
	CountTokens(ctx context.Context, req *Request) (int, error)
}

// Usage is what the provider reports it billed for the call.
//
// The input classes are disjoint, as Anthropic and Bedrock report them:
// InputTokens is the input neither read from nor written to the prompt
// cache. A provider whose vendor counts cached tokens inside its prompt
// total (OpenAI) subtracts them, so that each token is priced once.
type Usage struct {
	InputTokens  int
	OutputTokens int
	// CachedInputTokens were read from the vendor's prompt cache.
	CachedInputTokens int
	// CacheWriteTokens were written to the vendor's prompt cache, and
	// CacheWrite1hTokens are the part of them written for one hour rather
	// than five minutes (priced higher).
	CacheWriteTokens   int
	CacheWrite1hTokens int
	// Estimated is set when the vendor reported no usage (a stream cut
	// before its final event) and the figures are the gateway's estimate.
	Estimated bool
}

// Input is every input token of the call, cached, written or neither: what
// the prompt was, for budgets, quotas and the estimate's calibration.
func (u Usage) Input() int { return u.InputTokens + u.CachedInputTokens + u.CacheWriteTokens }

// Add returns the sum of two usages; the sum is estimated if either is.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:        u.InputTokens + o.InputTokens,
		OutputTokens:       u.OutputTokens + o.OutputTokens,
		CachedInputTokens:  u.CachedInputTokens + o.CachedInputTokens,
		CacheWriteTokens:   u.CacheWriteTokens + o.CacheWriteTokens,
		CacheWrite1hTokens: u.CacheWrite1hTokens + o.CacheWrite1hTokens,
		Estimated:          u.Estimated || o.Estimated,
	}
}

// Response is the result of a model call.
type Response struct {
	Text       string
	Usage      Usage
	StopReason string
	// StopSequence is the stop sequence that ended the answer, when the
	// vendor says which (StopReason "stop_sequence").
	StopSequence string
	// ToolCalls are the tools the model called, after Text (StopReason
	// StopToolUse). A streamed answer's tool calls arrive here whole.
	ToolCalls []ToolCall
	// Thinking is the model's reasoning before Text, when the request
	// asked for it; a streamed answer's blocks arrive here whole too.
	Thinking []ThinkingBlock
	// GuardrailTrace is the vendor's trace of the request's Guardrail, as
	// the vendor sent it (Bedrock's trace.guardrail), when it sent one.
	GuardrailTrace json.RawMessage
	// ModelID is the provider's own model identifier that served the call.
	ModelID string
	// TTFT is the time from the call until the first token arrived.
	TTFT time.Duration
}

// Provider is a model backend.
//
// Stream calls emit for every text delta in order. If emit returns an error the
// stream stops and Stream returns that error. On any error, Stream still
// returns a non-nil *Response carrying the text and usage produced so far, so
// cut and cancelled streams are billed correctly.
type Provider interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
	Stream(ctx context.Context, req *Request, emit func(text string) error) (*Response, error)
}

// Kind classifies a provider failure. Callers decide retries, breaker
// bookkeeping and fallbacks on the kind alone.
type Kind string

// Error kinds, named after the Bedrock exceptions they normalise.
const (
	KindThrottled    Kind = "throttled"     // ThrottlingException, HTTP 429
	KindUnavailable  Kind = "unavailable"   // ServiceUnavailable, InternalServer, HTTP 5xx
	KindTimeout      Kind = "timeout"       // ModelTimeoutException, deadline exceeded
	KindNotReady     Kind = "not_ready"     // ModelNotReadyException
	KindValidation   Kind = "validation"    // ValidationException, HTTP 400
	KindAccessDenied Kind = "access_denied" // AccessDeniedException, HTTP 401/403
	KindNotFound     Kind = "not_found"     // ResourceNotFoundException, HTTP 404
	KindGuardrail    Kind = "guardrail"     // content blocked by a guardrail
	KindCanceled     Kind = "canceled"      // the caller went away
	KindUnknown      Kind = "unknown"
)

// Retryable reports whether a failure of this kind may succeed when tried again.
func (k Kind) Retryable() bool {
	switch k {
	case KindThrottled, KindUnavailable, KindTimeout, KindNotReady:
		return true
	}
	return false
}

// Error is a normalised provider failure.
type Error struct {
	Kind  Kind
	Model string
	// RetryAfter is the provider's hint, zero when it gave none.
	RetryAfter time.Duration
	// Status is the HTTP status the provider answered, zero if none.
	Status int
	// Code is the vendor's own error code (ThrottlingException,
	// overloaded_error, …), kept for events; empty if none.
	Code string
	Err  error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("provider %s: %s", e.Model, e.Kind)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err: the kind of a wrapped *Error, KindCanceled
// for context cancellation, KindTimeout for an expired deadline, and
// KindUnknown otherwise.
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	if pe, ok := errors.AsType[*Error](err); ok {
		return pe.Kind
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	}
	return KindUnknown
}

// KindFromStatus maps an HTTP status to a kind, for adapters of HTTP APIs.
func KindFromStatus(status int) Kind {
	switch {
	case status == 429:
		return KindThrottled
	case status == 408 || status == 504:
		return KindTimeout
	case status == 401 || status == 403:
		return KindAccessDenied
	case status == 404:
		return KindNotFound
	case status >= 500:
		return KindUnavailable
	case status >= 400:
		return KindValidation
	}
	return KindUnknown
}

// RetryAfterOf returns the provider's retry hint carried by err, if any.
func RetryAfterOf(err error) time.Duration {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.RetryAfter
	}
	return 0
}

// Traceparent is the W3C traceparent an adapter sends upstream with a call
// made in ctx: the model attempt's span (its trace and span id, its
// trace's sampled flag), so that a vendor's or a proxy's traces join the
// turn's. It is "" when ctx carries no span.
func Traceparent(ctx context.Context) string {
	tc, ok := events.TraceContextFrom(ctx)
	if !ok || !tc.IsValid() {
		return ""
	}
	return events.FormatTraceparent(tc)
}

// Segment is a piece of a text cut at its cache marks; Mark is the mark it
// ends at, nil for the piece after the last mark.
type Segment struct {
	Text string
	Mark *CacheMark
}

// Segments cuts text at its marks, for a vendor that takes a prompt as a
// list of blocks with a mark after some of them. The pieces joined are
// text; a mark outside the text, or not on a character boundary, is left
// out.
func Segments(text string, marks []CacheMark) []Segment {
	var out []Segment
	from := 0
	for i := range marks {
		at := marks[i].At
		if at <= from || at > len(text) || !utf8.RuneStart(byteAt(text, at)) {
			continue
		}
		out = append(out, Segment{Text: text[from:at], Mark: &marks[i]})
		from = at
	}
	if from < len(text) || len(out) == 0 {
		out = append(out, Segment{Text: text[from:]})
	}
	return out
}

// byteAt is text[i], or a character start at the end of text.
func byteAt(text string, i int) byte {
	if i == len(text) {
		return 0
	}
	return text[i]
}
