package server

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/queue"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/retry"
	"github.com/fmgate/fmgate/internal/session"
)

// fleetBatcher is the gateway's Batcher in fleet mode. Every turn gets a
// Redis batch (redisbatch), and Begin reads ahead, in one round trip, what
// steps 2–5 consult: the session's history, the rate-limit decision, the
// budget counters, the breakers of the models, the quota saturation the
// planner checks and the retry pressure of the first model. Each policy's
// own Redis code makes those calls, with its own timeouts and outage rules;
// the adapters then take the answers from the turn's context instead of
// asking again.
//
// For a P0 turn the same round trip also reserves quota on the model the
// planner will most likely pick, with that model's breaker permit (see
// speculate): its exact size needs the history being read, so the
// reservation is sized at what most recent turns needed. When step 6 asks for that
// model and no more than was reserved, the turn has its reservation without
// a second round trip; otherwise the hold is released by a write queued
// onto the turn's next command, and step 6 reserves as before. The record
// step's writes, with the quota settlement, the breaker outcome and the
// retry deposit queued since, go in the last round trip.
type fleetBatcher struct {
	rdb *redis.Client
	log *slog.Logger
	now func() time.Time
	// current is the config in force (a reload swaps it); a turn's own
	// figures come from its snapshot (configOf).
	current  func() *config.Config
	sessions session.Store
	limiter  *ratelimit.Limiter
	enf      *budget.Enforcer
	counters budget.Counters
	breakers *breaker.Set
	ledger   quota.Ledger
	pressure retry.Pressure
	// search is the catalog search's breaker; nil without the catalog.
	// searchClosed is whether it was closed when last read: only then is
	// its permit taken ahead, since a closed breaker's permit costs nothing
	// when the turn is refused before it searches, and a half-open one's
	// would hold a probe slot.
	search       breaker.Breaker
	searchClosed atomic.Bool
	// queue is woken when a speculative reservation is released.
	queue *queue.Queue
	// seen is what the last turns saw of each model tier, by name: it
	// picks the model a P0 turn reserves on ahead.
	seen seenSet
	// sizes are the reservations step 6 asked for lately: they size the
	// reservation taken ahead.
	sizes recentSizes
}

// recentSizes keeps the last sizesKept reservation sizes of P0 turns.
type recentSizes struct {
	mu   sync.Mutex
	ring [sizesKept]int
	n    int // sizes added in all
}

const (
	sizesKept = 128
	// sizesNeeded is how many sizes must be known before they size a
	// reservation taken ahead; until then it is the largest a turn can
	// need.
	sizesNeeded = 32
)

func (r *recentSizes) add(tokens int) {
	r.mu.Lock()
	r.ring[r.n%sizesKept] = tokens
	r.n++
	r.mu.Unlock()
}

// typicalMax is the 95th percentile of the recent sizes with a tenth more,
// and false while fewer than sizesNeeded are known. A turn needing more
// than that (one in twenty or fewer) has the hold replaced by an exact
// reservation in step 6, a round trip of its own.
func (r *recentSizes) typicalMax() (int, bool) {
	r.mu.Lock()
	n := min(r.n, sizesKept)
	var buf [sizesKept]int
	copy(buf[:], r.ring[:n])
	r.mu.Unlock()
	if n < sizesNeeded {
		return 0, false
	}
	s := buf[:n]
	slices.Sort(s)
	return s[(n*95+99)/100-1] * 11 / 10, true
}

// modelSeen is what this instance last saw of one model.
type modelSeen struct {
	// state is the breaker's state when last read; -1 before the first read.
	state atomic.Int32
	// full is whether the quota was last seen without room for a turn's
	// largest reservation (or refused one).
	full atomic.Bool
}

// seenSet is what this instance last saw of each model tier.
type seenSet struct {
	m sync.Map // tier name → *modelSeen
	// isTier reports whether a name is a model tier in force: only those
	// get a record, so that the set stays as small as the config.
	isTier func(string) bool
}

// of is name's record, nil for a name that is no model tier.
func (s *seenSet) of(name string) *modelSeen {
	if v, ok := s.m.Load(name); ok {
		return v.(*modelSeen)
	}
	if s.isTier == nil || !s.isTier(name) {
		return nil
	}
	fresh := &modelSeen{}
	fresh.state.Store(-1)
	v, _ := s.m.LoadOrStore(name, fresh)
	return v.(*modelSeen)
}

// searchBreaker is the name of the catalog search's breaker.
const searchBreaker = "search"

