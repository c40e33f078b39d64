package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Outage says what a scope does while Redis is unreachable.
type Outage string

// Outage policies. The zero value means OutageLocal.
const (
	// OutageLocal enforces 1/fleetSize of the limit in a local memory
	// bucket: the fleet as a whole stays near the limit without Redis.
	OutageLocal Outage = "local"
	// OutageOpen skips the scope (admits as far as it is concerned).
	OutageOpen Outage = "open"
	// OutageClosed refuses every request the scope applies to.
	OutageClosed Outage = "closed"
)

// Rule is one scope's limit and its outage policy.
type Rule struct {
	Limit `yaml:",inline"`
	// Outage is the policy while Redis is unreachable; "" means "local".
	Outage Outage `yaml:"outage"`
}

// UserRules are the per-user limits, each its own bucket. A rule with rate 0
// is off.
type UserRules struct {
	PerSecond Rule `yaml:"perSecond"`
	PerMinute Rule `yaml:"perMinute"`
	PerHour   Rule `yaml:"perHour"`
	PerDay    Rule `yaml:"perDay"`
}

// Config is the admission limits. DefaultConfig holds the MangaAssist values.
type Config struct {
	// Global bounds the whole gateway (default 2,000/s, burst 4,000).
	Global Rule `yaml:"global"`
	// Routes bound each entry route by name (defaults: connect 500/s burst
	// 1,000; sendMessage 2,000/s burst 4,000). A route not listed has no
	// route limit.
	Routes map[string]Rule `yaml:"routes"`
	// User bounds each user (defaults 5/s burst 10, 30/min, 200/h, 5,000/day).
	User UserRules `yaml:"user"`
	// IP bounds each client address, whoever it says it is: connections and
	// turns alike (server.trustedProxies says whose X-Forwarded-For names
	// it). Default off; e.g. rate 2000 per 5m, as an AWS WAF rate rule.
	IP Rule `yaml:"ip"`
	// PremiumMultiplier scales every per-user rate and burst for premium
	// users (default 3).
	PremiumMultiplier float64 `yaml:"premiumMultiplier"`
	// FleetSize is the number of gateway instances sharing the limits; the
	// "local" outage policy enforces 1/FleetSize of each limit (default 1).
	FleetSize int `yaml:"fleetSize"`
	// RedisTimeout bounds every Redis call (default 50ms).
	RedisTimeout time.Duration `yaml:"redisTimeout"`
	// OutageProbe is how long the Limiter keeps to its outage policies after
	// a Redis failure before trying Redis again (default 1s), so an outage
	// does not add RedisTimeout to every turn.
	OutageProbe time.Duration `yaml:"outageProbe"`
}

// DefaultConfig returns the MangaAssist limits.
func DefaultConfig() Config {
	return Config{
		Global: Rule{Limit: PerSecond(2000, 4000)},
		Routes: map[string]Rule{
			"connect":     {Limit: PerSecond(500, 1000)},
			"sendMessage": {Limit: PerSecond(2000, 4000)},
		},
		User: UserRules{
			PerSecond: Rule{Limit: PerSecond(5, 10)},
			PerMinute: Rule{Limit: Limit{Rate: 30, Per: time.Minute}},
			PerHour:   Rule{Limit: Limit{Rate: 200, Per: time.Hour}},
			PerDay:    Rule{Limit: Limit{Rate: 5000, Per: 24 * time.Hour}},
		},
		PremiumMultiplier: 3,
		FleetSize:         1,
		RedisTimeout:      DefaultRedisTimeout,
		OutageProbe:       time.Second,
	}
}

// Validate reports every problem, each as "fieldPath: problem".
func (c Config) Validate() error {
	var errs []error
	check := func(path string, r Rule) {
		errs = append(errs, r.validate(path))
		switch r.Outage {
		case "", OutageLocal, OutageOpen, OutageClosed:
		default:
			errs = append(errs, fmt.Errorf("%s.outage: must be local, open or closed", path))
		}
	}
	check("global", c.Global)
	for name, r := range c.Routes {
		check("routes."+name, r)
	}
	check("user.perSecond", c.User.PerSecond)
	check("user.perMinute", c.User.PerMinute)
	check("user.perHour", c.User.PerHour)
	check("user.perDay", c.User.PerDay)
	check("ip", c.IP)
	if c.PremiumMultiplier < 0 {
		errs = append(errs, errors.New("premiumMultiplier: must be >= 0"))
	}
	if c.FleetSize < 0 {
		errs = append(errs, errors.New("fleetSize: must be >= 0"))
	}
	if c.RedisTimeout < 0 {
		errs = append(errs, errors.New("redisTimeout: must be >= 0"))
	}
	if c.OutageProbe < 0 {
		errs = append(errs, errors.New("outageProbe: must be >= 0"))
	}
	return errors.Join(errs...)
}

