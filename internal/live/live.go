// Package live keeps fmgate's live operations figures: a sliding window
// (default 60 s) of what the gateway is doing right now, derived from the
// spans it emits (turns, errors, latency and time-to-first-token
// percentiles, the tiers that answered, cost and tokens per minute),
// joined with the current state of the breakers, quotas and queue, plus a
// projection of when each model's tokens-per-minute ceiling runs out.
//
// An Aggregator is an events.Sink: the emitter hands it finished spans and
// it folds them into one bucket per second, O(1) per span. Run computes a
// Snapshot every Interval, keeps the last History of them and streams them
// to dashboards over Server-Sent Events (Handler: GET /admin/live and GET
// /admin/live/snapshot).
package live

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// State is what the gateway's stateful policies look like at one moment. It
// is read through the state callback given to New, once per snapshot.
type State struct {
	Breakers []Breaker
	// Quota holds one entry per model with a ceiling.
	Quota []Quota
	Queue QueueState
	// Pressure holds the adaptive pressure level of each model tier and
	// of each deployment of a tier that has several.
	Pressure []Pressure
}

// Pressure is one model tier's or deployment's adaptive pressure level.
type Pressure struct {
	// Name is the tier's, or the deployment's "<tier>@<deployment>" (as
	// its breaker is named).
	Name string `json:"name"`
	// Level is NORMAL, SLIGHT, RECOVERY, HIGH or CIRCUIT_OPEN.
	Level string `json:"level"`
}

// Breaker is one circuit breaker's position.
type Breaker struct {
	Name string `json:"name"`
	// State is "closed", "half_open" or "open".
	State string `json:"state"`
}

// Quota is one model's use of its tokens- and requests-per-minute ceiling.
type Quota struct {
	Model string `json:"model"`
	// ModelID is the provider's identifier of Model, the one spans carry in
	// artifact.model_id (and so TokensPerMinute's key). Projections join
	// the two through it. Omitted when the quota is keyed by that id.
	ModelID    string `json:"modelId,omitempty"`
	TPMUsed    int    `json:"tpmUsed"`
	TPMCeiling int    `json:"tpmCeiling"`
	RPMUsed    int    `json:"rpmUsed"`
	RPMCeiling int    `json:"rpmCeiling"`
	// Saturation is the share of the ceiling in use, 0..1 (fleet-wide in
	// fleet mode). In State, 0 means "compute it": the snapshot then carries
	// max(TPMUsed/TPMCeiling, RPMUsed/RPMCeiling). Always clamped to 0..1.
	Saturation float64 `json:"saturation"`
}

// QueueState is the priority queue's content.
type QueueState struct {
	Depth int
	// ByPriority counts waiting turns by class name ("P0".."P3").
	ByPriority map[string]int
	// OldestWait is how long the longest-waiting turn has been queued.
	OldestWait time.Duration
}

