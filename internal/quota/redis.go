package quota

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redisbatch"
)

//go:embed ledger.lua
var ledgerLua string

var ledgerScript = redis.NewScript(ledgerLua)

// Redis is the fleet Ledger: every instance sharing the client and key prefix
// shares the same windows, holds and run-time ceilings. Each Reserve, Settle,
// Release and Saturation is one Lua script (one round trip) using Redis TIME
// as the clock, bounded by Config.StoreTimeout.
//
// When Redis fails, calls return the error (never a *SaturatedError): the
// caller decides, and the gateway's documented choice is to go ahead with the
// call, since the provider's own throttling still bounds the damage.
type Redis struct {
	c       redis.UniversalClient
	prefix  string
	conf    atomic.Pointer[redisConf] // swapped whole by Configure
	timeout time.Duration
	// clock overrides Redis TIME in tests that move time; nil in production.
	clock func() time.Time
}

// NewRedis returns a ledger keeping its state under prefix in c.
func NewRedis(c redis.UniversalClient, prefix string, cfg Config) (*Redis, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	l := &Redis{c: c, prefix: prefix, timeout: cfg.StoreTimeout}
	l.conf.Store(&redisConf{cfg: cfg, pol: newPolicy(cfg)})
	return l, nil
}

// redisConf is the configuration every call passes to the script.
type redisConf struct {
	cfg Config
	pol policy
}

// Configure applies cfg's ceilings, safety margin and priority shares from
// this instance's next call on; the shared window, the reservations
// outstanding and the ceilings set at run time (SetCeiling) stay in Redis.
// MaxHold and StoreTimeout stay as the ledger was built. Every instance of
// a fleet applies its own config: reload each one.
func (l *Redis) Configure(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("quota: %w", err)
	}
	cfg.MaxHold, cfg.StoreTimeout = l.conf.Load().cfg.MaxHold, l.timeout
	l.conf.Store(&redisConf{cfg: cfg, pol: newPolicy(cfg)})
	return nil
}

func (l *Redis) keys(model string) []string {
	// The hash tag keeps one model's keys in one cluster slot.
	// The window is "window", its totals in it. "win", the window of the
	// layout before the totals, is read while it exists: an instance still
	// on that layout (a rolling upgrade) settles there.
	base := l.prefix + "quota:{" + model + "}:"
	return []string{base + "window", base + "held", base + "exp", base + "agg", base + "ceil", base + "win"}
}

func (l *Redis) args(model, op, id string, p Priority, tokens int) []any {
	conf := l.conf.Load()
	c := conf.cfg.Models[model]
	clock := ""
	if l.clock != nil {
		clock = strconv.FormatInt(l.clock().UnixMilli(), 10)
	}
	args := []any{
		op, id, int(p), tokens, c.TPM, c.RPM, conf.pol.margin,
		conf.pol.pauseAt[0], conf.pol.pauseAt[1], conf.pol.pauseAt[2], conf.pol.pauseAt[3],
		conf.pol.guaranteed[0], conf.pol.guaranteed[1], conf.pol.guaranteed[2], conf.pol.guaranteed[3],
		conf.cfg.MaxHold.Milliseconds(), clock, c.Concurrent,
	}
	return args
}

func (l *Redis) run(ctx context.Context, model, op, id string, p Priority, tokens int) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	res, err := ledgerScript.Run(ctx, l.c, l.keys(model), l.args(model, op, id, p, tokens)...).Slice()
	if err != nil {
		return nil, fmt.Errorf("quota: redis %s %s: %w", op, model, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("quota: redis %s %s: empty reply", op, model)
	}
	if n, _ := res[0].(int64); n == -1 {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, model)
	}
	return res, nil
}

// Reserve implements Ledger.
func (l *Redis) Reserve(ctx context.Context, model string, p Priority, tokens int) (Reservation, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("quota: reserve: invalid priority %d", int(p))
	}
	tokens = max(tokens, 0)
	id := strconv.FormatUint(rand.Uint64(), 36)
	res, err := l.run(ctx, model, "reserve", id, p, tokens)
	if err != nil {
		return nil, err
	}
	if n, _ := res[0].(int64); n == 1 {
		return &redisReservation{l: l, model: model, id: id, tokens: tokens}, nil
	}
	if len(res) < 3 {
		return nil, fmt.Errorf("quota: redis reserve %s: malformed reply", model)
	}
	sat, _ := strconv.ParseFloat(fmt.Sprint(res[1]), 64)
	ms, _ := res[2].(int64)
	busy := len(res) > 3 && fmt.Sprint(res[3]) == "busy"
	return nil, &SaturatedError{Model: model, Priority: p, Saturation: sat, RetryAfter: time.Duration(ms) * time.Millisecond, Concurrent: busy}
}