// ahead is what Begin read for one turn. Each answer is taken once, by the
// call it stands for; a call that finds nothing (or a different question)
// asks Redis itself.
type ahead struct {
	mu      sync.Mutex
	history *historyAnswer
	limit   *limitAnswer
	totals  *totalsAnswer
	snaps   map[string]breaker.Snapshot
	sats    map[string]quota.Snapshot
	levels  map[string]retry.Level
	permits map[string]permitAnswer
	// spec is the reservation taken ahead, until step 6 takes it or it is
	// released; nil when none was asked for.
	spec *specAnswer
	// needed is the size step 6 asked for (P0), 0 when it did not.
	needed int
}

// specAnswer is a reservation taken ahead on model for up to tokens.
type specAnswer struct {
	model  string
	tokens int
	res    quota.Reservation // nil when refused or failed
	err    error
}

type historyAnswer struct {
	owner, sessionID string
	msgs             []provider.Message
	err              error
}

type limitAnswer struct {
	req ratelimit.Request
	res ratelimit.Result
	err error
}

type totalsAnswer struct {
	userID, sessionID, day string
	tot                    budget.Totals
	err                    error
}

type permitAnswer struct {
	permit breaker.Permit
	err    error
}

type aheadKey struct{}

func aheadFrom(ctx context.Context) *ahead {
	a, _ := ctx.Value(aheadKey{}).(*ahead)
	return a
}

// Begin implements gateway.Batcher.
func (f *fleetBatcher) Begin(ctx context.Context, t *gateway.Turn) (context.Context, func()) {
	b := redisbatch.New(f.rdb, 0, f.log)
	a := &ahead{snaps: map[string]breaker.Snapshot{}, sats: map[string]quota.Snapshot{},
		levels: map[string]retry.Level{}, permits: map[string]permitAnswer{}}
	ctx = context.WithValue(redisbatch.With(ctx, b), aheadKey{}, a)
	end := func() {
		// A reservation taken ahead that no step took (the turn was
		// refused, or ended before step 6) goes back with the last flush.
		f.releaseSpec(ctx, a)
		// So does a breaker permit taken ahead and never used: a half-open
		// probe's place must not be held until the breaker's halfOpenWait.
		for _, p := range a.takePermits() {
			p.permit.Release(ctx)
		}
		if n := a.neededTokens(); n > 0 {
			f.sizes.add(n)
		}
		b.Close(context.WithoutCancel(ctx))
	}

	var calls []func(context.Context)
	if !t.Stateless {
		calls = append(calls, func(ctx context.Context) {
			h := &historyAnswer{owner: t.UserID, sessionID: t.SessionID}
			h.msgs, h.err = f.sessions.History(ctx, t.UserID, t.SessionID)
			a.history = h
		})
	}
	calls = append(calls, func(ctx context.Context) {
		l := &limitAnswer{req: rateRequest(t)}
		l.res, l.err = f.limiter.Check(ctx, l.req)
		a.limit = l
	})
	day := f.enf.Day(f.now())
	calls = append(calls, func(ctx context.Context) {
		tctx, cancel := context.WithTimeout(ctx, f.current().Budget.StoreTimeout)
		defer cancel()
		tot := &totalsAnswer{userID: t.UserID, sessionID: budgetSession(t), day: day}
		tot.tot, tot.err = f.counters.Load(tctx, t.UserID, tot.sessionID, day)
		a.totals = tot
	})
	models := f.route(t.StartTier)
	spec := f.speculate(t, models)
	if spec != nil {
		calls = append(calls, func(ctx context.Context) {
			spec.res, spec.err = f.ledger.Reserve(ctx, spec.model, quota.P0, spec.tokens)
		}, func(ctx context.Context) {
			p, err := f.breakers.Get(spec.model).Allow(ctx)
			a.putPermit(spec.model, permitAnswer{permit: p, err: err})
		})
		a.spec = spec
	}
	mu := &a.mu // the maps below are filled by concurrent calls
	for i, m := range models {
		// The permit asked for ahead answers for its own breaker's state
		// (stateFromPermit, below).
		if spec == nil || m != spec.model {
			calls = append(calls, func(ctx context.Context) {
				if s, err := breaker.StateOf(ctx, f.breakers.Get(m)); err == nil {
					mu.Lock()
					a.snaps[m] = s
					mu.Unlock()
				}
			})
		}
		// The reservation taken ahead answers the planner for its model.
		if t.Priority == gateway.P0 && (spec == nil || m != spec.model) && (i < len(models)-1 || f.seenFull(m)) {
			calls = append(calls, func(ctx context.Context) {
				if s, err := f.ledger.Saturation(ctx, m); err == nil {
					mu.Lock()
					a.sats[m] = s
					mu.Unlock()
				}
			})
		}
	}
	if f.search != nil {
		calls = append(calls, func(ctx context.Context) {
			s, err := breaker.StateOf(ctx, f.search)
			f.searchClosed.Store(err == nil && s.State == breaker.Closed)
		})
		if f.searchClosed.Load() {
			calls = append(calls, func(ctx context.Context) {
				p, err := f.search.Allow(ctx)
				a.putPermit(searchBreaker, permitAnswer{permit: p, err: err})
			})
		}
	}
	if len(models) > 0 {
		m := models[0]
		calls = append(calls, func(ctx context.Context) {
			l := f.pressure.Level(ctx, m)
			mu.Lock()
			a.levels[m] = l
			mu.Unlock()
		})
	}
	redisbatch.Gather(ctx, calls...)
	if spec != nil {
		a.stateFromPermit(spec.model)
	}
	f.remember(a)
	return ctx, end
}

