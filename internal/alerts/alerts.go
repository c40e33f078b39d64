// Package alerts tells on-call when the gateway needs a person: it
// evaluates rules in-process over the live figures (breaker open, quota
// saturation, saturated fallback, error rate, p99 time to first byte over
// the 3 s goal, event sinks losing events, a failed canary), each with a
// `for:` duration and automatic resolution, and delivers firing and resolved
// notifications to webhooks in the Alertmanager webhook format, with retries
// and a bounded queue. GET /admin/alerts lists what is firing, pending and
// recently resolved.
package alerts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/live"
)

// Alert states.
const (
	StatePending  = "pending"
	StateFiring   = "firing"
	StateResolved = "resolved"
)

// Observation is what the rules look at, read once per evaluation.
type Observation struct {
	Live live.Snapshot
	// Primary is the key under which the live tier mix counts the turns the
	// primary model answered (its model id; the tier name when it has none).
	Primary string
	// Dropped is each event sink's total of lost events so far.
	Dropped map[string]uint64
	// Canary is the latest canary verdict; nil without a canary.
	Canary *Canary
	// ReloadFailed is why the last reload of the config file was refused;
	// nil when it succeeded, or none was tried.
	ReloadFailed *ReloadFailure
}

// ReloadFailure is a refused config reload, as the ConfigReloadFailed
// rule reads it.
type ReloadFailure struct {
	Path     string   // the config file
	Code     string   // invalid_config, needs_restart, …
	Problems []string // each "field: problem"
}

// Canary is a canary verdict as the CanaryFailed rule reads it.
type Canary struct {
	Kind    string // "prompt" or "graph"
	A, B    string // the versions compared
	Failed  bool
	Reasons []string
}

// Alert is one alert instance: a rule and the labels that tell its
// instances apart (a breaker, a model, a sink).
type Alert struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	// Value is what the rule measured at the last evaluation.
	Value float64 `json:"value"`
	// ActiveSince is when the condition started to hold.
	ActiveSince time.Time `json:"activeSince"`
	// StartsAt is when the alert fired; EndsAt when it resolved.
	StartsAt    *time.Time `json:"startsAt,omitempty"`
	EndsAt      *time.Time `json:"endsAt,omitempty"`
	Fingerprint string     `json:"fingerprint"`

	lastSent time.Time
}

// Manager evaluates the rules and keeps the alerts' states. It is safe for
// concurrent use.
type Manager struct {
	cfg    Config
	now    func() time.Time
	log    *slog.Logger
	notify *notifier

	mu      sync.Mutex
	active  map[string]*Alert // by fingerprint: pending and firing
	recent  []Alert           // resolved, newest last, at most cfg.Recent
	dropped map[string]uint64 // sink totals at the previous evaluation
}

// New returns a Manager; zero fields of cfg take their defaults. now and log
// may be nil.
func New(cfg Config, now func() time.Time, log *slog.Logger) *Manager {
	cfg = cfg.withDefaults()
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		cfg:    cfg,
		now:    now,
		log:    log,
		notify: newNotifier(cfg.Webhooks, cfg.ExternalURL, log),
		active: map[string]*Alert{},
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.RepeatInterval == 0 {
		c.RepeatInterval = d.RepeatInterval
	}
	if c.Recent == 0 {
		c.Recent = d.Recent
	}
	return c
}

// Run evaluates the rules every Interval over what observe returns, and
// delivers notifications, until ctx ends.
func (m *Manager) Run(ctx context.Context, observe func(context.Context) Observation) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); m.notify.run(ctx) }()
	defer wg.Wait()
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		octx, cancel := context.WithTimeout(ctx, m.cfg.Interval)
		obs := observe(octx)
		cancel()
		m.Evaluate(obs)
	}
}

// signal is one rule's condition holding for one set of labels.
type signal struct {
	name, severity       string
	labels               map[string]string
	value                float64
	summary, description string
	rule                 Rule
}

