package breaker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestRedisConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) harness {
		client, prefix := redistest.Client(t)
		// The race test queues 1,000 scripts on a small pool; the timeout
		// is about Redis health, not this test's throughput.
		return harness{
			factory: RedisFactory(client, prefix, 10*time.Second),
			advance: func(d time.Duration) { time.Sleep(d + 2*time.Millisecond) },
		}
	})
}

func TestRedisUnreachableFailsOpen(t *testing.T) {
	client := redis.NewClient(&redis.Options{
		Addr:        "127.0.0.1:1", // nothing listens on port 1
		DialTimeout: 100 * time.Millisecond,
		MaxRetries:  -1,
	})
	defer client.Close()
	b := NewRedis(client, "fmgate-test:unreachable:", "sonnet", DefaultConfig())

	start := time.Now()
	p, err := b.Allow(context.Background())
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOpen) {
		t.Fatalf("Allow = %v, want ErrUnavailable and not ErrOpen", err)
	}
	if p == nil {
		t.Fatal("Allow returned a nil Permit")
	}
	p.Done(context.Background(), false) // must not panic or block
	if _, err := b.Snapshot(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Snapshot = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("calls against a dead Redis took %s", d)
	}

	s := NewSet(RedisFactory(client, "fmgate-test:unreachable:", 0), map[string]Config{"haiku": DefaultConfig()})
	if snap := s.Snapshots(context.Background())["haiku"]; snap.Error == "" {
		t.Errorf("Snapshots for an unreachable breaker = %+v, want Error set", snap)
	}
}

func TestRedisSharesStateAcrossInstances(t *testing.T) {
	client, prefix := redistest.Client(t)
	cfg := suiteConfig()
	a := NewRedis(client, prefix, "sonnet", cfg)
	b := NewRedis(client, prefix, "sonnet", cfg)
	record(t, a, "FFF")
	record(t, b, "FF")
	wantState(t, a, Open, "after five failures split between two instances")
	other := NewRedis(client, prefix, "haiku", cfg)
	wantState(t, other, Closed, "for a different name")
}

// TestRedisConformanceBatched runs the suite the way a fleet turn calls a
// breaker: inside a Redis batch (redisbatch), where an outcome is queued and
// sent ahead of the next call instead of on its own round trip.
func TestRedisConformanceBatched(t *testing.T) {
	runConformance(t, func(t *testing.T) harness {
		client, prefix := redistest.Client(t)
		client.AddHook(redisbatch.Hook())
		bt := redisbatch.New(client, 10*time.Second, nil)
		t.Cleanup(func() { bt.Close(context.Background()) })
		f := RedisFactory(client, prefix, 10*time.Second)
		return harness{
			factory: func(name string, cfg Config, hook TransitionFunc) Breaker {
				return batched{f(name, cfg, hook), bt}
			},
			advance: func(d time.Duration) { time.Sleep(d + 2*time.Millisecond) },
		}
	})
}

// batched puts every call of a Breaker, and of its permits, in one batch.
type batched struct {
	Breaker
	b *redisbatch.Batch
}

func (x batched) Allow(ctx context.Context) (Permit, error) {
	p, err := x.Breaker.Allow(redisbatch.With(ctx, x.b))
	return batchedPermit{p, x.b}, err
}

func (x batched) Snapshot(ctx context.Context) (Snapshot, error) {
	return x.Breaker.Snapshot(redisbatch.With(ctx, x.b))
}

type batchedPermit struct {
	Permit
	b *redisbatch.Batch
}

func (p batchedPermit) Done(ctx context.Context, ok bool) {
	p.Permit.Done(redisbatch.With(ctx, p.b), ok)
}

func (p batchedPermit) Release(ctx context.Context) {
	p.Permit.Release(redisbatch.With(ctx, p.b))
}

// TestRedisStateSkipsTheWindow: State answers the planner's question (the
// state, when it admits again) like Snapshot, without the window's counts.
func TestRedisStateSkipsTheWindow(t *testing.T) {
	client, prefix := redistest.Client(t)
	cfg := suiteConfig()
	cfg.OpenTimeout = 10 * time.Second // still open when read, however slow the run
	b := NewRedis(client, prefix, "sonnet", cfg)
	ctx := context.Background()
	record(t, b, "SSF")
	snap, err := b.Snapshot(ctx)
	if err != nil || snap.State != Closed || snap.Calls != 3 || snap.Failures != 1 {
		t.Fatalf("Snapshot = %+v, %v; want closed with 3 calls, 1 failure", snap, err)
	}
	st, err := StateOf(ctx, b)
	if err != nil || st.State != Closed || st.Calls != 0 || st.Generation != snap.Generation {
		t.Fatalf("State = %+v, %v; want closed, generation %d, no counts", st, err, snap.Generation)
	}
	record(t, b, "FFFF")
	st, err = StateOf(ctx, b)
	if err != nil || st.State != Open || st.RetryAfter <= 0 || st.RetryAfter > cfg.OpenTimeout {
		t.Fatalf("State after five failures = %+v, %v; want open, admitting again within %v", st, err, cfg.OpenTimeout)
	}
}

// TestRedisWindowStaysBounded: successes do not read the window, yet its
// stale steps are still deleted (by the first call of each step), so a
// breaker that never fails keeps at most a window's worth of steps.
func TestRedisWindowStaysBounded(t *testing.T) {
	client, prefix := redistest.Client(t)
	cfg := suiteConfig()
	cfg.Window = 200 * time.Millisecond // steps of 10ms
	b := NewRedis(client, prefix, "sonnet", cfg)
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(3 * time.Millisecond) {
		record(t, b, "S")
	}
	n, err := client.HLen(context.Background(), b.keys[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if limit := int64(windowBuckets + 2); n == 0 || n > limit {
		t.Fatalf("the window holds %d steps after a second of successes, want 1..%d", n, limit)
	}
	snap, err := b.Snapshot(context.Background())
	if err != nil || snap.Calls == 0 || snap.Failures != 0 {
		t.Fatalf("Snapshot = %+v, %v; want the last window's calls", snap, err)
	}
}
