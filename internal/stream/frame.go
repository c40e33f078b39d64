package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Type names a server-to-client frame.
type Type string

// The frame types of the external contract.
const (
	TypeChunk     Type = "chunk"
	TypeDone      Type = "done"
	TypeError     Type = "error"
	TypeHeartbeat Type = "heartbeat"
	TypeStatus    Type = "status"
)

// Status states: why the answer has not started yet.
const (
	StateRetrying    = "retrying"     // the model failed; the turn tries it again after RetryInSeconds
	StateFallingBack = "falling_back" // the turn moves to the next model tier
	StateQueued      = "queued"       // the turn waits in the priority queue for quota
)

// StatusFrame tells the client why its answer has not started yet:
// {"type":"status","requestId":"r1","state":"retrying","attempt":2,"of":4,
// "retryInSeconds":2,"message":"…"}. It is only sent before the first chunk.
type StatusFrame struct {
	RequestID string
	// State is StateRetrying, StateFallingBack or StateQueued.
	State string
	// Attempt (from 1) of Of: the model call or tier about to be tried;
	// encoded only when positive.
	Attempt, Of int
	// RetryInSeconds is encoded only when positive.
	RetryInSeconds int
	// Message is in the user's language, safe to show.
	Message string
}

// AppendJSON appends the wire form of s to dst.
func (s StatusFrame) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":"status","requestId":`...)
	dst = appendJSONString(dst, s.RequestID)
	dst = append(dst, `,"state":`...)
	dst = appendJSONString(dst, s.State)
	if s.Attempt > 0 {
		dst = append(dst, `,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(s.Attempt), 10)
	}
	if s.Of > 0 {
		dst = append(dst, `,"of":`...)
		dst = strconv.AppendInt(dst, int64(s.Of), 10)
	}
	if s.RetryInSeconds > 0 {
		dst = append(dst, `,"retryInSeconds":`...)
		dst = strconv.AppendInt(dst, int64(s.RetryInSeconds), 10)
	}
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, s.Message)
	return append(dst, '}')
}

// Chunk is a piece of answer text:
// {"type":"chunk","requestId":"r1","index":0,"text":"…"}.
type Chunk struct {
	RequestID string
	// Index numbers the chunks of a request from 0.
	Index int
	// Split marks the pieces of a chunk too large for one frame; only then is
	// SubIndex (from 0) encoded, and all pieces share Index.
	Split    bool
	SubIndex int
	Text     string
}

// Tokens is the token usage reported in a done frame. Input counts every
// input token, of which CacheRead were read from the vendor's prompt cache
// and CacheWrite written to it.
type Tokens struct {
	Input      int `json:"input"`
	Output     int `json:"output"`
	CacheRead  int `json:"cacheRead,omitempty"`
	CacheWrite int `json:"cacheWrite,omitempty"`
}

// DoneMetrics are the stream timings of a done frame, computed by the stream.
type DoneMetrics struct {
	// TTFTms is from the start of the stream to the first chunk frame sent.
	TTFTms int64 `json:"ttft_ms"`
	// TotalMs is from the start of the stream to the done frame.
	TotalMs int64 `json:"total_ms"`
	// TPS is output tokens per second of generation, rounded to 0.1.
	TPS float64 `json:"tps"`
	// Chunks counts chunk frames sent, each piece of a split chunk included.
	Chunks int `json:"chunks"`
}

// Done ends a successful answer. Stream.Finish fills RequestID and Metrics.
type Done struct {
	RequestID  string  `json:"requestId"`
	Tier       string  `json:"tier"`
	Degraded   bool    `json:"degraded"`
	Confidence float64 `json:"confidence"`
	Tokens     Tokens  `json:"tokens"`
	CostUSD    float64 `json:"costUsd"`
	// CacheSavedUSD is what the vendor's prompt cache saved: the cost at
	// the plain input price less CostUSD. Encoded only when not zero.
	CacheSavedUSD float64     `json:"cacheSavedUsd,omitempty"`
	Metrics       DoneMetrics `json:"metrics"`
	TraceID       string      `json:"traceId"`
	// CacheHit is encoded only when true.
	CacheHit bool `json:"cacheHit,omitempty"`
	// Continued is set when a fallback model finished the answer after its
	// first model failed mid-stream; Parts then names the tier of each part
	// of the text, in order. Both are encoded only when Continued is set.
	Continued bool           `json:"continued,omitempty"`
	Parts     [MaxParts]Part `json:"-"`
}

// MaxParts is the most parts an answer has: its first model's and one
// continuation.
const MaxParts = 2

// Part is a stretch of an answer's text written by one tier; Chars counts
// its Unicode code points.
type Part struct {
	Tier  string `json:"tier"`
	Chars int    `json:"chars"`
}

// partList is the parts in use, for the wire.
func (d Done) partList() []Part {
	var out []Part
	for _, p := range d.Parts {
		if p.Tier != "" {
			out = append(out, p)
		}
	}
	return out
}

// ErrorFrame ends a failed answer, also after chunks were sent.
type ErrorFrame struct {
	RequestID string
	// Code is stable and machine-readable, e.g. "rate_limited".
	Code string
	// Message is safe to show to users.
	Message string
	// RetryAfterSeconds is encoded only when positive.
	RetryAfterSeconds int
}

// Frame is any server frame; the field named by Type is set.
type Frame struct {
	Type  Type
	Chunk Chunk
	Done  Done
	Error ErrorFrame
	// Status is set for TypeStatus.
	Status StatusFrame
}

var heartbeatJSON = []byte(`{"type":"heartbeat"}`)

// AppendJSON appends the wire form of c to dst.
func (c Chunk) AppendJSON(dst []byte) []byte {
	return appendChunk(dst, c, c.Text)
}

// appendChunk encodes c with text in place of c.Text, so the stream can encode
// its byte buffer without converting it to a string.
func appendChunk[T ~string | ~[]byte](dst []byte, c Chunk, text T) []byte {
	dst = append(dst, `{"type":"chunk","requestId":`...)
	dst = appendJSONString(dst, c.RequestID)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(c.Index), 10)
	if c.Split {
		dst = append(dst, `,"subIndex":`...)
		dst = strconv.AppendInt(dst, int64(c.SubIndex), 10)
	}
	dst = append(dst, `,"text":`...)
	dst = appendJSONString(dst, text)
	return append(dst, '}')
}

// AppendJSON appends the wire form of e to dst.
func (e ErrorFrame) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"type":"error","requestId":`...)
	dst = appendJSONString(dst, e.RequestID)
	dst = append(dst, `,"code":`...)
	dst = appendJSONString(dst, e.Code)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, e.Message)
	if e.RetryAfterSeconds > 0 {
		dst = append(dst, `,"retryAfterSeconds":`...)
		dst = strconv.AppendInt(dst, int64(e.RetryAfterSeconds), 10)
	}
	return append(dst, '}')
}