// Evaluate runs every rule over obs once: conditions that start holding
// become pending, pending ones that held for their rule's For fire, firing
// ones no longer holding resolve. Firing and resolving queue a notification.
func (m *Manager) Evaluate(obs Observation) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range m.signals(obs) {
		fp := fingerprint(s.name, s.labels)
		seen[fp] = true
		a, ok := m.active[fp]
		if !ok {
			a = &Alert{Name: s.name, State: StatePending, ActiveSince: now, Fingerprint: fp}
			m.active[fp] = a
		}
		a.Value = s.value
		a.Labels = map[string]string{"alertname": s.name, "severity": s.severity, "service": "fmgate"}
		maps.Copy(a.Labels, s.labels)
		a.Annotations = map[string]string{"summary": s.summary, "description": s.description}
		switch {
		case a.State == StatePending && now.Sub(a.ActiveSince) >= s.rule.For:
			a.State = StateFiring
			at := now
			a.StartsAt = &at
			a.lastSent = now
			m.log.Warn("alert firing", "alert", s.name, "labels", a.Labels, "value", s.value)
			m.notify.send(*a)
		case a.State == StateFiring && now.Sub(a.lastSent) >= m.cfg.RepeatInterval:
			a.lastSent = now
			m.notify.send(*a)
		}
	}
	for fp, a := range m.active {
		if seen[fp] {
			continue
		}
		delete(m.active, fp)
		if a.State != StateFiring {
			continue // pending that never fired: forgotten
		}
		a.State = StateResolved
		at := now
		a.EndsAt = &at
		m.log.Info("alert resolved", "alert", a.Name, "labels", a.Labels)
		m.notify.send(*a)
		m.recent = append(m.recent, *a)
		if over := len(m.recent) - m.cfg.Recent; over > 0 {
			m.recent = slices.Delete(m.recent, 0, over)
		}
	}
}

// Announce notifies a one-off event — a canary ramped or rolled back — as
// an alert that starts and ends at once (severity info unless labels say
// otherwise), and keeps it with the recently resolved.
func (m *Manager) Announce(name string, labels, annotations map[string]string) {
	now := m.now()
	a := Alert{Name: name, State: StateResolved, ActiveSince: now, StartsAt: &now, EndsAt: &now,
		Labels:      map[string]string{"alertname": name, "severity": "info", "service": "fmgate"},
		Annotations: annotations}
	maps.Copy(a.Labels, labels)
	a.Fingerprint = fingerprint(name, labels)
	m.log.Info("announced", "alert", name, "labels", a.Labels)
	m.mu.Lock()
	m.recent = append(m.recent, a)
	if over := len(m.recent) - m.cfg.Recent; over > 0 {
		m.recent = slices.Delete(m.recent, 0, over)
	}
	m.mu.Unlock()
	m.notify.send(a)
}

