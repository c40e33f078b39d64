package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxFleetInstances bounds how many windows a snapshot reads.
const maxFleetInstances = 256

// registryKey is the sorted set, under the prefix, of the instances that
// published, scored by when they last did; registryKeep is how long an
// instance stays in it after its last window, far longer than a window's
// TTL: its window key's expiry, not the set, says whether it is live.
const (
	registryKey  = "#instances"
	registryKeep = 10 * time.Minute
)

// RedisFleet is a Fleet in Redis: one key per instance (prefix + instance
// id) holding its window as JSON, expiring after the TTL Publish gives,
// and a registry of the instances (prefix + "#instances") through which
// Windows finds them in one read, whatever else the keyspace holds. Every
// call is bounded by its context.
type RedisFleet struct {
	rdb    redis.UniversalClient
	prefix string
	now    func() time.Time
}

// NewRedisFleet returns a RedisFleet whose keys start with prefix (e.g.
// "fmgate:live:").
func NewRedisFleet(rdb redis.UniversalClient, prefix string) *RedisFleet {
	return &RedisFleet{rdb: rdb, prefix: prefix, now: time.Now}
}

// Publish implements Fleet: the window and the registry's entry, in one
// round trip, which also drops the entries of instances gone for longer
// than registryKeep.
func (f *RedisFleet) Publish(ctx context.Context, w Window, ttl time.Duration) error {
	if w.Instance == "" {
		return errors.New("live: fleet: window without an instance id")
	}
	if strings.HasPrefix(w.Instance, "#") {
		return fmt.Errorf("live: fleet: instance id %q: may not start with #", w.Instance)
	}
	b, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("live: fleet: encode: %w", err)
	}
	now := f.now().UnixMilli()
	reg := f.prefix + registryKey
	_, err = f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, f.prefix+w.Instance, b, ttl)
		p.ZAdd(ctx, reg, redis.Z{Score: float64(now), Member: w.Instance})
		p.ZRemRangeByScore(ctx, reg, "-inf", "("+strconv.FormatInt(now-registryKeep.Milliseconds(), 10))
		p.PExpire(ctx, reg, registryKeep)
		return nil
	})
	if err != nil {
		return fmt.Errorf("live: fleet: publish: %w", err)
	}
	return nil
}

// Windows implements Fleet: the windows of the maxFleetInstances
// instances that published last, those whose window has not expired.
func (f *RedisFleet) Windows(ctx context.Context) ([]Window, error) {
	ids, err := f.rdb.ZRevRange(ctx, f.prefix+registryKey, 0, maxFleetInstances-1).Result()
	if err != nil {
		return nil, fmt.Errorf("live: fleet: instances: %w", err)
	}
	if len(ids) == 0 {
		return []Window{}, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = f.prefix + id
	}
	vals, err := f.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("live: fleet: read: %w", err)
	}
	out := make([]Window, 0, len(vals))
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue // its window expired: the instance stopped publishing
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
