// Package cache stores model answers so that the fallback cascade can serve a
// recent answer to the same question when every model tier has failed.
//
// Two stores share one contract: Memory (an LRU bounded by entries and bytes,
// the embedded default) and Redis (shared by a fleet). Both keep an entry for
// TTL+StaleFor and report when it was stored; the caller decides whether an
// entry older than TTL is served as stale (with less confidence, until a model's answer replaces it).
package cache

import (
	"context"
	"errors"
	"time"
)

// Cache is a response store keyed by an opaque key (the fallback package
// derives it from the normalised question, locale and prompt version).
type Cache interface {
	// Get returns the entry and true, or false when the key is absent or
	// older than TTL+StaleFor.
	Get(ctx context.Context, key string) (Entry, bool, error)
	// Set stores text under key, stamped with the store's clock.
	Set(ctx context.Context, key, text string) error
}

// Entry is a cached answer.
type Entry struct {
	Text string
	// StoredAt is when the entry was written, on the caller's clock (the
	// Redis store converts from the server clock using the age it measures).
	StoredAt time.Time
}

// Config bounds the cache. Zero values are invalid; start from DefaultConfig.
type Config struct {
	// TTL is how long an entry is fresh. Default 1h.
	TTL time.Duration `yaml:"ttl"`
	// StaleFor is how long past TTL an entry is still served, marked stale
	// and with half the cache tier's confidence, until a model's answer to
	// the same question replaces it. Default 10m; 0 disables stale serving.
	StaleFor time.Duration `yaml:"staleFor"`
	// MaxEntries bounds the memory store. Default 10,000.
	MaxEntries int `yaml:"maxEntries"`
	// MaxBytes bounds the memory store by key+text size plus a fixed
	// per-entry overhead. Default 64 MiB.
	MaxBytes int64 `yaml:"maxBytes"`
	// Timeout bounds every Redis call. Default 100ms.
	Timeout time.Duration `yaml:"timeout"`
}

// DefaultConfig returns the MangaAssist defaults.
func DefaultConfig() Config {
	return Config{
		TTL:        time.Hour,
		StaleFor:   10 * time.Minute,
		MaxEntries: 10_000,
		MaxBytes:   64 << 20,
		Timeout:    100 * time.Millisecond,
	}
}

// Validate reports every invalid field, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	if c.TTL <= 0 {
		errs = append(errs, errors.New("ttl: must be > 0"))
	}
	if c.StaleFor < 0 {
		errs = append(errs, errors.New("staleFor: must be >= 0"))
	}
	if c.MaxEntries <= 0 {
		errs = append(errs, errors.New("maxEntries: must be > 0"))
	}
	if c.MaxBytes <= 0 {
		errs = append(errs, errors.New("maxBytes: must be > 0"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, errors.New("timeout: must be > 0"))
	}
	return errors.Join(errs...)
}

// ErrTooLarge is returned by Memory.Set for an entry bigger than MaxBytes.
var ErrTooLarge = errors.New("cache: entry larger than maxBytes")
