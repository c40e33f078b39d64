package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// State is what the gateway's stateful policies look like at a scrape.
type State struct {
	Breakers []BreakerState
	Quota    []QuotaState
	Queue    []QueueDepth
	// Deployments are the pressure levels of the deployments of the tiers
	// that have several.
	Deployments []DeploymentPressure
}

// DeploymentPressure is the adaptive pressure level of one deployment of a
// tier (labels tier and deployment, as fmgate_deployment_calls_total's,
// from the configuration). Level is the level's name, NORMAL, SLIGHT,
// RECOVERY, HIGH or CIRCUIT_OPEN, in any case; any other exports 0 for
// all five.
type DeploymentPressure struct {
	Tier, Deployment, Level string
}

// BreakerState is one circuit breaker. Name is the breaker's name (a
// configured model name or id; anything else is exported as "other").
// State is "closed", "half_open" or "open"; any other value exports 0 for
// all three states.
type BreakerState struct {
	Name  string
	State string
}

// QuotaState is one model's quota use in the current window, in tokens and
// requests per minute. The ceilings are the limits the ledger enforces (the
// same numbers as /admin/live's quota entries); a ceiling of 0 means none,
// and no saturation ratio is exported for it.
type QuotaState struct {
	Model      string
	TPMUsed    int64
	TPMCeiling int64
	RPMUsed    int64
	RPMCeiling int64
}

// QueueDepth is the number of turns waiting in the priority queue at one
// priority ("P0".."P3"; anything else is exported as "other").
type QueueDepth struct {
	Priority string
	Depth    int
}

// StateFunc reads the current State. It is called at most once at a time,
// at each scrape, with a context that ends after Options.StateTimeout.
type StateFunc func(ctx context.Context) (State, error)

// SetState installs (or, with nil, removes) the callback whose State is
// exported as fmgate_breaker_state, fmgate_quota_*, fmgate_queue_depth and
// fmgate_deployment_pressure.
// When it fails, panics, outlasts Options.StateTimeout, or is still running
// from an earlier scrape, that scrape exports none of these gauges (rather
// than stale values) and fmgate_state_errors_total{reason} counts it.
func (m *Metrics) SetState(f StateFunc) {
	if f == nil {
		m.stateCollect.fn.Store(nil)
		return
	}
	m.stateCollect.fn.Store(&f)
}

// RegisterDropped installs (or, with nil, removes) the function whose
// result is exported as the counter fmgate_events_dropped_total{sink}: the
// events each sink has lost since start (the emitter's Stats). It is called
// at every scrape and must be fast. Sinks other than jsonl, nats, otlp,
// eventstore, live and metrics are summed into "other".
func (m *Metrics) RegisterDropped(f func() map[string]uint64) {
	if f == nil {
		m.dropped.fn.Store(nil)
		return
	}
	m.dropped.fn.Store(&f)
}

// Reasons of fmgate_state_errors_total.
const (
	stateError   = "error"
	stateTimeout = "timeout"
	stateBusy    = "busy"
	statePanic   = "panic"
)

var (
	descBreaker = prometheus.NewDesc("fmgate_breaker_state",
		"Circuit breaker state, one-hot: 1 for the breaker's current state, 0 for the others.",
		[]string{"breaker", "state"}, nil)
	descSaturation = prometheus.NewDesc("fmgate_quota_saturation_ratio",
		"Quota use over its ceiling in the current window (0..1, above 1 when overshot), by model and kind (tpm, rpm).",
		[]string{"model", "kind"}, nil)
	descQuotaUsed = prometheus.NewDesc("fmgate_quota_used_per_minute",
		"Quota used in the current window: tokens (kind tpm) or requests (kind rpm) per minute.",
		[]string{"model", "kind"}, nil)
	descQuotaCeiling = prometheus.NewDesc("fmgate_quota_ceiling_per_minute",
		"Quota ceiling enforced: tokens (kind tpm) or requests (kind rpm) per minute.",
		[]string{"model", "kind"}, nil)
	descDeployPressure = prometheus.NewDesc("fmgate_deployment_pressure",
		"Adaptive pressure level of a tier's deployment, one-hot: 1 for its current level (normal, slight, recovery, high, circuit_open), 0 for the others.",
		[]string{"tier", "deployment", "level"}, nil)
	descQueue = prometheus.NewDesc("fmgate_queue_depth",
		"Turns waiting in the priority queue, by priority.",
		[]string{"priority"}, nil)
	descDropped = prometheus.NewDesc("fmgate_events_dropped_total",
		"Events the emitter lost for a sink (queue full or write failed).",
		[]string{"sink"}, nil)
)

