package quota

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

func TestRedisConformance(t *testing.T) {
	runConformance(t, func(t *testing.T, cfg Config, clk *fakeClock) Ledger {
		c, prefix := redistest.Client(t)
		cfg.StoreTimeout = 2e9 // the race detector slows the 200-reserver test
		l, err := NewRedis(c, prefix, cfg)
		if err != nil {
			t.Fatal(err)
		}
		l.clock = clk.Now
		return l
	})
}

// TestRedisUsesServerTime runs without the test clock: instances agree on
// time because the script reads Redis TIME.
func TestRedisUsesServerTime(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	cfg := testConfig()
	a, err := NewRedis(c, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewRedis(c, prefix, cfg) // a second instance of the fleet
	r, err := a.Reserve(ctx, "m", P0, 700)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Settle(ctx, 600); err != nil {
		t.Fatal(err)
	}
	if err := a.SetCeiling(ctx, "m", Ceiling{TPM: 650, RPM: 100}); err != nil {
		t.Fatal(err)
	}
	_, err = b.Reserve(ctx, "m", P0, 100)
	var se *SaturatedError
	if !errors.As(err, &se) || se.RetryAfter <= 0 || se.RetryAfter > Window {
		t.Fatalf("other instance: err = %v, want saturated by the shared cut", err)
	}
	s, err := b.Saturation(ctx, "m")
	if err != nil || s.TokensUsed != 600 || s.TPMLimit != 650 {
		t.Fatalf("snapshot = %+v, %v", s, err)
	}
}

func TestRedisErrorsDoNotHang(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: time.Second})
	defer c.Close()
	cfg := testConfig()
	cfg.StoreTimeout = 50 * time.Millisecond
	l, _ := NewRedis(c, "x:", cfg)
	start := time.Now()
	_, err := l.Reserve(context.Background(), "m", P0, 1)
	if err == nil || errors.Is(err, ErrSaturated) {
		t.Fatalf("err = %v, want a store error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s", d)
	}
}
