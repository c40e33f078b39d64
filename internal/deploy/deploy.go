// Package deploy spreads a model tier's calls over its deployments: the
// same model in several regions, accounts or endpoints, each with its own
// provider, breaker and weight. A Pool is the tier's provider: it picks a
// deployment for each call (weighted, least busy, or lowest latency), and
// when one is throttled or failing it sheds the call to its siblings, so
// that the tier falls back to the next tier only when every deployment
// has failed it.
//
// What the pool learns is shared through a State: in memory for one
// instance, in Redis for a fleet, so that a deployment one instance saw
// throttled is spared by all. Each deployment also has an adaptive
// pressure level of its own (Pressure, as the retrier keeps one per tier):
// a deployment under pressure is sent a smaller share of the calls, one
// whose pressure circuit is open none, while its siblings keep theirs.
package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/retry"
)

// Strategies of a pool.
const (
	Weighted      = "weighted"
	LeastBusy     = "least-busy"
	LowestLatency = "lowest-latency"
)

// Deployment is one place a tier's model is served from.
type Deployment struct {
	// Name is the deployment's name within its tier (e.g. "us-west-2").
	Name string
	// Model is what the provider is asked for in Request.Model: the name
	// it knows this deployment by.
	Model    string
	Weight   int
	Provider provider.Provider
	Breaker  breaker.Breaker
	// Quota names the deployment's own TPM/RPM ceiling in the ledger;
	// "": only the tier's.
	Quota string
	// Pressure names the deployment's adaptive pressure level
	// (Pool.WithPressure), as its breaker is named: "<tier>@<name>"; "":
	// none is kept, and it counts as NORMAL.
	Pressure string
}

// Pressure is what a pool needs of the adaptive retry pressure: each
// deployment's outcomes recorded, and their levels read together
// (retry.Pressure satisfies it).
type Pressure interface {
	Record(ctx context.Context, name string, o retry.Outcome)
	Levels(ctx context.Context, names []string) []retry.Level
}

// Quota is what a pool needs of the quota ledger: a reservation on a
// deployment's own ceiling (quota.Ledger satisfies it through Ledger).
type Quota interface {
	// Reserve takes tokens and one request of model's ceiling; ok is false
	// when the ceiling has no room. settle ends the reservation with the
	// tokens billed (release: -1).
	Reserve(ctx context.Context, model string, tokens int) (settle func(tokens int), ok bool, err error)
}

// Stat is what the state knows of a deployment now.
type Stat struct {
	// InFlight calls on it, fleet-wide.
	InFlight int
	// Latency is the moving average of its calls' time to the end, zero
	// before the first.
	Latency time.Duration
	// ThrottledUntil is when it may be called again after throttling.
	ThrottledUntil time.Time
}

// State is what the pools of a fleet share about their deployments.
// Every call is bounded by its ctx.
type State interface {
	// Stats returns the stat of each of deps of tier.
	Stats(ctx context.Context, tier string, deps []string) ([]Stat, error)
	// Begin counts a call in flight on dep, until End with the same id or
	// until ttl passes (its instance died).
	Begin(ctx context.Context, tier, dep, id string, ttl time.Duration) error
	// End ends call id and folds its latency into dep's average.
	End(ctx context.Context, tier, dep, id string, latency time.Duration) error
	// Throttle spares dep for d from now (extending, never shortening, a
	// throttle in force).
	Throttle(ctx context.Context, tier, dep string, d time.Duration) error
}

// ewmaWeight is the weight of the newest latency in the moving average.
const ewmaWeight = 0.2

// callTTL bounds how long a call counts as in flight without its End.
const callTTL = 5 * time.Minute

// Cooldowns of a throttled deployment: the provider's Retry-After when it
// gave one, bounded; else the default.
const (
	defaultCooldown = 2 * time.Second
	maxCooldown     = 60 * time.Second
)

// stateTimeout bounds each call to the state, so that a slow Redis costs
// a turn little: without the state the pool still balances by weight.
const stateTimeout = 50 * time.Millisecond

// Observer hears how each call to a deployment went: outcome is "ok",
// "throttled", "failed" or "error" (a client error, not the deployment's
// fault), or "skipped" when it was passed over (breaker open, throttled).
type Observer func(tier, dep, outcome string, latency time.Duration)

// Pool is a tier's provider over its deployments. It is safe for
// concurrent use.
type Pool struct {
	tier     string
	deps     []Deployment
	strategy string
	state    State
	now      func() time.Time
	observe  Observer
	quota    Quota
	estimate func(*provider.Request) int
	pressure Pressure
	// pressured names the deployments that keep a pressure level; at
	// holds their indexes in deps.
	pressured []string
	at        []int

	mu      sync.Mutex
	current []int // smooth weighted round robin
	seq     uint64
}