// Request is one turn asking for admission.
type Request struct {
	UserID string
	// Route is the entry route ("sendMessage", "connect"); "" skips route limits.
	Route string
	// RouteOnly checks the route's scope alone: a connection being opened
	// ("connect") is not a turn, and takes nothing from the global or the
	// user's buckets.
	RouteOnly bool
	Premium   bool
	// IP is the client's address (or a keyed hash of it), for the ip
	// scope; "" skips it.
	IP string
	// Key names the caller's API key (a keyed hash of it) and KeyMonthly
	// its quota of turns per 30 days, for the key_per_month scope; 0
	// skips it.
	Key        string
	KeyMonthly int
	// KeyPerMinute is the key's own rate, turns per minute, for the
	// key_per_minute scope; 0 skips it.
	KeyPerMinute int
	// Cost is the number of tokens the turn takes from every bucket; 0 means 1.
	Cost int
}

// Scope names, as reported in Result.Limit.
const (
	ScopeGlobal        = "global"
	ScopeUserPerSecond = "user_per_second"
	ScopeUserPerMinute = "user_per_minute"
	ScopeUserPerHour   = "user_per_hour"
	ScopeUserPerDay    = "user_per_day"
	ScopeIP            = "ip"
	ScopeKeyPerMonth   = "key_per_month"
	ScopeKeyPerMinute  = "key_per_minute"
	// Route scopes are named "route_" + the route name.
	scopeRoutePrefix = "route_"
)

// Limiter checks every scope that applies to a turn in one decision.
type Limiter struct {
	cfg       atomic.Pointer[Config] // swapped whole by SetConfig
	store     Store
	local     *MemoryStore
	now       func() time.Time
	downUntil atomic.Int64 // unix ns before which Redis is not tried
}

// New returns a Limiter over store (a MemoryStore when nil). When store
// fails (Redis unreachable or slow), each scope follows its Outage policy
// for cfg.OutageProbe before store is tried again.
func New(cfg Config, store Store, now func() time.Time) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	local := NewMemoryStore(now)
	if store == nil {
		store = local
	}
	l := &Limiter{store: store, local: local, now: now}
	l.cfg.Store(withDefaults(cfg))
	return l, nil
}

// SetConfig replaces the limits from the next decision on. The buckets
// keep their state, in memory and in Redis: a bucket is keyed by its
// scope, not its limit, and holds how far ahead of its rate it is, in
// time; so a caller who used up a minute under the old limit is not handed
// a fresh minute by the new one.
func (l *Limiter) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	l.cfg.Store(withDefaults(cfg))
	return nil
}

func withDefaults(cfg Config) *Config {
	if cfg.FleetSize < 1 {
		cfg.FleetSize = 1
	}
	if cfg.PremiumMultiplier == 0 {
		cfg.PremiumMultiplier = 1
	}
	if cfg.OutageProbe == 0 {
		cfg.OutageProbe = time.Second
	}
	return &cfg
}

type scope struct {
	name   string
	bucket Bucket
	outage Outage
}

// maxScopes is global + route + ip + four user rules + the key's month.
const maxScopes = 8

// Month is the period of a key's quota of turns.
const Month = 30 * 24 * time.Hour

func (l *Limiter) scopes(cfg *Config, r Request, buf *[maxScopes]scope) []scope {
	s := buf[:0]
	add := func(name, key string, rule Rule, f float64) {
		if rule.Enabled() {
			s = append(s, scope{name: name, bucket: Bucket{Key: key, Limit: rule.Scale(f)}, outage: rule.Outage})
		}
	}
	if !r.RouteOnly {
		add(ScopeGlobal, "global", cfg.Global, 1)
	}
	if r.Route != "" {
		if rule, ok := cfg.Routes[r.Route]; ok {
			add(scopeRoutePrefix+r.Route, "route:"+r.Route, rule, 1)
		}
	}
	if r.IP != "" {
		add(ScopeIP, "ip:"+r.IP, cfg.IP, 1)
	}
	if r.RouteOnly {
		return s
	}
	f := 1.0
	if r.Premium {
		f = cfg.PremiumMultiplier
	}
	// The four user keys are cut from one string: one allocation, not four.
	keys := "user_s:" + r.UserID + "user_m:" + r.UserID + "user_h:" + r.UserID + "user_d:" + r.UserID
	n := len(keys) / 4
	add(ScopeUserPerSecond, keys[:n], cfg.User.PerSecond, f)
	add(ScopeUserPerMinute, keys[n:2*n], cfg.User.PerMinute, f)
	add(ScopeUserPerHour, keys[2*n:3*n], cfg.User.PerHour, f)
	add(ScopeUserPerDay, keys[3*n:], cfg.User.PerDay, f)
	if r.KeyMonthly > 0 {
		add(ScopeKeyPerMonth, "key_month:"+r.Key, Rule{Limit: Limit{Rate: r.KeyMonthly, Per: Month}}, 1)
	}
	if r.KeyPerMinute > 0 {
		add(ScopeKeyPerMinute, "key_minute:"+r.Key, Rule{Limit: Limit{Rate: r.KeyPerMinute, Per: time.Minute}}, 1)
	}
	return s
}