// errNotFinite is returned for a done frame JSON cannot carry.
var errNotFinite = errors.New("stream: done frame: confidence, costUsd, cacheSavedUsd and tps must be finite")

// checkFinite refuses a done frame with a float JSON cannot carry.
func (d *Done) checkFinite() error {
	for _, f := range [...]float64{d.Confidence, d.CostUSD, d.CacheSavedUSD, d.Metrics.TPS} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return errNotFinite
		}
	}
	return nil
}

// AppendJSON appends the wire form of d to dst. It fails only when a float
// field is NaN or infinite.
func (d Done) AppendJSON(dst []byte) ([]byte, error) {
	if err := d.checkFinite(); err != nil {
		return dst, err
	}
	buf := bytes.NewBuffer(dst)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	wire := struct {
		Type Type `json:"type"`
		Done
		Parts []Part `json:"parts,omitempty"`
	}{Type: TypeDone, Done: d}
	if d.Continued {
		wire.Parts = d.partList()
	}
	if err := enc.Encode(wire); err != nil {
		return dst, fmt.Errorf("stream: done frame: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// AppendHeartbeat appends a heartbeat frame to dst.
func AppendHeartbeat(dst []byte) []byte { return append(dst, heartbeatJSON...) }

// AppendJSON appends the wire form of f to dst.
func (f Frame) AppendJSON(dst []byte) ([]byte, error) {
	switch f.Type {
	case TypeChunk:
		return f.Chunk.AppendJSON(dst), nil
	case TypeDone:
		return f.Done.AppendJSON(dst)
	case TypeError:
		return f.Error.AppendJSON(dst), nil
	case TypeHeartbeat:
		return AppendHeartbeat(dst), nil
	case TypeStatus:
		return f.Status.AppendJSON(dst), nil
	}
	return dst, fmt.Errorf("stream: unknown frame type %q", f.Type)
}

// wireFrame accepts every field of every frame type; pointers tell a
// missing field from a zero one.
type wireFrame struct {
	Type              Type        `json:"type"`
	RequestID         string      `json:"requestId"`
	Index             *int        `json:"index"`
	SubIndex          *int        `json:"subIndex"`
	Text              *string     `json:"text"`
	Tier              string      `json:"tier"`
	Degraded          bool        `json:"degraded"`
	Confidence        float64     `json:"confidence"`
	Tokens            Tokens      `json:"tokens"`
	CostUSD           float64     `json:"costUsd"`
	Metrics           DoneMetrics `json:"metrics"`
	TraceID           string      `json:"traceId"`
	CacheHit          bool        `json:"cacheHit"`
	Continued         bool        `json:"continued"`
	Parts             []Part      `json:"parts"`
	Code              string      `json:"code"`
	Message           string      `json:"message"`
	RetryAfterSeconds int         `json:"retryAfterSeconds"`
	State             string      `json:"state"`
	Attempt           int         `json:"attempt"`
	Of                int         `json:"of"`
	RetryInSeconds    int         `json:"retryInSeconds"`
}

// DecodeFrame parses one server frame. Unknown fields are ignored; a missing
// chunk index or text, a negative index, an error frame without a code or an
// unknown type is an error.
func DecodeFrame(b []byte) (Frame, error) {
	var w wireFrame
	if err := json.Unmarshal(b, &w); err != nil {
		return Frame{}, fmt.Errorf("stream: decode frame: %w", err)
	}
	switch w.Type {
	case TypeChunk:
		if w.Index == nil || w.Text == nil {
			return Frame{}, errors.New("stream: decode frame: chunk needs index and text")
		}
		c := Chunk{RequestID: w.RequestID, Index: *w.Index, Text: *w.Text}
		if w.SubIndex != nil {
			c.Split, c.SubIndex = true, *w.SubIndex
		}
		if c.Index < 0 || c.SubIndex < 0 {
			return Frame{}, errors.New("stream: decode frame: negative chunk index")
		}
		return Frame{Type: TypeChunk, Chunk: c}, nil
	case TypeDone:
		d := Done{
			RequestID: w.RequestID, Tier: w.Tier, Degraded: w.Degraded, Confidence: w.Confidence,
			Tokens: w.Tokens, CostUSD: w.CostUSD, Metrics: w.Metrics, TraceID: w.TraceID, CacheHit: w.CacheHit,
			Continued: w.Continued,
		}
		if d.Continued {
			n := 0
			for _, p := range w.Parts {
				if n < MaxParts && p.Tier != "" {
					d.Parts[n] = Part{Tier: p.Tier, Chars: max(p.Chars, 0)}
					n++
				}
			}
		}
		return Frame{Type: TypeDone, Done: d}, nil
	case TypeError:
		if w.Code == "" {
			return Frame{}, errors.New("stream: decode frame: error frame needs a code")
		}
		e := ErrorFrame{RequestID: w.RequestID, Code: w.Code, Message: w.Message}
		if w.RetryAfterSeconds > 0 {
			e.RetryAfterSeconds = w.RetryAfterSeconds
		}
		return Frame{Type: TypeError, Error: e}, nil
	case TypeHeartbeat:
		return Frame{Type: TypeHeartbeat}, nil
	case TypeStatus:
		if w.State == "" {
			return Frame{}, errors.New("stream: decode frame: status frame needs a state")
		}
		return Frame{Type: TypeStatus, Status: StatusFrame{RequestID: w.RequestID, State: w.State,
			Attempt: max(w.Attempt, 0), Of: max(w.Of, 0), RetryInSeconds: max(w.RetryInSeconds, 0), Message: w.Message}}, nil
	}
	return Frame{}, fmt.Errorf("stream: decode frame: unknown type %q", w.Type)
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s quoted as a JSON string, for the front doors
// that write their vendor's frames by hand; see appendJSONString.
func AppendJSONString[T ~string | ~[]byte](dst []byte, s T) []byte { return appendJSONString(dst, s) }

// appendJSONString quotes s as encoding/json does with HTML escaping off:
// non-ASCII stays UTF-8, each invalid byte becomes \ufffd, and U+2028/U+2029
// are escaped because JavaScript source cannot hold them raw.
func appendJSONString[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// AppendMarshaledString appends s quoted exactly as encoding/json quotes a
// string, for the front doors whose vendor events encoding/json wrote
// before they were written by hand, so their bytes stay the same. It
// differs from AppendJSONString in writing \b and \f short, and with html
// (json.Marshal's default) in escaping <, > and & too.
func AppendMarshaledString[T ~string | ~[]byte](dst []byte, s T, html bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (!html || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// chunkOverhead is the length of chunk frame c's JSON less its quoted text,
// ridLen being the length of c.RequestID quoted.
func chunkOverhead(c Chunk, ridLen int) int {
	n := len(`{"type":"chunk","requestId":`) + ridLen + len(`,"index":`) + decimalLen(c.Index) + len(`,"text":`) + len(`}`)
	if c.Split {
		n += len(`,"subIndex":`) + decimalLen(c.SubIndex)
	}
	return n
}

// decimalLen is the number of characters of n in decimal.
func decimalLen(n int) int {
	l := 1
	if n < 0 {
		l++
	}
	for n <= -10 || n >= 10 {
		n /= 10
		l++
	}
	return l
}

// jsonStringLen is the length of s quoted by appendJSONString.
func jsonStringLen[T ~string | ~[]byte](s T) int {
	n := 2
	for i := 0; i < len(s); {
		out, size := escapedLen(s[i:])
		n += out
		i += size
	}
	return n
}

// escapedLen is how many bytes the first character of s takes once quoted by
// appendJSONString, and how many bytes of s it consumes.
func escapedLen[T ~string | ~[]byte](s T) (out, size int) {
	b := s[0]
	if b < utf8.RuneSelf {
		switch {
		case b == '"' || b == '\\' || b == '\n' || b == '\r' || b == '\t':
			return 2, 1
		case b < 0x20:
			return 6, 1
		}
		return 1, 1
	}
	r, size := decodeRune(s)
	switch {
	case r == utf8.RuneError && size == 1:
		return 6, 1
	case r == '\u2028' || r == '\u2029':
		return 6, size
	}
	return size, size
}

// fitPrefix returns the length of the longest prefix of text whose quoted
// form fits in budget bytes (quotes included), never ending inside a
// character, and at least one character so a split always progresses.
func fitPrefix(text []byte, budget int) int {
	used, n := 2, 0
	for n < len(text) {
		out, size := escapedLen(text[n:])
		if used+out > budget && n > 0 {
			break
		}
		used += out
		n += size
	}
	return n
}

func decodeRune[T ~string | ~[]byte](s T) (rune, int) {
	switch v := any(s).(type) {
	case string:
		return utf8.DecodeRuneInString(v)
	case []byte:
		return utf8.DecodeRune(v)
	}
	var buf [utf8.UTFMax]byte
	n := copy(buf[:], s[:min(len(s), utf8.UTFMax)])
	return utf8.DecodeRune(buf[:n])
}
