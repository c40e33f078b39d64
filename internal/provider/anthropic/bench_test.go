package anthropic_test

import (
	"context"
	"testing"
)

// BenchmarkStreamThroughTheWire is one streamed answer through
// anthropic-sdk-go from the simulator on Anthropic's wire (loopback HTTP/1.1,
// the simulator at full speed, in the same process): the adapter's, the
// SDK's and the wire's cost per simulated answer, simulator included.
func BenchmarkStreamThroughTheWire(b *testing.B) {
	_, url := upstreamB(b)
	p := newProviderB(b, url)
	req := request("Recommend a fantasy manga")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Stream(ctx, req, func(string) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
