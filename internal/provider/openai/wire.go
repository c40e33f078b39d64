package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/tidwall/gjson"

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
		if m.Role == provider.RoleAssistant {
			message("assistant", m.Content)
		} else {
			message("user", m.Content)
		}
	}
	b = append(b, ']')
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
	if stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(b, '}'), nil
}

func appendString(b []byte, s string) []byte { return stream.AppendJSONString(b, s) }

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
	model    string
	content  string
	finish   string
	usage    provider.Usage
	reported bool // usage was in this chunk
}

// streamError is an error event a server sent instead of a chunk.
type streamError struct{ message, typ, code string }

func (e *streamError) Error() string { return "error event mid-stream: " + e.message }

var errMalformed = errors.New("a chunk of the stream is not JSON")

// decode reads data into c; an error event is a *streamError.
func (c *chunk) decode(data string) error {
	*c = chunk{}
	if !gjson.Valid(data) {
		return errMalformed
	}
	var failed error
	gjson.Parse(data).ForEach(func(key, v gjson.Result) bool {
		switch key.Str {
		case "model":
			c.model = v.String()
		case "choices":
			v.ForEach(func(_, ch gjson.Result) bool {
				if ch.Get("index").Int() != 0 {
					return true // fmgate asks for one choice
				}
				c.content = ch.Get("delta.content").String()
				c.finish = ch.Get("finish_reason").String()
				return false
			})
		case "usage":
			c.usage, c.reported = usageOf(v)
		case "error":
			if v.Type != gjson.Null {
				failed = errorOf(v)
				return false
			}
		}
		return true
	})
	return failed
}

// completion is what fmgate reads of a chat.completion.
type completion struct {
	model, text, finish string
	usage               provider.Usage
	reported, answered  bool
}

func decodeCompletion(raw []byte) (completion, error) {
	var c completion
	if !gjson.ValidBytes(raw) {
		return c, errors.New("the answer is not JSON")
	}
	r := gjson.ParseBytes(raw)
	c.model = r.Get("model").String()
	c.usage, c.reported = usageOf(r.Get("usage"))
	r.Get("choices").ForEach(func(_, ch gjson.Result) bool {
		if ch.Get("index").Int() != 0 {
			return true
		}
		c.answered = true
		c.text = ch.Get("message.content").String()
		c.finish = ch.Get("finish_reason").String()
		return false
	})
	return c, nil
}

// usageOf reads a usage object; ok is false when there is none.
func usageOf(v gjson.Result) (u provider.Usage, ok bool) {
	if !v.IsObject() {
		return u, false
	}
	return provider.Usage{
		InputTokens:       int(v.Get("prompt_tokens").Int()),
		OutputTokens:      int(v.Get("completion_tokens").Int()),
		CachedInputTokens: int(v.Get("prompt_tokens_details.cached_tokens").Int()),
	}, true
}

func errorOf(v gjson.Result) *streamError {
	if !v.IsObject() {
		return &streamError{message: v.String()}
	}
	return &streamError{message: v.Get("message").String(), typ: v.Get("type").String(), code: v.Get("code").String()}
}
