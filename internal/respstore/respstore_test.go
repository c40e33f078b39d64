package respstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

// store is what both implementations offer.
type store interface {
	Put(ctx context.Context, id, owner string, rec []byte) error
	Get(ctx context.Context, id, owner string) ([]byte, bool, error)
	Delete(ctx context.Context, id, owner string) (bool, error)
}

// conformance runs the shared suite. open returns a fresh store keeping
// records for ttl, and a way to let time pass for it (a fake clock, or a
// real sleep for Redis's expiry).
func conformance(t *testing.T, open func(t *testing.T, ttl time.Duration) (store, func(time.Duration))) {
	ctx := context.Background()
	t.Run("owner reads back the record", func(t *testing.T) {
		s, _ := open(t, time.Minute)
		if err := s.Put(ctx, "resp_1", "alice", []byte(`{"items":[]}`)); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.Get(ctx, "resp_1", "alice")
		if err != nil || !ok || string(got) != `{"items":[]}` {
			t.Fatalf("Get = %q, %v, %v", got, ok, err)
		}
	})
	t.Run("another caller sees nothing and deletes nothing", func(t *testing.T) {
		s, _ := open(t, time.Minute)
		if err := s.Put(ctx, "resp_1", "alice", []byte("x")); err != nil {
			t.Fatal(err)
		}
		for _, who := range []string{"bob", "", "alic", "alicex"} {
			if got, ok, err := s.Get(ctx, "resp_1", who); ok || err != nil || got != nil {
				t.Fatalf("Get as %q = %q, %v, %v", who, got, ok, err)
			}
			if ok, err := s.Delete(ctx, "resp_1", who); ok || err != nil {
				t.Fatalf("Delete as %q = %v, %v", who, ok, err)
			}
		}
		if _, ok, _ := s.Get(ctx, "resp_1", "alice"); !ok {
			t.Fatal("another caller's delete removed alice's record")
		}
		if _, ok, _ := s.Get(ctx, "resp_2", "alice"); ok {
			t.Fatal("an unknown id was found")
		}
	})
	t.Run("owners whose bytes run together stay apart", func(t *testing.T) {
		s, _ := open(t, time.Minute)
		if err := s.Put(ctx, "resp_1", "ab", []byte("c:record")); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Get(ctx, "resp_1", "abc"); ok {
			t.Fatal(`owner "abc" read "ab"'s record`)
		}
		if ok, _ := s.Delete(ctx, "resp_1", "abc"); ok {
			t.Fatal(`owner "abc" deleted "ab"'s record`)
		}
		if got, ok, _ := s.Get(ctx, "resp_1", "ab"); !ok || string(got) != "c:record" {
			t.Fatalf("Get = %q, %v", got, ok)
		}
	})
	t.Run("the owner deletes it once", func(t *testing.T) {
		s, _ := open(t, time.Minute)
		if err := s.Put(ctx, "resp_1", "alice", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.Delete(ctx, "resp_1", "alice"); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		if _, ok, _ := s.Get(ctx, "resp_1", "alice"); ok {
			t.Fatal("the record outlived its delete")
		}
		if ok, err := s.Delete(ctx, "resp_1", "alice"); ok || err != nil {
			t.Fatalf("second Delete = %v, %v", ok, err)
		}
	})
	t.Run("a record expires", func(t *testing.T) {
		s, wait := open(t, 300*time.Millisecond)
		if err := s.Put(ctx, "resp_1", "alice", []byte("a")); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := s.Get(ctx, "resp_1", "alice"); !ok {
			t.Fatal("the record expired at once")
		}
		wait(600 * time.Millisecond)
		if got, ok, _ := s.Get(ctx, "resp_1", "alice"); ok {
			t.Fatalf("the record outlived its ttl: %q", got)
		}
		if ok, _ := s.Delete(ctx, "resp_1", "alice"); ok {
			t.Fatal("an expired record was deleted")
		}
	})
	t.Run("concurrent records", func(t *testing.T) {
		s, _ := open(t, time.Minute)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				if err := s.Put(ctx, fmt.Sprintf("resp_%d", i), fmt.Sprintf("u%d", i%4), []byte(fmt.Sprint(i))); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		for i := range 16 {
			got, ok, err := s.Get(ctx, fmt.Sprintf("resp_%d", i), fmt.Sprintf("u%d", i%4))
			if err != nil || !ok || string(got) != fmt.Sprint(i) {
				t.Fatalf("record %d: %q, %v, %v", i, got, ok, err)
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
	conformance(t, func(t *testing.T, ttl time.Duration) (store, func(time.Duration)) {
		c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		return NewMemory(64, 0, ttl, c.now), c.add
	})
}

func TestRedisConformance(t *testing.T) {
	conformance(t, func(t *testing.T, ttl time.Duration) (store, func(time.Duration)) {
		client, prefix := redistest.Client(t)
		return NewRedis(client, prefix+"resp:", ttl), time.Sleep
	})
}

func TestMemoryIsBoundedByCountAndBytes(t *testing.T) {
	ctx := context.Background()
	t.Run("count", func(t *testing.T) {
		c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		m := NewMemory(3, 0, time.Hour, c.now)
		for i := range 5 {
			c.add(time.Second)
			if err := m.Put(ctx, fmt.Sprintf("resp_%d", i), "u", []byte("r")); err != nil {
				t.Fatal(err)
			}
		}
		if m.Len() != 3 {
			t.Fatalf("%d records held, bound 3", m.Len())
		}
		for i, want := range []bool{false, false, true, true, true} {
			if _, ok, _ := m.Get(ctx, fmt.Sprintf("resp_%d", i), "u"); ok != want {
				t.Fatalf("record %d held %v, want %v (the oldest make room)", i, ok, want)
			}
		}
	})
	t.Run("bytes", func(t *testing.T) {
		c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		m := NewMemory(100, 1000, time.Hour, c.now)
		for i := range 4 {
			if err := m.Put(ctx, fmt.Sprintf("resp_%d", i), "u", []byte(strings.Repeat("x", 400))); err != nil {
				t.Fatal(err)
			}
		}
		for i, want := range []bool{false, false, true, true} {
			if _, ok, _ := m.Get(ctx, fmt.Sprintf("resp_%d", i), "u"); ok != want {
				t.Fatalf("record %d held %v, want %v (1,000 bytes hold two records of 400)", i, ok, want)
			}
		}
		if err := m.Put(ctx, "resp_big", "u", []byte(strings.Repeat("x", 1001))); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := m.Get(ctx, "resp_big", "u"); ok {
			t.Fatal("a record larger than the store was kept")
		}
		if _, ok, _ := m.Get(ctx, "resp_3", "u"); !ok {
			t.Fatal("a record too large to keep evicted the others")
		}
	})
	t.Run("expired records make room first", func(t *testing.T) {
		c := &fakeClock{t: time.Unix(1_700_000_000, 0)}
		m := NewMemory(10, 0, time.Minute, c.now)
		for i := range 5 {
			_ = m.Put(ctx, fmt.Sprintf("resp_%d", i), "u", []byte("r"))
		}
		c.add(2 * time.Minute)
		_ = m.Put(ctx, "resp_new", "u", []byte("r"))
		if m.Len() != 1 {
			t.Fatalf("%d records held after the others expired, want 1", m.Len())
		}
	})
}

func TestRedisRecordsExpireWithTheirTTL(t *testing.T) {
	client, prefix := redistest.Client(t)
	s := NewRedis(client, prefix+"resp:", 30*time.Minute)
	if err := s.Put(context.Background(), "resp_1", "u", []byte("r")); err != nil {
		t.Fatal(err)
	}
	ttl, err := client.PTTL(context.Background(), prefix+"resp:resp_1").Result()
	if err != nil || ttl <= 29*time.Minute || ttl > 30*time.Minute {
		t.Fatalf("PTTL = %v, %v; want the store's 30m", ttl, err)
	}
}

func TestRedisUnreachableIsUnavailable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	s := NewRedis(client, "x:", time.Minute)
	s.Timeout = 300 * time.Millisecond
	ctx := context.Background()
	if err := s.Put(ctx, "resp_1", "u", []byte("r")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Put: %v, want ErrUnavailable", err)
	}
	if _, _, err := s.Get(ctx, "resp_1", "u"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Get: %v, want ErrUnavailable", err)
	}
	if _, err := s.Delete(ctx, "resp_1", "u"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Delete: %v, want ErrUnavailable", err)
	}
}
