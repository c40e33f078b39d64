package live

import (
	"errors"
	"fmt"
	"time"
)

// Config sizes the live figures. A zero field means its default (see
// DefaultConfig); New fills those in.
type Config struct {
	// Window is the sliding window the span-derived figures cover (turns,
	// errors, percentiles, tiers, cost and tokens per minute). It is kept as
	// one bucket per second, so it must be a whole number of seconds.
	// Default 60s; limits 1s..1h.
	Window time.Duration `yaml:"window"`
	// Interval is how often Run computes a snapshot, appends it to the
	// history and sends it to subscribers. Default 1s; limits 100ms..Window.
	Interval time.Duration `yaml:"interval"`
	// History is how far back the snapshot history reaches; a new
	// subscriber receives it first. It holds History/Interval snapshots.
	// Default 15m; at least Interval, at most 100,000 snapshots.
	History time.Duration `yaml:"history"`
	// MaxSubscribers is the most concurrent GET /admin/live streams; one
	// more is refused with 503 overloaded. Default 32; limit 10,000.
	MaxSubscribers int `yaml:"maxSubscribers"`
}

// DefaultConfig returns the defaults: a 60 s window, a snapshot every
// second, 15 minutes of history and 32 subscribers.
func DefaultConfig() Config {
	return Config{
		Window:         60 * time.Second,
		Interval:       time.Second,
		History:        15 * time.Minute,
		MaxSubscribers: 32,
	}
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.History == 0 {
		c.History = d.History
	}
	if c.MaxSubscribers == 0 {
		c.MaxSubscribers = d.MaxSubscribers
	}
	return c
}

const maxHistorySnapshots = 100_000

// Validate reports every problem in c, each as "field: problem". It checks
// c as given, so a zero field is a problem here; New fills zero fields with
// their defaults before it validates.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.Window < time.Second || c.Window > time.Hour:
		errs = append(errs, fmt.Errorf("window: must be between 1s and 1h, got %s", c.Window))
	case c.Window%time.Second != 0:
		errs = append(errs, fmt.Errorf("window: must be a whole number of seconds, got %s", c.Window))
	}
	if c.Interval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("interval: must be at least 100ms, got %s", c.Interval))
	} else if c.Window > 0 && c.Interval > c.Window {
		errs = append(errs, fmt.Errorf("interval: must not exceed window (%s), got %s", c.Window, c.Interval))
	}
	if c.Interval > 0 {
		switch {
		case c.History < c.Interval:
			errs = append(errs, fmt.Errorf("history: must be at least interval (%s), got %s", c.Interval, c.History))
		case c.History/c.Interval > maxHistorySnapshots:
			errs = append(errs, fmt.Errorf("history: must hold at most %d snapshots (history/interval), got %d", maxHistorySnapshots, c.History/c.Interval))
		}
	}
	if c.MaxSubscribers < 1 || c.MaxSubscribers > 10_000 {
		errs = append(errs, fmt.Errorf("maxSubscribers: must be between 1 and 10000, got %d", c.MaxSubscribers))
	}
	return errors.Join(errs...)
}

// historyLen is the number of snapshots the history keeps.
func (c Config) historyLen() int { return int(c.History / c.Interval) }