// signals lists the conditions holding in obs.
func (m *Manager) signals(obs Observation) []signal {
	r := m.cfg.Rules
	s := obs.Live
	var out []signal
	if !r.BreakerOpen.Disabled {
		for _, b := range s.Breakers {
			if b.State == "open" {
				out = append(out, signal{name: "FmgateBreakerOpen", severity: "critical", rule: r.BreakerOpen,
					labels: map[string]string{"breaker": b.Name}, value: 1,
					summary:     fmt.Sprintf("Circuit breaker %s is open", b.Name),
					description: fmt.Sprintf("Calls to %s are refused while its breaker is open; turns fall back to the next tier.", b.Name)})
			}
		}
	}
	if !r.QuotaSaturation.Disabled {
		for _, q := range s.Quota {
			if q.Saturation > r.QuotaSaturation.Threshold {
				out = append(out, signal{name: "FmgateQuotaSaturation", severity: "warning", rule: r.QuotaSaturation,
					labels: map[string]string{"model": q.Model}, value: q.Saturation,
					summary: fmt.Sprintf("%s quota %.0f%% used", q.Model, 100*q.Saturation),
					description: fmt.Sprintf("%s uses %.0f%% of its tokens/requests-per-minute ceiling (alert above %.0f%%): batch and eval traffic pause, chat downshifts.",
						q.Model, 100*q.Saturation, 100*r.QuotaSaturation.Threshold)})
			}
		}
	}
	enough := func(rule Rule) bool { return s.Turns > 0 && s.Turns >= rule.MinTurns }
	if rule := r.SaturatedFallback; !rule.Disabled && enough(rule) {
		var below int64
		for tier, n := range s.Tiers {
			if tier != obs.Primary && tier != "none" {
				below += n
			}
		}
		if share := float64(below) / float64(s.Turns); share > rule.Threshold {
			out = append(out, signal{name: "FmgateSaturatedFallback", severity: "critical", rule: rule, value: share,
				summary: fmt.Sprintf("%.0f%% of turns answered below the primary model", 100*share),
				description: fmt.Sprintf("%d of %d turns in the last %d s were served by a secondary model, the cache, the FAQ or the graceful message.",
					below, s.Turns, s.WindowSeconds)})
		}
	}
	if rule := r.ErrorRate; !rule.Disabled && enough(rule) && s.ErrorRate > rule.Threshold {
		out = append(out, signal{name: "FmgateErrorRate", severity: "critical", rule: rule, value: s.ErrorRate,
			summary:     fmt.Sprintf("%.1f%% of turns failed", 100*s.ErrorRate),
			description: fmt.Sprintf("%d of %d turns in the last %d s ended in an error (%s).", s.Errors, s.Turns, s.WindowSeconds, topCodes(s.ErrorsByCode))})
	}
	if rule := r.TTFTP99; !rule.Disabled && enough(rule) && s.TTFTMs.P99 != nil && *s.TTFTMs.P99 > rule.Threshold {
		out = append(out, signal{name: "FmgateSlowFirstByte", severity: "warning", rule: rule, value: *s.TTFTMs.P99,
			summary:     fmt.Sprintf("p99 time to first byte %.0f ms", *s.TTFTMs.P99),
			description: fmt.Sprintf("The slowest 1%% of answers took over %.0f ms to start (goal: %.0f ms).", *s.TTFTMs.P99, rule.Threshold)})
	}
	if rule := r.SinkDrops; !rule.Disabled {
		for sink, total := range obs.Dropped {
			prev, known := m.dropped[sink]
			if known && float64(total-prev) > rule.Threshold && total > prev {
				out = append(out, signal{name: "FmgateEventsDropped", severity: "warning", rule: rule,
					labels: map[string]string{"sink": sink}, value: float64(total - prev),
					summary:     fmt.Sprintf("Event sink %s lost %d events", sink, total-prev),
					description: fmt.Sprintf("The %s sink could not keep up or failed to write; %d events since the last check are missing from it.", sink, total-prev)})
			}
		}
		m.dropped = maps.Clone(obs.Dropped)
	}
	if c := obs.Canary; !r.CanaryFailed.Disabled && c != nil && c.Failed {
		out = append(out, signal{name: "FmgateCanaryFailed", severity: "critical", rule: r.CanaryFailed,
			labels: map[string]string{"kind": c.Kind, "canary": c.B}, value: 1,
			summary:     fmt.Sprintf("Canary %s %s is worse than %s", c.Kind, c.B, c.A),
			description: strings.Join(c.Reasons, "; ")})
	}
	if f := obs.ReloadFailed; !r.ConfigReloadFailed.Disabled && f != nil {
		out = append(out, signal{name: "FmgateConfigReloadFailed", severity: "warning", rule: r.ConfigReloadFailed,
			labels: map[string]string{"code": f.Code}, value: float64(len(f.Problems)),
			summary:     fmt.Sprintf("Reloading %s failed: the config in force is the one before it", f.Path),
			description: strings.Join(f.Problems, "; ")})
	}
	return out
}

func topCodes(by map[string]int64) string {
	codes := slices.Collect(maps.Keys(by))
	sort.Slice(codes, func(i, j int) bool {
		return by[codes[i]] > by[codes[j]] || (by[codes[i]] == by[codes[j]] && codes[i] < codes[j])
	})
	if len(codes) > 3 {
		codes = codes[:3]
	}
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s ×%d", c, by[c])
	}
	if len(parts) == 0 {
		return "no code"
	}
	return strings.Join(parts, ", ")
}

// fingerprint identifies an alert instance by its name and labels.
func fingerprint(name string, labels map[string]string) string {
	h := sha256.New()
	h.Write([]byte(name))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		h.Write([]byte{0})
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(labels[k]))
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// List is GET /admin/alerts: what fires, what is pending, what resolved
// recently (newest first), and how the notifications went.
type List struct {
	Firing        []Alert       `json:"firing"`
	Pending       []Alert       `json:"pending"`
	Recent        []Alert       `json:"recent"`
	Notifications NotifyStats   `json:"notifications"`
	Webhooks      int           `json:"webhooks"`
	Interval      time.Duration `json:"-"`
}

// List returns the alerts now.
func (m *Manager) List() List {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := List{Firing: []Alert{}, Pending: []Alert{}, Recent: []Alert{}, Notifications: m.notify.stats(), Webhooks: len(m.cfg.Webhooks)}
	for _, a := range m.active {
		if a.State == StateFiring {
			out.Firing = append(out.Firing, *a)
		} else {
			out.Pending = append(out.Pending, *a)
		}
	}
	byStart := func(x []Alert) {
		sort.Slice(x, func(i, j int) bool {
			if !x[i].ActiveSince.Equal(x[j].ActiveSince) {
				return x[i].ActiveSince.Before(x[j].ActiveSince)
			}
			return x[i].Fingerprint < x[j].Fingerprint
		})
	}
	byStart(out.Firing)
	byStart(out.Pending)
	for i := len(m.recent) - 1; i >= 0; i-- {
		out.Recent = append(out.Recent, m.recent[i])
	}
	return out
}