// Check decides the turn against every applicable scope at once: it is
// admitted only if every scope has Cost tokens, and a refusal takes nothing
// from any scope. The error is non-nil only when ctx is done; store failures
// are absorbed by the outage policies (Result.Degraded reports it).
func (l *Limiter) Check(ctx context.Context, r Request) (Result, error) {
	n := r.Cost
	if n == 0 {
		n = 1
	}
	if n < 0 {
		return Result{}, ErrInvalidCost
	}
	cfg := l.cfg.Load() // one decision, one set of limits
	var sbuf [maxScopes]scope
	scopes := l.scopes(cfg, r, &sbuf)
	// The store is an interface, so what it is handed escapes: the buckets
	// and their verdicts share one allocation.
	bufs := new(struct {
		b [maxScopes]Bucket
		d [maxScopes]Decision
	})
	buckets := bufs.b[:len(scopes)]
	for i, s := range scopes {
		buckets[i] = s.bucket
	}
	ds := bufs.d[:len(scopes)]

	if l.now().UnixNano() >= l.downUntil.Load() {
		ok, err := l.store.AllowAll(ctx, buckets, n, ds)
		if err == nil {
			return summarize(ok, scopes, ds, false), nil
		}
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		l.downUntil.Store(l.now().Add(cfg.OutageProbe).UnixNano())
	}
	return l.checkOutage(ctx, cfg, scopes, n)
}

// checkOutage applies each scope's Outage policy while the store is down.
func (l *Limiter) checkOutage(ctx context.Context, cfg *Config, scopes []scope, n int) (Result, error) {
	var lbuf [maxScopes]scope
	local := lbuf[:0]
	for _, s := range scopes {
		switch s.outage {
		case OutageOpen:
		case OutageClosed:
			return Result{
				Limit:      s.name,
				Policy:     policyOf(s.bucket.Limit),
				RetryAfter: cfg.OutageProbe,
				Reset:      cfg.OutageProbe,
				Degraded:   true,
			}, nil
		default:
			s.bucket.Limit = s.bucket.Limit.Share(cfg.FleetSize)
			local = append(local, s)
		}
	}
	var bbuf [maxScopes]Bucket
	buckets := bbuf[:len(local)]
	for i, s := range local {
		buckets[i] = s.bucket
	}
	var dbuf [maxScopes]Decision
	ds := dbuf[:len(local)]
	ok, err := l.local.AllowAll(ctx, buckets, n, ds)
	if err != nil {
		return Result{}, err
	}
	return summarize(ok, local, ds, true), nil
}

// summarize picks the scope a client should hear about: when refused, the
// refusing scope that takes longest to recover (waiting that long clears
// every refusing scope); when admitted, the scope with the fewest tokens left.
func summarize(ok bool, scopes []scope, ds []Decision, degraded bool) Result {
	res := Result{Allowed: ok, Degraded: degraded}
	pick := -1
	for i, d := range ds {
		switch {
		case !ok && !d.Allowed:
			if pick < 0 || d.RetryAfter > ds[pick].RetryAfter {
				pick = i
			}
		case ok:
			if pick < 0 || d.Remaining < ds[pick].Remaining {
				pick = i
			}
		}
	}
	if pick < 0 {
		return res
	}
	d := ds[pick]
	res.Limit = scopes[pick].name
	res.Policy = policyOf(scopes[pick].bucket.Limit)
	res.Remaining = d.Remaining
	res.RetryAfter = d.RetryAfter
	if ok {
		res.Reset = d.ResetAfter
	} else {
		res.Reset = d.RetryAfter
		if d.RetryAfter == Never {
			res.Reset = d.ResetAfter
		}
	}
	return res
}