// Snapshot is the live figures at one moment, in the JSON shape the
// dashboards read. Maps and slices are never nil, so they encode as {} and
// [].
type Snapshot struct {
	T             time.Time `json:"t"`
	WindowSeconds int       `json:"windowSeconds"`
	// Turns counts the turn spans that ended in the window; TurnsPerSecond
	// is Turns / WindowSeconds.
	Turns          int64   `json:"turns"`
	TurnsPerSecond float64 `json:"turnsPerSecond"`
	// Errors counts the turns the gateway failed (outcome.status "failed"
	// with a code that is not a refusal); a degraded answer is not an
	// error. ErrorRate is Errors/Turns, 0 without turns.
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"errorRate"`
	// ErrorsByCode counts those turns by outcome.error_code ("unknown" when
	// empty).
	ErrorsByCode map[string]int64 `json:"errorsByCode"`
	// Refused counts the turns refused by design: the client's own error
	// (a bad or unauthorised request, a client gone) or a policy's answer
	// (a rate limit, a budget, a full queue). They are failed turns in the
	// events, not gateway errors. RefusedByCode counts them by code.
	Refused       int64            `json:"refused"`
	RefusedByCode map[string]int64 `json:"refusedByCode"`
	// LatencyMs is the turn duration (duration_ms); TTFTMs the time to
	// first token of the turns that streamed (stream.ts_start −
	// turn.ts_start).
	LatencyMs Percentiles `json:"latencyMs"`
	TTFTMs    Percentiles `json:"ttftMs"`
	// Tiers counts turns by what served them: outcome.fallback_used when
	// degraded, else artifact.model_id, else "none".
	Tiers map[string]int64 `json:"tiers"`
	// CostUSDPerMinute is the cost of every span in the window, per minute.
	CostUSDPerMinute float64 `json:"costUsdPerMinute"`
	// TokensPerMinute is tokens in + out of model_attempt spans, by model,
	// per minute.
	TokensPerMinute map[string]float64 `json:"tokensPerMinute"`
	Queue           Queue              `json:"queue"`
	Breakers        []Breaker          `json:"breakers"`
	Quota           []Quota            `json:"quota"`
	// Pressure is State.Pressure, sorted by name.
	Pressure    []Pressure   `json:"pressure"`
	Projections []Projection `json:"projections"`
	// StateError says why breakers, quota, queue and pressure could not be
	// read; they are then empty while the span-derived figures stay.
	// Omitted when fine.
	StateError string `json:"stateError,omitempty"`
	// Instances is the fleet breakdown when the aggregator shares its
	// window with a fleet (SetFleet): one line per instance that published
	// within the last 3 × Interval, sorted by id; the span-derived figures
	// above are then the fleet's (histograms merged, so percentiles are of
	// every turn of the fleet). Omitted without a fleet.
	Instances []InstanceFigures `json:"instances,omitempty"`
	// FleetError says why the fleet's windows could not be read; the
	// figures are then this instance's alone. Omitted when fine.
	FleetError string `json:"fleetError,omitempty"`
}

// Percentiles are nearest-rank percentiles (the ceil(q·n)-th smallest
// sample of the window) in milliseconds, rounded to 0.1 ms; null when the
// window holds no sample.
//
// They are estimated from a fixed log-linear histogram (16 buckets per
// power of two, exact below 32 ms, counting up to about 17.5 minutes),
// interpolated within the bucket and clamped to the window's smallest and
// largest sample: exact below 32 ms and for a single or uniform sample,
// otherwise within 1/16 (6.25%) of the exact value.
type Percentiles struct {
	P50 *float64 `json:"p50"`
	P95 *float64 `json:"p95"`
	P99 *float64 `json:"p99"`
}

// Queue is the queue in a Snapshot.
type Queue struct {
	Depth        int            `json:"depth"`
	ByPriority   map[string]int `json:"byPriority"`
	OldestWaitMs int64          `json:"oldestWaitMs"`
}

// Projection says when a model is expected to reach its TPM ceiling. There
// is one per model that has a quota entry (named as the entry names it;
// tokens of its ModelID count towards it) or tokens in the window, sorted
// by model. SecondsToExhaustion applies SecondsToExhaustion to the model's
// tokensPerMinute over the last TrendSpan of snapshots (this one included)
// against the quota entry's tpmCeiling; null without a ceiling, without
// enough points, or when the trend is flat or falling.
type Projection struct {
	Model               string   `json:"model"`
	SecondsToExhaustion *float64 `json:"secondsToExhaustion"`
}

// Aggregator folds spans into the live window and serves snapshots. It is
// safe for concurrent use. Create it with New.
type Aggregator struct {
	cfg       Config
	windowSec int64
	state     func(ctx context.Context) (State, error)
	now       func() time.Time
	start     time.Time // when the window began filling

	mu      sync.Mutex // guards ring and pending
	ring    []bucket
	pending pendingStreams
	late    atomic.Uint64 // spans too old for the window

	stateMu   sync.Mutex
	stateCall *stateCall // the call in flight, if any

	hmu      sync.Mutex // guards history, subs and stopped
	history  historyRing
	subs     map[*subscriber]struct{}
	stopped  bool
	done     chan struct{} // closed when Run returns
	running  atomic.Bool
	dropped  atomic.Uint64 // frames not delivered to slow subscribers
	pingEach time.Duration // SSE keep-alive period

	fleet       Fleet  // nil: this instance alone
	instance    string // this instance's id in the fleet
	fleetErrors atomic.Uint64
}

// New returns an Aggregator. Zero fields of cfg take their defaults; the
// result must pass Validate, else New panics (a programming error: check
// configuration with Validate first).
//
// state reads the breakers, quota and queue; it is called once per
// Snapshot with a deadline of Interval/2 and must honour it. It may be nil
// (the snapshot then has none). now may be nil (time.Now).
func New(cfg Config, state func(ctx context.Context) (State, error), now func() time.Time) *Aggregator {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("live: invalid config: %v", err))
	}
	if now == nil {
		now = time.Now
	}
	a := &Aggregator{
		cfg:       cfg,
		windowSec: int64(cfg.Window / time.Second),
		state:     state,
		now:       now,
		start:     now(),
		ring:      make([]bucket, cfg.Window/time.Second),
		pending:   newPendingStreams(maxPendingStreams),
		history:   newHistoryRing(cfg.historyLen()),
		subs:      make(map[*subscriber]struct{}),
		done:      make(chan struct{}),
		pingEach:  15 * time.Second,
	}
	for i := range a.ring {
		a.ring[i].init()
	}
	return a
}

// Name implements events.Sink.
func (a *Aggregator) Name() string { return "live" }

// Write implements events.Sink: it folds each span into the bucket of the
// second it ended in (a span dated in the future counts now; one older than
// the window is dropped and counted in Stats). It takes one short lock per
// batch and never waits on subscribers.
func (a *Aggregator) Write(_ context.Context, batch []events.Event) error {
	nowSec := a.now().Unix()
	a.mu.Lock()
	for i := range batch {
		a.add(&batch[i], nowSec)
	}
	a.mu.Unlock()
	return nil
}

const (
	spanTurn         = "turn"
	spanStream       = "stream"
	spanModelAttempt = "model_attempt"
)

func (a *Aggregator) add(e *events.Event, nowSec int64) {
	var streamStart time.Time
	switch e.Name {
	case spanStream:
		// The stream span is emitted before its turn: remember when the
		// first token left until the turn arrives.
		if e.ParentSpanID != "" && !e.TSStart.IsZero() {
			a.pending.put(spanKey{e.TraceID, e.ParentSpanID}, e.TSStart)
		}
	case spanTurn:
		streamStart, _ = a.pending.take(spanKey{e.TraceID, e.SpanID})
	}
	b := a.bucketAt(e.TSEnd, nowSec)
	if b == nil {
		a.late.Add(1)
		return
	}
	if c := e.Resource.CostUSD; !math.IsNaN(c) && !math.IsInf(c, 0) {
		b.cost += c // a non-finite cost would make every snapshot unencodable
	}
	switch {
	case e.Name == spanTurn && e.Node.NodeID == events.NodeEmbeddings:
		// An embedding call: its cost counts, but it is no chat turn.
	case e.Name == spanTurn:
		b.turns++
		if e.Outcome.Status == events.StatusFailed {
			b.failed++
			inc(b.errs, orDefault(e.Outcome.ErrorCode, "unknown"), 1)
		}
		b.lat.add(e.DurationMS)
		tier := e.Outcome.FallbackUsed
		if tier == "" {
			tier = orDefault(e.Artifact.ModelID, "none")
		}
		inc(b.tiers, tier, 1)
		if !streamStart.IsZero() {
			if d := streamStart.Sub(e.TSStart); d >= 0 {
				b.ttft.add(int64((d + time.Millisecond/2) / time.Millisecond))
			}
		}
	case e.Name == spanModelAttempt:
		if n := int64(e.Resource.TokensIn) + int64(e.Resource.TokensOut); n > 0 {
			inc(b.tokens, orDefault(e.Artifact.ModelID, "unknown"), n)
		}
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Snapshot computes the current figures: the span window as of now, the
// state read through the callback (once per call) and the projections from
// the history. Run calls it every Interval; GET /admin/live/snapshot once
// per request.
func (a *Aggregator) Snapshot(ctx context.Context) Snapshot {
	now := a.now()
	s := a.windowFigures(now)
	if a.fleet != nil {
		if err := a.fleetFigures(ctx, now, &s); err != nil {
			s.FleetError = err.Error()
		}
	}
	st, err := a.readState(ctx)
	if err != nil {
		s.StateError = err.Error()
		st = State{}
	}
	applyState(&s, st)
	s.Projections = a.projections(now, s)
	return s
}

// applyState copies st into s in a stable order.
func applyState(s *Snapshot, st State) {
	s.Breakers = append(make([]Breaker, 0, len(st.Breakers)), st.Breakers...)
	sort.Slice(s.Breakers, func(i, j int) bool { return s.Breakers[i].Name < s.Breakers[j].Name })
	s.Pressure = append(make([]Pressure, 0, len(st.Pressure)), st.Pressure...)
	sort.Slice(s.Pressure, func(i, j int) bool { return s.Pressure[i].Name < s.Pressure[j].Name })
	s.Quota = make([]Quota, 0, len(st.Quota))
	for _, q := range st.Quota {
		if q.Saturation == 0 {
			q.Saturation = max(ratio(q.TPMUsed, q.TPMCeiling), ratio(q.RPMUsed, q.RPMCeiling))
		}
		q.Saturation = min(max(q.Saturation, 0), 1)
		s.Quota = append(s.Quota, q)
	}
	sort.Slice(s.Quota, func(i, j int) bool { return s.Quota[i].Model < s.Quota[j].Model })
	s.Queue = Queue{
		Depth:        st.Queue.Depth,
		ByPriority:   make(map[string]int, len(st.Queue.ByPriority)),
		OldestWaitMs: st.Queue.OldestWait.Milliseconds(),
	}
	for k, v := range st.Queue.ByPriority {
		s.Queue.ByPriority[k] = v
	}
}

func ratio(used, ceiling int) float64 {
	if ceiling <= 0 {
		return 0
	}
	return float64(used) / float64(ceiling)
}

// stateCall is one call of the state callback, shared by every snapshot
// taken while it runs.
type stateCall struct {
	done    chan struct{}
	st      State
	err     error
	waiters int // snapshots that asked for this call; guarded by stateMu
}

// readState returns the state through the callback, waiting at most
// Interval/2 (or until ctx ends). Concurrent snapshots share one call, and
// a callback that ignores its deadline is abandoned, not called again until
// it returns, so it can neither stall the snapshot loop nor pile up.
func (a *Aggregator) readState(ctx context.Context) (State, error) {
	if a.state == nil {
		return State{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Interval/2)
	defer cancel()
	a.stateMu.Lock()
	c := a.stateCall
	if c == nil {
		c = &stateCall{done: make(chan struct{})}
		a.stateCall = c
		// The call has a deadline of its own, not the first caller's.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Interval/2)
		go func() {
			defer ccancel()
			c.st, c.err = a.state(cctx)
			a.stateMu.Lock()
			a.stateCall = nil
			a.stateMu.Unlock()
			close(c.done)
		}()
	}
	c.waiters++
	a.stateMu.Unlock()
	select {
	case <-c.done:
		if c.err != nil {
			return State{}, fmt.Errorf("state: %w", c.err)
		}
		return c.st, nil
	case <-ctx.Done():
		return State{}, fmt.Errorf("state: %w", ctx.Err())
	}
}

// Stats counts what the aggregator could not use or deliver.
type Stats struct {
	// LateSpans counts spans that ended before the window and were dropped.
	LateSpans uint64
	// DroppedFrames counts snapshots not sent to a subscriber that was
	// still behind on earlier ones.
	DroppedFrames uint64
	// Subscribers is the number of open GET /admin/live streams.
	Subscribers int
}

// Stats returns the counters, for metrics.
func (a *Aggregator) Stats() Stats {
	a.hmu.Lock()
	n := len(a.subs)
	a.hmu.Unlock()
	return Stats{LateSpans: a.late.Load(), DroppedFrames: a.dropped.Load(), Subscribers: n}
}

// round rounds v to the given number of decimals.
func round(v float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(v*p) / p
}