// speculate picks the model a P0 turn reserves on ahead, and the size: the
// first of models whose breaker was last seen closed, skipping those last
// seen open (the planner skips them too); none when the first such model's
// quota was last seen without room for the size (the exact, smaller size
// may still fit), or a model before it was last seen half open or not seen
// yet. The size is what step 6 asked for in most recent turns
// (specTokens), at most the input the budget step admits (history, catalog
// context and all) and the output it may grant. Nil when nothing is to be
// reserved ahead.
func (f *fleetBatcher) speculate(t *gateway.Turn, models []string) *specAnswer {
	if t.Priority != gateway.P0 {
		return nil
	}
	for _, m := range models {
		s := f.seen.of(m)
		if s == nil {
			return nil
		}
		switch breaker.State(s.state.Load()) {
		case breaker.Closed:
			if s.full.Load() {
				return nil // too little room: step 6 reserves its exact size
			}
			return &specAnswer{model: m, tokens: f.specTokens(t, m)}
		case breaker.Open:
			continue
		default:
			return nil
		}
	}
	return nil
}

// specTokens is the size of the reservation taken ahead for t on model:
// what step 6 asked for in most recent turns (recentSizes.typicalMax),
// within the largest it can ask for.
func (f *fleetBatcher) specTokens(t *gateway.Turn, model string) int {
	most := f.mostTokens(t, model)
	if typical, ok := f.sizes.typicalMax(); ok {
		return min(typical, most)
	}
	return most
}

// mostTokens is the largest reservation step 6 can make for t on model:
// the budget's cap on input plus the output it may grant (reserver.Reserve).
func (f *fleetBatcher) mostTokens(t *gateway.Turn, model string) int {
	cfg := configOf(t, f.current)
	out := cfg.Budget.RequestOutput
	if t.MaxOutput > 0 && t.MaxOutput < out {
		out = t.MaxOutput
	}
	if mo, ok := cfg.Model(model); ok && mo.MaxOutputTokens < out {
		out = mo.MaxOutputTokens
	}
	return f.enf.ContextRoom(0, t.MaxOutput) + out
}

// seenFull reports whether model's quota was last seen without room.
func (f *fleetBatcher) seenFull(model string) bool {
	s := f.seen.of(model)
	return s != nil && s.full.Load()
}

// remember keeps what the turn's reads saw of each model for the next
// turns' speculate.
func (f *fleetBatcher) remember(a *ahead) {
	limits := f.current().Budget
	a.mu.Lock()
	defer a.mu.Unlock()
	for m, snap := range a.snaps {
		if s := f.seen.of(m); s != nil {
			s.state.Store(int32(snap.State))
		}
	}
	for m, snap := range a.sats {
		if s := f.seen.of(m); s != nil {
			room := snap.TPMLimit - snap.TokensUsed
			s.full.Store(snap.Saturation >= 1 || snap.RequestsUsed >= snap.RPMLimit || room < limits.RequestInput+limits.RequestOutput)
		}
	}
	if sp := a.spec; sp != nil {
		if s := f.seen.of(sp.model); s != nil {
			switch {
			case sp.err == nil:
				s.full.Store(false)
			case errors.Is(sp.err, quota.ErrSaturated):
				s.full.Store(true)
			}
		}
	}
}

// releaseSpec returns the reservation taken ahead, if no step took it.
// Within the turn's batch the release is queued onto the turn's next
// command.
func (f *fleetBatcher) releaseSpec(ctx context.Context, a *ahead) {
	if sp := a.takeAnySpec(); sp != nil && sp.res != nil {
		lease{res: sp.res, q: f.queue}.Release(ctx)
	}
}

