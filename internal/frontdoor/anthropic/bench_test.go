package anthropic

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
// one op takes one chunk from the stream layer (its contract frame, as the
// stream encodes it) to the content_block_delta event written and flushed
// on the connection.
func BenchmarkStreamChunk(b *testing.B) {
	const text = "『進撃の巨人』（ダークファンタジー、全34巻完結）は、壁に囲まれた街で巨人と戦う物語です。"
	ctx := context.Background()
	s := &sender{ev: NewEvents(&discard{h: http.Header{}}), id: "msg_0123456789abcdef01234567", model: "claude-sonnet-4", tier: "sonnet"}
	frame := stream.Chunk{RequestID: "r", Text: "open the text block"}.AppendJSON(nil)
	if err := s.Send(ctx, frame); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 1
	for b.Loop() {
		frame = stream.Chunk{RequestID: "msg_0123456789abcdef01234567", Index: i, Text: text}.AppendJSON(frame[:0])
		if err := s.Send(ctx, frame); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
