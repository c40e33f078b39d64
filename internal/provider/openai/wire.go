package openai

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/fmgate/fmgate/internal/jsonscan"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

// The Chat Completions wire, written and read by hand: the request is
// appended as bytes and the answers are read with gjson into the few fields
// fmgate uses, instead of the SDK's reflective param and response types,
// whose decoding was most of a streamed answer's cost. The calls still go
// through the SDK's client (base URL, auth, headers, error statuses).

// chatPath is the Chat Completions endpoint, relative to the base URL.
const chatPath = "chat/completions"

// MaxEventBytes bounds one server-sent event of a streamed answer; a
// longer one fails the call as unavailable.
const MaxEventBytes = 4 << 20

// body is the Chat Completions request for req: the system prompt, the
// conversation, the limits and stops; with stream, the usage chunk asked
// for.
func (p *Provider) body(req *provider.Request, stream bool) ([]byte, error) {
	size := 160 + len(p.cfg.ModelID) + len(req.System)
	for _, m := range req.Messages {
		size += 32 + len(m.Content)
		for _, im := range m.Images {
			size += 80 + base64.StdEncoding.EncodedLen(len(im.Data))
		}
	}
	for _, s := range req.StopSequences {
		size += 4 + len(s)
	}
	b := make([]byte, 0, size)
	b = append(b, `{"model":`...)
	b = appendString(b, p.cfg.ModelID)
	b = append(b, `,"messages":[`...)
	first := true
	message := func(role, content string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, `{"role":"`...)
		b = append(b, role...)
		b = append(b, `","content":`...)
		b = appendString(b, content)
		b = append(b, '}')
	}
	if req.System != "" {
		message("system", req.System)
	}
	for _, m := range req.Messages {
		switch {
		case m.Role == provider.RoleAssistant && len(m.ToolCalls) > 0:
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, `{"role":"assistant","content":`...)
			if m.Content == "" {
				b = append(b, "null"...)
			} else {
				b = appendString(b, m.Content)
			}
			b = appendToolCalls(append(b, ','), m.ToolCalls)
			b = append(b, '}')
		case m.Role == provider.RoleAssistant:
			message("assistant", m.Content)
		default:
			for _, r := range m.ToolResults {
				if !first {
					b = append(b, ',')
				}
				first = false
				b = append(b, `{"role":"tool","tool_call_id":`...)
				b = appendString(b, provider.ToolID(r.CallID, provider.MaxToolIDOpenAI))
				b = append(b, `,"content":`...)
				b = appendString(b, resultText(r))
				b = append(b, '}')
			}
			switch {
			case len(m.Images) > 0:
				if !first {
					b = append(b, ',')
				}
				first = false
				b = appendImageMessage(b, m)
			case m.Content != "" || len(m.ToolResults) == 0:
				message("user", m.Content)
			}
		}
	}
	b = append(b, ']')
	b = appendTools(b, req.Tools, req.ToolChoice)
	b = appendFormat(b, req.Format)
	if req.MaxTokens > 0 {
		if p.maxCompletion {
			b = append(b, `,"max_completion_tokens":`...)
		} else {
			b = append(b, `,"max_tokens":`...)
		}
		b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	}
	if req.Temperature != nil {
		t := *req.Temperature
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, fmt.Errorf("openai: temperature %v is not a number", t)
		}
		b = append(b, `,"temperature":`...)
		b = strconv.AppendFloat(b, t, 'g', -1, 64)
	}
	if req.Seed != nil {
		b = append(b, `,"seed":`...)
		b = strconv.AppendInt(b, *req.Seed, 10)
	}
	if req.TopP != nil {
		p := *req.TopP
		if math.IsNaN(p) || math.IsInf(p, 0) {
			return nil, fmt.Errorf("openai: top_p %v is not a number", p)
		}
		b = append(b, `,"top_p":`...)
		b = strconv.AppendFloat(b, p, 'g', -1, 64)
	}
	if len(req.StopSequences) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range req.StopSequences {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, s)
		}
		b = append(b, ']')
	}
	if req.CacheKey != "" {
		b = append(b, `,"prompt_cache_key":`...)
		b = appendString(b, req.CacheKey)
	}
	if stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(b, '}'), nil
}

func appendString(b []byte, s string) []byte { return stream.AppendJSONString(b, s) }