// stateCollector exports the State read at scrape time.
type stateCollector struct {
	m       *Metrics
	timeout time.Duration
	fn      atomic.Pointer[StateFunc]
	busy    atomic.Bool
	// errors is fmgate_state_errors_total. The collector exports it itself,
	// after the read, so a scrape's own failure is in that scrape.
	errors *prometheus.CounterVec
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	c.errors.Describe(ch)
	ch <- descBreaker
	ch <- descSaturation
	ch <- descQuotaUsed
	ch <- descQuotaCeiling
	ch <- descQueue
	ch <- descDeployPressure
}

var errPanic = errors.New("state callback panicked")

type stateResult struct {
	st  State
	err error
}

// read calls f in its own goroutine and waits at most c.timeout. A callback
// that ignores its context is left to finish alone; until it does, later
// scrapes report busy instead of piling up goroutines.
func (c *stateCollector) read(f StateFunc) (State, string) {
	if !c.busy.CompareAndSwap(false, true) {
		return State{}, stateBusy
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	done := make(chan stateResult, 1)
	go func() {
		var r stateResult
		defer func() {
			if p := recover(); p != nil {
				r = stateResult{err: fmt.Errorf("%w: %v", errPanic, p)}
			}
			// Free the slot before handing over the result, so that the
			// next scrape never sees this finished call as busy.
			c.busy.Store(false)
			done <- r
		}()
		r.st, r.err = f(ctx)
	}()
	var r stateResult
	select {
	case r = <-done:
	case <-ctx.Done():
		select {
		case r = <-done: // finished just in time
		default:
			return State{}, stateTimeout
		}
	}
	switch {
	case errors.Is(r.err, errPanic):
		return State{}, statePanic
	case r.err != nil && ctx.Err() != nil:
		return State{}, stateTimeout
	case r.err != nil:
		return State{}, stateError
	}
	return r.st, ""
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	defer c.errors.Collect(ch)
	f := c.fn.Load()
	if f == nil {
		return
	}
	st, failed := c.read(*f)
	if failed != "" {
		c.errors.WithLabelValues(failed).Inc()
		return
	}
	c.collectBreakers(ch, st.Breakers)
	c.collectQuota(ch, st.Quota)
	c.collectQueue(ch, st.Queue)
	c.collectPressure(ch, st.Deployments)
}

func (c *stateCollector) collectPressure(ch chan<- prometheus.Metric, ds []DeploymentPressure) {
	if len(ds) == 0 {
		return
	}
	// A deployment reported twice shows the more conservative level.
	type key struct{ tier, dep string }
	byDep := make(map[key]int, len(ds))
	for _, d := range ds {
		k := key{d.Tier, d.Deployment}
		if cur, ok := byDep[k]; !ok || slices.Index(pressureLevels, strings.ToLower(d.Level)) > cur {
			byDep[k] = slices.Index(pressureLevels, strings.ToLower(d.Level))
		}
	}
	keys := slices.SortedFunc(maps.Keys(byDep), func(a, b key) int { return strings.Compare(a.tier+"\x00"+a.dep, b.tier+"\x00"+b.dep) })
	for _, k := range keys {
		for i, l := range pressureLevels {
			v := 0.0
			if i == byDep[k] {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descDeployPressure, prometheus.GaugeValue, v, k.tier, k.dep, l)
		}
	}
}

// breakerRank orders states by severity, so that two breakers reported
// under one label ("other") show the worse state.
func breakerRank(s string) int {
	switch s {
	case "closed":
		return 1
	case "half_open":
		return 2
	case "open":
		return 3
	}
	return 0
}

func (c *stateCollector) collectBreakers(ch chan<- prometheus.Metric, bs []BreakerState) {
	if len(bs) == 0 {
		return
	}
	byName := make(map[string]string, len(bs))
	for _, b := range bs {
		name := c.m.modelName(b.Name)
		if cur, ok := byName[name]; !ok || breakerRank(b.State) > breakerRank(cur) {
			byName[name] = b.State
		}
	}
	for _, name := range sortedKeys(byName) {
		st := byName[name]
		for _, s := range breakerStates {
			v := 0.0
			if s == st {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descBreaker, prometheus.GaugeValue, v, name, s)
		}
	}
}

func (c *stateCollector) collectQuota(ch chan<- prometheus.Metric, qs []QuotaState) {
	if len(qs) == 0 {
		return
	}
	// Models outside Options.Models are summed under "other".
	byModel := make(map[string]QuotaState, len(qs))
	for _, q := range qs {
		name := c.m.modelName(q.Model)
		s := byModel[name]
		s.TPMUsed += q.TPMUsed
		s.TPMCeiling += q.TPMCeiling
		s.RPMUsed += q.RPMUsed
		s.RPMCeiling += q.RPMCeiling
		byModel[name] = s
	}
	for _, name := range sortedKeys(byModel) {
		q := byModel[name]
		for _, k := range []struct {
			kind          string
			used, ceiling int64
		}{{"tpm", q.TPMUsed, q.TPMCeiling}, {"rpm", q.RPMUsed, q.RPMCeiling}} {
			ch <- prometheus.MustNewConstMetric(descQuotaUsed, prometheus.GaugeValue, float64(k.used), name, k.kind)
			ch <- prometheus.MustNewConstMetric(descQuotaCeiling, prometheus.GaugeValue, float64(k.ceiling), name, k.kind)
			if k.ceiling > 0 {
				ch <- prometheus.MustNewConstMetric(descSaturation, prometheus.GaugeValue,
					float64(k.used)/float64(k.ceiling), name, k.kind)
			}
		}
	}
}

func (c *stateCollector) collectQueue(ch chan<- prometheus.Metric, qs []QueueDepth) {
	if len(qs) == 0 {
		return
	}
	byPrio := make(map[string]int, len(qs))
	for _, q := range qs {
		byPrio[priorityLabel.bound(q.Priority)] += q.Depth
	}
	for _, p := range sortedKeys(byPrio) {
		ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(byPrio[p]), p)
	}
}