// Saturation implements Ledger.
func (l *Redis) Saturation(ctx context.Context, model string) (Snapshot, error) {
	res, err := l.run(ctx, model, "snap", "", P0, 0)
	if err != nil {
		return Snapshot{}, err
	}
	if len(res) < 5 {
		return Snapshot{}, fmt.Errorf("quota: redis snap %s: malformed reply", model)
	}
	num := func(v any) int { n, _ := v.(int64); return int(n) }
	sat, _ := strconv.ParseFloat(fmt.Sprint(res[4]), 64)
	return Snapshot{
		TokensUsed: num(res[0]), RequestsUsed: num(res[1]),
		TPMLimit: num(res[2]), RPMLimit: num(res[3]),
		Saturation: sat,
	}, nil
}

// SetCeiling implements Ledger. The override is stored without expiry and is
// seen by every instance from its next reservation.
func (l *Redis) SetCeiling(ctx context.Context, model string, c Ceiling) error {
	if c.TPM < 0 || c.RPM < 0 || (c != Ceiling{} && (c.TPM == 0 || c.RPM == 0)) {
		return fmt.Errorf("quota: set ceiling %s: tpm and rpm must both be > 0 (or both 0 to restore)", model)
	}
	cmd := l.c
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	key := l.keys(model)[4]
	var err error
	if c == (Ceiling{}) {
		err = cmd.Del(ctx, key).Err()
	} else {
		err = cmd.HSet(ctx, key, "tpm", c.TPM, "rpm", c.RPM).Err()
	}
	if err != nil {
		return fmt.Errorf("quota: set ceiling %s: %w", model, err)
	}
	return nil
}

// Ceilings implements Ledger: the configured models and their shared
// overrides. Models that exist only as an override set by another instance
// are not listed.
func (l *Redis) Ceilings(ctx context.Context) (map[string]Ceiling, error) {
	cmd := l.c
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	configured := l.conf.Load().cfg.Models
	pipe := cmd.Pipeline()
	cmds := map[string]*redis.SliceCmd{}
	for name := range configured {
		cmds[name] = pipe.HMGet(ctx, l.keys(name)[4], "tpm", "rpm")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("quota: ceilings: %w", err)
	}
	out := make(map[string]Ceiling, len(cmds))
	for name, c := range cmds {
		ceil := configured[name]
		if v := c.Val(); len(v) == 2 && v[0] != nil && v[1] != nil {
			tpm, err1 := strconv.Atoi(fmt.Sprint(v[0]))
			rpm, err2 := strconv.Atoi(fmt.Sprint(v[1]))
			if err1 == nil && err2 == nil {
				ceil = Ceiling{TPM: tpm, RPM: rpm}
			}
		}
		out[name] = ceil
	}
	return out, nil
}

type redisReservation struct {
	l      *Redis
	model  string
	id     string
	tokens int
	done   atomic.Bool
}

func (r *redisReservation) Tokens() int { return r.tokens }

// Settle implements Reservation. If Redis cannot be reached the error is
// returned and the hold simply expires after MaxHold.
func (r *redisReservation) Settle(ctx context.Context, actualTokens int) error {
	if r.done.Swap(true) {
		return nil
	}
	return r.l.finish(ctx, r.model, "settle", r.id, max(actualTokens, 0))
}

// Release implements Reservation.
func (r *redisReservation) Release(ctx context.Context) error {
	if r.done.Swap(true) {
		return nil
	}
	return r.l.finish(ctx, r.model, "release", r.id, 0)
}

// finish settles or releases a hold. Within a turn's batch (redisbatch) it
// is sent with the turn's next Redis command, or at the turn's end, and
// returns nil: nobody acts on its outcome, and a hold it fails to end
// expires after MaxHold as when the call fails outright.
func (l *Redis) finish(ctx context.Context, model, op, id string, tokens int) error {
	args := l.args(model, op, id, P0, tokens)
	if redisbatch.Later(ctx, ledgerScript, l.keys(model), func(time.Duration) []any { return args }, nil) {
		return nil
	}
	_, err := l.run(ctx, model, op, id, P0, tokens)
	return err
}
