package ratelimit

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/fmgate/fmgate/internal/redistest"
)

func newLimiter(t *testing.T, cfg Config, store Store, clk *fakeClock) *Limiter {
	t.Helper()
	l, err := New(cfg, store, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLimiterDefaults(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		premium  bool
		interval time.Duration // between messages
		admitted int           // before the first refusal
		limit    string
		retry    time.Duration
		headers  map[string]string
	}{
		{
			name: "rapid fire hits the per-second burst", interval: 0, admitted: 10,
			limit: ScopeUserPerSecond, retry: 200 * time.Millisecond,
			headers: map[string]string{"RateLimit-Policy": "10;w=2", "RateLimit": "limit=10, remaining=0, reset=1", "Retry-After": "1"},
		},
		{
			// 30 at once plus the 3 tokens refilled (one per 2 s) during 6.6 s.
			name: "steady 5/s hits 30 per minute", interval: 200 * time.Millisecond, admitted: 33,
			limit: ScopeUserPerMinute, retry: 1400 * time.Millisecond,
			headers: map[string]string{"RateLimit-Policy": "30;w=60", "RateLimit": "limit=30, remaining=0, reset=2", "Retry-After": "2"},
		},
		{
			// 90 at once plus one token per 667 ms during 25.6 s.
			name: "premium gets 3x the minute", premium: true, interval: 200 * time.Millisecond, admitted: 128,
			limit: ScopeUserPerMinute, retry: 400 * time.Millisecond,
			headers: map[string]string{"RateLimit-Policy": "90;w=60", "Retry-After": "1"},
		},
		{
			// 200 at once plus one token per 18 s during 448 s.
			name: "one per 2 s hits 200 per hour", interval: 2 * time.Second, admitted: 224,
			limit: ScopeUserPerHour, retry: 2 * time.Second,
			headers: map[string]string{"RateLimit-Policy": "200;w=3600", "RateLimit": "limit=200, remaining=0, reset=2", "Retry-After": "2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			l := newLimiter(t, DefaultConfig(), nil, clk)
			req := Request{UserID: "u1", Route: "sendMessage", Premium: tt.premium}
			var res Result
			n := 0
			for ; n < 10000; n++ {
				var err error
				if res, err = l.Check(ctx, req); err != nil {
					t.Fatal(err)
				}
				if !res.Allowed {
					break
				}
				clk.Advance(tt.interval)
			}
			if n != tt.admitted {
				t.Fatalf("admitted %d, want %d", n, tt.admitted)
			}
			if res.Limit != tt.limit {
				t.Errorf("refused by %q, want %q", res.Limit, tt.limit)
			}
			if tt.retry != 0 && (res.RetryAfter < tt.retry-time.Millisecond || res.RetryAfter > tt.retry+time.Millisecond) {
				t.Errorf("RetryAfter = %s, want %s", res.RetryAfter, tt.retry)
			}
			h := res.Headers()
			for k, v := range tt.headers {
				if got := h.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
			// Waiting RetryAfter is enough.
			clk.Advance(res.RetryAfter)
			if res2, _ := l.Check(ctx, req); !res2.Allowed {
				t.Errorf("refused after waiting RetryAfter: %+v", res2)
			}
		})
	}
}

func TestLimiterUsersAreIndependent(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, DefaultConfig(), nil, clk)
	for range 10 {
		l.Check(context.Background(), Request{UserID: "noisy"})
	}
	res, _ := l.Check(context.Background(), Request{UserID: "quiet"})
	if !res.Allowed {
		t.Fatalf("a noisy user throttled a quiet one: %+v", res)
	}
}

// The ip scope bounds an address whoever its users say they are, on
// connections and turns alike; it is off by default.
func TestLimiterIPScope(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	if cfg.IP.Enabled() {
		t.Fatal("the ip scope is on by default")
	}
	cfg.IP = Rule{Limit: Limit{Rate: 3, Per: time.Minute}}
	l := newLimiter(t, cfg, nil, newFakeClock())
	for i, r := range []Request{{UserID: "a", IP: "h1"}, {UserID: "b", IP: "h1"}, {Route: "connect", RouteOnly: true, IP: "h1"}} {
		if res, _ := l.Check(ctx, r); !res.Allowed {
			t.Fatalf("request %d within the address's limit: %+v", i+1, res)
		}
	}
	res, _ := l.Check(ctx, Request{UserID: "c", IP: "h1"})
	if res.Allowed || res.Limit != ScopeIP || !strings.Contains(res.Message("en"), "your network") {
		t.Fatalf("a fourth request from the address: %+v, want refused by the ip scope", res)
	}
	if res, _ := l.Check(ctx, Request{UserID: "c", IP: "h2"}); !res.Allowed {
		t.Fatalf("another address: %+v", res)
	}
}

// A key's monthly quota is its own bucket over 30 days, whatever users
// share the key; keys without one skip the scope.
func TestLimiterKeyMonthlyQuota(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLimiter(t, DefaultConfig(), nil, clk)
	for i, user := range []string{"a", "b", "c"} {
		if res, _ := l.Check(ctx, Request{UserID: user, Key: "k1", KeyMonthly: 3}); !res.Allowed {
			t.Fatalf("turn %d within the key's month: %+v", i+1, res)
		}
	}
	res, _ := l.Check(ctx, Request{UserID: "d", Key: "k1", KeyMonthly: 3})
	if res.Allowed || res.Limit != ScopeKeyPerMonth || !strings.Contains(res.Message("en"), "3 requests for the month") {
		t.Fatalf("a fourth turn on the key: %+v (%s), want refused by its monthly quota", res, res.Message("en"))
	}
	if res, _ := l.Check(ctx, Request{UserID: "d", Key: "k2", KeyMonthly: 3}); !res.Allowed {
		t.Fatalf("another key: %+v", res)
	}
	clk.Advance(Month / 3)
	if res, _ := l.Check(ctx, Request{UserID: "a", Key: "k1", KeyMonthly: 3}); !res.Allowed {
		t.Fatalf("a third of a month later, a turn has come back: %+v", res)
	}
}

// A connection being opened (RouteOnly) is checked against its route's
// limit alone: it takes nothing from the user's or the global buckets.
func TestLimiterRouteOnlyChecksTheRouteAlone(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Routes["connect"] = Rule{Limit: Limit{Rate: 1, Per: time.Hour, Burst: 3}}
	l := newLimiter(t, cfg, nil, clk)
	for i := range 3 {
		if res, _ := l.Check(ctx, Request{UserID: "u", Route: "connect", RouteOnly: true}); !res.Allowed {
			t.Fatalf("connection %d within the route's burst: %+v", i+1, res)
		}
	}
	if res, _ := l.Check(ctx, Request{UserID: "u", Route: "connect", RouteOnly: true}); res.Allowed || res.Limit != "route_connect" {
		t.Fatalf("a fourth connection: %+v, want refused by route_connect", res)
	}
	// The user's per-second burst of 10 is whole.
	for i := range 10 {
		if res, _ := l.Check(ctx, Request{UserID: "u", Route: "sendMessage"}); !res.Allowed {
			t.Fatalf("message %d after the connections: %+v", i+1, res)
		}
	}
}

func TestLimiterAdmittedHeaders(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, DefaultConfig(), nil, clk)
	res, _ := l.Check(context.Background(), Request{UserID: "u", Route: "sendMessage"})
	if !res.Allowed || res.Limit != ScopeUserPerSecond || res.Remaining != 9 {
		t.Fatalf("got %+v, want admitted, tightest scope user_per_second with 9 left", res)
	}
	h := res.Headers()
	if h.Get("Retry-After") != "" {
		t.Error("Retry-After on an admitted turn")
	}
	if got := h.Get("RateLimit"); got != "limit=10, remaining=9, reset=1" {
		t.Errorf("RateLimit = %q", got)
	}
}

