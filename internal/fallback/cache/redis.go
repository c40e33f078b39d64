package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnavailable is returned without contacting Redis while the store's own
// breaker is open after repeated failures.
var ErrUnavailable = errors.New("cache: redis unavailable")

// The write stamps the entry with the server's clock so that every gateway
// in the fleet agrees on its age.
var setScript = redis.NewScript(`
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], string.format('%.0f', ms) .. ':' .. ARGV[1], 'PX', ARGV[2])
return 1
`)

// The read returns the server's clock with the value, so the age is measured
// on one clock and survives skew between gateway and Redis.
var getScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return false end
local t = redis.call('TIME')
return {v, t[1], t[2]}
`)

// Redis stores entries as "<storedAtMillis>:<text>" with a PX expiry of
// TTL+StaleFor, one round trip per call, each bounded by Config.Timeout.
// After 3 consecutive failures it stops calling Redis for 5 s and returns
// ErrUnavailable at once, so an outage costs a turn nothing but a log line.
type Redis struct {
	client redis.Scripter
	prefix string
	cfg    Config
	now    func() time.Time
	guard  guard
}

// NewRedis returns a store keeping its keys under prefix (e.g.
// "fmgate:cache:"). The caller should validate cfg first.
func NewRedis(client redis.Scripter, prefix string, cfg Config) *Redis {
	return &Redis{
		client: client, prefix: prefix, cfg: cfg, now: time.Now,
		guard: guard{threshold: 3, cooldown: 5 * time.Second},
	}
}

// Get implements Cache.
func (r *Redis) Get(ctx context.Context, key string) (Entry, bool, error) {
	now := r.now()
	if !r.guard.allow(now) {
		return Entry{}, false, ErrUnavailable
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, err := getScript.Run(cctx, r.client, []string{r.prefix + key}).Slice()
	if errors.Is(err, redis.Nil) {
		r.guard.done(now, nil, ctx)
		return Entry{}, false, nil
	}
	if err != nil {
		r.guard.done(now, err, ctx)
		return Entry{}, false, fmt.Errorf("cache: redis get: %w", err)
	}
	r.guard.done(now, nil, ctx)
	e, err := decode(res, now)
	if err != nil {
		return Entry{}, false, fmt.Errorf("cache: redis get %s: %w", key, err)
	}
	return e, true, nil
}

// Set implements Cache.
func (r *Redis) Set(ctx context.Context, key, text string) error {
	now := r.now()
	if !r.guard.allow(now) {
		return ErrUnavailable
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	px := (r.cfg.TTL + r.cfg.StaleFor).Milliseconds()
	err := setScript.Run(cctx, r.client, []string{r.prefix + key}, text, px).Err()
	r.guard.done(now, err, ctx)
	if err != nil {
		return fmt.Errorf("cache: redis set: %w", err)
	}
	return nil
}

func decode(res []any, now time.Time) (Entry, error) {
	if len(res) != 3 {
		return Entry{}, fmt.Errorf("unexpected reply of %d elements", len(res))
	}
	v, _ := res[0].(string)
	sec, err1 := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(res[2]), 10, 64)
	stamp, text, ok := strings.Cut(v, ":")
	storedMs, err3 := strconv.ParseInt(stamp, 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || !ok {
		return Entry{}, fmt.Errorf("malformed entry: %v", err)
	}
	age := time.Duration(sec*1000+usec/1000-storedMs) * time.Millisecond
	return Entry{Text: text, StoredAt: now.Add(-max(age, 0))}, nil
}

// guard is the Redis store's own breaker: it opens after threshold
// consecutive failures and lets one call through per cooldown.
type guard struct {
	threshold int
	cooldown  time.Duration

	mu       sync.Mutex
	failures int
	openTill time.Time
}

func (g *guard) allow(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failures < g.threshold || !now.Before(g.openTill) {
		if g.failures >= g.threshold {
			g.openTill = now.Add(g.cooldown) // this call is the probe
		}
		return true
	}
	return false
}

// done records the outcome; a failure caused by the caller's own
// cancellation says nothing about Redis and is not counted.
func (g *guard) done(now time.Time, err error, caller context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.failures = 0
	case caller.Err() != nil:
	default:
		g.failures++
		if g.failures >= g.threshold {
			g.openTill = now.Add(g.cooldown)
		}
	}
}
