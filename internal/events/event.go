// Package events is fmgate's single structured event stream: every span of
// every turn (admit, budget, quota, each model attempt, cache, FAQ, stream…)
// ends by emitting exactly one Event in schema version 3, the shape that the
// cost, latency, quality and capacity views all read.
//
// The pipeline opens spans with a Tracer; finished spans go to an Emitter,
// which never blocks the turn: a bounded queue per sink, a background
// dispatcher writing batches, drops counted per sink, and a write-ahead log
// for must-persist (cost and quota) events so that durable sinks such as the
// embedded event store see each of them exactly once even across a crash.
//
// Privacy is enforced here, not downstream: user ids are keyed hashes,
// message text only enters an event as a redacted, truncated excerpt when
// explicitly enabled, and every sink encodes through Encode, which writes
// only the schema's allow-listed fields.
package events

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// SchemaVersion is the version of the event shape written by Encode.
const SchemaVersion = 3

// InvocationMode says how the turn reached the gateway.
type InvocationMode string

// Invocation modes of schema v3.
const (
	ModeSyncStreaming InvocationMode = "sync_streaming"
	ModeSync          InvocationMode = "sync"
	ModeAsyncQueue    InvocationMode = "async_queue"
	ModeBatch         InvocationMode = "batch"
	ModeScheduled     InvocationMode = "scheduled"
)

// NodeEmbeddings is the node of an embedding call's "turn" span (POST
// /v1/embeddings): a turn for the cost views, under its feature and model,
// but not a chat turn, whose latency, tier mix and errors the live figures
// and their alert rules follow.
const NodeEmbeddings = "embeddings"

// ArtifactKind says what kind of work a span did.
type ArtifactKind string

// Artifact kinds of schema v3.
const (
	KindLLMCall      ArtifactKind = "llm_call"
	KindToolCall     ArtifactKind = "tool_call"
	KindSubAgentCall ArtifactKind = "sub_agent_call"
	KindEval         ArtifactKind = "eval"
	KindInternal     ArtifactKind = "internal"
)

// CacheHit records how much of a request a cache answered.
type CacheHit string

// Cache outcomes of schema v3. The empty value encodes as null: the span
// did not involve a cache.
const (
	CacheFull          CacheHit = "full"
	CachePrefixPartial CacheHit = "prefix_partial"
	CacheMiss          CacheHit = "miss"
)

// Status is the outcome of a span.
type Status string

// Outcomes of schema v3. A span that never set its status ends as StatusOK.
const (
	StatusOK             Status = "ok"
	StatusFallback       Status = "fallback"
	StatusRetrySucceeded Status = "retry_succeeded"
	StatusFailed         Status = "failed"
)

// Event is one finished span in schema version 3 (seed "The unified event
// schema"). Fields outside the seed's blocks are Name, MustPersist,
// PromptExcerpt, SampledOut, Attribution.Priority and Outcome.VendorCode;
// they are documented below.
//
// Optional string fields (parent_span_id at a root span, model_id,
// prompt_version, tool_*, sub_agent_*, cache_hit, error_code,
// fallback_used) encode as JSON null when empty, as the seed shows them.
// Sinks must treat an Event as read-only: one value is shared by all sinks.
type Event struct {
	SchemaVersion int    `json:"schema_version"`
	TraceID       string `json:"trace_id"`       // 32 lowercase hex (W3C)
	SpanID        string `json:"span_id"`        // 16 lowercase hex (W3C)
	ParentSpanID  string `json:"parent_span_id"` // null at the root span
	WorkflowID    string `json:"workflow_id"`
	UserIDHash    string `json:"user_id_hash"` // Hasher output, never the raw id
	SessionID     string `json:"session_id"`
	// TSStart and TSEnd encode as RFC 3339 UTC with milliseconds.
	TSStart    time.Time `json:"ts_start"`
	TSEnd      time.Time `json:"ts_end"`
	DurationMS int64     `json:"duration_ms"`

	// Name is the span name ("turn", "admit", "budget", "quota",
	// "model_attempt", "retry", "cache", "faq", "stream", …). Not in the
	// seed's blocks; it is what trace viewers show.
	Name string `json:"name"`
	// MustPersist marks cost and quota records: they go through the
	// write-ahead log and reach durable sinks exactly once. Not in the seed's
	// blocks (the seed's Q6 names the flag).
	MustPersist bool `json:"must_persist"`
	// PromptExcerpt is a redacted, truncated excerpt of the user's message.
	// Empty unless privacy.excerpt is enabled; omitted from the JSON when
	// empty.
	PromptExcerpt string `json:"prompt_excerpt,omitempty"`
	// Sampled is the trace's head-sampling flag (W3C flag bit 0) when the
	// span ended. It is not part of the encoded event: TailSampler reads it
	// in process.
	Sampled bool `json:"-"`
	// SampledOut is set on a turn span whose turn was not sampled (see
	// SamplingConfig): neither head-sampled nor failed, fell back or slow.
	// It is how the decision travels with the spans to the event stores,
	// which then keep only that turn's turn span and must-persist records
	// in full. Not in the seed's blocks; omitted when false, so an event
	// without it is kept whole.
	SampledOut bool `json:"sampled_out,omitempty"`
	// Content is a model attempt's prompt and answer, set only for a turn
	// whose payload is logged with content capture on
	// (payloadLog.captureContent). It is never encoded: no stored or
	// streamed event carries it, only an in-process exporter that
	// captures content (the OTLP sink) reads it.
	Content *Content `json:"-"`

	Node        Node        `json:"node"`
	Artifact    Artifact    `json:"artifact"`
	Resource    Resource    `json:"resource"`
	Outcome     Outcome     `json:"outcome"`
	Attribution Attribution `json:"attribution"`
}

