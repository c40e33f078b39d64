package quota

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redisbatch"
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

// TestRedisConformanceBatched runs the suite the way a fleet turn calls the
// ledger: inside a Redis batch (redisbatch), where settlements and releases
// are queued and sent ahead of the next call.
func TestRedisConformanceBatched(t *testing.T) {
	runConformance(t, func(t *testing.T, cfg Config, clk *fakeClock) Ledger {
		c, prefix := redistest.Client(t)
		c.AddHook(redisbatch.Hook())
		cfg.StoreTimeout = 2e9
		l, err := NewRedis(c, prefix, cfg)
		if err != nil {
			t.Fatal(err)
		}
		l.clock = clk.Now
		b := redisbatch.New(c, 2*time.Second, nil)
		t.Cleanup(func() { b.Close(context.Background()) })
		return batchedLedger{l, b}
	})
}

// batchedLedger puts every call of a Ledger, and of its reservations, in
// one batch.
type batchedLedger struct {
	Ledger
	b *redisbatch.Batch
}

func (x batchedLedger) Reserve(ctx context.Context, model string, p Priority, tokens int) (Reservation, error) {
	r, err := x.Ledger.Reserve(redisbatch.With(ctx, x.b), model, p, tokens)
	if err != nil {
		return nil, err
	}
	return batchedReservation{r, x.b}, nil
}

func (x batchedLedger) Saturation(ctx context.Context, model string) (Snapshot, error) {
	return x.Ledger.Saturation(redisbatch.With(ctx, x.b), model)
}

func (x batchedLedger) SetCeiling(ctx context.Context, model string, c Ceiling) error {
	return x.Ledger.SetCeiling(redisbatch.With(ctx, x.b), model, c)
}

func (x batchedLedger) Configure(cfg Config) error { return x.Ledger.(configurer).Configure(cfg) }

func (x batchedLedger) Ceilings(ctx context.Context) (map[string]Ceiling, error) {
	return x.Ledger.Ceilings(redisbatch.With(ctx, x.b))
}

type batchedReservation struct {
	Reservation
	b *redisbatch.Batch
}

func (r batchedReservation) Settle(ctx context.Context, n int) error {
	return r.Reservation.Settle(redisbatch.With(ctx, r.b), n)
}

func (r batchedReservation) Release(ctx context.Context) error {
	return r.Reservation.Release(redisbatch.With(ctx, r.b))
}

// TestRedisCountsAnEarlierLayoutsWindow: during a rolling upgrade, the
// tokens an instance of the layout before the window's totals settles (its
// script, kept in testdata, writing quota:{model}:win) count against the
// ceiling for the upgraded instances too.
func TestRedisCountsAnEarlierLayoutsWindow(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	src, err := os.ReadFile("testdata/ledger-before-totals.lua")
	if err != nil {
		t.Fatal(err)
	}
	before := redis.NewScript(string(src))
	l, err := NewRedis(c, prefix, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	base := prefix + "quota:{m}:" // the earlier layout's keys, as it named them
	oldKeys := []string{base + "win", base + "held", base + "exp", base + "agg", base + "ceil"}
	for _, op := range []string{"reserve", "settle"} {
		res, err := before.Run(ctx, c, oldKeys, l.args("m", op, "old-instance-call", P0, 600)...).Slice()
		if err != nil || len(res) == 0 || res[0] != int64(1) {
			t.Fatalf("the earlier layout's %s: %v, %v", op, res, err)
		}
	}
	s, err := l.Saturation(ctx, "m")
	if err != nil || s.TokensUsed != 600 || s.RequestsUsed != 1 {
		t.Fatalf("snapshot = %+v, %v; want the 600 tokens the earlier layout settled", s, err)
	}
	_, err = l.Reserve(ctx, "m", P0, 500)
	var se *SaturatedError
	if !errors.As(err, &se) || se.RetryAfter <= 0 || se.RetryAfter > Window {
		t.Fatalf("err = %v, want saturated by the earlier layout's tokens, fitting again within the window", err)
	}
	r, err := l.Reserve(ctx, "m", P0, 300)
	if err != nil {
		t.Fatalf("300 more should fit beside the 600: %v", err)
	}
	if err := r.Settle(ctx, 300); err != nil {
		t.Fatal(err)
	}
	if s, _ := l.Saturation(ctx, "m"); s.TokensUsed != 900 {
		t.Fatalf("snapshot = %+v, want 900 tokens from both layouts", s)
	}
}
