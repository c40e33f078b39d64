// Package openai speaks the OpenAI Chat Completions wire protocol on the
// server side: it decodes POST /v1/chat/completions bodies and encodes
// chat.completion answers, chat.completion.chunk server-sent events and
// OpenAI's error shape. Two handlers share this one codec: New, fmgate's
// drop-in front door that runs each request through the gateway's pipeline,
// and Sim, the simulator's wire server that answers from sim.Sim directly and
// fails the way OpenAI fails.
//
// Supported request fields: model, messages (system, developer, user,
// assistant with tool_calls, and tool roles; string or text-part content;
// image_url parts with a data URL in user messages; a message name), stream, stream_options.include_usage, max_tokens /
// max_completion_tokens, temperature, stop (a string or up to 4 strings),
// tools (functions), tool_choice, parallel_tool_calls, prompt_cache_key and
// user. Fields that would change an OpenAI answer but that fmgate cannot
// honour (remote image URLs, n>1, logprobs, penalties, audio …) are refused
// with a 400 naming the field, never dropped. response_format json_object
// and json_schema are honoured: every answer is checked against them.
//
// The front door also serves the Responses API (POST /v1/responses, and
// GET and DELETE /v1/responses/{id} of a stored response): its input items
// decode into the same conversation as chat messages, with the same tools,
// formats and images, and its answers are response objects or the API's
// typed server-sent events (responses_decode.go, responses_encode.go).
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/jsonscan"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
)

// Limits of a request, as OpenAI documents them.
const (
	// MaxStop is the most stop sequences a request may carry.
	MaxStop = 4
	// MaxUserBytes bounds the user field.
	MaxUserBytes = 128
	// MaxPromptCacheKeyBytes bounds prompt_cache_key.
	MaxPromptCacheKeyBytes = 256
	// DefaultMaxBodyBytes bounds a request body when the caller sets no limit:
	// a whole conversation travels in every request.
	DefaultMaxBodyBytes = 4 << 20
)

// Chat is a decoded chat completion request.
type Chat struct {
	// Model is the request's model, as sent.
	Model string
	// System joins the system and developer messages, in order.
	System string
	// History is the conversation before the last user message;
	// consecutive messages of one role are joined.
	History []provider.Message
	// Message is the last user message, and Images the images sent with it.
	Message string
	Images  []provider.Image
	Stream  bool
	// IncludeUsage asks for the final usage chunk of a stream.
	IncludeUsage bool
	// MaxTokens is the smaller of max_tokens and max_completion_tokens; 0
	// when neither is set.
	MaxTokens   int
	Temperature *float64
	TopP        *float64
	Seed        *int64
	Stop        []string
	User        string
	// PromptCacheKey is prompt_cache_key, passed to the model.
	PromptCacheKey string
	// Tools are the functions offered, ToolChoice tool_choice and
	// parallel_tool_calls.
	Tools      []provider.Tool
	ToolChoice provider.ToolChoice
	// ToolResults are the role "tool" messages after the last assistant
	// message: the last user message, with Message (often empty).
	ToolResults []provider.ToolResult
	// Format is response_format: text, json_object or json_schema.
	Format provider.Format
}

// Messages returns the conversation as a provider sees it: History, then
// the last user message.
func (c *Chat) Messages() []provider.Message {
	msgs := make([]provider.Message, 0, len(c.History)+1)
	msgs = append(msgs, c.History...)
	return append(msgs, provider.Message{Role: provider.RoleUser, Content: c.Message, ToolResults: c.ToolResults, Images: c.Images})
}

// chatRequest is the JSON body. Fields fmgate refuses whenever they carry
// a value are raw, so that an explicit null is accepted like an absent field.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	Stop                json.RawMessage `json:"stop"`
	User                *string         `json:"user"`
	PromptCacheKey      *string         `json:"prompt_cache_key"`

	// Accepted at the value that changes nothing.
	N                *int            `json:"n"`
	Logprobs         *bool           `json:"logprobs"`
	TopP             *float64        `json:"top_p"`
	Seed             *int64          `json:"seed"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	Store            *bool           `json:"store"`
	ResponseFormat   *responseFormat `json:"response_format"`
	Modalities       []string        `json:"modalities"`

	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`

	// Refused when set.
	Functions        json.RawMessage `json:"functions"`
	FunctionCall     json.RawMessage `json:"function_call"`
	TopLogprobs      json.RawMessage `json:"top_logprobs"`
	LogitBias        json.RawMessage `json:"logit_bias"`
	Audio            json.RawMessage `json:"audio"`
	Prediction       json.RawMessage `json:"prediction"`
	WebSearchOptions json.RawMessage `json:"web_search_options"`
	Metadata         json.RawMessage `json:"metadata"`
	ReasoningEffort  json.RawMessage `json:"reasoning_effort"`
	Verbosity        json.RawMessage `json:"verbosity"`
	ServiceTier      json.RawMessage `json:"service_tier"`
	SafetyIdentifier json.RawMessage `json:"safety_identifier"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// IncludeObfuscation pads deltas against side channels; fmgate's
	// deltas carry no padding, which the flag permits.
	IncludeObfuscation *bool `json:"include_obfuscation"`
}

type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema"`
}

type chatMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Name         json.RawMessage `json:"name"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	ToolCallID   json.RawMessage `json:"tool_call_id"`
	FunctionCall json.RawMessage `json:"function_call"`
	Refusal      json.RawMessage `json:"refusal"`
	Audio        json.RawMessage `json:"audio"`
}

// ReadChat reads and decodes a request body of at most limit bytes (0:
// DefaultMaxBodyBytes), its images bounded by images. Every error is an
// *Error in OpenAI's shape.
func ReadChat(r *http.Request, limit int64, images vision.Limits) (Chat, *Error) {
	return readChat(r, limit, images, nil)
}

// readChat is ReadChat reading the body into buf's memory (see readBody).
func readChat(r *http.Request, limit int64, images vision.Limits, buf *[]byte) (Chat, *Error) {
	data, e := readBody(r, limit, buf)
	if e != nil {
		return Chat{}, e
	}
	return DecodeChat(data, images)
}

// readBody reads a request body of at most limit bytes (0:
// DefaultMaxBodyBytes); a longer one is a 413. With buf it reads into
// *buf's memory and leaves the buffer, however grown, in *buf for its pool:
// what is decoded from the body must not keep its bytes (encoding/json
// copies every string and raw value it decodes).
func readBody(r *http.Request, limit int64, buf *[]byte) ([]byte, *Error) {
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	var data []byte
	if buf != nil {
		data = (*buf)[:0]
	}
	if n := r.ContentLength; n > 0 && n <= limit {
		data = slices.Grow(data, int(n)+1) // the read past the body sees its end without growing
	}
	data, err := appendAll(data, &io.LimitedReader{R: r.Body, N: limit + 1})
	if buf != nil {
		*buf = data
	}
	if err != nil {
		return nil, invalidRequest("", "Could not read the request body: %v", err)
	}
	if int64(len(data)) > limit {
		e := invalidRequest("", "The request body is larger than %d bytes.", limit)
		e.Status = http.StatusRequestEntityTooLarge
		return nil, e
	}
	return data, nil
}

// appendAll is io.ReadAll appending to b.
func appendAll(b []byte, r *io.LimitedReader) ([]byte, error) {
	if cap(b) == 0 {
		b = make([]byte, 0, 512)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// decodeBody decodes one JSON object of UTF-8 into v, refusing a member v
// does not name and anything after the object.
func decodeBody(data []byte, v any) *Error {
	if !utf8.Valid(data) {
		return invalidRequest("", "The request body must be UTF-8 encoded JSON.")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if dec.More() {
		return invalidRequest("", "The request body must hold one JSON object, with nothing after it.")
	}
	return nil
}

// DecodeChat decodes a request body, its images bounded by images. Every
// error is an *Error with status 400 in OpenAI's shape, naming the
// offending parameter.
func DecodeChat(data []byte, images vision.Limits) (Chat, *Error) {
	var c Chat
	var req chatRequest
	if !req.decodeFast(data) {
		req = chatRequest{}
		if e := decodeBody(data, &req); e != nil {
			return c, e
		}
	}
	if e := req.refusals(); e != nil {
		return c, e
	}
	if req.Model == "" {
		return c, invalidRequest("model", "you must provide a model parameter")
	}
	c.Model = req.Model
	if req.Stream != nil {
		c.Stream = *req.Stream
	}
	if req.StreamOptions != nil {
		if !c.Stream {
			return c, invalidRequest("stream_options", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		}
		c.IncludeUsage = req.StreamOptions.IncludeUsage
	}
	for _, lim := range []struct {
		param string
		v     *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if lim.v == nil {
			continue
		}
		if *lim.v < 1 {
			return c, invalidRequest(lim.param, "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", lim.param, *lim.v)
		}
		if c.MaxTokens == 0 || *lim.v < c.MaxTokens {
			c.MaxTokens = *lim.v
		}
	}
	var e *Error
	if c.Temperature, c.TopP, e = checkSampling(req.Temperature, req.TopP); e != nil {
		return c, e
	}
	c.Seed = req.Seed
	if e := checkMetadata(req.Metadata); e != nil {
		return c, e
	}
	if c.Stop, e = decodeStop(req.Stop); e != nil {
		return c, e
	}
	if c.User, e = checkUser(req.User); e != nil {
		return c, e
	}
	if c.PromptCacheKey, e = checkPromptCacheKey(req.PromptCacheKey); e != nil {
		return c, e
	}
	if c.Format, e = decodeFormat(req.ResponseFormat); e != nil {
		return c, e
	}
	if c.Tools, e = decodeTools(req.Tools); e != nil {
		return c, e
	}
	if c.ToolChoice, e = decodeToolChoice(req.ToolChoice, c.Tools); e != nil {
		return c, e
	}
	if p := req.ParallelToolCalls; p != nil {
		c.ToolChoice.Sequential = !*p
	}
	if e := c.decodeMessages(req.Messages, vision.NewReader(images)); e != nil {
		return c, e
	}
	return c, nil
}

// checkSampling accepts temperature (0 to 2) and top_p (0 to 1).
func checkSampling(temperature, topP *float64) (*float64, *float64, *Error) {
	if t := temperature; t != nil && (*t < 0 || *t > 2) {
		return nil, nil, invalidRequest("temperature", "Invalid 'temperature': expected a number between 0 and 2, but got %g instead.", *t)
	}
	if p := topP; p != nil && (*p < 0 || *p > 1) {
		return nil, nil, invalidRequest("top_p", "Invalid 'top_p': expected a number between 0 and 1, but got %g instead.", *p)
	}
	return temperature, topP, nil
}

// checkUser accepts user, the end user's id, of at most MaxUserBytes.
func checkUser(user *string) (string, *Error) {
	if user == nil {
		return "", nil
	}
	if len(*user) > MaxUserBytes {
		return "", invalidRequest("user", "Invalid 'user': string too long. Expected a string with maximum length %d.", MaxUserBytes)
	}
	return *user, nil
}

// checkPromptCacheKey accepts prompt_cache_key of at most
// MaxPromptCacheKeyBytes.
func checkPromptCacheKey(k *string) (string, *Error) {
	if k == nil {
		return "", nil
	}
	if len(*k) > MaxPromptCacheKeyBytes {
		return "", invalidRequest("prompt_cache_key", "Invalid 'prompt_cache_key': string too long. Expected a string with maximum length %d.", MaxPromptCacheKeyBytes)
	}
	return *k, nil
}

// refusals names the first field set to a value fmgate cannot honour.
func (req *chatRequest) refusals() *Error {
	unsupported := func(param, what string) *Error {
		return invalidRequest(param, "fmgate does not support '%s' (%s); remove it from the request.", param, what)
	}
	switch {
	case req.N != nil && *req.N != 1:
		return unsupported("n", "only one choice per request")
	case req.Logprobs != nil && *req.Logprobs:
		return unsupported("logprobs", "log probabilities are not available")
	case req.PresencePenalty != nil && *req.PresencePenalty != 0:
		return unsupported("presence_penalty", "penalties are not available")
	case req.FrequencyPenalty != nil && *req.FrequencyPenalty != 0:
		return unsupported("frequency_penalty", "penalties are not available")
	case req.Store != nil && *req.Store:
		return unsupported("store", "fmgate does not store completions for later retrieval")
	}
	for _, m := range req.Modalities {
		if m != "text" {
			return unsupported("modalities", "only text output is available")
		}
	}
	for _, f := range []struct {
		param, what string
		v           json.RawMessage
	}{
		{"functions", "use 'tools' instead of the deprecated 'functions'", req.Functions},
		{"function_call", "use 'tool_choice' instead of the deprecated 'function_call'", req.FunctionCall},
		{"top_logprobs", "log probabilities are not available", req.TopLogprobs},
		{"logit_bias", "token biases are not available", req.LogitBias},
		{"audio", "only text output is available", req.Audio},
		{"prediction", "predicted outputs are not available", req.Prediction},
		{"web_search_options", "web search is not available", req.WebSearchOptions},
		{"reasoning_effort", "the model tier decides", req.ReasoningEffort},
		{"verbosity", "the model tier decides", req.Verbosity},
		{"service_tier", "fmgate's priority classes come from the API key", req.ServiceTier},
		{"safety_identifier", "send the end user's id in 'user'", req.SafetyIdentifier},
	} {
		if isSet(f.v) {
			return unsupported(f.param, f.what)
		}
	}
	return nil
}

func isSet(v json.RawMessage) bool {
	return len(v) > 0 && !bytes.Equal(v, []byte("null"))
}

func decodeStop(raw json.RawMessage) ([]string, *Error) {
	if !isSet(raw) {
		return nil, nil
	}
	var stops []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		stops = []string{one}
	} else if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, invalidRequest("stop", "Invalid 'stop': expected a string or an array of strings.")
	}
	if len(stops) > MaxStop {
		return nil, invalidRequest("stop", "Invalid 'stop': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", MaxStop, len(stops))
	}
	for _, s := range stops {
		if s == "" {
			return nil, invalidRequest("stop", "Invalid 'stop': a stop sequence must not be empty.")
		}
	}
	return stops, nil
}

// decodeMessages splits the conversation into the system prompt, the
// history and the last user message; rd reads the user messages' images.
func (c *Chat) decodeMessages(msgs []chatMessage, rd *vision.Reader) *Error {
	if len(msgs) == 0 {
		return invalidRequest("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	var conv conversation
	for i, m := range msgs {
		param := "messages[" + strconv.Itoa(i) + "]"
		for _, f := range []struct {
			name, what string
			v          json.RawMessage
		}{
			{"function_call", "use 'tool_calls' instead of the deprecated 'function_call'", m.FunctionCall},
			{"audio", "only text messages are available", m.Audio},
		} {
			if isSet(f.v) {
				return invalidRequest(param+"."+f.name, "fmgate does not support '%s.%s' (%s).", param, f.name, f.what)
			}
		}
		if isSet(m.ToolCalls) && m.Role != "assistant" {
			return invalidRequest(param+".tool_calls", "Only assistant messages may carry 'tool_calls'.")
		}
		if isSet(m.ToolCallID) && m.Role != "tool" {
			return invalidRequest(param+".tool_call_id", "Only tool messages may carry 'tool_call_id'.")
		}
		if e := checkName(m.Name, param); e != nil {
			return e
		}
		var text string
		var images []provider.Image
		var e *Error
		if m.Role != "assistant" || isSet(m.Content) || !isSet(m.ToolCalls) {
			var userImages *vision.Reader
			if m.Role == "user" {
				userImages = rd
			}
			if text, images, e = decodeContent(m.Content, param, userImages); e != nil {
				return e
			}
		}
		switch m.Role {
		case "system", "developer":
			conv.addSystem(text)
		case "user":
			conv.add(provider.RoleUser, text, images)
		case "assistant":
			if isSet(m.Refusal) && !isSet(m.Content) {
				var refusal string
				if err := json.Unmarshal(m.Refusal, &refusal); err != nil {
					return invalidRequest(param+".refusal", "Invalid '%s.refusal': expected a string.", param)
				}
				text = refusal
			}
			calls, e := decodeToolCalls(m.ToolCalls, param)
			if e != nil {
				return e
			}
			if len(calls) > 0 {
				conv.addCalls(text, calls)
				continue
			}
			conv.add(provider.RoleAssistant, text, nil)
		case "tool":
			r, e := decodeToolResult(m.ToolCallID, text, param)
			if e != nil {
				return e
			}
			conv.addResult(r)
		case "function":
			return invalidRequest(param+".role", "fmgate does not support 'function' messages; send the result as a 'tool' message.")
		case "":
			return invalidRequest(param+".role", "Missing required parameter: '%s.role'.", param)
		default:
			return invalidRequest(param+".role", "Invalid '%s.role': %q is not one of system, developer, user, assistant.", param, truncate(m.Role, 40))
		}
	}
	c.System = conv.systemPrompt()
	history, last, e := conv.split("messages", "The last message must come from the user or a tool: fmgate answers a user's message.")
	if e != nil {
		return e
	}
	c.Message, c.ToolResults, c.Images = last.Content, last.ToolResults, last.Images
	c.History = history
	return nil
}

// conversation gathers a request's messages, in whichever of OpenAI's
// shapes they come (chat messages, Responses input items), into the system
// prompt and the conversation a provider takes.
type conversation struct {
	system []string
	msgs   []provider.Message
}

func (c *conversation) addSystem(text string) { c.system = append(c.system, text) }

// systemPrompt joins the system and developer messages, in order.
func (c *conversation) systemPrompt() string { return strings.Join(c.system, "\n\n") }

// add appends a user or assistant message, joined to the one before it
// when that is the same speaker's and calls no tools.
func (c *conversation) add(role provider.Role, text string, images []provider.Image) {
	if n := len(c.msgs); n > 0 && c.msgs[n-1].Role == role && len(c.msgs[n-1].ToolCalls) == 0 {
		c.msgs[n-1].Content = joinText(c.msgs[n-1].Content, text)
		c.msgs[n-1].Images = append(c.msgs[n-1].Images, images...)
		return
	}
	c.msgs = append(c.msgs, provider.Message{Role: role, Content: text, Images: images})
}

// addCalls appends an assistant message that calls tools after its text.
func (c *conversation) addCalls(text string, calls []provider.ToolCall) {
	c.msgs = append(c.msgs, provider.Message{Role: provider.RoleAssistant, Content: text, ToolCalls: calls})
}

// addCall adds one tool call to the assistant message before it, or
// starts one.
func (c *conversation) addCall(call provider.ToolCall) {
	if n := len(c.msgs); n > 0 && c.msgs[n-1].Role == provider.RoleAssistant {
		c.msgs[n-1].ToolCalls = append(c.msgs[n-1].ToolCalls, call)
		return
	}
	c.addCalls("", []provider.ToolCall{call})
}

// addResult adds a tool's result to the user message of results before
// it, or starts one.
func (c *conversation) addResult(r provider.ToolResult) {
	if n := len(c.msgs); n > 0 && c.msgs[n-1].Role == provider.RoleUser && c.msgs[n-1].Content == "" && len(c.msgs[n-1].Images) == 0 {
		c.msgs[n-1].ToolResults = append(c.msgs[n-1].ToolResults, r)
		return
	}
	c.msgs = append(c.msgs, provider.Message{Role: provider.RoleUser, ToolResults: []provider.ToolResult{r}})
}

// split ends the conversation at its last message, which must be the
// user's: the history before it, and it. param names the request's
// conversation in errors, and lastRule says what must come last.
func (c *conversation) split(param, lastRule string) ([]provider.Message, provider.Message, *Error) {
	conv := c.msgs
	if len(conv) == 0 || conv[len(conv)-1].Role != provider.RoleUser {
		return nil, provider.Message{}, invalidRequest(param, "%s", lastRule)
	}
	for _, m := range conv {
		if len(m.ToolCalls) > provider.MaxToolCallsTurn {
			return nil, provider.Message{}, invalidRequest(param, "Invalid '%s': at most %d tool calls per assistant message.", param, provider.MaxToolCallsTurn)
		}
	}
	if err := provider.CheckToolPairing(conv); err != nil {
		return nil, provider.Message{}, invalidRequest(param, "Invalid '%s': %v.", param, err)
	}
	last := conv[len(conv)-1]
	if strings.TrimSpace(last.Content) == "" && len(last.ToolResults) == 0 && len(last.Images) == 0 {
		return nil, provider.Message{}, invalidRequest(param, "The last user message must not be empty.")
	}
	return conv[:len(conv)-1], last, nil
}

// joinText joins two texts of one speaker, skipping an empty one.
func joinText(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "\n\n" + b
}

// decodeContent reads a message's content: a string, or an array of text
// parts, joined, and of image_url parts when rd reads images (a user
// message's).
func decodeContent(raw json.RawMessage, param string, rd *vision.Reader) (string, []provider.Image, *Error) {
	if len(raw) > 0 && raw[0] == '"' {
		p := jsonscan.New(string(raw))
		if s, err := p.Str(); err == nil && p.End() == nil {
			return s, nil, nil
		}
	}
	param += ".content"
	if !isSet(raw) {
		return "", nil, invalidRequest(param, "Missing required parameter: '%s'.", param)
	}
	var s string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, invalidRequest(param, "Invalid '%s': expected a string or an array of text parts.", param)
		}
		return s, nil, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, invalidRequest(param, "Invalid '%s': expected a string or an array of text parts.", param)
	}
	var b strings.Builder
	var images []provider.Image
	for j, p := range parts {
		pp := fmt.Sprintf("%s[%d]", param, j)
		var part struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		dec := json.NewDecoder(bytes.NewReader(p))
		if err := dec.Decode(&part); err != nil {
			return "", nil, invalidRequest(pp, "Invalid '%s': expected an object with a type.", pp)
		}
		switch {
		case part.Type == "image_url" && rd != nil:
			im, e := decodeImagePart(p, pp, rd)
			if e != nil {
				return "", nil, e
			}
			images = append(images, im)
			continue
		case part.Type == "image_url":
			return "", nil, invalidRequest(pp+".type", "Only user messages may carry images.")
		case part.Type != "text":
			return "", nil, invalidRequest(pp+".type", "fmgate does not support content parts of type %q; send text and image_url parts only.", truncate(part.Type, 40))
		}
		if part.Text == nil {
			return "", nil, invalidRequest(pp+".text", "Missing required parameter: '%s.text'.", pp)
		}
		if e := onlyMembers(p, pp, "text part", "type", "text"); e != nil {
			return "", nil, e
		}
		b.WriteString(*part.Text)
	}
	return b.String(), images, nil
}

// onlyMembers refuses a part with a member other than keys set.
func onlyMembers(p json.RawMessage, pp, what string, keys ...string) *Error {
	var extra map[string]json.RawMessage
	_ = json.Unmarshal(p, &extra)
	for k, v := range extra {
		if !slices.Contains(keys, k) && isSet(v) {
			return invalidRequest(pp+"."+k, "fmgate does not support '%s.%s' on a %s.", pp, truncate(k, 40), what)
		}
	}
	return nil
}

// Image detail levels OpenAI takes; Anthropic and Bedrock read every image
// at one level, so the detail reaches only an OpenAI tier.
var imageDetails = []string{"auto", "low", "high", "original"}

// decodeImagePart reads an image_url part: a data or https URL and its
// detail.
func decodeImagePart(p json.RawMessage, pp string, rd *vision.Reader) (provider.Image, *Error) {
	var part struct {
		ImageURL json.RawMessage `json:"image_url"`
	}
	if err := json.Unmarshal(p, &part); err != nil || !isSet(part.ImageURL) {
		return provider.Image{}, invalidRequest(pp+".image_url", "Missing required parameter: '%s.image_url' (an object with a url).", pp)
	}
	if e := onlyMembers(p, pp, "image_url part", "type", "image_url"); e != nil {
		return provider.Image{}, e
	}
	var iu struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	}
	if err := json.Unmarshal(part.ImageURL, &iu); err != nil {
		return provider.Image{}, invalidRequest(pp+".image_url", "Invalid '%s.image_url': expected an object with a url.", pp)
	}
	if e := onlyMembers(part.ImageURL, pp+".image_url", "image_url part", "url", "detail"); e != nil {
		return provider.Image{}, e
	}
	return imageOf(iu.URL, iu.Detail, pp+".image_url.url", pp+".image_url.detail", rd)
}

// imageOf reads an image sent as a data URL, or as a remote URL the
// gateway fetches once the caller is admitted, at detail; urlParam and
// detailParam name them in errors.
func imageOf(url, detail, urlParam, detailParam string, rd *vision.Reader) (provider.Image, *Error) {
	if detail != "" && !slices.Contains(imageDetails, detail) {
		return provider.Image{}, invalidRequest(detailParam, "Invalid '%s': expected one of auto, low, high, original, but got %q.", detailParam, truncate(detail, 20))
	}
	im, err := rd.URL(url)
	if err != nil {
		return provider.Image{}, invalidRequest(urlParam, "Invalid '%s': %v.", urlParam, err)
	}
	im.Detail = detail
	return im, nil
}

// jsonError explains a body encoding/json refused.
func jsonError(err error) *Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return invalidRequest("", "We could not parse the JSON body of your request at byte %d. The OpenAI API expects a JSON payload.", syn.Offset)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalidRequest("", "The request body must be a JSON object.")
		}
		return invalidRequest(field, "Invalid type for '%s': expected %s, but got a JSON %s instead.", field, jsonKind(typ.Type.Kind().String()), typ.Value)
	case errors.Is(err, io.EOF):
		return invalidRequest("", "The request body is empty; send a JSON object.")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidRequest("", "The JSON body of your request ends too early.")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return invalidRequest(name, "Unrecognized request argument supplied: %s", truncate(name, 60))
	}
	return invalidRequest("", "We could not parse the JSON body of your request.")
}

func jsonKind(k string) string {
	switch k {
	case "int", "int64", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	}
	return "an object"
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
