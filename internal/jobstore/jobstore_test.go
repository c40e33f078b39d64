package jobstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

// store is what both implementations offer.
type store interface {
	Put(ctx context.Context, id, owner string, state []byte, ttl time.Duration) error
	Get(ctx context.Context, id, owner string) ([]byte, bool, error)
}

// conformance runs the shared suite. open returns a fresh store; wait lets
// time pass for it (a fake clock, or a real sleep for Redis's expiry).
func conformance(t *testing.T, open func(t *testing.T) (store, func(time.Duration))) {
	ctx := context.Background()
	t.Run("owner reads back the latest state", func(t *testing.T) {
		s, _ := open(t)
		for _, st := range []string{`{"status":"queued"}`, `{"status":"running","completed":1}`} {
			if err := s.Put(ctx, "b-1", "alice", []byte(st), time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		got, ok, err := s.Get(ctx, "b-1", "alice")
		if err != nil || !ok || string(got) != `{"status":"running","completed":1}` {
			t.Fatalf("Get = %q, %v, %v", got, ok, err)
		}
	})
	t.Run("another caller sees nothing", func(t *testing.T) {
		s, _ := open(t)
		if err := s.Put(ctx, "b-1", "alice", []byte("x"), time.Minute); err != nil {
			t.Fatal(err)
		}
		for _, who := range []string{"bob", "", "alic", "alicex"} {
			if got, ok, err := s.Get(ctx, "b-1", who); ok || err != nil || got != nil {
				t.Fatalf("Get as %q = %q, %v, %v", who, got, ok, err)
			}
		}
		if _, ok, _ := s.Get(ctx, "b-2", "alice"); ok {
			t.Fatal("an unknown id was found")
		}
	})
	t.Run("owners whose bytes run together stay apart", func(t *testing.T) {
		s, _ := open(t)
		if err := s.Put(ctx, "b-1", "ab", []byte("c:state"), time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Get(ctx, "b-1", "abc"); ok {
			t.Fatal(`owner "abc" read "ab"'s job`)
		}
		if got, ok, _ := s.Get(ctx, "b-1", "ab"); !ok || string(got) != "c:state" {
			t.Fatalf("Get = %q, %v", got, ok)
		}
	})
	t.Run("a job expires with the ttl of its last put", func(t *testing.T) {
		s, wait := open(t)
		if err := s.Put(ctx, "b-1", "alice", []byte("a"), 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "b-1", "alice", []byte("b"), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		wait(500 * time.Millisecond)
		if _, ok, _ := s.Get(ctx, "b-1", "alice"); !ok {
			t.Fatal("the job expired with its first ttl")
		}
		wait(2 * time.Second)
		if got, ok, _ := s.Get(ctx, "b-1", "alice"); ok {
			t.Fatalf("the job outlived its ttl: %q", got)
		}
	})
	t.Run("concurrent jobs", func(t *testing.T) {
		s, _ := open(t)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				id, owner := fmt.Sprintf("b-%d", i), fmt.Sprintf("u%d", i%4)
				for n := range 20 {
					if err := s.Put(ctx, id, owner, []byte(fmt.Sprint(n)), time.Minute); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		for i := range 16 {
			got, ok, err := s.Get(ctx, fmt.Sprintf("b-%d", i), fmt.Sprintf("u%d", i%4))
			if err != nil || !ok || string(got) != "19" {
				t.Fatalf("job %d: %q, %v, %v", i, got, ok, err)
			}
		}
	})
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestMemoryConformance(t *testing.T) {
	conformance(t, func(t *testing.T) (store, func(time.Duration)) {
		c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		return NewMemory(64, c.now), c.add
	})
}

func TestRedisConformance(t *testing.T) {
	conformance(t, func(t *testing.T) (store, func(time.Duration)) {
		client, prefix := redistest.Client(t)
		return NewRedis(client, prefix+"batch:"), time.Sleep
	})
}

func TestMemoryIsBounded(t *testing.T) {
	c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	m := NewMemory(3, c.now)
	ctx := context.Background()
	for i := range 5 {
		if err := m.Put(ctx, fmt.Sprintf("b-%d", i), "u", []byte("s"), time.Duration(10+i)*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.jobs) != 3 {
		t.Fatalf("%d jobs held, bound 3", len(m.jobs))
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok, _ := m.Get(ctx, fmt.Sprintf("b-%d", i), "u"); ok != want {
			t.Fatalf("job %d held %v, want %v (the ones closest to expiry make room)", i, ok, want)
		}
	}
}

func TestRedisUnreachableIsUnavailable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	s := NewRedis(client, "x:")
	s.Timeout = 300 * time.Millisecond
	if err := s.Put(context.Background(), "b-1", "u", []byte("s"), time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Put: %v, want ErrUnavailable", err)
	}
	if _, _, err := s.Get(context.Background(), "b-1", "u"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Get: %v, want ErrUnavailable", err)
	}
}

func FuzzCutOwner(f *testing.F) {
	f.Add([]byte("5:alice{}"))
	f.Add([]byte("0:"))
	f.Add([]byte("99999999:x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		owner, state, ok := cutOwner(b)
		if ok && string(value(owner, state)) != string(b) {
			t.Fatalf("cutOwner(%q) = %q, %q does not round-trip", b, owner, state)
		}
	})
}
