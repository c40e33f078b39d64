package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

const (
	shardCount = 64
	// sweepEvery is how often (by the store's clock) a shard drops buckets
	// that are full again; a full bucket is the same as an absent one, so
	// memory is bounded by the keys active within their refill time.
	sweepEvery = time.Minute
)

// MemoryStore keeps buckets in process memory: 64 shards, each a map from
// key to TAT under its own mutex. It is the embedded default and the local
// fallback when Redis is unreachable.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [shardCount]memShard
}

type memShard struct {
	mu        sync.Mutex
	tats      map[string]int64
	nextSweep int64
	_         [40]byte // keep hot shards on separate cache lines
}

// NewMemoryStore returns an empty store reading time from now (time.Now if nil).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	s := &MemoryStore{now: now, seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].tats = make(map[string]int64)
	}
	return s
}

func (s *MemoryStore) shard(key string) int {
	return int(maphash.String(s.seed, key) % shardCount)
}

// Allow implements Store.
func (s *MemoryStore) Allow(_ context.Context, key string, l Limit, n int) (Decision, error) {
	if n < 0 {
		return Decision{}, ErrInvalidCost
	}
	if !l.Enabled() {
		return Decision{Allowed: true}, nil
	}
	now := s.now().UnixNano()
	sh := &s.shards[s.shard(key)]
	sh.mu.Lock()
	sh.maybeSweep(now)
	d, tat := gcra(sh.tats[key], now, l, n)
	if d.Allowed {
		sh.store(key, tat, now)
	}
	sh.mu.Unlock()
	return d, nil
}

// AllowAll implements Store. It locks the buckets' shards in ascending order,
// so concurrent multi-bucket requests cannot deadlock.
func (s *MemoryStore) AllowAll(_ context.Context, buckets []Bucket, n int, out []Decision) (bool, error) {
	if n < 0 {
		return false, ErrInvalidCost
	}
	var idxBuf [8]int
	idx := idxBuf[:0]
	for _, b := range buckets {
		idx = append(idx, s.shard(b.Key))
	}
	locked := sortedUnique(append(make([]int, 0, 8), idx...))
	for _, i := range locked {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locked {
			s.shards[i].mu.Unlock()
		}
	}()
	now := s.now().UnixNano()
	var tatBuf [8]int64
	tats := tatBuf[:0]
	all := true
	for i, b := range buckets {
		if !b.Limit.Enabled() {
			out[i] = Decision{Allowed: true}
			tats = append(tats, 0)
			continue
		}
		sh := &s.shards[idx[i]]
		sh.maybeSweep(now)
		d, tat := gcra(sh.tats[b.Key], now, b.Limit, n)
		out[i] = d
		tats = append(tats, tat)
		all = all && d.Allowed
	}
	if !all {
		// Nothing was taken: report what each bucket holds now.
		for i, b := range buckets {
			if out[i].Allowed && b.Limit.Enabled() {
				out[i].Remaining += n
				out[i].ResetAfter -= time.Duration(int64(n) * int64(b.Limit.interval()))
			}
		}
		return false, nil
	}
	for i, b := range buckets {
		if b.Limit.Enabled() {
			s.shards[idx[i]].store(b.Key, tats[i], now)
		}
	}
	return true, nil
}

// Len is the number of buckets held, for tests and metrics.
func (s *MemoryStore) Len() int {
	total := 0
	for i := range s.shards {
		s.shards[i].mu.Lock()
		total += len(s.shards[i].tats)
		s.shards[i].mu.Unlock()
	}
	return total
}

// store keeps tat, or forgets the key when its bucket is full (tat <= now),
// which is the same state as an absent key.
func (sh *memShard) store(key string, tat, now int64) {
	if tat <= now {
		delete(sh.tats, key)
		return
	}
	sh.tats[key] = tat
}

func (sh *memShard) maybeSweep(now int64) {
	if now < sh.nextSweep {
		return
	}
	sh.nextSweep = now + int64(sweepEvery)
	for k, tat := range sh.tats {
		if tat <= now {
			delete(sh.tats, k)
		}
	}
}

func sortedUnique(a []int) []int {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
	out := a[:0]
	for i, v := range a {
		if i == 0 || v != a[i-1] {
			out = append(out, v)
		}
	}
	return out
}