// New returns the pool of tier. state may be nil (nothing shared: weights
// alone, no throttle memory across instances).
func New(tier string, deps []Deployment, strategy string, state State, now func() time.Time, observe Observer) (*Pool, error) {
	if len(deps) == 0 {
		return nil, fmt.Errorf("deploy: tier %s has no deployment", tier)
	}
	switch strategy {
	case "":
		strategy = Weighted
	case Weighted, LeastBusy, LowestLatency:
	default:
		return nil, fmt.Errorf("deploy: unknown strategy %q (want %s, %s or %s)", strategy, Weighted, LeastBusy, LowestLatency)
	}
	if now == nil {
		now = time.Now
	}
	if state == nil {
		state = NewMemory(now)
	}
	if observe == nil {
		observe = func(string, string, string, time.Duration) {}
	}
	for i := range deps {
		if deps[i].Weight <= 0 {
			deps[i].Weight = 1
		}
	}
	return &Pool{tier: tier, deps: deps, strategy: strategy, state: state, now: now, observe: observe, current: make([]int, len(deps))}, nil
}

// WithQuota makes the pool reserve each call on its deployment's own
// ceiling (Deployment.Quota) first, with estimate's tokens: a deployment
// without room is passed over like a throttled one.
func (p *Pool) WithQuota(q Quota, estimate func(*provider.Request) int) *Pool {
	p.quota, p.estimate = q, estimate
	return p
}

// WithPressure makes the pool record each call's outcome to its
// deployment's pressure level (Deployment.Pressure) and weigh those levels
// when it picks: a deployment's weight is halved at each level above
// NORMAL (SLIGHT, RECOVERY, HIGH), so that it is sent fewer calls but
// still some, whose outcomes can bring its level down again; its average
// latency counts double at each level for lowest-latency; and a
// deployment at CIRCUIT_OPEN is passed over, as one whose breaker is open,
// until its cooldown ends. A call its caller gave up on is not recorded.
func (p *Pool) WithPressure(pr Pressure) *Pool {
	p.pressure, p.pressured, p.at = pr, nil, nil
	for i, d := range p.deps {
		if d.Pressure != "" {
			p.pressured, p.at = append(p.pressured, d.Pressure), append(p.at, i)
		}
	}
	return p
}

// Deployments names the pool's deployments, in order.
func (p *Pool) Deployments() []string {
	names := make([]string, len(p.deps))
	for i, d := range p.deps {
		names[i] = d.Name
	}
	return names
}

// Complete implements provider.Provider.
func (p *Pool) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.call(ctx, req, func(ctx context.Context, d Deployment, req *provider.Request) (*provider.Response, error) {
		return d.Provider.Complete(ctx, req)
	}, nil)
}

// Stream implements provider.Provider. Once a deployment has emitted text
// the call stays on it: a cut stream is the tier's failure, not shed.
func (p *Pool) Stream(ctx context.Context, req *provider.Request, emit func(text string) error) (*provider.Response, error) {
	started := false
	return p.call(ctx, req, func(ctx context.Context, d Deployment, req *provider.Request) (*provider.Response, error) {
		return d.Provider.Stream(ctx, req, func(text string) error {
			started = true
			return emit(text)
		})
	}, &started)
}

