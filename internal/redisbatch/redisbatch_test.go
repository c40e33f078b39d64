package redisbatch_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/redistest"
)

// trips counts the round trips a client makes: a command or a pipeline
// each, leaving out the handshake of new connections.
type trips struct{ n atomic.Int64 }

func handshake(name string) bool { return name == "hello" || name == "client" }

func (r *trips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *trips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd.Name()) {
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (r *trips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !handshake(cmds[0].Name()) {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

func client(t *testing.T) (*redis.Client, string, *trips) {
	t.Helper()
	c, prefix := redistest.Client(t)
	c.AddHook(redisbatch.Hook())
	n := &trips{}
	c.AddHook(n)
	// A connection ready, so that the counts below are the commands' own.
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	n.n.Store(0)
	return c, prefix, n
}

var incrBy = redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)

func ten(time.Duration) []any { return []any{10} }
func one(time.Duration) []any { return []any{1} }

func TestGatherSendsIndependentCallsInOneRoundTrip(t *testing.T) {
	c, p, n := client(t)
	ctx := redisbatch.With(context.Background(), redisbatch.New(c, 0, nil))
	c.Set(ctx, p+"a", "1", time.Minute)
	c.RPush(ctx, p+"l", "x", "y")
	n.n.Store(0)

	var got string
	var list []string
	var hm []any
	var scr int64
	redisbatch.Gather(ctx,
		func(ctx context.Context) { got = c.Get(ctx, p+"a").Val() },
		func(ctx context.Context) { list = c.LRange(ctx, p+"l", 0, -1).Val() },
		func(ctx context.Context) {
			// A pipeline of its own joins the others'.
			pipe := c.Pipeline()
			cmd := pipe.HMGet(ctx, p+"h", "x")
			_, _ = pipe.Exec(ctx)
			hm = cmd.Val()
		},
		func(ctx context.Context) { scr, _ = incrBy.Run(ctx, c, []string{p + "n"}, 5).Int64() },
	)
	if got != "1" || len(list) != 2 || len(hm) != 1 || hm[0] != nil {
		t.Fatalf("replies: get %q, lrange %v, hmget %v", got, list, hm)
	}
	if scr != 5 {
		t.Fatalf("script reply %d, want 5", scr)
	}
	// The script may have needed its source once (NOSCRIPT): one more round.
	if got := n.n.Load(); got > 2 {
		t.Fatalf("%d round trips for four independent calls, want 1 (2 when the script was not loaded)", got)
	}
	n.n.Store(0)
	redisbatch.Gather(ctx,
		func(ctx context.Context) { c.Get(ctx, p+"a") },
		func(ctx context.Context) { scr, _ = incrBy.Run(ctx, c, []string{p + "n"}, 1).Int64() },
	)
	if got := n.n.Load(); got != 1 || scr != 6 {
		t.Fatalf("%d round trips (script reply %d), want 1 and 6", got, scr)
	}
}

func TestGatherWithoutBatchSendsEachCommand(t *testing.T) {
	c, p, n := client(t)
	ctx := context.Background()
	redisbatch.Gather(ctx,
		func(ctx context.Context) { c.Get(ctx, p+"a") },
		func(ctx context.Context) { c.Get(ctx, p+"b") },
		func(ctx context.Context) { c.Get(ctx, p+"c") },
	)
	if got := n.n.Load(); got != 3 {
		t.Fatalf("%d round trips, want 3", got)
	}
}

func TestRunQueuesUntilTheNextCommand(t *testing.T) {
	c, p, n := client(t)
	b := redisbatch.New(c, 0, nil)
	ctx := redisbatch.With(context.Background(), b)
	var replies []int64
	for i := 0; i < 3; i++ {
		if !redisbatch.Later(ctx, incrBy, []string{p + "n"}, ten, func(cmd *redis.Cmd) {
			v, _ := cmd.Int64()
			replies = append(replies, v)
		}) {
			t.Fatal("Later did not queue with a batch in the context")
		}
	}
	if got := n.n.Load(); got != 0 || b.Pending() != 3 {
		t.Fatalf("%d round trips and %d queued before any other command, want 0 and 3", got, b.Pending())
	}
	// The next command of the turn carries the queued writes and sees them.
	v, err := c.Get(ctx, p+"n").Int64()
	if err != nil || v != 30 {
		t.Fatalf("GET after three queued INCRBY 10: %d, %v; want 30", v, err)
	}
	if got := n.n.Load(); got != 1 {
		t.Fatalf("%d round trips, want 1", got)
	}
	if len(replies) != 3 || replies[2] != 30 {
		t.Fatalf("replies given to done: %v, want [10 20 30]", replies)
	}
}

func TestFlushAndClose(t *testing.T) {
	c, p, n := client(t)
	b := redisbatch.New(c, 0, nil)
	ctx := redisbatch.With(context.Background(), b)
	if redisbatch.Later(context.Background(), incrBy, []string{p + "n"}, one, nil) {
		t.Fatal("Later queued without a batch")
	}
	redisbatch.Later(ctx, incrBy, []string{p + "n"}, one, nil)
	redisbatch.Later(ctx, incrBy, []string{p + "n"}, one, nil)
	b.Flush(ctx)
	if got := n.n.Load(); got != 1 {
		t.Fatalf("%d round trips for a flush of two writes, want 1", got)
	}
	b.Flush(ctx) // nothing queued: nothing sent
	if got := n.n.Load(); got != 1 {
		t.Fatalf("an empty flush sent something (%d round trips)", got)
	}
	b.Close(ctx)
	if redisbatch.Later(ctx, incrBy, []string{p + "n"}, one, nil) {
		t.Fatal("Later queued on a closed batch")
	}
	if v, _ := c.Get(ctx, p+"n").Int64(); v != 2 {
		t.Fatalf("counter %d, want 2", v)
	}
}

func TestQueuedScriptRedisForgotIsSentWithItsSource(t *testing.T) {
	c, p, _ := client(t)
	var tag [8]byte
	_, _ = rand.Read(tag[:])
	// A source Redis has never seen: EVALSHA answers NOSCRIPT.
	fresh := redis.NewScript("-- " + hex.EncodeToString(tag[:]) + "\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])")
	b := redisbatch.New(c, 0, nil)
	ctx := redisbatch.With(context.Background(), b)
	var reply int64
	redisbatch.Later(ctx, fresh, []string{p + "n"}, func(time.Duration) []any { return []any{7} }, func(cmd *redis.Cmd) { reply, _ = cmd.Int64() })
	b.Flush(ctx)
	if v, _ := c.Get(context.Background(), p+"n").Int64(); v != 7 || reply != 7 {
		t.Fatalf("counter %d, reply %d; want 7 and 7", v, reply)
	}
}

func TestGatherWaitIsBoundedByTheCallersDeadline(t *testing.T) {
	c, p, _ := client(t)
	ctx := redisbatch.With(context.Background(), redisbatch.New(c, 0, nil))
	release := make(chan struct{})
	var err error
	start := time.Now()
	redisbatch.Gather(ctx,
		func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			err = c.Get(ctx, p+"a").Err()
			close(release)
		},
		// Busy elsewhere until the other gave up: it must not hold it.
		func(context.Context) { <-release },
	)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the caller's deadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Gather took %v", d)
	}
}

