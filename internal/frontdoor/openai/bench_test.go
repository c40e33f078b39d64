package openai

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/stream"
	"github.com/fmgate/fmgate/internal/vision"
)

var benchBody = []byte(`{"model":"sonnet","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,` +
	`"messages":[{"role":"system","content":"Answer briefly."},{"role":"user","content":"hello"},` +
	`{"role":"assistant","content":"Hello! How can I help?"},{"role":"user","content":"おすすめのファンタジー漫画を教えて"}]}`)

func BenchmarkDecodeChat(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		if _, e := DecodeChat(benchBody, vision.Limits{}); e != nil {
			b.Fatal(e)
		}
	}
}

// longBody is a 41-message conversation, about 26 KB.
var longBody = func() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"sonnet","stream":true,"max_tokens":256,"messages":[{"role":"system","content":"Answer briefly."}`)
	for i := range 41 {
		role := map[bool]string{true: "user", false: "assistant"}[i%2 == 0]
		b.WriteString(`,{"role":"` + role + `","content":"` + strings.Repeat("おすすめのファンタジー漫画を教えて。", 10) + `"}`)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}()

// BenchmarkReadChat is reading a request body and decoding it: into a
// buffer of the door's pool, as the door reads it, or into a new one, as
// ReadChat (the simulator's) reads it; a four-message request and a
// 41-message one.
func BenchmarkReadChat(b *testing.B) {
	for _, body := range []struct {
		name string
		b    []byte
	}{{"short", benchBody}, {"long", longBody}} {
		rd := bytes.NewReader(nil)
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Body, r.ContentLength = io.NopCloser(rd), int64(len(body.b))
		b.Run(body.name+"/pooled", func(b *testing.B) {
			var d door
			b.ReportAllocs()
			b.SetBytes(int64(len(body.b)))
			for b.Loop() {
				rd.Reset(body.b)
				buf := d.bufs.get()
				_, e := readChat(r, 0, vision.Limits{}, buf)
				d.bufs.put(buf)
				if e != nil {
					b.Fatal(e)
				}
			}
		})
		b.Run(body.name+"/unpooled", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body.b)))
			for b.Loop() {
				rd.Reset(body.b)
				if _, e := ReadChat(r, 0, vision.Limits{}); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

// BenchmarkWriteCompletion is encoding a 2 KB chat.completion answer into
// the response: in a buffer of the door's pool, as the door writes it, or
// in one allocated for it.
func BenchmarkWriteCompletion(b *testing.B) {
	c := Completion{ID: "chatcmpl-0123456789abcdef01234567", Created: 1795558911, Model: "claude-sonnet-4",
		Text: strings.Repeat(chunkText, 16), FinishReason: FinishStop, Usage: Usage{PromptTokens: 120, CompletionTokens: 400}}
	w := &discard{h: http.Header{}}
	b.Run("pooled", func(b *testing.B) {
		var d door
		b.ReportAllocs()
		for b.Loop() {
			d.writeJSON(w, c.AppendJSON)
		}
	})
	b.Run("allocated", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = w.Write(append(c.AppendJSON(make([]byte, 0, 512+len(c.Text))), '\n'))
		}
	})
}

func BenchmarkAppendDelta(b *testing.B) {
	meta := chunkMeta{id: "chatcmpl-0123456789abcdef01234567", created: 1795558911, model: "anthropic.claude-3-sonnet-20240229-v1:0", includeUsage: true}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = meta.appendDelta(buf[:0], "『進撃の巨人』（ダークファンタジー、全34巻完結）", false)
	}
}

// discard is a connection that takes every write at once: what is left is
// the door's own cost.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// chunkText is one aggregation window of a streamed Japanese answer.
const chunkText = "『進撃の巨人』（ダークファンタジー、全34巻完結）は、壁に囲まれた街で巨人と戦う物語です。"

// BenchmarkStreamChunk is the door's cost per chunk of a streamed answer:
// one op takes one chunk from the stream layer (the frame as a value and
// its text, as the stream hands it to a FrameSender) to the vendor's event
// written and flushed on the connection.
func BenchmarkStreamChunk(b *testing.B) {
	ctx := context.Background()
	text := []byte(chunkText)
	b.Run("chat", func(b *testing.B) {
		meta := chunkMeta{id: "chatcmpl-0123456789abcdef01234567", created: 1795558911, model: "anthropic.claude-3-sonnet-20240229-v1:0", includeUsage: true}
		tx := &transcoder{ev: newEvents(&discard{h: http.Header{}}, meta), tier: "sonnet"}
		f := &stream.Frame{Type: stream.TypeChunk, Chunk: stream.Chunk{RequestID: "0123456789abcdef01234567"}}
		b.ReportAllocs()
		for b.Loop() {
			if err := tx.SendFrame(ctx, f, text); err != nil {
				b.Fatal(err)
			}
			f.Chunk.Index++
		}
	})
	b.Run("responses", func(b *testing.B) {
		w := &discard{h: http.Header{}}
		tx := &respTranscoder{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 1024), tier: "sonnet",
			st: &ResponseStream{R: &Response{ID: "resp_0123456789abcdef01234567", CreatedAt: 1795558911, Model: "claude-sonnet-4", Request: &Responses{}}}}
		f := &stream.Frame{Type: stream.TypeChunk, Chunk: stream.Chunk{RequestID: "0123456789abcdef01234567"}}
		b.ReportAllocs()
		for b.Loop() {
			tx.st.R.Text = "" // the answer so far is kept for the end; not this benchmark's subject
			if err := tx.SendFrame(ctx, f, text); err != nil {
				b.Fatal(err)
			}
			f.Chunk.Index++
		}
	})
}