// call tries the deployments in the order order gives until one answers.
func (p *Pool) call(ctx context.Context, req *provider.Request, do func(context.Context, Deployment, *provider.Request) (*provider.Response, error), started *bool) (*provider.Response, error) {
	order := p.order(ctx)
	if len(order) == 0 {
		return nil, &provider.Error{Kind: provider.KindUnavailable, Model: p.tier,
			Err: fmt.Errorf("every deployment of %s is failing: its pressure circuit is open", p.tier)}
	}
	var last error
	tried := 0
	for _, i := range order {
		d := p.deps[i]
		settle, ok := p.reserve(ctx, d, req)
		if !ok {
			p.observe(p.tier, d.Name, "skipped", 0)
			last = &provider.Error{Kind: provider.KindThrottled, Model: d.Model, RetryAfter: defaultCooldown,
				Err: fmt.Errorf("deployment %s/%s: its own quota is full", p.tier, d.Name)}
			continue
		}
		permit, err := d.Breaker.Allow(ctx)
		if errors.Is(err, breaker.ErrOpen) {
			settle(-1)
			p.observe(p.tier, d.Name, "skipped", 0)
			last = err
			continue
		}
		tried++
		id := p.callID()
		p.withState(ctx, func(ctx context.Context) error { return p.state.Begin(ctx, p.tier, d.Name, id, callTTL) })
		start := p.now()
		r := *req
		r.Model = d.Model
		resp, err := do(ctx, d, &r)
		took := p.now().Sub(start)
		p.withState(ctx, func(ctx context.Context) error { return p.state.End(ctx, p.tier, d.Name, id, took) })
		if resp != nil {
			settle(resp.Usage.Input() + resp.Usage.OutputTokens)
		} else {
			settle(-1)
		}
		p.judge(ctx, d, err)
		if err == nil {
			permit.Done(ctx, true)
			p.observe(p.tier, d.Name, "ok", took)
			return resp, nil
		}
		last = fmt.Errorf("deployment %s/%s: %w", p.tier, d.Name, err)
		switch kind := provider.KindOf(err); kind {
		case provider.KindThrottled, provider.KindNotReady:
			permit.Release(ctx)
			cool := min(max(provider.RetryAfterOf(err), defaultCooldown), maxCooldown)
			p.withState(ctx, func(ctx context.Context) error { return p.state.Throttle(ctx, p.tier, d.Name, cool) })
			p.observe(p.tier, d.Name, "throttled", took)
		case provider.KindUnavailable, provider.KindTimeout, provider.KindUnknown:
			if ctx.Err() != nil {
				permit.Release(ctx)
				return nil, last
			}
			permit.Done(ctx, false)
			p.observe(p.tier, d.Name, "failed", took)
		default:
			// The request's fault (validation, access, a guardrail) or the
			// caller's: another deployment would answer the same.
			permit.Release(ctx)
			p.observe(p.tier, d.Name, "error", took)
			return nil, last
		}
		if started != nil && *started {
			return nil, last // the client has part of this answer: no other deployment may finish it
		}
	}
	if tried == 0 && last != nil {
		// Every deployment's breaker is open: the tier is down as a whole.
		return nil, &provider.Error{Kind: provider.KindUnavailable, Model: p.tier,
			Err: fmt.Errorf("every deployment of %s is failing: %w", p.tier, last)}
	}
	return nil, last
}

// reserve reserves req on d's own ceiling; ok is false when it has no
// room. Without a ceiling, or when the ledger does not answer, the call
// goes on (the tier's own reservation still bounds it).
func (p *Pool) reserve(ctx context.Context, d Deployment, req *provider.Request) (settle func(int), ok bool) {
	none := func(int) {}
	if d.Quota == "" || p.quota == nil {
		return none, true
	}
	settle, ok, err := p.quota.Reserve(ctx, d.Quota, p.estimate(req))
	if err != nil || settle == nil {
		return none, err != nil || ok
	}
	return settle, ok
}

// judge records to d's pressure what err (nil: an answer) says about it,
// as the retrier would of a tier: nothing for a call its caller gave up
// on or that ran out of its time.
func (p *Pool) judge(ctx context.Context, d Deployment, err error) {
	if p.pressure == nil || d.Pressure == "" {
		return
	}
	o := retry.OutcomeOK
	if err != nil {
		kind := provider.KindOf(err)
		if kind == provider.KindCanceled || ctx.Err() != nil {
			return
		}
		o = retry.OutcomeOf(kind)
	}
	p.pressure.Record(ctx, d.Pressure, o)
}

// levels are the deployments' pressure levels, read in one call; NORMAL
// for those without one.
func (p *Pool) levels(ctx context.Context) []retry.Level {
	out := make([]retry.Level, len(p.deps))
	if p.pressure == nil || len(p.pressured) == 0 {
		return out
	}
	if got := p.pressure.Levels(ctx, p.pressured); len(got) == len(p.pressured) {
		for j, l := range got {
			out[p.at[j]] = l
		}
	}
	return out
}

// share scales a deployment's weight by its pressure level: 8 at NORMAL,
// halved at each level above it, 1 at HIGH.
func share(l retry.Level) int { return 8 >> min(max(int(l), 0), int(retry.LevelHigh)) }

