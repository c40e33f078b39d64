package sim

import (
	"context"
	"testing"
)

// BenchmarkStream is one zero-latency Stream call (no TTFT, unlimited pace):
// the simulator's own overhead per call, dominated by composing the answer
// and tokenising input and output.
func BenchmarkStream(b *testing.B) {
	for _, msg := range []string{"おすすめの漫画を教えてください", "How long does shipping take?"} {
		b.Run(msg, func(b *testing.B) {
			s, _ := newSim(b, 1, map[string]Settings{"m": instant})
			req := userRequest("m", msg)
			emit := func(string) error { return nil }
			CountTokens("") // load the tokenizer outside the timing
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Stream(context.Background(), req, emit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkCountTokens(b *testing.B) {
	text := "鬼滅の刃と薬屋のひとりごと、葬送のフリーレンは全巻在庫がございます。Standard shipping takes 3-5 business days within Japan."
	CountTokens(text)
	b.ReportAllocs()
	for b.Loop() {
		CountTokens(text)
	}
}
