package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is one queue under test: advance moves its clock (the fake clock for
// memory, real sleeping for Redis, whose clock is Redis TIME).
type env struct {
	q       *Queue
	ttl     time.Duration
	advance func(time.Duration)
}

type factory func(t *testing.T, capacity int) env

func memoryEnv(t *testing.T, capacity int) env {
	clk := &fakeClock{t: time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)}
	cfg := Config{Capacity: capacity, TTL: 30 * time.Second, PollInterval: 2 * time.Millisecond}
	q := NewMemory(cfg, clk.Now)
	return env{q: q, ttl: cfg.TTL, advance: func(d time.Duration) { clk.Advance(d); q.Notify() }}
}

func redisEnv(t *testing.T, capacity int) env {
	c, prefix := redistest.Client(t)
	cfg := Config{Capacity: capacity, TTL: 400 * time.Millisecond, PollInterval: 5 * time.Millisecond}
	q := NewRedis(c, cfg, RedisOptions{Prefix: prefix, Timeout: time.Second})
	return env{q: q, ttl: cfg.TTL, advance: time.Sleep}
}

func TestConformance(t *testing.T) {
	for _, f := range []struct {
		name string
		new  factory
	}{{"memory", memoryEnv}, {"redis", redisEnv}} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			testQueue(t, f.new)
		})
	}
}

// gate is a try function that admits only once opened, recording who got in.
type gate struct {
	open   atomic.Bool
	mu     sync.Mutex
	tried  map[string]int
	served []string
}

func newGate() *gate { return &gate{tried: map[string]int{}} }

func (g *gate) try(id string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.tried[id]++
		if g.open.Load() {
			g.served = append(g.served, id)
			return true, nil
		}
		return false, nil
	}
}

func (g *gate) triedOnly() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for id := range g.tried {
		ids = append(ids, id)
	}
	return ids
}

func waitDepth(t *testing.T, q *Queue, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := q.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Depth == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("depth %d, want %d", s.Depth, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// spawn starts Wait for a ticket in the background; its error arrives on the channel.
func spawn(ctx context.Context, q *Queue, tk Ticket, try func(context.Context) (bool, error)) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- q.Wait(ctx, tk, try) }()
	return ch
}

func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return")
		return nil
	}
}