// order is the deployments in the order to try: those throttled now and
// those whose pressure circuit is open left out, the strategy's choice
// first, then the others by weight for their pressure. It is empty when
// every deployment's pressure circuit is open.
func (p *Pool) order(ctx context.Context) []int {
	names := p.Deployments()
	var stats []Stat
	p.withState(ctx, func(ctx context.Context) (err error) {
		stats, err = p.state.Stats(ctx, p.tier, names)
		return err
	})
	levels := p.levels(ctx)
	now := p.now()
	avail := make([]int, 0, len(p.deps))
	spare := -1 // of those throttled, the one whose throttle ends first
	for i := range p.deps {
		if levels[i] == retry.LevelCircuitOpen {
			p.observe(p.tier, p.deps[i].Name, "skipped", 0)
			continue
		}
		if stats != nil && now.Before(stats[i].ThrottledUntil) {
			p.observe(p.tier, p.deps[i].Name, "skipped", 0)
			if spare < 0 || stats[i].ThrottledUntil.Before(stats[spare].ThrottledUntil) {
				spare = i
			}
			continue
		}
		avail = append(avail, i)
	}
	if len(avail) == 0 {
		// All throttled: try the one whose throttle ends first, rather
		// than none, in case it is over.
		if spare < 0 {
			return nil
		}
		return []int{spare}
	}
	weight := func(i int) int { return p.deps[i].Weight * share(levels[i]) }
	pick := p.pick(avail, stats, levels, weight)
	out := []int{pick}
	rest := slices.DeleteFunc(slices.Clone(avail), func(i int) bool { return i == pick })
	slices.SortStableFunc(rest, func(a, b int) int { return weight(b) - weight(a) })
	return append(out, rest...)
}

// pick chooses among avail by the pool's strategy, with each deployment's
// weight for its pressure. Without stats (the state did not answer) every
// strategy falls back to weights.
func (p *Pool) pick(avail []int, stats []Stat, levels []retry.Level, weight func(int) int) int {
	switch {
	case p.strategy == LeastBusy && stats != nil:
		return slices.MinFunc(avail, func(a, b int) int {
			// Fewest in flight for its weight; ties to the heavier.
			la, lb := stats[a].InFlight*weight(b), stats[b].InFlight*weight(a)
			if la != lb {
				return la - lb
			}
			return weight(b) - weight(a)
		})
	case p.strategy == LowestLatency && stats != nil:
		// An unmeasured deployment is tried first, so that each gets an
		// average; one under pressure counts as slower.
		latency := func(i int) time.Duration {
			return stats[i].Latency * time.Duration(share(retry.LevelNormal)/share(levels[i]))
		}
		return slices.MinFunc(avail, func(a, b int) int { return int(latency(a) - latency(b)) })
	}
	return p.weighted(avail, weight)
}

// weighted is smooth weighted round robin over avail: each deployment gets
// its weight's share of calls, spread evenly.
func (p *Pool) weighted(avail []int, weight func(int) int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	total, best := 0, -1
	for _, i := range avail {
		p.current[i] += weight(i)
		total += weight(i)
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	p.current[best] -= total
	return best
}

func (p *Pool) callID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	return fmt.Sprintf("%p-%d", p, p.seq)
}

// withState runs fn against the state within stateTimeout; a failure costs
// only the balancing's precision, never the call.
func (p *Pool) withState(ctx context.Context, fn func(context.Context) error) {
	if _, local := p.state.(*Memory); local {
		_ = fn(ctx)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stateTimeout)
	defer cancel()
	_ = fn(ctx)
}

// Snapshot is a deployment's state for the admin API and metrics.
type Snapshot struct {
	Tier       string        `json:"tier"`
	Deployment string        `json:"deployment"`
	Weight     int           `json:"weight"`
	Strategy   string        `json:"strategy"`
	Breaker    string        `json:"breaker"`
	InFlight   int           `json:"inFlight"`
	Latency    time.Duration `json:"latencyNs"`
	Throttled  bool          `json:"throttled"`
	Until      time.Time     `json:"throttledUntil,omitzero"`
	// Pressure is the deployment's adaptive pressure level (NORMAL,
	// SLIGHT, RECOVERY, HIGH, CIRCUIT_OPEN); empty when none is kept.
	Pressure string `json:"pressure,omitempty"`
}

// Snapshots reports each deployment's state.
func (p *Pool) Snapshots(ctx context.Context) ([]Snapshot, error) {
	stats, err := p.state.Stats(ctx, p.tier, p.Deployments())
	if err != nil {
		return nil, err
	}
	levels := p.levels(ctx)
	now := p.now()
	out := make([]Snapshot, len(p.deps))
	for i, d := range p.deps {
		b := "unknown"
		if s, err := d.Breaker.Snapshot(ctx); err == nil {
			b = s.State.String()
		}
		out[i] = Snapshot{Tier: p.tier, Deployment: d.Name, Weight: d.Weight, Strategy: p.strategy, Breaker: b,
			InFlight: stats[i].InFlight, Latency: stats[i].Latency, Throttled: now.Before(stats[i].ThrottledUntil), Until: stats[i].ThrottledUntil}
		if p.pressure != nil && d.Pressure != "" {
			out[i].Pressure = levels[i].String()
		}
	}
	return out, nil
}