// droppedCollector exports the emitter's drop counts.
type droppedCollector struct {
	fn atomic.Pointer[func() map[string]uint64]
}

func (c *droppedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDropped }

func (c *droppedCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.fn.Load()
	if f == nil {
		return
	}
	counts := (*f)()
	bySink := make(map[string]uint64, len(counts))
	for name, n := range counts {
		bySink[sinkLabel.bound(name)] += n
	}
	for _, name := range sortedKeys(bySink) {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(bySink[name]), name)
	}
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// PayloadCounts are the payload log writer's counts since start.
type PayloadCounts struct {
	Written uint64
	// Dropped by reason: queue_full, write_failed, shutdown.
	Dropped map[string]uint64
}

// RegisterPayloads installs (or, with nil, removes) the function whose
// result is exported as fmgate_payload_log_written_total and
// fmgate_payload_log_dropped_total{reason}. It is called at every scrape
// and must be fast.
func (m *Metrics) RegisterPayloads(f func() PayloadCounts) {
	if f == nil {
		m.payloads.fn.Store(nil)
		return
	}
	m.payloads.fn.Store(&f)
}

var (
	descPayloadsWritten = prometheus.NewDesc("fmgate_payload_log_written_total",
		"Turn payloads written to the payload log.", nil, nil)
	descPayloadsDropped = prometheus.NewDesc("fmgate_payload_log_dropped_total",
		"Turn payloads chosen for the payload log but not written, by reason (queue_full, write_failed, shutdown).",
		[]string{"reason"}, nil)
)

// payloadCollector exports the payload log writer's counts.
type payloadCollector struct {
	fn atomic.Pointer[func() PayloadCounts]
}

func (c *payloadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPayloadsWritten
	ch <- descPayloadsDropped
}

func (c *payloadCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.fn.Load()
	if f == nil {
		return
	}
	counts := (*f)()
	ch <- prometheus.MustNewConstMetric(descPayloadsWritten, prometheus.CounterValue, float64(counts.Written))
	for _, reason := range sortedKeys(counts.Dropped) {
		ch <- prometheus.MustNewConstMetric(descPayloadsDropped, prometheus.CounterValue, float64(counts.Dropped[reason]), reason)
	}
}