func testQueue(t *testing.T, newEnv factory) {
	ctx := context.Background()

	t.Run("served by priority then arrival, only the head tries", func(t *testing.T) {
		e := newEnv(t, 100)
		g := newGate()
		tickets := []Ticket{{ID: "a", Priority: P3}, {ID: "b", Priority: P2}, {ID: "c", Priority: P0}, {ID: "d", Priority: P1}, {ID: "e", Priority: P0}, {ID: "f", Priority: P3}}
		var chans []<-chan error
		for i, tk := range tickets {
			chans = append(chans, spawn(ctx, e.q, tk, g.try(tk.ID)))
			waitDepth(t, e.q, i+1)
		}
		g.mu.Lock()
		g.tried = map[string]int{}
		g.mu.Unlock()
		for range 3 {
			e.q.Notify()
			time.Sleep(10 * time.Millisecond)
		}
		if got := g.triedOnly(); len(got) != 1 || got[0] != "c" {
			t.Fatalf("tried %v after all arrived, want only the P0 head c", got)
		}
		s, _ := e.q.Stats(ctx)
		if s.ByPriority != [4]int{2, 1, 1, 2} {
			t.Errorf("ByPriority = %v, want [2 1 1 2]", s.ByPriority)
		}
		g.open.Store(true)
		e.q.Notify()
		for _, ch := range chans {
			if err := recv(t, ch); err != nil {
				t.Fatal(err)
			}
		}
		if got := strings.Join(g.served, ""); got != "cedbaf" {
			t.Fatalf("served %q, want cedbaf", got)
		}
		waitDepth(t, e.q, 0)
	})

	t.Run("empty queue serves at once", func(t *testing.T) {
		e := newEnv(t, 10)
		if err := e.q.Wait(ctx, Ticket{ID: "x", Priority: P2}, func(context.Context) (bool, error) { return true, nil }); err != nil {
			t.Fatal(err)
		}
		waitDepth(t, e.q, 0)
	})

	t.Run("expired waiter gets ErrExpired and the next moves up", func(t *testing.T) {
		e := newEnv(t, 10)
		stuck := spawn(ctx, e.q, Ticket{ID: "stuck", Priority: P0}, func(context.Context) (bool, error) { return false, nil })
		waitDepth(t, e.q, 1)
		e.advance(e.ttl / 2)
		g := newGate()
		g.open.Store(true)
		next := spawn(ctx, e.q, Ticket{ID: "next", Priority: P1}, g.try("next"))
		waitDepth(t, e.q, 2)
		e.advance(e.ttl/2 + 10*time.Millisecond)
		if err := recv(t, stuck); !errors.Is(err, ErrExpired) {
			t.Fatalf("stuck: err = %v, want ErrExpired", err)
		}
		if err := recv(t, next); err != nil {
			t.Fatalf("next: %v", err)
		}
		if ErrExpired.Error() != "queue: timed out in queue" {
			t.Errorf("message %q", ErrExpired)
		}
	})

	t.Run("full queue refuses with RetryAfter", func(t *testing.T) {
		e := newEnv(t, 2)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		never := func(context.Context) (bool, error) { return false, nil }
		a := spawn(cctx, e.q, Ticket{ID: "a", Priority: P1}, never)
		b := spawn(cctx, e.q, Ticket{ID: "b", Priority: P1}, never)
		waitDepth(t, e.q, 2)
		err := e.q.Wait(ctx, Ticket{ID: "c", Priority: P0}, never)
		var fe *FullError
		if !errors.As(err, &fe) || !errors.Is(err, ErrFull) {
			t.Fatalf("err = %v, want *FullError matching ErrFull", err)
		}
		if fe.RetryAfter <= 0 || fe.RetryAfter > e.ttl {
			t.Errorf("RetryAfter = %s, want in (0, %s]", fe.RetryAfter, e.ttl)
		}
		cancel()
		for _, ch := range []<-chan error{a, b} {
			if err := recv(t, ch); !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
		}
		waitDepth(t, e.q, 0)
	})

	t.Run("cancelled waiter leaves and unblocks the next", func(t *testing.T) {
		e := newEnv(t, 10)
		cctx, cancel := context.WithCancel(ctx)
		head := spawn(cctx, e.q, Ticket{ID: "head", Priority: P0}, func(context.Context) (bool, error) { return false, nil })
		waitDepth(t, e.q, 1)
		g := newGate()
		g.open.Store(true)
		next := spawn(ctx, e.q, Ticket{ID: "next", Priority: P3}, g.try("next"))
		waitDepth(t, e.q, 2)
		cancel()
		if err := recv(t, head); !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if err := recv(t, next); err != nil {
			t.Fatal(err)
		}
		waitDepth(t, e.q, 0)
	})

	t.Run("try error is returned and the ticket removed", func(t *testing.T) {
		e := newEnv(t, 10)
		boom := errors.New("quota store down")
		err := e.q.Wait(ctx, Ticket{ID: "x", Priority: P1}, func(context.Context) (bool, error) { return false, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		waitDepth(t, e.q, 0)
	})

	t.Run("stats report oldest wait", func(t *testing.T) {
		e := newEnv(t, 10)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := spawn(cctx, e.q, Ticket{ID: "old", Priority: P2}, func(context.Context) (bool, error) { return false, nil })
		waitDepth(t, e.q, 1)
		e.advance(e.ttl / 4)
		s, err := e.q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Depth != 1 || s.ByPriority[P2] != 1 || s.OldestWait < e.ttl/4 || s.OldestWait >= e.ttl {
			t.Fatalf("stats %+v, want depth 1 at P2 waiting >= %s", s, e.ttl/4)
		}
		cancel()
		recv(t, ch)
	})

	t.Run("invalid priority", func(t *testing.T) {
		e := newEnv(t, 10)
		if err := e.q.Wait(ctx, Ticket{ID: "x", Priority: 7}, nil); err == nil {
			t.Fatal("want error")
		}
	})
}

func TestRedisReapsTicketsOfDeadInstances(t *testing.T) {
	c, prefix := redistest.Client(t)
	cfg := Config{Capacity: 10, TTL: 10 * time.Second, PollInterval: 5 * time.Millisecond}
	opt := RedisOptions{Prefix: prefix, Timeout: time.Second, Lease: 150 * time.Millisecond}
	dead := NewRedis(c, cfg, opt)
	// An instance that enqueued a P0 and then died: it never polls again.
	if _, err := dead.b.add(context.Background(), Ticket{ID: "orphan", Priority: P0}); err != nil {
		t.Fatal(err)
	}
	live := NewRedis(c, cfg, opt)
	start := time.Now()
	err := live.Wait(context.Background(), Ticket{ID: "live", Priority: P3}, func(context.Context) (bool, error) { return true, nil })
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("waited %s behind a dead instance's ticket; want about the lease", el)
	}
}

func TestRedisUnreachable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	defer c.Close()
	q := NewRedis(c, DefaultConfig(), RedisOptions{Prefix: "x:"})
	start := time.Now()
	err := q.Wait(context.Background(), Ticket{ID: "x", Priority: P0}, func(context.Context) (bool, error) { return true, nil })
	if err == nil || errors.Is(err, ErrFull) {
		t.Fatalf("err = %v, want a Redis error", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("took %s", el)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{Capacity: 0, TTL: -1}.Validate()
	for _, want := range []string{"capacity:", "ttl:", "pollInterval:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
}

func BenchmarkMemoryWaitUncontended(b *testing.B) {
	q := NewMemory(DefaultConfig(), nil)
	ok := func(context.Context) (bool, error) { return true, nil }
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := q.Wait(context.Background(), Ticket{ID: fmt.Sprint(i), Priority: P1}, ok); err != nil {
			b.Fatal(err)
		}
	}
}
