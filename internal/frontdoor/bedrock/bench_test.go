package bedrock

import (
	"context"
	"net/http"
	"testing"

	"github.com/fmgate/fmgate/internal/stream"
)

// discard is a connection that takes every write at once: what is left is
// the door's own cost.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// BenchmarkStreamChunk is the door's cost per chunk of a streamed answer:
// one op takes one chunk from the stream layer (the frame as a value and
// its text, as the stream hands it to a FrameSender) to the
// contentBlockDelta event written and flushed on the connection.
func BenchmarkStreamChunk(b *testing.B) {
	text := []byte("『進撃の巨人』（ダークファンタジー、全34巻完結）は、壁に囲まれた街で巨人と戦う物語です。")
	ctx := context.Background()
	w := &discard{h: http.Header{}}
	es := &eventSender{w: w, ew: NewEventWriter(w), tier: "sonnet"}
	es.ew.Hold() // as converseStream does
	f := &stream.Frame{Type: stream.TypeChunk, Chunk: stream.Chunk{RequestID: "0123456789abcdef01234567"}}
	b.ReportAllocs()
	for b.Loop() {
		if err := es.SendFrame(ctx, f, text); err != nil {
			b.Fatal(err)
		}
		f.Chunk.Index++
	}
}