// appendImageMessage appends a user message with images: its content an
// array of image_url parts (data URLs, with their detail), then its text.
func appendImageMessage(b []byte, m provider.Message) []byte {
	b = append(b, `{"role":"user","content":[`...)
	for i, im := range m.Images {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"image_url","image_url":{"url":"data:`...)
		b = append(b, im.MediaType...)
		b = append(b, ";base64,"...)
		b = base64.StdEncoding.AppendEncode(b, im.Data)
		b = append(b, '"')
		if im.Detail != "" {
			b = append(b, `,"detail":`...)
			b = appendString(b, im.Detail)
		}
		b = append(b, "}}"...)
	}
	if m.Content != "" {
		b = append(b, `,{"type":"text","text":`...)
		b = appendString(b, m.Content)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendTools appends tools, tool_choice and parallel_tool_calls.
func appendTools(b []byte, tools []provider.Tool, c provider.ToolChoice) []byte {
	if len(tools) == 0 {
		return b
	}
	b = append(b, `,"tools":[`...)
	for i, t := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"function","function":{"name":`...)
		b = appendString(b, t.Name)
		if t.Description != "" {
			b = append(b, `,"description":`...)
			b = appendString(b, t.Description)
		}
		b = append(b, `,"parameters":`...)
		b = append(b, t.Schema...)
		if t.Strict {
			b = append(b, `,"strict":true`...)
		}
		b = append(b, "}}"...)
	}
	b = append(b, ']')
	switch c.Mode {
	case provider.ToolNone:
		b = append(b, `,"tool_choice":"none"`...)
	case provider.ToolAny:
		b = append(b, `,"tool_choice":"required"`...)
	case provider.ToolNamed:
		b = append(b, `,"tool_choice":{"type":"function","function":{"name":`...)
		b = appendString(b, c.Name)
		b = append(b, "}}"...)
	}
	if c.Sequential {
		b = append(b, `,"parallel_tool_calls":false`...)
	}
	return b
}

// appendFormat appends response_format.
func appendFormat(b []byte, f provider.Format) []byte {
	switch f.Kind {
	case provider.FormatJSONObject:
		b = append(b, `,"response_format":{"type":"json_object"}`...)
	case provider.FormatJSONSchema:
		name := f.Name
		if name == "" {
			name = "answer"
		}
		b = append(b, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		b = appendString(b, name)
		if f.Description != "" {
			b = append(b, `,"description":`...)
			b = appendString(b, f.Description)
		}
		b = append(b, `,"schema":`...)
		b = append(b, f.Schema...)
		if f.Strict {
			b = append(b, `,"strict":true`...)
		}
		b = append(b, "}}"...)
	}
	return b
}

// appendToolCalls appends an assistant message's tool_calls.
func appendToolCalls(b []byte, calls []provider.ToolCall) []byte {
	b = append(b, `"tool_calls":[`...)
	for i, c := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = appendString(b, provider.ToolID(c.ID, provider.MaxToolIDOpenAI))
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, c.Name)
		b = append(b, `,"arguments":`...)
		b = appendString(b, string(c.Input))
		b = append(b, "}}"...)
	}
	return append(b, ']')
}

// resultText is a tool result as a tool message's content: OpenAI has no
// error flag, so a failed tool's result says so in words.
func resultText(r provider.ToolResult) string {
	if r.IsError {
		return "Error: " + r.Content
	}
	return r.Content
}

// callParts gathers the pieces of the tool calls of one answer: a stream
// sends each call's id and name first and its arguments in fragments,
// keyed by the call's index.
type callParts struct {
	calls []provider.ToolCall
	args  []strings.Builder
	index []int64
}

func (cp *callParts) add(index int64, id, name, args string) {
	i := slices.Index(cp.index, index)
	if i < 0 {
		cp.index = append(cp.index, index)
		cp.calls = append(cp.calls, provider.ToolCall{})
		cp.args = append(cp.args, strings.Builder{})
		i = len(cp.calls) - 1
	}
	if id != "" {
		cp.calls[i].ID = id
	}
	if name != "" {
		cp.calls[i].Name = name
	}
	cp.args[i].WriteString(args)
}

// done is the calls in the order of their index, each checked whole: an
// id, a name and arguments that are one JSON object.
func (cp *callParts) done() ([]provider.ToolCall, error) {
	if len(cp.calls) == 0 {
		return nil, nil
	}
	order := make([]int, len(cp.calls))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(cp.index[a], cp.index[b]) })
	calls := make([]provider.ToolCall, 0, len(cp.calls))
	for _, i := range order {
		c := cp.calls[i]
		args := cp.args[i].String()
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		c.Input = json.RawMessage(args)
		if c.ID == "" || c.Name == "" || !provider.IsJSONObject(c.Input) {
			return nil, fmt.Errorf("the model's tool call %d is incomplete or its arguments are not a JSON object", cp.index[i])
		}
		calls = append(calls, c)
	}
	return calls, nil
}

// readToolCalls reads a choice's tool_calls into cp.
func readToolCalls(p *jsonscan.Scanner, cp *callParts) error {
	if p.Null() {
		return nil
	}
	n := int64(0)
	return p.Array(func() error {
		index, id, name, args := n, "", "", ""
		n++
		err := p.Object(func(key string) (err error) {
			switch key {
			case "index":
				index, err = p.Int()
			case "id":
				id, err = p.Text()
			case "function":
				err = p.Object(func(key string) (err error) {
					switch key {
					case "name":
						name, err = p.Text()
					case "arguments":
						args, err = p.Text()
					default:
						err = p.Skip()
					}
					return err
				})
			default:
				err = p.Skip()
			}
			return err
		})
		if err == nil {
			cp.add(index, id, name, args)
		}
		return err
	})
}

// eventReader reads the data of server-sent events: data lines joined by
// newlines, dispatched at a blank line; event names, ids and comments are
// skipped. An event cut by the end of the body is dropped, as the SSE
// specification says.
type eventReader struct {
	r    *bufio.Reader
	data []byte
}

func newEventReader(r io.Reader) *eventReader {
	return &eventReader{r: bufio.NewReaderSize(r, 4096)}
}

// next returns the next event's data, or io.EOF at the end of the body.
func (e *eventReader) next() (string, error) {
	e.data = e.data[:0]
	has := false
	for {
		line, err := e.line()
		if err != nil {
			return "", err
		}
		if len(line) == 0 {
			if has {
				return string(e.data), nil
			}
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if string(name) != "data" {
			continue // event:, id:, retry:, or a ":" comment
		}
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
		if has {
			e.data = append(e.data, '\n')
		}
		if len(e.data)+len(value) > MaxEventBytes {
			return "", fmt.Errorf("an event of the stream is over %d bytes", MaxEventBytes)
		}
		e.data = append(e.data, value...)
		has = true
	}
}

// line returns the next line without its end (\n or \r\n), valid
// until the next call. A line longer than the buffer is gathered, within
// MaxEventBytes.
func (e *eventReader) line() ([]byte, error) {
	line, err := e.r.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		long := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if len(long) > MaxEventBytes {
				return nil, fmt.Errorf("an event of the stream is over %d bytes", MaxEventBytes)
			}
			line, err = e.r.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil && (err != io.EOF || len(line) == 0) {
		return line, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), nil
}

// chunk is what fmgate reads of one chat.completion.chunk: the first
// choice's delta and finish reason, the model and the usage.
type chunk struct {
	model   string
	content string
	finish  string
	stopped string // the stop string that ended the answer, where the server says

	usage    provider.Usage
	reported bool // usage was in this chunk
	// calls, when set, gathers the tool call pieces of the stream.
	calls *callParts
}

// streamError is an error event a server sent instead of a chunk.
type streamError struct{ message, typ, code string }

func (e *streamError) Error() string { return "error event mid-stream: " + e.message }

// decode reads data into c; an error event is a *streamError.
func (c *chunk) decode(data string) error {
	*c = chunk{calls: c.calls}
	p := jsonscan.New(data)
	var failed *streamError
	answered := false
	err := p.Object(func(key string) (err error) {
		switch key {
		case "model":
			c.model, err = p.Text()
		case "choices":
			err = p.Array(func() error {
				ch := choice{calls: c.calls}
				if err := ch.read(&p, "delta"); err != nil {
					return err
				}
				if ch.index == 0 && !answered { // fmgate asks for one choice
					c.content, c.finish, c.stopped, answered = ch.content, ch.finish, ch.stopped, true
				}
				return nil
			})
		case "usage":
			c.usage, c.reported, err = readUsage(&p)
		case "error":
			failed, err = readError(&p)
		default:
			err = p.Skip()
		}
		return err
	})
	if err == nil {
		err = p.End()
	}
	if err != nil {
		return errMalformed
	}
	if failed != nil {
		return failed
	}
	return nil
}

var errMalformed = errors.New("a chunk of the stream is not JSON")

// choice is one entry of "choices": its text is under "delta" in a chunk,
// under "message" in a whole answer.
type choice struct {
	index           int64
	content, finish string
	// stopped is vLLM's stop_reason when it is a string: the stop
	// sequence that ended the answer (OpenAI itself does not say).
	stopped string
	// calls, when set, gathers the choice's tool calls.
	calls *callParts
}

func (ch *choice) read(p *jsonscan.Scanner, textKey string) error {
	return p.Object(func(key string) (err error) {
		switch key {
		case "index":
			ch.index, err = p.Int()
		case "finish_reason":
			ch.finish, err = p.Text()
		case "stop_reason":
			if p.Peek() != '"' {
				return p.Skip() // null, or the id of a stop token
			}
			ch.stopped, err = p.Str()
		case textKey:
			if p.Null() {
				return nil
			}
			err = p.Object(func(key string) (err error) {
				switch {
				case key == "content":
					ch.content, err = p.Text()
					return err
				case key == "tool_calls" && ch.calls != nil && ch.index == 0:
					return readToolCalls(p, ch.calls)
				}
				return p.Skip()
			})
		default:
			err = p.Skip()
		}
		return err
	})
}

// completion is what fmgate reads of a chat.completion.
type completion struct {
	model, text, finish string
	stopped             string
	usage               provider.Usage
	reported, answered  bool
	calls               callParts
}

func decodeCompletion(raw []byte) (*completion, error) {
	c := &completion{}
	p := jsonscan.New(string(raw))
	err := p.Object(func(key string) (err error) {
		switch key {
		case "model":
			c.model, err = p.Text()
		case "choices":
			err = p.Array(func() error {
				ch := choice{calls: &c.calls}
				if c.answered {
					ch.calls = nil
				}
				if err := ch.read(&p, "message"); err != nil {
					return err
				}
				if ch.index == 0 && !c.answered {
					c.text, c.finish, c.stopped, c.answered = ch.content, ch.finish, ch.stopped, true
				}
				return nil
			})
		case "usage":
			c.usage, c.reported, err = readUsage(&p)
		default:
			err = p.Skip()
		}
		return err
	})
	if err == nil {
		err = p.End()
	}
	if err != nil {
		return nil, errors.New("the answer is not JSON")
	}
	return c, nil
}

// readUsage reads a usage object; ok is false for null.
func readUsage(p *jsonscan.Scanner) (u provider.Usage, ok bool, err error) {
	if p.Null() {
		return u, false, nil
	}
	err = p.Object(func(key string) error {
		var n int64
		var err error
		switch key {
		case "prompt_tokens":
			n, err = p.Int()
			u.InputTokens = int(n)
		case "completion_tokens":
			n, err = p.Int()
			u.OutputTokens = int(n)
		case "prompt_tokens_details":
			if p.Null() {
				return nil
			}
			err = p.Object(func(key string) error {
				switch key {
				case "cached_tokens":
					n, err := p.Int()
					u.CachedInputTokens = int(n)
					return err
				case "cache_write_tokens": // an OpenAI-compatible server fronting a vendor that bills writes
					n, err := p.Int()
					u.CacheWriteTokens = int(n)
					return err
				case "cache_write_1h_tokens": // the part of those written for one hour
					n, err := p.Int()
					u.CacheWrite1hTokens = int(n)
					return err
				}
				return p.Skip()
			})
		default:
			err = p.Skip()
		}
		return err
	})
	// OpenAI counts the cached (and written) tokens inside prompt_tokens;
	// Usage keeps its input classes apart.
	u.InputTokens = max(u.InputTokens-u.CachedInputTokens-u.CacheWriteTokens, 0)
	return u, err == nil, err
}

// readError reads an "error" member: nil for null; an object's message,
// type and code; anything else as the message.
func readError(p *jsonscan.Scanner) (*streamError, error) {
	if p.Null() {
		return nil, nil
	}
	e := &streamError{}
	if p.Peek() != '{' {
		var err error
		e.message, err = p.Text()
		return e, err
	}
	err := p.Object(func(key string) (err error) {
		switch key {
		case "message":
			e.message, err = p.Text()
		case "type":
			e.typ, err = p.Text()
		case "code":
			e.code, err = p.Text()
		default:
			err = p.Skip()
		}
		return err
	})
	return e, err
}
