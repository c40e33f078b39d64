package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

func TestRedisConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) harness {
		client, prefix := redistest.Client(t)
		return harness{
			open: func(n int, ttl time.Duration) Store {
				s := NewRedis(client, prefix, n, ttl)
				s.Timeout = 5 * time.Second // the suite's pace, not Redis health
				return s
			},
			// Redis keeps its own clock: let d pass by taking it off every
			// key's remaining time to live.
			advance: func(d time.Duration) {
				ctx := context.Background()
				keys, err := client.Keys(ctx, prefix+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					left := client.PTTL(ctx, k).Val()
					if left < 0 {
						continue
					}
					if left <= d {
						client.Del(ctx, k)
					} else {
						client.PExpire(ctx, k, left-d)
					}
				}
			},
		}
	})
}

func TestRedisUnreachableIsUnavailable(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer client.Close()
	s := NewRedis(client, "fmgate-test:unreachable:", 10, time.Minute)
	if _, err := s.History(context.Background(), "alice", "s1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("History = %v, want ErrUnavailable", err)
	}
	if err := s.Append(context.Background(), "alice", "s1", "q", "a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append = %v, want ErrUnavailable", err)
	}
}
