// Package quota is the reservation ledger that keeps the gateway under each
// provider model's tokens-per-minute (TPM) and requests-per-minute (RPM)
// ceilings.
//
// Callers reserve before they invoke a model (estimated input + max output
// tokens, plus one request) and settle with the usage the provider reported
// afterwards; a reservation that cannot be granted is never sent, so the
// provider never sees the calls that would have been throttled. Capacity is
// ceiling × safety margin (85 % by default), shared by four priority classes:
// as the rolling minute fills up, batch work (P3) pauses first, then eval (P2),
// then async user-facing work (P1). Sync chat (P0) may use the whole margined
// ceiling and is never made to wait here: when it is refused the gateway
// downshifts it to the next model.
//
// Two implementations pass one conformance suite: Memory (one process) and
// Redis (a fleet; one Lua script per decision, Redis TIME as the clock).
package quota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Window is the length of the rolling window the ceilings are measured over.
const Window = 60 * time.Second

const windowSec = int64(Window / time.Second)

// Priority is a traffic class. Lower values are more important.
type Priority int

// Priority classes, most important first.
const (
	P0 Priority = iota // sync chat: never waits on quota, downshifts instead
	P1                 // async user-facing work
	P2                 // eval and judge calls
	P3                 // batch enrichment
)

// NumPriorities is the number of priority classes.
const NumPriorities = 4

// String returns "P0".."P3".
func (p Priority) String() string {
	if p < P0 || p > P3 {
		return fmt.Sprintf("Priority(%d)", int(p))
	}
	return fmt.Sprintf("P%d", int(p))
}

// Valid reports whether p is one of P0..P3.
func (p Priority) Valid() bool { return p >= P0 && p <= P3 }

// ParsePriority parses "P0".."P3" (case-insensitive, also "0".."3").
func ParsePriority(s string) (Priority, error) {
	t := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "P")
	if len(t) == 1 && t[0] >= '0' && t[0] <= '3' {
		return Priority(t[0] - '0'), nil
	}
	return 0, fmt.Errorf("quota: unknown priority %q (want P0, P1, P2 or P3)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, so YAML maps can be
// keyed by "P0".."P3".
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Ceiling is a provider's published limit for one model.
type Ceiling struct {
	// TPM is tokens per minute (input + output).
	TPM int `yaml:"tpm"`
	// RPM is requests per minute.
	RPM int `yaml:"rpm"`
	// Concurrent caps the calls in flight at once (reserved and not yet
	// settled or released), as Bedrock caps some models (Claude 3 Opus:
	// 1, Haiku and Sonnet: 2 on a new account). 0: no cap. Set in the
	// config only; an admin ceiling override changes TPM and RPM.
	Concurrent int `yaml:"concurrent"`
}

// Config configures a ledger.
type Config struct {
	// SafetyMargin is the share of each ceiling the gateway lets itself use,
	// in (0, 1]. Default 0.85.
	SafetyMargin float64 `yaml:"safetyMargin"`
	// Models holds the provider ceilings per gateway model name. The defaults
	// are production-like Bedrock figures (sonnet 400,000 TPM / 2,000 RPM,
	// haiku 1,000,000 TPM / 4,000 RPM); a fresh or free-tier Bedrock account
	// gets far less (10,000 TPM / 10 RPM per model) and must say so here.
	Models map[string]Ceiling `yaml:"models"`
	// PauseAt is, per class, the saturation (0..1 of the margined ceiling)
	// beyond which the class is no longer granted: a reservation is granted
	// only if the window stays at or below PauseAt after it. Defaults P3 0.70,
	// P2 0.80, P1 0.90, P0 1.0. Every class must be present.
	PauseAt map[Priority]float64 `yaml:"pauseAt"`
	// Guaranteed is an optional share (0..1 of the margined ceiling) per class
	// that the class may use even past its PauseAt and that no other class may
	// take while it is unused, so batch work cannot starve completely. Empty
	// by default; the shares must sum to at most 1.
	Guaranteed map[Priority]float64 `yaml:"guaranteed"`
	// MaxHold is how long a reservation that is neither settled nor released
	// keeps its capacity before it is returned to the pool, so a crashed
	// caller cannot leak capacity forever. Default 2m; at least Window.
	MaxHold time.Duration `yaml:"maxHold"`
	// StoreTimeout bounds every Redis call. Default 100ms.
	StoreTimeout time.Duration `yaml:"storeTimeout"`
}

// DefaultConfig returns the MangaAssist defaults.
func DefaultConfig() Config {
	return Config{
		SafetyMargin: 0.85,
		Models: map[string]Ceiling{
			"sonnet": {TPM: 400_000, RPM: 2_000},
			"haiku":  {TPM: 1_000_000, RPM: 4_000},
		},
		PauseAt:      map[Priority]float64{P0: 1.0, P1: 0.90, P2: 0.80, P3: 0.70},
		Guaranteed:   map[Priority]float64{},
		MaxHold:      2 * time.Minute,
		StoreTimeout: 100 * time.Millisecond,
	}
}

// Validate reports every problem in c, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	if !(c.SafetyMargin > 0 && c.SafetyMargin <= 1) {
		errs = append(errs, errors.New("safetyMargin: must be in (0, 1]"))
	}
	for name, m := range c.Models {
		if name == "" {
			errs = append(errs, errors.New("models: model name must not be empty"))
		}
		if m.TPM <= 0 {
			errs = append(errs, fmt.Errorf("models.%s.tpm: must be > 0", name))
		}
		if m.RPM <= 0 {
			errs = append(errs, fmt.Errorf("models.%s.rpm: must be > 0", name))
		}
		if m.Concurrent < 0 {
			errs = append(errs, fmt.Errorf("models.%s.concurrent: must be >= 0 (0: no cap)", name))
		}
	}
	for p := P0; p <= P3; p++ {
		v, ok := c.PauseAt[p]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("pauseAt.%s: must be set", p))
		case !(v > 0 && v <= 1):
			errs = append(errs, fmt.Errorf("pauseAt.%s: must be in (0, 1]", p))
		case p > P0 && v > c.PauseAt[p-1]:
			errs = append(errs, fmt.Errorf("pauseAt.%s: must not exceed pauseAt.%s (lower classes pause first)", p, p-1))
		}
	}
	sum := 0.0
	for p, v := range c.Guaranteed {
		if !p.Valid() {
			errs = append(errs, fmt.Errorf("guaranteed.%s: unknown priority", p))
		}
		if v < 0 || v > 1 {
			errs = append(errs, fmt.Errorf("guaranteed.%s: must be in [0, 1]", p))
		}
		sum += v
	}
	if sum > 1 {
		errs = append(errs, errors.New("guaranteed: shares must sum to at most 1"))
	}
	if c.MaxHold < Window {
		errs = append(errs, fmt.Errorf("maxHold: must be >= %s", Window))
	}
	if c.StoreTimeout <= 0 {
		errs = append(errs, errors.New("storeTimeout: must be > 0"))
	}
	return errors.Join(errs...)
}

