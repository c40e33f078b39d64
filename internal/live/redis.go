package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxFleetInstances bounds how many windows a snapshot reads.
const maxFleetInstances = 256

// RedisFleet is a Fleet in Redis: one key per instance (prefix + instance
// id) holding its window as JSON, expiring after the TTL Publish gives.
// Windows reads them with SCAN and one MGET; every call is bounded by its
// context.
type RedisFleet struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedisFleet returns a RedisFleet whose keys start with prefix (e.g.
// "fmgate:live:").
func NewRedisFleet(rdb redis.UniversalClient, prefix string) *RedisFleet {
	return &RedisFleet{rdb: rdb, prefix: prefix}
}

// Publish implements Fleet.
func (f *RedisFleet) Publish(ctx context.Context, w Window, ttl time.Duration) error {
	if w.Instance == "" {
		return errors.New("live: fleet: window without an instance id")
	}
	b, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("live: fleet: encode: %w", err)
	}
	if err := f.rdb.Set(ctx, f.prefix+w.Instance, b, ttl).Err(); err != nil {
		return fmt.Errorf("live: fleet: publish: %w", err)
	}
	return nil
}

// Windows implements Fleet.
func (f *RedisFleet) Windows(ctx context.Context) ([]Window, error) {
	var keys []string
	var cursor uint64
	for {
		ks, next, err := f.rdb.Scan(ctx, cursor, globEscape(f.prefix)+"*", 100).Result()
		if err != nil {
			return nil, fmt.Errorf("live: fleet: scan: %w", err)
		}
		keys = append(keys, ks...)
		if cursor = next; cursor == 0 || len(keys) >= maxFleetInstances {
			break
		}
	}
	if len(keys) == 0 {
		return []Window{}, nil
	}
	keys = keys[:min(len(keys), maxFleetInstances)]
	vals, err := f.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("live: fleet: read: %w", err)
	}
	out := make([]Window, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // expired between SCAN and MGET
		}
		var w Window
		if json.Unmarshal([]byte(s), &w) != nil || w.Instance == "" {
			continue // not a window: never let one bad key hide the fleet
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

// globEscape quotes the characters SCAN MATCH treats as a pattern, so a key
// prefix is matched literally.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
