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
// one op takes one chunk from the stream layer (its contract frame, as the
// stream encodes it) to the contentBlockDelta event written and flushed on
// the connection.
func BenchmarkStreamChunk(b *testing.B) {
	const text = "『進撃の巨人』（ダークファンタジー、全34巻完結）は、壁に囲まれた街で巨人と戦う物語です。"
	ctx := context.Background()
	w := &discard{h: http.Header{}}
	es := &eventSender{w: w, ew: NewEventWriter(w), tier: "sonnet"}
	frame := make([]byte, 0, 512)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		frame = stream.Chunk{RequestID: "0123456789abcdef01234567", Index: i, Text: text}.AppendJSON(frame[:0])
		if err := es.Send(ctx, frame); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
