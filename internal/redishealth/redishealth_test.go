package redishealth_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/redishealth"
	"github.com/fmgate/fmgate/internal/redistest"
)

// TestHealthNoticesRedisBackWithinSeconds: a Redis that returns is in use
// again about a second later, without waiting out the open period (15 s)
// and without a caller's command.
func TestHealthNoticesRedisBackWithinSeconds(t *testing.T) {
	rs := redistest.Start(t)
	h := redishealth.New(breaker.Defaults()["redis"], nil, nil)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: 1, DialTimeout: 300 * time.Millisecond})
	defer c.Close()
	h.Watch(c)
	defer h.Close()
	ctx := context.Background()

	rs.Kill()
	for i := 0; h.Healthy(); i++ {
		if i > 20 {
			t.Fatal("a killed Redis is still healthy after 20 commands")
		}
		_ = c.Get(ctx, "k").Err()
	}
	time.Sleep(2500 * time.Millisecond) // a few PINGs find it still down
	if h.Healthy() {
		t.Fatal("healthy while Redis is still down")
	}
	back := time.Now()
	rs.Restart()
	for !h.Healthy() {
		if time.Since(back) > 5*time.Second {
			t.Fatalf("Redis back for 5 s, health still %+v", h.Snapshot(ctx))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("in use again %v after Redis was restarted", time.Since(back).Round(time.Millisecond))
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}

func TestHealthFailsFastWhileRedisIsDownAndRecovers(t *testing.T) {
	rs := redistest.Start(t)
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var (
		mu      sync.Mutex
		changes []bool
	)
	cfg := breaker.Defaults()["redis"]
	h := redishealth.New(cfg, now, func(up bool) { mu.Lock(); changes = append(changes, up); mu.Unlock() })
	h.WatchEvery = time.Hour // this test follows the open period; see TestHealthNoticesRedisBackWithinSeconds
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: 1, DialTimeout: 300 * time.Millisecond})
	defer c.Close()
	h.Watch(c)
	defer h.Close()
	ctx := context.Background()

	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) || !h.Healthy() {
		t.Fatalf("a missing key (%v) must not count against Redis's health", err)
	}

	rs.Kill()
	failures := 0
	for h.Healthy() {
		if failures++; failures > cfg.FailureThreshold {
			t.Fatalf("still healthy after %d failed commands; threshold %d", failures, cfg.FailureThreshold)
		}
		if err := c.Get(ctx, "k").Err(); err == nil || errors.Is(err, redishealth.ErrDown) {
			t.Fatalf("command %d to a killed Redis: %v, want a network error", failures, err)
		}
	}
	// Down: commands fail at once, and say why in words, matching both the
	// health error and the breaker's "state unavailable".
	err := c.Get(ctx, "k").Err()
	if !errors.Is(err, redishealth.ErrDown) || !errors.Is(err, breaker.ErrUnavailable) || !redishealth.IsOutage(err) {
		t.Fatalf("with Redis down: %v; want ErrDown", err)
	}
	pipeErr := func() error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { p.Get(ctx, "k"); p.Get(ctx, "j"); return nil })
		return err
	}()
	if !errors.Is(pipeErr, redishealth.ErrDown) {
		t.Fatalf("pipeline with Redis down: %v; want ErrDown", pipeErr)
	}

	// Back: after the open period the next command starts the recovery
	// probes (PINGs in the background, on fresh connections) and is itself
	// refused at once; the stages close the breaker.
	rs.Restart()
	offset.Add(int64(cfg.OpenTimeout + time.Second))
	if err := c.Set(ctx, "k", "again", 0).Err(); !errors.Is(err, redishealth.ErrDown) {
		t.Fatalf("the command that starts the probes: %v; want ErrDown, not a wait", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !h.Healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("Redis back, health still %+v after 5s", h.Snapshot(ctx))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Set(ctx, "k", "again", 0).Err(); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0] || !changes[1] {
		t.Fatalf("health changes %v; want [false true]", changes)
	}
}

func TestIsOutage(t *testing.T) {
	tests := []struct {
		name string
		give error
		want bool
	}{
		{"nil", nil, false},
		{"missing key", redis.Nil, false},
		{"deadline", context.DeadlineExceeded, true},
		{"down", redishealth.ErrDown, true},
		{"other", errors.New("dial tcp: connection refused"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redishealth.IsOutage(tt.give); got != tt.want {
				t.Errorf("IsOutage(%v) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

// A Redis that is only busy — every pooled connection taken, commands out
// of time waiting for one — is not down: a PING on a connection of the
// health's own answers, and shared state stays in use.
func TestABusyPoolIsNotAnOutage(t *testing.T) {
	rs := redistest.Start(t)
	h := redishealth.New(breaker.Defaults()["redis"], nil, nil)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 1, PoolTimeout: 20 * time.Millisecond, ContextTimeoutEnabled: true})
	defer c.Close()
	h.Watch(c)
	defer h.Close()
	ctx := context.Background()

	held := make(chan struct{})
	go func() {
		defer close(held)
		_ = c.BLPop(ctx, 1500*time.Millisecond, "nothing-comes").Err() // takes the pool's one connection
	}()
	time.Sleep(100 * time.Millisecond)
	timeouts := 0
	for range 40 {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		err := c.Get(cctx, "k").Err()
		cancel()
		if errors.Is(err, redishealth.ErrDown) {
			t.Fatalf("declared down after %d commands that waited for a busy pool", timeouts)
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			timeouts++
		}
		time.Sleep(5 * time.Millisecond)
	}
	if timeouts < 20 {
		t.Fatalf("only %d of 40 commands ran out of time: the pool was not busy, the test proves nothing", timeouts)
	}
	<-held
	if !h.Healthy() {
		t.Fatalf("health %+v after the pool was only busy", h.Snapshot(ctx))
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("after the busy spell: %v", err)
	}
}

// A Redis that stops answering altogether (frozen: connections open, no
// replies) is declared down by the first slow command's PING, without
// waiting for the breaker's threshold of timeouts.
func TestAFrozenRedisIsDeclaredDownByOnePing(t *testing.T) {
	rs := redistest.Start(t)
	h := redishealth.New(breaker.Defaults()["redis"], nil, nil)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: 0, ContextTimeoutEnabled: true})
	defer c.Close()
	h.Watch(c)
	defer h.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rs.Freeze()
	defer rs.Thaw()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := c.Get(cctx, "k").Err()
	cancel()
	if err == nil {
		t.Fatal("a frozen Redis answered")
	}
	deadline := time.Now().Add(redishealth.ProbeTimeout + 2*time.Second)
	for h.Healthy() {
		if time.Now().After(deadline) {
			t.Fatalf("one command timed out against a frozen Redis; health still %+v", h.Snapshot(ctx))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redishealth.ErrDown) {
		t.Fatalf("with Redis frozen and declared down: %v; want ErrDown at once", err)
	}
}