// Together implements gateway.Batcher.
func (f *fleetBatcher) Together(ctx context.Context, calls ...func(context.Context)) {
	redisbatch.Gather(ctx, calls...)
}

// route is the model tiers a turn starting at start may try, as the
// gateway orders them.
func (f *fleetBatcher) route(start string) []string {
	models := f.current().Models
	names := make([]string, 0, len(models))
	for _, m := range models {
		if len(names) == 0 && start != "" && m.Name != start && m.ModelID != start {
			continue
		}
		names = append(names, m.Name)
	}
	if len(names) == 0 && start != "" {
		return f.route("")
	}
	return names
}

// rateRequest is the rate-limit question a turn asks.
func rateRequest(t *gateway.Turn) ratelimit.Request {
	return ratelimit.Request{UserID: t.UserID, Route: t.Route, Premium: t.Premium, Cost: 1, IP: t.ClientIP, Key: t.KeyHash, KeyMonthly: t.KeyMonthly, KeyPerMinute: t.KeyPerMinute,
		RouteOnly: t.Route == gateway.RouteConnect}
}

// takeHistory returns the history read ahead for owner's session.
func (a *ahead) takeHistory(owner, sessionID string) (*historyAnswer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.history
	if h == nil || h.owner != owner || h.sessionID != sessionID {
		return nil, false
	}
	a.history = nil
	return h, true
}

func (a *ahead) takeLimit(req ratelimit.Request) (*limitAnswer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.limit
	if l == nil || l.req != req {
		return nil, false
	}
	a.limit = nil
	return l, true
}

func (a *ahead) takeTotals(userID, sessionID, day string) (*totalsAnswer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	tot := a.totals
	if tot == nil || tot.userID != userID || tot.sessionID != sessionID || tot.day != day {
		return nil, false
	}
	a.totals = nil
	return tot, true
}

// snapshot is model's breaker as read ahead. Unlike the other answers it
// stays: the planner and the reservation both consult it.
func (a *ahead) snapshot(model string) (breaker.Snapshot, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.snaps[model]
	return s, ok
}

func (a *ahead) takeSaturation(model string) (quota.Snapshot, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sats[model]
	delete(a.sats, model)
	return s, ok
}

func (a *ahead) takeLevel(model string) (retry.Level, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.levels[model]
	delete(a.levels, model)
	return l, ok
}

// takeSpec returns the reservation taken ahead when it is on model.
func (a *ahead) takeSpec(model string) (*specAnswer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := a.spec
	if sp == nil || sp.model != model {
		return nil, false
	}
	a.spec = nil
	return sp, true
}

// need records the size step 6 asked for.
func (a *ahead) need(tokens int) {
	a.mu.Lock()
	a.needed = tokens
	a.mu.Unlock()
}

func (a *ahead) neededTokens() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.needed
}

// takeAnySpec returns the reservation taken ahead, whatever its model.
func (a *ahead) takeAnySpec() *specAnswer {
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := a.spec
	a.spec = nil
	return sp
}

// specSaturation is what the reservation taken ahead on model says of its
// saturation: none when granted, the refusal's figure when refused.
func (a *ahead) specSaturation(model string) (quota.Snapshot, error, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sp := a.spec
	if sp == nil || sp.model != model {
		return quota.Snapshot{}, nil, false
	}
	if sat, ok := errors.AsType[*quota.SaturatedError](sp.err); ok {
		return quota.Snapshot{Saturation: sat.Saturation}, nil, true
	}
	return quota.Snapshot{}, sp.err, true
}

// specOn reports whether a reservation taken ahead waits on model.
func (a *ahead) specOn(model string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spec != nil && a.spec.model == model
}

func (a *ahead) hasPermit(model string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.permits[model]
	return ok
}

func (a *ahead) putPermit(model string, p permitAnswer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.permits[model] = p
}

// stateFromPermit notes model's breaker state as its permit taken ahead
// says it. When it does not (Redis failed), the planner asks itself.
func (a *ahead) stateFromPermit(model string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.permits[model]; ok {
		if s, ok := breaker.AllowState(p.permit, p.err); ok {
			a.snaps[model] = s
		}
	}
}

// takePermits removes and returns every permit no step took.
func (a *ahead) takePermits() []permitAnswer {
	a.mu.Lock()
	defer a.mu.Unlock()
	ps := make([]permitAnswer, 0, len(a.permits))
	for m, p := range a.permits {
		ps = append(ps, p)
		delete(a.permits, m)
	}
	return ps
}

func (a *ahead) takePermit(model string) (permitAnswer, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.permits[model]
	delete(a.permits, model)
	return p, ok
}

// The wrappers below answer from what Begin read, when the turn's context
// carries it, and ask the policy otherwise.

