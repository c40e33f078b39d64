package cache

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// closedPortClient returns a client for a port nothing listens on.
func closedPortClient(t *testing.T) *redis.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRedisDownFailsFastThenStopsCalling(t *testing.T) {
	ctx := context.Background()
	r := NewRedis(closedPortClient(t), "fmgate-test:down:", DefaultConfig())
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }

	for i := range 3 {
		start := time.Now()
		_, ok, err := r.Get(ctx, "k")
		if err == nil || ok || errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d: ok %v, err %v; want a connection error", i, ok, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("call %d took %v: a Redis outage must not stall a turn", i, d)
		}
	}
	if err := r.Set(ctx, "k", "v"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after 3 failures Set = %v, want ErrUnavailable without a call", err)
	}
	now = now.Add(5 * time.Second)
	if _, _, err := r.Get(ctx, "k"); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("after cooldown Get = %v, want one probe reaching the network", err)
	}
	if _, _, err := r.Get(ctx, "k"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("after a failed probe Get = %v, want ErrUnavailable", err)
	}
}

func TestDecodeRejectsMalformedValues(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		give []any
	}{
		{"no stamp", []any{"hello", "1700000000", "0"}},
		{"bad stamp", []any{"x:hello", "1700000000", "0"}},
		{"short reply", []any{"1:hello"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decode(tt.give, now); err == nil {
				t.Error("decode accepted a malformed value")
			}
		})
	}
	e, err := decode([]any{"1700000000000:a:b", "1700000001", "500000"}, now)
	if err != nil || e.Text != "a:b" || now.Sub(e.StoredAt) != 1500*time.Millisecond {
		t.Errorf("decode = %+v, %v; want text a:b aged 1.5s", e, err)
	}
}