// multiScopeRefusalConsumesNothing: one user hitting their own limit must
// not spend the global bucket other users share.
func multiScopeRefusalConsumesNothing(t *testing.T, store func(clk *fakeClock) Store) {
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Global = Rule{Limit: Limit{Rate: 1, Per: time.Hour, Burst: 3}}
	cfg.User = UserRules{PerSecond: Rule{Limit: Limit{Rate: 1, Per: time.Hour, Burst: 1}}}
	l := newLimiter(t, cfg, store(clk), clk)
	ctx := context.Background()
	steps := []struct {
		user  string
		want  bool
		limit string
	}{
		{"x", true, ScopeUserPerSecond},
		{"x", false, ScopeUserPerSecond},
		{"x", false, ScopeUserPerSecond},
		{"y", true, ""},
		{"z", true, ""},
		{"w", false, ScopeGlobal},
	}
	for i, s := range steps {
		res, err := l.Check(ctx, Request{UserID: s.user})
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed != s.want || (s.limit != "" && res.Limit != s.limit) {
			t.Fatalf("step %d (%s): got allowed=%v limit=%q, want %v %q", i, s.user, res.Allowed, res.Limit, s.want, s.limit)
		}
	}
}

func TestLimiterMultiScopeRefusalConsumesNothing(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		multiScopeRefusalConsumesNothing(t, func(clk *fakeClock) Store { return NewMemoryStore(clk.Now) })
	})
	t.Run("redis", func(t *testing.T) {
		multiScopeRefusalConsumesNothing(t, func(clk *fakeClock) Store { return redisFactory(t, clk.Now) })
	})
}

