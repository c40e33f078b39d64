// Package bedrock speaks the AWS Bedrock Runtime Converse API on the server
// side: POST /model/{modelId}/converse (JSON) and /converse-stream (the AWS
// event stream, application/vnd.amazon.eventstream), with Bedrock's error
// shape (X-Amzn-ErrorType and {"message"}). The same request decoder and
// response encoders serve two handlers: New, fmgate's drop-in front door in
// front of its pipeline (SigV4 verified), and Sim, the model simulator on
// Bedrock's wire, which fmgate's own bedrock provider is tested against.
package bedrock

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"net/url"
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

// Limits of a decoded request. Bedrock's own limits are higher; these bound
// what one untrusted request can make fmgate hold.
const (
	// DefaultMaxBodyBytes bounds a request body: 1 MiB.
	DefaultMaxBodyBytes = 1 << 20
	// maxMessages bounds the conversation a request carries.
	maxMessages = 200
	// maxStopSequences and maxStopSequenceBytes bound inferenceConfig.stopSequences.
	maxStopSequences     = 8
	maxStopSequenceBytes = 256
	// maxModelIDBytes bounds the model id in the path.
	maxModelIDBytes = 2048
)

// Operations of the Converse API.
const (
	OpConverse       = "converse"
	OpConverseStream = "converse-stream"
	// InvokeModel and InvokeModelWithResponseStream, for Anthropic's
	// Messages body.
	OpInvoke       = "invoke"
	OpInvokeStream = "invoke-with-response-stream"
	// CountTokens, for a Converse or an InvokeModel input.
	OpCountTokens = "count-tokens"
)

// Stop reasons of the Converse API that fmgate produces or recognises.
const (
	StopEndTurn             = "end_turn"
	StopMaxTokens           = "max_tokens"
	StopSequence            = "stop_sequence"
	StopGuardrailIntervened = "guardrail_intervened"
	StopContentFiltered     = "content_filtered"
	StopToolUse             = provider.StopToolUse
)

// Request is a decoded Converse / ConverseStream request: the parts fmgate
// supports. Everything else Bedrock accepts (images from s3Location,
// document blocks, cachePoint entries among tools,
// additionalModelRequestFields other than Claude's thinking, …) is
// refused by Decode with a ValidationException, never silently dropped.
type Request struct {
	ModelID string
	// System is the request's system blocks joined by blank lines.
	System string
	// SystemCache marks where a cachePoint block follows system text.
	SystemCache []provider.CacheMark
	// Messages alternate user and assistant turns and end with a user turn.
	// Assistant messages carry their toolUse blocks as ToolCalls, user
	// messages their toolResult blocks as ToolResults; the last user
	// message may hold tool results alone. User messages carry their
	// image blocks as Images.
	Messages []provider.Message
	// Prefill is a final assistant message's text: the start of the
	// answer, which the model continues.
	Prefill       string
	MaxTokens     int // 0: not set
	Temperature   *float64
	TopP          *float64
	StopSequences []string
	// Tools and ToolChoice are toolConfig's; none without one.
	Tools      []provider.Tool
	ToolChoice provider.ToolChoice
	// Thinking is additionalModelRequestFields.thinking, Claude's extended
	// thinking; nil when absent or disabled.
	Thinking *provider.Thinking
	// Guardrail is guardrailConfig, the Amazon Bedrock guardrail the
	// model call is to apply; nil when absent.
	Guardrail *provider.Guardrail
	// Format is outputConfig.textFormat, a JSON schema the answer's text
	// must match; the zero value is free text.
	Format provider.Format
	// Metadata is requestMetadata, for the invocation logs of the Bedrock
	// tiers that serve the request.
	Metadata map[string]string
}

