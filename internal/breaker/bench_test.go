package breaker

import (
	"context"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

func BenchmarkMemoryAllowDone(b *testing.B) {
	br := NewMemory("sonnet", DefaultConfig(), time.Now)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := br.Allow(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.Done(ctx, true)
	}
}

func BenchmarkMemoryAllowDoneParallel(b *testing.B) {
	br := NewMemory("sonnet", DefaultConfig(), time.Now)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := br.Allow(ctx)
			if err != nil {
				b.Fatal(err)
			}
			p.Done(ctx, true)
		}
	})
}

func BenchmarkRedisAllowDone(b *testing.B) {
	client, prefix := redistest.Client(b)
	br := NewRedis(client, prefix, "sonnet", DefaultConfig())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := br.Allow(ctx)
		if err != nil {
			b.Fatal(err)
		}
		p.Done(ctx, true)
	}
}
