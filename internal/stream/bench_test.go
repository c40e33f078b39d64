package stream

import (
	"context"
	"strings"
	"testing"
)

// nopSender accepts every frame at once.
type nopSender struct{}

func (nopSender) Send(context.Context, []byte) error { return nil }

// nopFrameSender accepts every frame at once, as values.
type nopFrameSender struct{ nopSender }

func (nopFrameSender) SendFrame(context.Context, *Frame, []byte) error { return nil }

// BenchmarkWrite measures the aggregator's cost per model delta: one op is
// one Write of a typical Japanese delta, with chunks flushed by time (real
// clock) and size and sent to a no-op Sender by the stream's goroutine.
func BenchmarkWrite(b *testing.B) {
	const delta = "おすすめの漫画" // 21 bytes, a few tokens
	s := New(context.Background(), nopSender{}, "req-0123456789", DefaultConfig(), SystemClock{})
	defer s.Close()
	b.SetBytes(int64(len(delta)))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Write(delta); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := s.Finish(Done{}); err != nil {
		b.Fatal(err)
	}
	m := s.Metrics()
	b.ReportMetric(m.CompressionRatio, "deltas/frame")
}

// BenchmarkStream is one whole answer: New, 200 deltas, Finish, Close,
// sent as the contract's JSON frames.
func BenchmarkStream(b *testing.B) { benchmarkStream(b, nopSender{}) }

// BenchmarkStreamFrames is BenchmarkStream for a FrameSender, which takes
// the frames as values.
func BenchmarkStreamFrames(b *testing.B) { benchmarkStream(b, nopFrameSender{}) }

func benchmarkStream(b *testing.B, sender Sender) {
	deltas := strings.Fields(strings.Repeat("ワンピース の 最新巻 は 第 108 巻 です 。 ", 30))[:200]
	b.ReportAllocs()
	for b.Loop() {
		s := New(context.Background(), sender, "req-0123456789", DefaultConfig(), SystemClock{})
		for _, d := range deltas {
			if err := s.Write(d); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Finish(Done{Tier: "sonnet", Tokens: Tokens{Input: 100, Output: 200}}); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkChunkAppendJSON is the frame encoder alone on a 4 KB chunk.
func BenchmarkChunkAppendJSON(b *testing.B) {
	c := Chunk{RequestID: "req-0123456789", Index: 12, Text: strings.Repeat("漫画の推薦です。", 171)}
	buf := make([]byte, 0, 8192)
	b.SetBytes(int64(len(c.Text)))
	b.ReportAllocs()
	for b.Loop() {
		buf = c.AppendJSON(buf[:0])
	}
}

// BenchmarkDeliver is the stream's cost to hand one frame to its Sender,
// the send deadline included (called here while the stream's goroutine
// waits for work, which stands in for it). The sender takes frames as
// values, so no encoding is measured.
func BenchmarkDeliver(b *testing.B) {
	s := New(context.Background(), nopFrameSender{}, "req-0123456789", DefaultConfig(), SystemClock{})
	defer s.Close()
	f := &Frame{Type: TypeChunk, Chunk: Chunk{RequestID: "req-0123456789"}}
	text := []byte("tok ")
	b.ReportAllocs()
	for b.Loop() {
		if err := s.deliver(f, text); err != nil {
			b.Fatal(err)
		}
	}
}