func TestTransactionsPassThrough(t *testing.T) {
	c, p, n := client(t)
	ctx := redisbatch.With(context.Background(), redisbatch.New(c, 0, nil))
	var v int64
	redisbatch.Gather(ctx,
		func(ctx context.Context) {
			var cmd *redis.IntCmd
			_, _ = c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				cmd = pipe.IncrBy(ctx, p+"t", 2)
				return nil
			})
			v = cmd.Val()
		},
		func(ctx context.Context) { c.Get(ctx, p+"a") },
	)
	if v != 2 {
		t.Fatalf("transaction reply %d, want 2", v)
	}
	if got := n.n.Load(); got != 2 {
		t.Fatalf("%d round trips, want 2 (the transaction on its own)", got)
	}
}

func TestLaterTellsArgsHowLongTheCallWaited(t *testing.T) {
	c, p, _ := client(t)
	b := redisbatch.New(c, 0, nil)
	ctx := redisbatch.With(context.Background(), b)
	var age time.Duration
	redisbatch.Later(ctx, incrBy, []string{p + "n"}, func(a time.Duration) []any { age = a; return []any{1} }, nil)
	time.Sleep(30 * time.Millisecond)
	b.Flush(ctx)
	if age < 30*time.Millisecond || age > 5*time.Second {
		t.Fatalf("age %v, want the 30ms the call waited", age)
	}
}

// A waiter woken after a queued write must find it in Redis: AfterQueued
// runs its function only once the write was answered.
func TestAfterQueuedRunsOnceTheWriteLanded(t *testing.T) {
	c, p, _ := client(t)
	b := redisbatch.New(c, 0, nil)
	ctx := redisbatch.With(context.Background(), b)
	if redisbatch.AfterQueued(ctx, func() {}) {
		t.Fatal("AfterQueued took a function with nothing queued")
	}
	if redisbatch.AfterQueued(context.Background(), func() {}) {
		t.Fatal("AfterQueued took a function without a batch")
	}
	redisbatch.Later(ctx, incrBy, []string{p + "n"}, ten, nil)
	seen := make(chan int64, 1)
	if !redisbatch.AfterQueued(ctx, func() {
		v, _ := c.Get(context.Background(), p+"n").Int64()
		seen <- v
	}) {
		t.Fatal("AfterQueued did not wait for the queued write")
	}
	select {
	case v := <-seen:
		t.Fatalf("ran before the write was sent (saw %d)", v)
	case <-time.After(50 * time.Millisecond):
	}
	b.Flush(ctx)
	select {
	case v := <-seen:
		if v != 10 {
			t.Fatalf("woken after the write, Redis held %d, want 10", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not run within 5s of the flush")
	}
}