// Content is the text of a model attempt in the shape of OpenTelemetry's
// GenAI conventions (gen_ai.input.messages, gen_ai.output.messages): each
// encodes to their JSON as it is.
type Content struct {
	Input  []ContentMessage
	Output []ContentMessage
}

// ContentMessage is one message; FinishReason only on an output message.
type ContentMessage struct {
	Role         string        `json:"role"`
	Parts        []ContentPart `json:"parts"`
	FinishReason string        `json:"finish_reason,omitempty"`
}

// ContentPart is a part of a message: "text" (Content), "tool_call" (ID,
// Name, Arguments) or "tool_call_response" (ID, Response).
type ContentPart struct {
	Type      string          `json:"type"`
	Content   string          `json:"content,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Response  string          `json:"response,omitempty"`
}

// Node is the graph position of a span.
type Node struct {
	GraphVersion   string         `json:"graph_version"`
	NodeID         string         `json:"node_id"`
	InvocationMode InvocationMode `json:"invocation_mode"`
}

// Artifact names the versioned things a span touched.
type Artifact struct {
	ArtifactKind    ArtifactKind `json:"artifact_kind"`
	ModelID         string       `json:"model_id"`
	PromptVersion   string       `json:"prompt_version"`
	ToolID          string       `json:"tool_id"`
	ToolVersion     string       `json:"tool_version"`
	SubAgentID      string       `json:"sub_agent_id"`
	SubAgentVersion string       `json:"sub_agent_version"`
}

// Resource is what a span consumed.
type Resource struct {
	TokensIn  int     `json:"tokens_in"`
	TokensOut int     `json:"tokens_out"`
	CostUSD   float64 `json:"cost_usd"`
	// TokensCacheRead and TokensCacheWrite are the part of TokensIn the
	// vendor read from and wrote to its prompt cache; CacheSavedUSD is what
	// the span would have cost at the model's plain input price, less
	// CostUSD (negative when cache writes cost more than reads saved). Not
	// in the seed's block; omitted when zero.
	TokensCacheRead       int      `json:"tokens_cache_read,omitempty"`
	TokensCacheWrite      int      `json:"tokens_cache_write,omitempty"`
	CacheSavedUSD         float64  `json:"cache_saved_usd,omitempty"`
	CacheHit              CacheHit `json:"cache_hit"`
	CapabilityFlagsActive []string `json:"capability_flags_active"` // [] when none
	// ToolCalls counts the tools a model attempt called, and ToolNames
	// names them in order (never their arguments). Not in the seed's
	// block; omitted when none.
	ToolCalls int      `json:"tool_calls,omitempty"`
	ToolNames []string `json:"tool_names,omitempty"`
	// Images counts the images a model attempt was sent (never their
	// bytes). Not in the seed's block; omitted when none.
	Images int `json:"images,omitempty"`
	// ImageBytes is the bytes of the remote images a fetch span fetched.
	// Not in the seed's block; omitted when none.
	ImageBytes int `json:"image_bytes,omitempty"`
	// ImageTokens is the part of a model attempt's input tokens its images
	// are, by its vendor's own formula, and ImageCostUSD their price at
	// the model's input price. Not in the seed's block; omitted when none.
	ImageTokens  int     `json:"image_tokens,omitempty"`
	ImageCostUSD float64 `json:"image_cost_usd,omitempty"`
}

// Outcome is how a span ended.
type Outcome struct {
	Status       Status   `json:"status"`
	ErrorCode    string   `json:"error_code"`
	FallbackUsed string   `json:"fallback_used"` // the tier that served, e.g. "haiku", "cache", "faq"
	EvalScore    *float64 `json:"eval_score"`    // filled in later by the judge
	// VendorCode is the model vendor's own error code behind ErrorCode's
	// normalised kind (ThrottlingException, overloaded_error, …) on a
	// failed model attempt. Not in the seed's block; omitted when empty.
	VendorCode string `json:"vendor_code,omitempty"`
	// StopReason is why a model attempt's answer ended (end_turn,
	// max_tokens, stop_sequence, tool_use, …). Not in the seed's block;
	// omitted when empty.
	StopReason string `json:"stop_reason,omitempty"`
}

// Attribution is who and what a span's cost is charged to.
type Attribution struct {
	Feature  string `json:"feature"`
	Surface  string `json:"surface"`
	Locale   string `json:"locale"`
	UserTier string `json:"user_tier"`
	// Priority is the turn's priority class "P0".."P3". Not in the seed's
	// block; omitted when empty.
	Priority string `json:"priority,omitempty"`
}

// ID is the key durable sinks deduplicate on: it is stable across WAL
// replays. It is trace_id followed by span_id (48 hex) rather than span_id
// alone, because 64-bit span ids collide at fleet volume.
func (e Event) ID() string { return e.TraceID + e.SpanID }

// MarshalJSON encodes through Encode so that encoding/json users get the
// same allow-listed shape as sinks.
func (e Event) MarshalJSON() ([]byte, error) { return AppendJSON(nil, &e), nil }

// Encode returns the event as one line of JSON (no trailing newline). It is
// the only way an event becomes bytes: it writes exactly the schema's
// fields, so nothing else can reach a sink.
func Encode(e *Event) []byte { return AppendJSON(make([]byte, 0, 768), e) }

// Decode parses one encoded event. Keys outside the schema are ignored, so a
// decoded event re-encodes to the allow-listed shape.
func Decode(b []byte) (Event, error) {
	var e Event
	if decodeCanonical(b, &e) {
		return e, nil
	}
	e = Event{}
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("events: decode: %w", err)
	}
	return e, nil
}

// AppendJSON appends the encoded event to b. See Encode.
func AppendJSON(b []byte, e *Event) []byte {
	b = append(b, `{"schema_version":`...)
	b = strconv.AppendInt(b, int64(e.SchemaVersion), 10)
	b = appendKey(b, "trace_id")
	b = appendString(b, e.TraceID)
	b = appendKey(b, "span_id")
	b = appendString(b, e.SpanID)
	b = appendKey(b, "parent_span_id")
	b = appendNullable(b, e.ParentSpanID)
	b = appendKey(b, "workflow_id")
	b = appendString(b, e.WorkflowID)
	b = appendKey(b, "user_id_hash")
	b = appendString(b, e.UserIDHash)
	b = appendKey(b, "session_id")
	b = appendString(b, e.SessionID)
	b = appendKey(b, "ts_start")
	b = appendTime(b, e.TSStart)
	b = appendKey(b, "ts_end")
	b = appendTime(b, e.TSEnd)
	b = appendKey(b, "duration_ms")
	b = strconv.AppendInt(b, e.DurationMS, 10)
	b = appendKey(b, "name")
	b = appendString(b, e.Name)
	b = appendKey(b, "must_persist")
	b = strconv.AppendBool(b, e.MustPersist)
	if e.PromptExcerpt != "" {
		b = appendKey(b, "prompt_excerpt")
		b = appendString(b, e.PromptExcerpt)
	}
	if e.SampledOut {
		b = append(b, `,"sampled_out":true`...)
	}

	b = append(b, `,"node":{"graph_version":`...)
	b = appendString(b, e.Node.GraphVersion)
	b = appendKey(b, "node_id")
	b = appendString(b, e.Node.NodeID)
	b = appendKey(b, "invocation_mode")
	b = appendString(b, string(e.Node.InvocationMode))

	b = append(b, `},"artifact":{"artifact_kind":`...)
	b = appendString(b, string(e.Artifact.ArtifactKind))
	b = appendKey(b, "model_id")
	b = appendNullable(b, e.Artifact.ModelID)
	b = appendKey(b, "prompt_version")
	b = appendNullable(b, e.Artifact.PromptVersion)
	b = appendKey(b, "tool_id")
	b = appendNullable(b, e.Artifact.ToolID)
	b = appendKey(b, "tool_version")
	b = appendNullable(b, e.Artifact.ToolVersion)
	b = appendKey(b, "sub_agent_id")
	b = appendNullable(b, e.Artifact.SubAgentID)
	b = appendKey(b, "sub_agent_version")
	b = appendNullable(b, e.Artifact.SubAgentVersion)

	b = append(b, `},"resource":{"tokens_in":`...)
	b = strconv.AppendInt(b, int64(e.Resource.TokensIn), 10)
	b = appendKey(b, "tokens_out")
	b = strconv.AppendInt(b, int64(e.Resource.TokensOut), 10)
	b = appendKey(b, "cost_usd")
	b = appendFloat(b, e.Resource.CostUSD)
	if e.Resource.TokensCacheRead != 0 {
		b = appendKey(b, "tokens_cache_read")
		b = strconv.AppendInt(b, int64(e.Resource.TokensCacheRead), 10)
	}
	if e.Resource.TokensCacheWrite != 0 {
		b = appendKey(b, "tokens_cache_write")
		b = strconv.AppendInt(b, int64(e.Resource.TokensCacheWrite), 10)
	}
	if e.Resource.CacheSavedUSD != 0 {
		b = appendKey(b, "cache_saved_usd")
		b = appendFloat(b, e.Resource.CacheSavedUSD)
	}
	b = appendKey(b, "cache_hit")
	b = appendNullable(b, string(e.Resource.CacheHit))
	b = appendKey(b, "capability_flags_active")
	b = append(b, '[')
	for i, f := range e.Resource.CapabilityFlagsActive {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, f)
	}
	b = append(b, ']')
	if e.Resource.ToolCalls != 0 {
		b = appendKey(b, "tool_calls")
		b = strconv.AppendInt(b, int64(e.Resource.ToolCalls), 10)
		b = appendKey(b, "tool_names")
		b = append(b, '[')
		for i, n := range e.Resource.ToolNames {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, n)
		}
		b = append(b, ']')
	}
	if e.Resource.Images != 0 {
		b = appendKey(b, "images")
		b = strconv.AppendInt(b, int64(e.Resource.Images), 10)
	}
	if e.Resource.ImageBytes != 0 {
		b = appendKey(b, "image_bytes")
		b = strconv.AppendInt(b, int64(e.Resource.ImageBytes), 10)
	}
	if e.Resource.ImageTokens != 0 {
		b = appendKey(b, "image_tokens")
		b = strconv.AppendInt(b, int64(e.Resource.ImageTokens), 10)
	}
	if e.Resource.ImageCostUSD != 0 {
		b = appendKey(b, "image_cost_usd")
		b = appendFloat(b, e.Resource.ImageCostUSD)
	}

	b = append(b, `},"outcome":{"status":`...)
	b = appendString(b, string(e.Outcome.Status))
	b = appendKey(b, "error_code")
	b = appendNullable(b, e.Outcome.ErrorCode)
	b = appendKey(b, "fallback_used")
	b = appendNullable(b, e.Outcome.FallbackUsed)
	b = appendKey(b, "eval_score")
	if e.Outcome.EvalScore == nil {
		b = append(b, "null"...)
	} else {
		b = appendFloat(b, *e.Outcome.EvalScore)
	}
	if e.Outcome.VendorCode != "" {
		b = appendKey(b, "vendor_code")
		b = appendString(b, e.Outcome.VendorCode)
	}
	if e.Outcome.StopReason != "" {
		b = appendKey(b, "stop_reason")
		b = appendString(b, e.Outcome.StopReason)
	}

	b = append(b, `},"attribution":{"feature":`...)
	b = appendString(b, e.Attribution.Feature)
	b = appendKey(b, "surface")
	b = appendString(b, e.Attribution.Surface)
	b = appendKey(b, "locale")
	b = appendString(b, e.Attribution.Locale)
	b = appendKey(b, "user_tier")
	b = appendString(b, e.Attribution.UserTier)
	if e.Attribution.Priority != "" {
		b = appendKey(b, "priority")
		b = appendString(b, e.Attribution.Priority)
	}
	return append(b, "}}"...)
}

func appendKey(b []byte, k string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	return append(b, '"', ':')
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

// timeLayout is RFC 3339 in UTC with exactly three fractional digits, as the
// seed's "2026-04-29T14:02:13.418Z".
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, timeLayout)
	return append(b, '"')
}

// appendFloat writes a JSON number; NaN and infinities, which JSON cannot
// carry, become 0 so that a bad cost never makes a whole event unreadable.
func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, '0')
	}
	fmtc := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmtc = 'e'
	}
	return strconv.AppendFloat(b, f, fmtc, -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string. Invalid UTF-8 becomes U+FFFD so a
// sink never receives undecodable bytes.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			// Valid JSON, but breaks JavaScript consumers of the JSONL.
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
