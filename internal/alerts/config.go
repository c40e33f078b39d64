package alerts

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config is the alerting section: how often the rules run, what each rule
// watches, and where notifications go.
type Config struct {
	// Interval between evaluations of the rules. Default 5s.
	Interval time.Duration `yaml:"interval"`
	// RepeatInterval re-sends a notification for an alert still firing, as
	// Alertmanager's repeat_interval does. Default 4h.
	RepeatInterval time.Duration `yaml:"repeatInterval"`
	// Recent is how many resolved alerts GET /admin/alerts keeps. Default 100.
	Recent int `yaml:"recent"`
	// Webhooks receive every notification in the Alertmanager webhook format
	// (version 4), so existing receivers work unchanged.
	Webhooks []Webhook `yaml:"webhooks"`
	// ExternalURL is sent as the payload's externalURL (e.g. the dashboard).
	ExternalURL string `yaml:"externalURL"`
	Rules       Rules  `yaml:"rules"`
}

// Webhook is one notification receiver.
type Webhook struct {
	URL string `yaml:"url"`
	// Timeout of one delivery attempt. Default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// Attempts per notification, the first included. Default 4; between
	// attempts the sender waits 0.5 s, 1 s, 2 s… (capped at 30 s).
	Attempts int `yaml:"attempts"`
}

// Rules configures each rule. A rule fires once its condition has held for
// For, and resolves as soon as it no longer holds.
type Rules struct {
	// BreakerOpen: a model's or dependency's circuit breaker is open.
	// Default for 0s (at once).
	BreakerOpen Rule `yaml:"breakerOpen"`
	// QuotaSaturation: a model's TPM/RPM use is above Threshold of its
	// ceiling. Default 0.85 for 1m.
	QuotaSaturation Rule `yaml:"quotaSaturation"`
	// SaturatedFallback: the share of turns answered below the primary
	// model (secondary model, cache, FAQ, graceful) in the live window is
	// above Threshold, over at least MinTurns turns. Default 0.5, 20 turns,
	// for 2m.
	SaturatedFallback Rule `yaml:"saturatedFallback"`
	// ErrorRate: turns the gateway failed over all turns in the live
	// window; refusals (a client's bad request, a rate limit, a budget) are
	// not failures. Default 0.05, 20 turns, for 2m.
	ErrorRate Rule `yaml:"errorRate"`
	// TTFTP99: the p99 time to first byte in milliseconds, against the 3 s
	// goal. Default 3000 ms, 20 turns, for 2m.
	TTFTP99 Rule `yaml:"ttftP99"`
	// SinkDrops: an event sink lost events since the last evaluation.
	// Default threshold 0 (any loss), for 0s.
	SinkDrops Rule `yaml:"sinkDrops"`
	// CanaryFailed: the canary verdict says B is worse than A. For 0s.
	CanaryFailed Rule `yaml:"canaryFailed"`
	// ConfigReloadFailed: the last reload of the config file (SIGHUP,
	// POST /admin/reload) was refused, so the config in force is older
	// than the file; it clears with the next successful reload. For 0s.
	ConfigReloadFailed Rule `yaml:"configReloadFailed"`
}

// Rule is one rule's thresholds.
type Rule struct {
	// Disabled switches the rule off.
	Disabled bool `yaml:"disabled"`
	// Threshold the watched value must exceed.
	Threshold float64 `yaml:"threshold"`
	// For is how long the condition must hold before the alert fires.
	For time.Duration `yaml:"for"`
	// MinTurns is the least number of turns in the window for a rate to
	// count; fewer turns say nothing.
	MinTurns int64 `yaml:"minTurns"`
}

// DefaultConfig is the alerting of the MangaAssist profile: every rule on,
// no webhook (alerts are listed at GET /admin/alerts and on the live view).
func DefaultConfig() Config {
	return Config{
		Interval:       5 * time.Second,
		RepeatInterval: 4 * time.Hour,
		Recent:         100,
		Rules: Rules{
			BreakerOpen:       Rule{},
			QuotaSaturation:   Rule{Threshold: 0.85, For: time.Minute},
			SaturatedFallback: Rule{Threshold: 0.5, For: 2 * time.Minute, MinTurns: 20},
			ErrorRate:         Rule{Threshold: 0.05, For: 2 * time.Minute, MinTurns: 20},
			TTFTP99:           Rule{Threshold: 3000, For: 2 * time.Minute, MinTurns: 20},
			SinkDrops:         Rule{},
			CanaryFailed:      Rule{},
			// The zero rule: it fires at the evaluation after the refusal.
			ConfigReloadFailed: Rule{},
		},
	}
}

// Validate reports every problem, each worded "field: problem".
func (c Config) Validate() error {
	var errs []error
	if c.Interval <= 0 {
		errs = append(errs, errors.New("interval: must be > 0"))
	}
	if c.RepeatInterval <= 0 {
		errs = append(errs, errors.New("repeatInterval: must be > 0"))
	}
	if c.Recent < 0 {
		errs = append(errs, errors.New("recent: must be >= 0"))
	}
	for i, w := range c.Webhooks {
		u, err := url.Parse(w.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("webhooks[%d].url: %q must be an http:// or https:// URL", i, w.URL))
		}
		if w.Timeout < 0 || w.Attempts < 0 {
			errs = append(errs, fmt.Errorf("webhooks[%d]: timeout and attempts must be >= 0", i))
		}
	}
	for name, r := range map[string]Rule{
		"breakerOpen": c.Rules.BreakerOpen, "quotaSaturation": c.Rules.QuotaSaturation,
		"saturatedFallback": c.Rules.SaturatedFallback, "errorRate": c.Rules.ErrorRate,
		"ttftP99": c.Rules.TTFTP99, "sinkDrops": c.Rules.SinkDrops, "canaryFailed": c.Rules.CanaryFailed,
		"configReloadFailed": c.Rules.ConfigReloadFailed,
	} {
		if r.Threshold < 0 || r.For < 0 || r.MinTurns < 0 {
			errs = append(errs, fmt.Errorf("rules.%s: threshold, for and minTurns must be >= 0", name))
		}
	}
	for name, r := range map[string]Rule{"quotaSaturation": c.Rules.QuotaSaturation,
		"saturatedFallback": c.Rules.SaturatedFallback, "errorRate": c.Rules.ErrorRate} {
		if r.Threshold > 1 {
			errs = append(errs, fmt.Errorf("rules.%s.threshold: a share, must be <= 1", name))
		}
	}
	return errors.Join(errs...)
}

func (w Webhook) withDefaults() Webhook {
	if w.Timeout == 0 {
		w.Timeout = 5 * time.Second
	}
	if w.Attempts == 0 {
		w.Attempts = 4
	}
	return w
}