// ErrSaturated is matched (errors.Is) by every *SaturatedError.
var ErrSaturated = errors.New("quota: saturated")

// ErrUnknownModel is returned for a model that has no ceiling.
var ErrUnknownModel = errors.New("quota: unknown model")

// SaturatedError says a reservation was refused.
type SaturatedError struct {
	Model    string
	Priority Priority
	// Saturation of the model before the refused reservation, 0..1+.
	Saturation float64
	// RetryAfter estimates when enough of the window rolls off for the same
	// reservation to be granted.
	RetryAfter time.Duration
	// Concurrent is set when the refusal is the model's concurrency cap,
	// not its per-minute ceilings.
	Concurrent bool
}

// ConcurrencyRetry bounds the retry hint of a call over a concurrency
// cap: calls in flight end within seconds, and waiters are woken when one
// does.
const ConcurrencyRetry = time.Second

func (e *SaturatedError) Error() string {
	if e.Concurrent {
		return fmt.Sprintf("quota: %s has its most calls in flight for %s, retry after %s", e.Model, e.Priority, e.RetryAfter.Round(time.Millisecond))
	}
	return fmt.Sprintf("quota: %s saturated for %s (%.0f%%), retry after %s",
		e.Model, e.Priority, e.Saturation*100, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrSaturated) true.
func (e *SaturatedError) Is(target error) bool { return target == ErrSaturated }

// Snapshot is a model's current use of its margined ceiling. Outstanding
// reservations count at their reserved size until settled.
type Snapshot struct {
	TokensUsed   int
	RequestsUsed int
	// TPMLimit and RPMLimit are the ceilings × safety margin.
	TPMLimit int
	RPMLimit int
	// Saturation is max(TokensUsed/TPMLimit, RequestsUsed/RPMLimit).
	Saturation float64
}

// Reservation is granted capacity. Exactly one of Settle or Release takes
// effect; later calls to either are no-ops.
type Reservation interface {
	// Settle replaces the reserved tokens by the tokens the provider actually
	// billed (a refund or a further charge); the request stays counted. A
	// stream cut mid-way settles with its partial usage.
	Settle(ctx context.Context, actualTokens int) error
	// Release returns the whole reservation (tokens and request), for calls
	// that failed or were cancelled before any usage was known.
	Release(ctx context.Context) error
	// Tokens is the number of tokens reserved.
	Tokens() int
}

// Ledger grants and accounts reservations.
//
// A reservation counts against the ceiling from Reserve until the later of
// one Window after Reserve and its settlement; if it is never settled nor
// released it counts until MaxHold has passed.
type Ledger interface {
	// Reserve asks for tokens (estimated input + max output) and one request
	// on model for class p. A refusal is a *SaturatedError. A reservation
	// larger than the whole margined ceiling is granted only when the window
	// is empty, so the ceiling is never overshot by more than one reservation.
	Reserve(ctx context.Context, model string, p Priority, tokens int) (Reservation, error)
	// Saturation reports the model's current use.
	Saturation(ctx context.Context, model string) (Snapshot, error)
	// SetCeiling changes a model's ceiling at run time (e.g. the provider cut
	// our TPM); it applies from the next reservation, for every instance
	// sharing the store. The zero Ceiling restores the configured one.
	SetCeiling(ctx context.Context, model string, c Ceiling) error
	// Ceilings returns the ceilings in force (not margined), by model.
	Ceilings(ctx context.Context) (map[string]Ceiling, error)
}

// policy is the decision shared by both implementations (the Lua script
// mirrors it; the conformance suite keeps them in step).
type policy struct {
	margin     float64
	pauseAt    [NumPriorities]float64
	guaranteed [NumPriorities]float64
}

func newPolicy(c Config) policy {
	p := policy{margin: c.SafetyMargin}
	for i := P0; i <= P3; i++ {
		p.pauseAt[i] = c.PauseAt[i]
		p.guaranteed[i] = c.Guaranteed[i]
	}
	return p
}

// limits returns the margined ceiling, at least 1 each.
func (pl policy) limits(c Ceiling) (tpm, rpm int64) {
	tpm = int64(math.Floor(float64(c.TPM) * pl.margin))
	rpm = int64(math.Floor(float64(c.RPM) * pl.margin))
	return max(tpm, 1), max(rpm, 1)
}

// usage is what a window (or the set of outstanding holds) consumes, by
// class.
type usage struct {
	tok [NumPriorities]int64
	req [NumPriorities]int64
}

// inFlight is the number of holds u counts, when u sums holds.
func (u usage) inFlight() int64 {
	_, n := u.totals()
	return n
}

func (u usage) totals() (tok, req int64) {
	for i := range NumPriorities {
		tok += u.tok[i]
		req += u.req[i]
	}
	return tok, req
}

func (u *usage) add(o usage) {
	for i := range NumPriorities {
		u.tok[i] += o.tok[i]
		u.req[i] += o.req[i]
	}
}

func (u *usage) sub(o usage) {
	for i := range NumPriorities {
		u.tok[i] -= o.tok[i]
		u.req[i] -= o.req[i]
	}
}

func saturation(tok, req, lt, lr int64) float64 {
	return max(float64(tok)/float64(lt), float64(req)/float64(lr))
}

// fits reports whether class p may take tokens (and one request) on top of u.
func (pl policy) fits(u usage, p Priority, tokens, lt, lr int64) bool {
	ut, ur := u.totals()
	if ut == 0 && ur == 0 {
		return true
	}
	ft, fr := float64(lt), float64(lr)
	pause := pl.pauseAt[p]
	if !(float64(ut+tokens) <= pause*ft && float64(ur+1) <= pause*fr) {
		g := pl.guaranteed[p]
		if !(g > 0 && float64(u.tok[p]+tokens) <= g*ft && float64(u.req[p]+1) <= g*fr) {
			return false
		}
	}
	// Capacity guaranteed to other classes and not used by them is off limits.
	var rt, rr float64
	for c := P0; c <= P3; c++ {
		if g := pl.guaranteed[c]; c != p && g > 0 {
			rt += max(0, g*ft-float64(u.tok[c]))
			rr += max(0, g*fr-float64(u.req[c]))
		}
	}
	return float64(ut+tokens)+rt <= ft && float64(ur+1)+rr <= fr
}