// ParsePath splits an escaped request path, /model/{modelId}/{op}, into the
// unescaped model id and the operation. Model ids arrive URL-encoded
// (anthropic.claude-3-5-sonnet-20240620-v1%3A0; an ARN's slashes as %2F), so
// the path is split before it is unescaped.
func ParsePath(escaped string) (modelID, op string, err error) {
	rest, ok := strings.CutPrefix(escaped, "/model/")
	if !ok {
		return "", "", errors.New("the path must be /model/{modelId}/ followed by converse, converse-stream, invoke, invoke-with-response-stream or count-tokens")
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return "", "", errors.New("the path must be /model/{modelId}/ followed by converse, converse-stream, invoke, invoke-with-response-stream or count-tokens")
	}
	op = rest[i+1:]
	switch op {
	case OpConverse, OpConverseStream, OpInvoke, OpInvokeStream, OpCountTokens:
	default:
		return "", "", fmt.Errorf("unknown operation %q: this endpoint serves converse, converse-stream, invoke, invoke-with-response-stream and count-tokens", truncate(op, 40))
	}
	id, err := url.PathUnescape(rest[:i])
	if err != nil {
		return "", "", fmt.Errorf("the model id in the path is not URL-encoded correctly: %w", err)
	}
	if id == "" || len(id) > maxModelIDBytes || !utf8.ValidString(id) || strings.ContainsAny(id, "\x00\r\n") {
		return "", "", errors.New("the model id in the path must be 1 to 2048 bytes of text")
	}
	return id, op, nil
}

// wireRequest is the JSON body of a Converse request. Fields fmgate does
// not support are kept raw so that Decode can name them in its refusal.
type wireRequest struct {
	Messages                          []wireMessage     `json:"messages"`
	System                            []json.RawMessage `json:"system"`
	InferenceConfig                   *wireInference    `json:"inferenceConfig"`
	ToolConfig                        json.RawMessage   `json:"toolConfig"`
	GuardrailConfig                   json.RawMessage   `json:"guardrailConfig"`
	AdditionalModelRequestFields      json.RawMessage   `json:"additionalModelRequestFields"`
	AdditionalModelResponseFieldPaths json.RawMessage   `json:"additionalModelResponseFieldPaths"`
	PromptVariables                   json.RawMessage   `json:"promptVariables"`
	RequestMetadata                   json.RawMessage   `json:"requestMetadata"`
	PerformanceConfig                 json.RawMessage   `json:"performanceConfig"`
	ServiceTier                       json.RawMessage   `json:"serviceTier"`
	OutputConfig                      json.RawMessage   `json:"outputConfig"`
}

type wireMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

type wireInference struct {
	MaxTokens     *int     `json:"maxTokens"`
	Temperature   *float64 `json:"temperature"`
	TopP          *float64 `json:"topP"`
	StopSequences []string `json:"stopSequences"`
}