// aheadSessions is the session store the gateway reads history through.
type aheadSessions struct{ session.Store }

func (s aheadSessions) History(ctx context.Context, owner, sessionID string) ([]provider.Message, error) {
	if a := aheadFrom(ctx); a != nil {
		if h, ok := a.takeHistory(owner, sessionID); ok {
			return h.msgs, h.err
		}
	}
	return s.Store.History(ctx, owner, sessionID)
}

// aheadCounters are the budget counters the enforcer loads.
type aheadCounters struct{ budget.Counters }

func (c aheadCounters) Load(ctx context.Context, userID, sessionID, day string) (budget.Totals, error) {
	if a := aheadFrom(ctx); a != nil {
		if tot, ok := a.takeTotals(userID, sessionID, day); ok {
			return tot.tot, tot.err
		}
	}
	return c.Counters.Load(ctx, userID, sessionID, day)
}

// aheadPressure is the retry pressure the retrier consults.
type aheadPressure struct{ retry.Pressure }

func (p aheadPressure) Level(ctx context.Context, model string) retry.Level {
	if a := aheadFrom(ctx); a != nil {
		if l, ok := a.takeLevel(model); ok {
			return l
		}
	}
	return p.Pressure.Level(ctx, model)
}

// limitCheck is the rate-limit decision for req: the one read ahead, or a
// new one.
func limitCheck(ctx context.Context, l *ratelimit.Limiter, req ratelimit.Request) (ratelimit.Result, error) {
	if a := aheadFrom(ctx); a != nil {
		if ans, ok := a.takeLimit(req); ok {
			return ans.res, ans.err
		}
	}
	return l.Check(ctx, req)
}

// breakerSnapshot is model's breaker state for the planner.
func breakerSnapshot(ctx context.Context, s *breaker.Set, model string) (breaker.Snapshot, error) {
	if a := aheadFrom(ctx); a != nil {
		if snap, ok := a.snapshot(model); ok {
			return snap, nil
		}
	}
	return breaker.StateOf(ctx, s.Get(model))
}

// quotaSaturation is model's quota saturation for the planner.
func quotaSaturation(ctx context.Context, l quota.Ledger, model string) (quota.Snapshot, error) {
	if a := aheadFrom(ctx); a != nil {
		if snap, err, ok := a.specSaturation(model); ok {
			return snap, err
		}
		if snap, ok := a.takeSaturation(model); ok {
			return snap, nil
		}
	}
	return l.Saturation(ctx, model)
}

// reserveAndAllow reserves quota for model and, in the same round trip,
// takes the breaker's permit for the first attempt, kept in the turn's
// context for the invoker. The permit is asked for only while the breaker
// was closed when read ahead: a closed breaker's permit costs nothing if
// unused, a half-open one's holds a probe slot.
//
// The reservation taken ahead on model serves when it holds at least
// tokens; then no Redis call is made. One that is too small, or on another
// model, is released by a write queued onto the reservation made here.
func reserveAndAllow(ctx context.Context, l quota.Ledger, s *breaker.Set, q *queue.Queue, model string, prio quota.Priority, tokens int) (quota.Reservation, error) {
	a := aheadFrom(ctx)
	if a != nil {
		a.need(tokens)
		sp, ok := a.takeSpec(model)
		if !ok {
			sp = a.takeAnySpec()
		}
		if sp != nil && sp.res != nil {
			if ok && tokens <= sp.tokens {
				return sp.res, nil
			}
			lease{res: sp.res, q: q}.Release(ctx)
		}
	}
	closed := false
	if a != nil && !a.hasPermit(model) {
		snap, ok := a.snapshot(model)
		closed = ok && snap.State == breaker.Closed
	}
	if !closed {
		return l.Reserve(ctx, model, prio, tokens)
	}
	var (
		res quota.Reservation
		err error
	)
	redisbatch.Gather(ctx,
		func(ctx context.Context) { res, err = l.Reserve(ctx, model, prio, tokens) },
		func(ctx context.Context) {
			p, perr := s.Get(model).Allow(ctx)
			a.putPermit(model, permitAnswer{permit: p, err: perr})
		})
	return res, err
}

// allow is breaker br's permit (named name): the one taken ahead — with the
// reservation for a model's first attempt, with the admission reads for the
// catalog search — or a new one.
func allow(ctx context.Context, br breaker.Breaker, name string) (breaker.Permit, error) {
	if a := aheadFrom(ctx); a != nil {
		if p, ok := a.takePermit(name); ok {
			return p.permit, p.err
		}
	}
	return br.Allow(ctx)
}
