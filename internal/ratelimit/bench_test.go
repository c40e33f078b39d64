package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

// BenchmarkMemoryAllow is the hot path: one bucket, existing key.
func BenchmarkMemoryAllow(b *testing.B) {
	s := NewMemoryStore(nil)
	ctx := context.Background()
	l := PerSecond(1_000_000, 1_000_000)
	s.Allow(ctx, "user:42", l, 1)
	b.ReportAllocs()
	for b.Loop() {
		s.Allow(ctx, "user:42", l, 1)
	}
}

func BenchmarkMemoryAllowParallel(b *testing.B) {
	s := NewMemoryStore(nil)
	ctx := context.Background()
	l := PerSecond(1_000_000, 1_000_000)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Allow(ctx, keys[i&1023], l, 1)
			i++
		}
	})
}

// BenchmarkLimiterCheckMemory is a full MangaAssist decision (global, route
// and four per-user buckets) in memory.
func BenchmarkLimiterCheckMemory(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Global.Rate, cfg.Global.Burst = 1_000_000, 1_000_000
	cfg.Routes["sendMessage"] = Rule{Limit: PerSecond(1_000_000, 1_000_000)}
	cfg.User = UserRules{PerSecond: Rule{Limit: PerSecond(1_000_000, 1_000_000)}, PerDay: Rule{Limit: PerSecond(1_000_000, 1_000_000)}}
	l, _ := New(cfg, nil, nil)
	req := Request{UserID: "u42", Route: "sendMessage"}
	b.ReportAllocs()
	for b.Loop() {
		l.Check(context.Background(), req)
	}
}

// BenchmarkLimiterCheckRedis is the same decision in one Redis round trip.
func BenchmarkLimiterCheckRedis(b *testing.B) {
	c, prefix := redistest.Client(b)
	cfg := DefaultConfig()
	cfg.Global.Rate, cfg.Global.Burst = 1_000_000, 1_000_000
	cfg.Routes["sendMessage"] = Rule{Limit: PerSecond(1_000_000, 1_000_000)}
	cfg.User = UserRules{PerSecond: Rule{Limit: PerSecond(1_000_000, 1_000_000)}, PerDay: Rule{Limit: PerSecond(1_000_000, 1_000_000)}}
	l, _ := New(cfg, NewRedisStore(c, prefix, time.Second), nil)
	req := Request{UserID: "u42", Route: "sendMessage"}
	b.ReportAllocs()
	for b.Loop() {
		res, err := l.Check(context.Background(), req)
		if err != nil || res.Degraded {
			b.Fatalf("check: %+v %v", res, err)
		}
	}
}