// ValidationError is a request Decode refuses; its message is safe to send
// back as a ValidationException.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalidf(format string, args ...any) *ValidationError {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// Decode parses and checks a Converse request body for modelID, its images
// bounded by images (zero fields: vision's defaults). Every refusal is a
// *ValidationError naming the field.
func Decode(modelID string, body []byte, images vision.Limits) (*Request, error) {
	if !utf8.Valid(body) {
		return nil, invalidf("the request body must be UTF-8 JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var w wireRequest
	if err := dec.Decode(&w); err != nil {
		return nil, invalidf("the request body is not a valid Converse request: %s", jsonProblem(err))
	}
	if dec.More() {
		return nil, invalidf("the request body must hold one JSON object")
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{
		{"additionalModelResponseFieldPaths", w.AdditionalModelResponseFieldPaths},
		{"promptVariables", w.PromptVariables},
		{"performanceConfig", w.PerformanceConfig},
		{"serviceTier", w.ServiceTier},
	} {
		if len(f.raw) > 0 && string(f.raw) != "null" {
			return nil, invalidf("%s is not supported by this endpoint; remove it from the request", f.name)
		}
	}
	req := &Request{ModelID: modelID}
	system, marks, err := decodeSystem(w.System)
	if err != nil {
		return nil, err
	}
	req.System, req.SystemCache = system, marks
	if err := decodeMessages(w.Messages, req, vision.NewReader(images)); err != nil {
		return nil, err
	}
	if isSet(w.ToolConfig) {
		if err := decodeToolConfig(w.ToolConfig, req); err != nil {
			return nil, err
		}
	}
	if err := checkToolBlocks(req); err != nil {
		return nil, err
	}
	n := len(req.SystemCache)
	for _, m := range req.Messages {
		n += len(m.Cache)
	}
	if n > provider.MaxCacheMarks {
		return nil, invalidf("the request holds %d cachePoint blocks; the limit is %d", n, provider.MaxCacheMarks)
	}
	if ic := w.InferenceConfig; ic != nil {
		if err := decodeInference(ic, req); err != nil {
			return nil, err
		}
	}
	if isSet(w.AdditionalModelRequestFields) {
		if err := decodeAdditional(w.AdditionalModelRequestFields, req); err != nil {
			return nil, err
		}
	}
	if err := checkThinking(req); err != nil {
		return nil, err
	}
	if isSet(w.RequestMetadata) {
		if req.Metadata, err = decodeRequestMetadata(w.RequestMetadata); err != nil {
			return nil, err
		}
	}
	if isSet(w.OutputConfig) {
		if req.Format, err = decodeOutputConfig(w.OutputConfig); err != nil {
			return nil, err
		}
		if req.Format.Kind != provider.FormatText && req.Thinking != nil {
			// Claude tiers are asked for the format through a tool they
			// must call, which thinking does not allow.
			return nil, invalidf("outputConfig.textFormat is not supported together with thinking by this endpoint; ask for one or the other")
		}
	}
	if isSet(w.GuardrailConfig) {
		if req.Guardrail, err = decodeGuardrail(w.GuardrailConfig); err != nil {
			return nil, err
		}
	}
	return req, nil
}

func decodeSystem(blocks []json.RawMessage) (string, []provider.CacheMark, error) {
	return decodeBlocks(blocks, "system", "\n\n")
}

// decodeBlocks joins text blocks with sep, with a cache mark at each
// cachePoint block, which must follow text.
func decodeBlocks(blocks []json.RawMessage, path, sep string) (string, []provider.CacheMark, error) {
	var (
		text  strings.Builder
		marks []provider.CacheMark
	)
	for i, raw := range blocks {
		where := fmt.Sprintf("%s[%d]", path, i)
		block, err := blockMembers(raw, where)
		if err != nil {
			return "", nil, err
		}
		t, mark, err := textBlock(block, where)
		switch {
		case err != nil:
			return "", nil, err
		case mark != nil && text.Len() == 0:
			return "", nil, invalidf("%s: a cachePoint must follow a text block", where)
		case mark != nil:
			mark.At = text.Len()
			marks = append(marks, *mark)
		default:
			if text.Len() > 0 {
				text.WriteString(sep)
			}
			text.WriteString(t)
		}
	}
	return text.String(), marks, nil
}

func decodeMessages(msgs []wireMessage, req *Request, rd *vision.Reader) error {
	switch {
	case len(msgs) == 0:
		return invalidf("messages must hold at least one user message")
	case len(msgs) > maxMessages:
		return invalidf("messages holds %d messages; the limit is %d", len(msgs), maxMessages)
	}
	req.Messages = make([]provider.Message, 0, len(msgs))
	for i, m := range msgs {
		var role provider.Role
		switch m.Role {
		case "user":
			role = provider.RoleUser
		case "assistant":
			role = provider.RoleAssistant
		default:
			return invalidf("messages[%d].role must be user or assistant, not %q", i, truncate(m.Role, 20))
		}
		if (i%2 == 0) != (role == provider.RoleUser) {
			return invalidf("messages must alternate user and assistant, starting with user (messages[%d] is %s)", i, m.Role)
		}
		if len(m.Content) == 0 {
			return invalidf("messages[%d].content must hold at least one block", i)
		}
		msg, err := decodeContent(m.Content, role, fmt.Sprintf("messages[%d].content", i), rd)
		if err != nil {
			return err
		}
		req.Messages = append(req.Messages, msg)
	}
	if last := req.Messages[len(req.Messages)-1]; last.Role == provider.RoleAssistant {
		// A prefill: the start of the answer, which the model continues.
		switch {
		case len(req.Messages) < 2:
			return invalidf("the first message must be the user's")
		case len(last.ToolCalls) > 0:
			return invalidf("the last message may not hold toolUse blocks (a tool call needs its result in a user message)")
		case len(last.Thinking) > 0:
			return invalidf("a final assistant message (a prefill) cannot hold reasoningContent blocks")
		case strings.TrimSpace(last.Content) == "":
			return invalidf("a final assistant message (a prefill) must hold text")
		case strings.TrimRightFunc(last.Content, unicode.IsSpace) != last.Content:
			return invalidf("a final assistant message (a prefill) cannot end with whitespace")
		case len(last.Cache) > 0:
			return invalidf("a cachePoint is not supported in a final assistant message (a prefill)")
		}
		req.Prefill = last.Content
		req.Messages = req.Messages[:len(req.Messages)-1]
	}
	return nil
}

// decodeContent reads a message's content blocks: text, cachePoint, and
// toolUse (an assistant's) or toolResult and image (a user's; rd reads the
// images). The text blocks are joined; a cachePoint marks the end of the
// text before it, and must follow a text or tool block.
func decodeContent(blocks []json.RawMessage, role provider.Role, path string, rd *vision.Reader) (provider.Message, error) {
	msg := provider.Message{Role: role}
	var text strings.Builder
	for i, raw := range blocks {
		where := fmt.Sprintf("%s[%d]", path, i)
		block, err := blockMembers(raw, where)
		if err != nil {
			return msg, err
		}
		switch {
		case len(block) == 1 && block["toolUse"] != nil:
			if role != provider.RoleAssistant {
				return msg, invalidf("%s: toolUse blocks belong in assistant messages", where)
			}
			if len(msg.ToolCalls) == provider.MaxToolCallsTurn {
				return msg, invalidf("%s: a message may hold at most %d toolUse blocks", where, provider.MaxToolCallsTurn)
			}
			c, err := decodeToolUse(block["toolUse"], where+".toolUse")
			if err != nil {
				return msg, err
			}
			msg.ToolCalls = append(msg.ToolCalls, c)
		case len(block) == 1 && block["toolResult"] != nil:
			if role != provider.RoleUser {
				return msg, invalidf("%s: toolResult blocks belong in user messages", where)
			}
			r, err := decodeToolResult(block["toolResult"], where+".toolResult")
			if err != nil {
				return msg, err
			}
			msg.ToolResults = append(msg.ToolResults, r)
		case len(block) == 1 && block["reasoningContent"] != nil:
			if role != provider.RoleAssistant {
				return msg, invalidf("%s: reasoningContent blocks belong in assistant messages", where)
			}
			th, err := decodeReasoning(block["reasoningContent"], where+".reasoningContent")
			if err != nil {
				return msg, err
			}
			msg.Thinking = append(msg.Thinking, th)
		case len(block) == 1 && block["image"] != nil:
			if role != provider.RoleUser {
				return msg, invalidf("%s: image blocks belong in user messages", where)
			}
			im, err := decodeImage(block["image"], where+".image", rd)
			if err != nil {
				return msg, err
			}
			msg.Images = append(msg.Images, im)
		default:
			t, mark, err := textBlock(block, where)
			switch {
			case err != nil:
				return msg, err
			case mark != nil && i == 0:
				return msg, invalidf("%s: a cachePoint must follow a text block, or a toolUse or toolResult block", where)
			case mark != nil:
				mark.At = text.Len()
				msg.Cache = append(msg.Cache, *mark)
			default:
				text.WriteString(t)
			}
		}
	}
	msg.Content = text.String()
	return msg, nil
}

// decodeImage reads an image block, {"format": "png", "source": {"bytes":
// "<base64>"}}. An s3Location source is refused: fmgate reads no buckets.
func decodeImage(raw json.RawMessage, where string, rd *vision.Reader) (provider.Image, error) {
	var w struct {
		Format string `json:"format"`
		Source struct {
			Bytes      *string         `json:"bytes"`
			S3Location json.RawMessage `json:"s3Location"`
		} `json:"source"`
	}
	if err := strictUnmarshal(raw, &w); err != nil {
		return provider.Image{}, invalidf("%s must be {\"format\": \"png\", \"source\": {\"bytes\": \"<base64>\"}}: %s", where, jsonProblem(err))
	}
	if isSet(w.Source.S3Location) {
		return provider.Image{}, invalidf("%s.source.s3Location is not supported by this endpoint: fmgate reads no S3 objects; send the image's bytes", where)
	}
	if !slices.Contains(imageFormats, w.Format) {
		return provider.Image{}, invalidf("%s.format must be one of %s, not %q", where, strings.Join(imageFormats, ", "), truncate(w.Format, 20))
	}
	if w.Source.Bytes == nil {
		return provider.Image{}, invalidf("%s.source.bytes is required", where)
	}
	im, err := rd.Base64("image/"+w.Format, *w.Source.Bytes)
	if err != nil {
		return provider.Image{}, invalidf("%s.source.bytes: %v", where, err)
	}
	return im, nil
}

// imageFormats are Bedrock's ImageFormat values.
var imageFormats = []string{"png", "jpeg", "gif", "webp"}

// blockMembers reads a content block as its members.
func blockMembers(raw json.RawMessage, where string) (map[string]json.RawMessage, error) {
	var block map[string]json.RawMessage
	if err := json.Unmarshal(raw, &block); err != nil || block == nil {
		return nil, invalidf("%s must be an object such as {\"text\": \"…\"}", where)
	}
	return block, nil
}

// textBlock reads a content block that must be {"text": "…"} or a
// {"cachePoint": {"type": "default"}} (returned as a mark, its position
// left to the caller); any other kind of block (image, document, …) is
// refused.
func textBlock(block map[string]json.RawMessage, where string) (string, *provider.CacheMark, error) {
	if cp, ok := block["cachePoint"]; ok && len(block) == 1 {
		ttl, err := decodeCachePoint(cp, where+".cachePoint")
		if err != nil {
			return "", nil, err
		}
		return "", &provider.CacheMark{TTL: ttl}, nil
	}
	for k := range block {
		if k != "text" {
			return "", nil, invalidf("%s: %s blocks are not supported by this endpoint; send text, cachePoint, image, toolUse, toolResult and reasoningContent blocks only", where, truncate(k, 40))
		}
	}
	var text string
	if err := json.Unmarshal(block["text"], &text); err != nil || block["text"] == nil {
		return "", nil, invalidf("%s.text must be a string", where)
	}
	return text, nil, nil
}

// decodeCachePoint reads {"type": "default", "ttl": "5m" | "1h"}.
func decodeCachePoint(raw json.RawMessage, where string) (time.Duration, error) {
	var cp struct {
		Type *string `json:"type"`
		TTL  *string `json:"ttl"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cp); err != nil {
		return 0, invalidf("%s must be {\"type\": \"default\"}, optionally with \"ttl\": \"5m\" or \"1h\"", where)
	}
	if cp.Type == nil || *cp.Type != "default" {
		return 0, invalidf("%s.type must be \"default\"", where)
	}
	switch {
	case cp.TTL == nil || *cp.TTL == "5m":
		return provider.CacheTTL, nil
	case *cp.TTL == "1h":
		return provider.CacheTTLLong, nil
	}
	return 0, invalidf("%s.ttl must be \"5m\" or \"1h\"", where)
}

func decodeInference(ic *wireInference, req *Request) error {
	if p := ic.TopP; p != nil {
		if math.IsNaN(*p) || *p < 0 || *p > 1 {
			return invalidf("inferenceConfig.topP must be between 0 and 1")
		}
		req.TopP = p
	}
	if ic.MaxTokens != nil {
		if *ic.MaxTokens < 1 {
			return invalidf("inferenceConfig.maxTokens must be at least 1")
		}
		req.MaxTokens = *ic.MaxTokens
	}
	if t := ic.Temperature; t != nil {
		if *t < 0 || *t > 1 {
			return invalidf("inferenceConfig.temperature must be between 0 and 1")
		}
		req.Temperature = t
	}
	if len(ic.StopSequences) > maxStopSequences {
		return invalidf("inferenceConfig.stopSequences holds %d sequences; the limit is %d", len(ic.StopSequences), maxStopSequences)
	}
	for i, s := range ic.StopSequences {
		if s == "" || len(s) > maxStopSequenceBytes {
			return invalidf("inferenceConfig.stopSequences[%d] must be 1 to %d bytes", i, maxStopSequenceBytes)
		}
	}
	req.StopSequences = ic.StopSequences
	return nil
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("malformed JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("%s has the wrong type (want %s)", te.Field, te.Type)
	case errors.Is(err, io.EOF):
		return "the body is empty"
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + truncate(f, 60) + " (not a Converse field, or not supported here)"
	}
	return truncate(msg, 120)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Usage is the Converse API's token usage.
type Usage struct {
	InputTokens           int           `json:"inputTokens"`
	OutputTokens          int           `json:"outputTokens"`
	TotalTokens           int           `json:"totalTokens"`
	CacheReadInputTokens  int           `json:"cacheReadInputTokens,omitempty"`
	CacheWriteInputTokens int           `json:"cacheWriteInputTokens,omitempty"`
	CacheDetails          []CacheDetail `json:"cacheDetails,omitempty"`
}

// CacheDetail is the tokens written to the prompt cache with one TTL.
type CacheDetail struct {
	TTL         string `json:"ttl"`
	InputTokens int    `json:"inputTokens"`
}

// UsageOf converts a provider usage to the wire's; the cache writes are
// split by TTL as Bedrock does, the hour before the five minutes.
func UsageOf(u provider.Usage) Usage {
	out := Usage{
		InputTokens:           u.InputTokens,
		OutputTokens:          u.OutputTokens,
		TotalTokens:           u.InputTokens + u.OutputTokens + u.CachedInputTokens + u.CacheWriteTokens,
		CacheReadInputTokens:  u.CachedInputTokens,
		CacheWriteInputTokens: u.CacheWriteTokens,
	}
	if long := min(u.CacheWrite1hTokens, u.CacheWriteTokens); long > 0 {
		out.CacheDetails = append(out.CacheDetails, CacheDetail{TTL: "1h", InputTokens: long})
	}
	if short := u.CacheWriteTokens - min(u.CacheWrite1hTokens, u.CacheWriteTokens); short > 0 {
		out.CacheDetails = append(out.CacheDetails, CacheDetail{TTL: "5m", InputTokens: short})
	}
	return out
}

type metrics struct {
	LatencyMs int64 `json:"latencyMs"`
}

type textContent struct {
	Text string `json:"text"`
}

// outBlock is a content block of an answer: reasoning, text or a toolUse.
type outBlock struct {
	ReasoningContent *reasoningJSON `json:"reasoningContent,omitempty"`
	Text             *string        `json:"text,omitempty"`
	ToolUse          *toolUseJSON   `json:"toolUse,omitempty"`
}

type outMessage struct {
	Role    string     `json:"role"`
	Content []outBlock `json:"content"`
}

type converseResponse struct {
	Output struct {
		Message outMessage `json:"message"`
	} `json:"output"`
	StopReason string          `json:"stopReason"`
	Usage      Usage           `json:"usage"`
	Metrics    metrics         `json:"metrics"`
	Trace      *guardrailTrace `json:"trace,omitempty"`
}

// WriteConverse sends a Converse answer: the model's reasoning
// (reasoningContent blocks first), the assistant's text and its tool calls
// (toolUse blocks after the text; no text block when there is no text but
// calls), the stop reason, usage and latency, and the guardrail's trace
// (trace.guardrail) when there is one.
func WriteConverse(w http.ResponseWriter, thinking []provider.ThinkingBlock, text string, calls []provider.ToolCall, stopReason string, u provider.Usage, latency time.Duration, trace json.RawMessage) {
	var body converseResponse
	content := make([]outBlock, 0, len(thinking)+1+len(calls))
	for _, th := range thinking {
		content = append(content, outBlock{ReasoningContent: reasoningOf(th)})
	}
	if text != "" || len(calls) == 0 {
		content = append(content, outBlock{Text: &text})
	}
	for _, c := range calls {
		content = append(content, outBlock{ToolUse: &toolUseJSON{ToolUseID: c.ID, Name: c.Name, Input: c.Input}})
	}
	body.Output.Message = outMessage{Role: "assistant", Content: content}
	body.StopReason = stopReason
	body.Usage = UsageOf(u)
	body.Metrics.LatencyMs = latency.Milliseconds()
	body.Trace = traceOf(trace)
	writeJSON(w, http.StatusOK, body)
}

// Exception is an error in Bedrock's shape: the HTTP status, the
// exception's name (sent as X-Amzn-ErrorType) and a message.
type Exception struct {
	Status     int
	Type       string
	Message    string
	RetryAfter time.Duration
}

// Bedrock's exception names.
const (
	ThrottlingException           = "ThrottlingException"
	ServiceQuotaExceededException = "ServiceQuotaExceededException"
	ServiceUnavailableException   = "ServiceUnavailableException"
	InternalServerException       = "InternalServerException"
	ModelNotReadyException        = "ModelNotReadyException"
	ModelTimeoutException         = "ModelTimeoutException"
	ModelStreamErrorException     = "ModelStreamErrorException"
	ModelErrorException           = "ModelErrorException"
	ValidationException           = "ValidationException"
	AccessDeniedException         = "AccessDeniedException"
	ResourceNotFoundException     = "ResourceNotFoundException"
	UnknownOperationException     = "UnknownOperationException"
	UnrecognizedClientException   = "UnrecognizedClientException"
	InvalidSignatureException     = "InvalidSignatureException"
)

// Validation returns a ValidationException (400) with msg.
func Validation(msg string) Exception {
	return Exception{Status: http.StatusBadRequest, Type: ValidationException, Message: msg}
}

// ExceptionForKind is the exception Bedrock answers for a provider failure
// of kind k (its status as Bedrock sends it).
func ExceptionForKind(k provider.Kind, msg string, retryAfter time.Duration) Exception {
	e := Exception{Message: msg, RetryAfter: retryAfter}
	switch k {
	case provider.KindThrottled:
		e.Status, e.Type = http.StatusTooManyRequests, ThrottlingException
	case provider.KindNotReady:
		e.Status, e.Type = http.StatusTooManyRequests, ModelNotReadyException
	case provider.KindTimeout:
		e.Status, e.Type = http.StatusRequestTimeout, ModelTimeoutException
	case provider.KindValidation, provider.KindGuardrail:
		e.Status, e.Type = http.StatusBadRequest, ValidationException
	case provider.KindAccessDenied:
		e.Status, e.Type = http.StatusForbidden, AccessDeniedException
	case provider.KindNotFound:
		e.Status, e.Type = http.StatusNotFound, ResourceNotFoundException
	case provider.KindUnavailable:
		e.Status, e.Type = http.StatusServiceUnavailable, ServiceUnavailableException
	default:
		e.Status, e.Type = http.StatusInternalServerError, InternalServerException
	}
	return e
}

type errorBody struct {
	Message string `json:"message"`
}

// WriteException sends e as Bedrock does: X-Amzn-ErrorType, a JSON body
// {"message"}, and Retry-After (whole seconds, at least 1) when set.
func WriteException(w http.ResponseWriter, e Exception) {
	h := w.Header()
	h.Set("X-Amzn-ErrorType", e.Type)
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(e.RetryAfter)))
	}
	writeJSON(w, e.Status, errorBody{Message: e.Message})
}

func retryAfterSeconds(d time.Duration) int {
	return max(int((d+time.Second-1)/time.Second), 1)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs are encoded here
		status, b = http.StatusInternalServerError, []byte(`{"message":"encoding failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// EventWriter writes a ConverseStream answer as AWS event-stream messages,
// flushing each one, or after Hold, with the others held, at Flush. Start
// sends the 200 and the messageStart event; the headers must be set
// before.
type EventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	held    bool
	buf     []byte // encoded messages not yet written
	payload []byte // the JSON of a delta event
	// block is the index of the content block being written; text says a
	// text block is open at it, reasoning a reasoningContent block (the
	// model's number thought), and tools that toolUse blocks went out.
	block       int
	text, tools bool
	reasoning   bool
	thought     int
}

// NewEventWriter returns an EventWriter over w.
func NewEventWriter(w http.ResponseWriter) *EventWriter {
	return &EventWriter{w: w, rc: http.NewResponseController(w)}
}

// Started reports whether the 200 and messageStart went out.
func (e *EventWriter) Started() bool { return e.started }

// Start sends the response header and the messageStart event.
func (e *EventWriter) Start() error {
	if e.started {
		return nil
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "application/vnd.amazon.eventstream")
	h.Set("Cache-Control", "no-store")
	e.w.WriteHeader(http.StatusOK)
	return e.event("messageStart", map[string]string{"role": "assistant"})
}

// Delta sends a contentBlockDelta event with text.
func (e *EventWriter) Delta(text string) error { return delta(e, text) }

// delta is Delta for text held as a string or as bytes (the stream's
// buffer, which the door encodes without copying). The event, one for
// every chunk of an answer, is written by hand, in the bytes json.Marshal
// writes for the other events.
func delta[T ~string | ~[]byte](e *EventWriter, text T) error {
	if err := e.Start(); err != nil {
		return err
	}
	if err := e.stopReasoning(); err != nil {
		return err
	}
	e.text = true
	p := append(e.payload[:0], `{"contentBlockIndex":`...)
	p = strconv.AppendInt(p, int64(e.block), 10)
	p = append(p, `,"delta":{"text":`...)
	p = stream.AppendMarshaledString(p, text, true)
	e.payload = append(p, "}}"...)
	return e.write(e.payload, ":message-type", "event", ":event-type", "contentBlockDelta", ":content-type", "application/json")
}

// stopText sends the contentBlockStop of an open text block, or
// reasoning block.
func (e *EventWriter) stopText() error {
	if err := e.stopReasoning(); err != nil {
		return err
	}
	if !e.text {
		return nil
	}
	e.text = false
	e.block++
	return e.event("contentBlockStop", map[string]int{"contentBlockIndex": e.block - 1})
}

// Stop sends the contentBlockStop of the text block (of an empty one when
// nothing was sent), messageStop with the stop reason, and the metadata
// event with usage, latency and the guardrail's trace when there is one.
func (e *EventWriter) Stop(stopReason string, u provider.Usage, latency time.Duration, trace json.RawMessage) error {
	if err := e.Start(); err != nil {
		return err
	}
	if !e.tools {
		e.text = true
	}
	if err := e.stopText(); err != nil {
		return err
	}
	if err := e.event("messageStop", map[string]string{"stopReason": stopReason}); err != nil {
		return err
	}
	return e.event("metadata", struct {
		Usage   Usage           `json:"usage"`
		Metrics metrics         `json:"metrics"`
		Trace   *guardrailTrace `json:"trace,omitempty"`
	}{UsageOf(u), metrics{LatencyMs: latency.Milliseconds()}, traceOf(trace)})
}

// Exception ends the stream with an exception message; exType is the
// stream member's name (throttlingException, modelStreamErrorException,
// serviceUnavailableException, internalServerException,
// validationException).
func (e *EventWriter) Exception(exType, msg string) error {
	if err := e.Start(); err != nil {
		return err
	}
	payload, _ := json.Marshal(errorBody{Message: msg})
	return e.write(payload, ":message-type", "exception", ":exception-type", exType, ":content-type", "application/json")
}

// StreamExceptionType is the event-stream exception member for a failure
// of kind k after the stream started.
func StreamExceptionType(k provider.Kind) string {
	switch k {
	case provider.KindThrottled:
		return "throttlingException"
	case provider.KindUnavailable:
		return "serviceUnavailableException"
	case provider.KindValidation:
		return "validationException"
	case provider.KindUnknown:
		return "internalServerException"
	}
	return "modelStreamErrorException"
}

func (e *EventWriter) event(eventType string, payload any) error {
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("bedrock: encode %s: %w", eventType, err)
	}
	return e.write(b, ":message-type", "event", ":event-type", eventType, ":content-type", "application/json")
}

// write adds the message of payload and headers (name, value, …) and
// writes it, unless messages are held.
func (e *EventWriter) write(payload []byte, headers ...string) error {
	e.buf = appendMessage(e.buf, payload, headers...)
	if e.held {
		return nil
	}
	return e.Flush()
}

// appendMessage appends an AWS event-stream message: the prelude (total
// and headers length) and its CRC, headers (name, value, … as strings, in
// order), payload and the message's CRC, the bytes eventstream.Encoder
// writes without its allocations. The headers here are constants, well
// within the format's 255-byte names and 32 KB values.
func appendMessage(dst, payload []byte, headers ...string) []byte {
	const stringType = 7 // the event-stream type of a string header
	start, hlen := len(dst), 0
	for i := 0; i+1 < len(headers); i += 2 {
		hlen += 1 + len(headers[i]) + 1 + 2 + len(headers[i+1])
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+4+4+hlen+len(payload)+4))
	dst = binary.BigEndian.AppendUint32(dst, uint32(hlen))
	dst = binary.BigEndian.AppendUint32(dst, crc32.ChecksumIEEE(dst[start:]))
	for i := 0; i+1 < len(headers); i += 2 {
		dst = append(append(dst, byte(len(headers[i]))), headers[i]...)
		dst = binary.BigEndian.AppendUint16(append(dst, stringType), uint16(len(headers[i+1])))
		dst = append(dst, headers[i+1]...)
	}
	dst = append(dst, payload...)
	return binary.BigEndian.AppendUint32(dst, crc32.ChecksumIEEE(dst[start:]))
}

// Hold keeps the messages sent from now on until Flush, which writes them
// in one write and flushes once: the events one frame of the pipeline's
// stream becomes (messageStart, the reasoning held and the first delta;
// the tool calls, messageStop and metadata) leave together.
func (e *EventWriter) Hold() { e.held = true }

// Flush writes the messages held and flushes the connection; it does
// nothing when none is held.
func (e *EventWriter) Flush() error {
	if len(e.buf) == 0 {
		return nil
	}
	err := stream.WriteFlush(e.w, e.rc, e.buf)
	e.buf = e.buf[:0]
	return err
}

// newRequestID is an x-amzn-RequestId: a random UUID.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
