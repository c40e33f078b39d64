package slots

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

func conformance(t *testing.T, open func(t *testing.T) Slots) {
	ctx := context.Background()
	t.Run("at most limit at once, concurrently", func(t *testing.T) {
		s := open(t)
		var got atomic.Int64
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Go(func() {
				ok, err := s.Acquire(ctx, "k", fmt.Sprint("call-", i), 3, time.Hour)
				if err != nil {
					t.Error(err)
				}
				if ok {
					got.Add(1)
				}
			})
		}
		wg.Wait()
		if got.Load() != 3 {
			t.Fatalf("%d of 30 concurrent calls took a slot under a limit of 3", got.Load())
		}
		if ok, _ := s.Acquire(ctx, "other", "x", 3, time.Hour); !ok {
			t.Fatal("keys share slots")
		}
	})
	t.Run("a released slot is free again, a lapsed one too", func(t *testing.T) {
		s := open(t)
		if ok, _ := s.Acquire(ctx, "k", "a", 1, time.Hour); !ok {
			t.Fatal("the first slot")
		}
		if ok, _ := s.Acquire(ctx, "k", "b", 1, time.Hour); ok {
			t.Fatal("a second slot under a limit of 1")
		}
		if err := s.Release(ctx, "k", "a"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.Acquire(ctx, "k", "b", 1, 50*time.Millisecond); !ok {
			t.Fatal("the released slot is not free")
		}
		time.Sleep(100 * time.Millisecond)
		if ok, _ := s.Acquire(ctx, "k", "c", 1, time.Hour); !ok {
			t.Fatal("a lapsed slot is still taken")
		}
	})
}

func TestMemoryConformance(t *testing.T) {
	conformance(t, func(*testing.T) Slots { return NewMemory(nil) })
}

func TestRedisConformance(t *testing.T) {
	conformance(t, func(t *testing.T) Slots {
		c, prefix := redistest.Client(t)
		return NewRedis(c, prefix)
	})
}