func TestLimiterCostAboveBurst(t *testing.T) {
	l := newLimiter(t, DefaultConfig(), nil, newFakeClock())
	res, _ := l.Check(context.Background(), Request{UserID: "u", Cost: 11})
	if res.Allowed || res.RetryAfter != Never || res.Limit != ScopeUserPerSecond {
		t.Fatalf("cost 11 over burst 10: got %+v", res)
	}
	if got := res.Headers().Get("Retry-After"); got != "2" {
		t.Fatalf("Retry-After = %q, want the window, 2", got)
	}
}

func TestResultMessage(t *testing.T) {
	tests := []struct {
		name   string
		res    Result
		locale string
		want   string
	}{
		{"too fast en", Result{Limit: ScopeUserPerSecond, RetryAfter: 1500 * time.Millisecond}, "en",
			"You're sending messages too fast — please wait 2 s and try again."},
		{"too fast ja", Result{Limit: ScopeUserPerMinute, RetryAfter: 2 * time.Second}, "ja-JP",
			"メッセージの送信が速すぎます。2秒待ってから、もう一度お試しください。"},
		{"hourly en", Result{Limit: ScopeUserPerHour, Policy: Policy{Quota: 200}, RetryAfter: 12 * time.Minute}, "en",
			"You've reached the limit of 200 messages per hour — please try again in 12 min."},
		{"daily ja", Result{Limit: ScopeUserPerDay, Policy: Policy{Quota: 5000}, RetryAfter: 3 * time.Hour}, "ja",
			"本日のメッセージ上限（5000件）に達しました。3時間後にもう一度お試しください。"},
		{"global en", Result{Limit: ScopeGlobal, RetryAfter: 10 * time.Millisecond}, "fr",
			"MangaAssist is very busy right now — please try again in 1 s."},
		{"route ja", Result{Limit: "route_connect", RetryAfter: 3 * time.Second}, "ja",
			"ただいま大変混み合っています。3秒後にもう一度お試しください。"},
		{"admitted", Result{Allowed: true, Limit: ScopeGlobal}, "en", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.res.Message(tt.locale); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := DefaultConfig()
	bad.Global.Rate = -1
	bad.Routes["connect"] = Rule{Limit: PerSecond(10, 1), Outage: "sometimes"}
	bad.User.PerDay.Burst = -2
	bad.FleetSize = -1
	err := bad.Validate()
	for _, want := range []string{"global.rate: must be >= 0", "routes.connect.outage:", "user.perDay.burst:", "fleetSize:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

func TestConfigYAML(t *testing.T) {
	src := `
global: {rate: 100, burst: 150, outage: closed}
routes:
  sendMessage: {rate: 50}
user:
  perMinute: {rate: 10, per: 1m}
premiumMultiplier: 2
fleetSize: 4
redisTimeout: 20ms
`
	cfg := DefaultConfig()
	if err := yaml.Unmarshal([]byte(src), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Global.Rate != 100 || cfg.Global.Burst != 150 || cfg.Global.Outage != OutageClosed {
		t.Errorf("global = %+v", cfg.Global)
	}
	if cfg.User.PerMinute.Limit != (Limit{Rate: 10, Per: time.Minute}) || cfg.FleetSize != 4 || cfg.RedisTimeout != 20*time.Millisecond {
		t.Errorf("cfg = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
}

// deadRedis is a client pointed at a port nobody listens on.
func deadRedis(t *testing.T) *redis.Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// silentRedis accepts connections and never answers.
func silentRedis(t *testing.T) *redis.Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestLimiterRedisOutage(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		client   func(*testing.T) *redis.Client
		outage   Outage
		admitted int // of 20 rapid turns
		degraded bool
	}{
		{"local at 1/N when refused", deadRedis, OutageLocal, 5, true},
		{"local at 1/N when silent", silentRedis, OutageLocal, 5, true},
		{"open", deadRedis, OutageOpen, 20, true},
		{"closed", deadRedis, OutageClosed, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := Config{
				Global:    Rule{Limit: Limit{Rate: 1, Per: time.Hour, Burst: 10}, Outage: tt.outage},
				FleetSize: 2,
			}
			l := newLimiter(t, cfg, NewRedisStore(tt.client(t), "rl:", 50*time.Millisecond), clk)
			admitted := 0
			start := time.Now()
			var last Result
			for range 20 {
				res, err := l.Check(ctx, Request{UserID: "u"})
				if err != nil {
					t.Fatal(err)
				}
				if res.Allowed {
					admitted++
				}
				last = res
				if !res.Degraded {
					t.Fatalf("not marked degraded: %+v", res)
				}
			}
			if admitted != tt.admitted {
				t.Errorf("admitted %d of 20, want %d", admitted, tt.admitted)
			}
			if el := time.Since(start); el > time.Second {
				t.Errorf("20 turns took %s during the outage; Redis must not be waited on", el)
			}
			if !last.Allowed && last.RetryAfterSeconds() < 1 {
				t.Errorf("refusal without a Retry-After: %+v", last)
			}
		})
	}
}

func TestLimiterRecoversAfterOutageProbe(t *testing.T) {
	c, prefix := redistest.Client(t)
	clk := newFakeClock()
	store := NewRedisStore(c, prefix, time.Second)
	cfg := Config{Global: Rule{Limit: PerSecond(1000, 1000)}, OutageProbe: time.Second}
	l := newLimiter(t, cfg, store, clk)
	l.downUntil.Store(clk.Now().Add(time.Second).UnixNano())
	if res, _ := l.Check(context.Background(), Request{}); !res.Degraded {
		t.Fatal("want the outage policy while Redis is marked down")
	}
	clk.Advance(time.Second)
	if res, _ := l.Check(context.Background(), Request{}); res.Degraded || !res.Allowed {
		t.Fatalf("after the probe interval Redis should decide again: %+v", res)
	}
}

func TestLimiterCancelledContext(t *testing.T) {
	c, prefix := redistest.Client(t)
	l := newLimiter(t, DefaultConfig(), NewRedisStore(c, prefix, time.Second), newFakeClock())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Check(ctx, Request{UserID: "u"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestFleetOverAdmission runs several Limiters, each with its own Redis
// client as separate gateway instances would, against one Redis, and checks
// the fleet admits no more than the limit allows over the run (+1%).
func TestFleetOverAdmission(t *testing.T) {
	const instances, workers = 4, 6
	c0, prefix := redistest.Client(t)
	cfg := Config{Global: Rule{Limit: PerSecond(1000, 100)}}
	var limiters []*Limiter
	for range instances {
		c := redis.NewClient(&redis.Options{Addr: redistest.Addr()})
		t.Cleanup(func() { c.Close() })
		l, err := New(cfg, NewRedisStore(c, prefix, time.Second), nil)
		if err != nil {
			t.Fatal(err)
		}
		limiters = append(limiters, l)
	}
	ctx := context.Background()
	t0, err := c0.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(2 * time.Second)
	var admitted, offered, degraded atomic.Int64
	var wg sync.WaitGroup
	for _, l := range limiters {
		for range workers {
			wg.Go(func() {
				for time.Now().Before(stop) {
					res, err := l.Check(ctx, Request{UserID: "fleet"})
					if err != nil {
						t.Error(err)
						return
					}
					offered.Add(1)
					if res.Degraded {
						degraded.Add(1)
					}
					if res.Allowed {
						admitted.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	t1, err := c0.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ideal := 100 + 1000*t1.Sub(t0).Seconds()
	got := float64(admitted.Load())
	t.Logf("offered %d, admitted %.0f, ideal %.0f over %s", offered.Load(), got, ideal, t1.Sub(t0))
	if degraded.Load() > 0 {
		t.Fatalf("%d decisions fell back to the outage policy; Redis too slow for the test", degraded.Load())
	}
	if float64(offered.Load()) < 1.2*ideal {
		t.Fatalf("offered %d is not above the limit; the test proves nothing", offered.Load())
	}
	if got > 1.01*ideal {
		t.Fatalf("fleet admitted %.0f, more than 1%% over the ideal %.0f", got, ideal)
	}
	if got < 0.9*ideal {
		t.Fatalf("fleet admitted %.0f, far under the ideal %.0f", got, ideal)
	}
}

// setConfigKeepsBuckets: new limits apply from the next decision, and what
// the buckets already counted still counts under them.
func setConfigKeepsBuckets(t *testing.T, store func(clk *fakeClock) Store) {
	ctx := context.Background()
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.User = UserRules{PerMinute: Rule{Limit: Limit{Rate: 5, Per: time.Minute, Burst: 5}}}
	l := newLimiter(t, cfg, store(clk), clk)
	for i := range 3 {
		if res, _ := l.Check(ctx, Request{UserID: "u"}); !res.Allowed {
			t.Fatalf("turn %d within 5/min: %+v", i+1, res)
		}
	}
	cfg.User.PerMinute = Rule{Limit: Limit{Rate: 2, Per: time.Minute, Burst: 2}}
	if err := l.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Check(ctx, Request{UserID: "u"}); res.Allowed || res.Limit != ScopeUserPerMinute {
		t.Fatalf("after lowering to 2/min with 3 spent: %+v, want refused by %s", res, ScopeUserPerMinute)
	}
	if res, _ := l.Check(ctx, Request{UserID: "v"}); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("another user under 2/min: %+v, want admitted with 1 left", res)
	}
	cfg.User.PerMinute.Rate = -1
	if err := l.SetConfig(cfg); err == nil {
		t.Fatal("SetConfig took an invalid rate")
	}
	if res, _ := l.Check(ctx, Request{UserID: "v"}); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("after a refused SetConfig: %+v, want the 2/min limit still in force", res)
	}
}

func TestLimiterSetConfigKeepsBuckets(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		setConfigKeepsBuckets(t, func(clk *fakeClock) Store { return NewMemoryStore(clk.Now) })
	})
	t.Run("redis", func(t *testing.T) {
		setConfigKeepsBuckets(t, func(clk *fakeClock) Store { return redisFactory(t, clk.Now) })
	})
}

// A key's own rate (auth.keys.*.requestsPerMinute) is one bucket for all
// its users; other keys are not held back by it.
func TestLimiterKeyPerMinute(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	l := newLimiter(t, DefaultConfig(), nil, clk)
	for i, user := range []string{"a", "b"} {
		if res, _ := l.Check(ctx, Request{UserID: user, Key: "k1", KeyPerMinute: 2}); !res.Allowed {
			t.Fatalf("turn %d within the key's minute: %+v", i+1, res)
		}
	}
	res, _ := l.Check(ctx, Request{UserID: "c", Key: "k1", KeyPerMinute: 2})
	if res.Allowed || res.Limit != ScopeKeyPerMinute || !strings.Contains(res.Message("en"), "2 requests per minute") {
		t.Fatalf("a third turn on the key: %+v (%s)", res, res.Message("en"))
	}
	if res, _ := l.Check(ctx, Request{UserID: "c", Key: "k2", KeyPerMinute: 2}); !res.Allowed {
		t.Fatalf("another key: %+v", res)
	}
	clk.Advance(30 * time.Second)
	if res, _ := l.Check(ctx, Request{UserID: "c", Key: "k1", KeyPerMinute: 2}); !res.Allowed {
		t.Fatalf("half a minute later a turn has come back: %+v", res)
	}
}
