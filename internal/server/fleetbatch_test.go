package server

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/queue"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/redistest"
)

// turnTrips counts the round trips turns make: the commands and pipelines
// sent under a turn's batch, leaving out the background work of the server
// (live figures) and connection handshakes.
type turnTrips struct{ n atomic.Int64 }

func (r *turnTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *turnTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "auth", "client", "select":
		default:
			if redisbatch.From(ctx) != nil {
				r.n.Add(1)
			}
		}
		return next(ctx, cmd)
	}
}
func (r *turnTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if redisbatch.From(ctx) != nil {
			r.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// fleetTurns is a fleet-mode server in front of fixedProvider, its turns'
// round trips counted.
func fleetTurns(t *testing.T, edit func(*config.Config)) (*Server, *turnTrips) {
	t.Helper()
	cfg := benchConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	cfg.Catalog.Enabled = false
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(context.Background(), isolate(t, cfg), Options{
		WrapProvider: func(string, provider.Provider) provider.Provider { return fixedProvider{} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	rt := &turnTrips{}
	s.Redis.AddHook(rt)
	return s, rt
}

func fleetTurn(i int, user string) *gateway.Turn {
	return &gateway.Turn{RequestID: "r" + strconv.Itoa(i), SessionID: "s-" + user, Message: "Which fantasy manga should I read next?",
		Locale: "en", Route: "chat", Surface: "openai", UserID: user}
}

// TestFleetTurnTakesTwoRoundTrips: once the models' breakers have been
// seen closed, a P0 turn reserves its quota with the admission reads and
// costs two round trips: read ahead, record.
func TestFleetTurnTakesTwoRoundTrips(t *testing.T) {
	s, rt := fleetTurns(t, nil)
	ctx := context.Background()
	if _, err := s.Gateway.Run(ctx, fleetTurn(0, "u"), discard{}); err != nil {
		t.Fatal(err)
	}
	rt.n.Store(0)
	const turns = 10
	for i := 1; i <= turns; i++ {
		res, err := s.Gateway.Run(ctx, fleetTurn(i, "u"), discard{})
		if err != nil || res.Tier != "sonnet" {
			t.Fatalf("turn %d: %+v, %v", i, res, err)
		}
	}
	if got := rt.n.Load(); got != 2*turns {
		t.Errorf("%d turns made %d round trips; want 2 each", turns, got)
	}
	// Every hold was settled: the window counts the billed tokens of the
	// eleven turns and nothing is outstanding.
	snap, err := s.Quota.Saturation(ctx, "sonnet")
	if err != nil {
		t.Fatal(err)
	}
	if want := (turns + 1) * 129; snap.TokensUsed != want || snap.RequestsUsed != turns+1 {
		t.Errorf("sonnet ledger after %d turns: %d tokens, %d requests; want %d, %d", turns+1, snap.TokensUsed, snap.RequestsUsed, want, turns+1)
	}
}

// TestFleetDailyBudgetHoldTakesARoundTrip: with a daily cost budget, the
// budget step holds the turn's estimate in Redis in a round trip of its
// own, settled with the record: three round trips a turn.
func TestFleetDailyBudgetHoldTakesARoundTrip(t *testing.T) {
	s, rt := fleetTurns(t, func(cfg *config.Config) { cfg.Budget.DailyCostUSD = 1000 })
	ctx := context.Background()
	if _, err := s.Gateway.Run(ctx, fleetTurn(0, "u"), discard{}); err != nil {
		t.Fatal(err)
	}
	rt.n.Store(0)
	const turns = 10
	for i := 1; i <= turns; i++ {
		if _, err := s.Gateway.Run(ctx, fleetTurn(i, "u"), discard{}); err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if got := rt.n.Load(); got != 3*turns {
		t.Errorf("%d turns made %d round trips; want 3 each", turns, got)
	}
}

// TestFleetRefusedTurnReleasesReservation: a turn refused by the rate
// limit after its quota was reserved ahead leaves the ledger as it found it.
func TestFleetRefusedTurnReleasesReservation(t *testing.T) {
	s, _ := fleetTurns(t, func(cfg *config.Config) {
		cfg.RateLimit.User.PerMinute = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 1}}
		// On a busy machine a 50 ms limit call can time out and the turn
		// be admitted on the outage rule; this test is about the release.
		cfg.RateLimit.RedisTimeout = 2 * time.Second
	})
	ctx := context.Background()
	if _, err := s.Gateway.Run(ctx, fleetTurn(0, "u"), discard{}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Gateway.Run(ctx, fleetTurn(1, "u"), discard{})
	if e, ok := errors.AsType[*gateway.Error](err); !ok || e.Code != gateway.CodeRateLimited {
		t.Fatalf("second turn: %v; want rate_limited", err)
	}
	snap, err := s.Quota.Saturation(ctx, "sonnet")
	if err != nil {
		t.Fatal(err)
	}
	if snap.TokensUsed != 129 || snap.RequestsUsed != 1 {
		t.Errorf("sonnet ledger after a served and a refused turn: %d tokens, %d requests; want 129, 1", snap.TokensUsed, snap.RequestsUsed)
	}
}

// TestFleetTurnRoutedElsewhereLeavesNoHold: the quota reserved ahead on
// the primary, whose breaker was last seen closed, goes back when the
// breaker turns out open and the turn goes to the next tier.
func TestFleetTurnRoutedElsewhereLeavesNoHold(t *testing.T) {
	s, _ := fleetTurns(t, nil)
	ctx := context.Background()
	if _, err := s.Gateway.Run(ctx, fleetTurn(0, "u"), discard{}); err != nil {
		t.Fatal(err)
	}
	br := s.Breakers.Get("sonnet")
	for range 100 {
		snap, err := br.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if snap.State == breaker.Open {
			break
		}
		p, _ := br.Allow(ctx)
		p.Done(ctx, false)
	}
	res, err := s.Gateway.Run(ctx, fleetTurn(1, "u"), discard{})
	if err != nil || res.Tier != "haiku" {
		t.Fatalf("turn with sonnet's breaker open: %+v, %v; want haiku", res, err)
	}
	snap, err := s.Quota.Saturation(ctx, "sonnet")
	if err != nil {
		t.Fatal(err)
	}
	if snap.TokensUsed != 129 || snap.RequestsUsed != 1 {
		t.Errorf("sonnet ledger: %d tokens, %d requests; want only the first turn's 129, 1", snap.TokensUsed, snap.RequestsUsed)
	}
}

// TestReserveAheadTooSmallIsReplaced: a reservation taken ahead smaller
// than the turn needs is released and an exact one made; one large enough
// is used as it is.
func TestReserveAheadTooSmallIsReplaced(t *testing.T) {
	c, prefix := redistest.Client(t)
	cfg := quota.DefaultConfig()
	l, err := quota.NewRedis(c, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	set := breaker.NewSet(breaker.MemoryFactory(nil), nil)
	q := queue.NewMemory(config.Default().Queue, nil)
	tests := []struct {
		name       string
		ahead      int
		need       int
		wantTokens int
	}{
		{name: "large enough", ahead: 5000, need: 3000, wantTokens: 5000},
		{name: "too small", ahead: 1000, need: 3000, wantTokens: 3000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := l.Reserve(ctx, "sonnet", quota.P0, tt.ahead)
			if err != nil {
				t.Fatal(err)
			}
			a := &ahead{permits: map[string]permitAnswer{"sonnet": {}},
				spec: &specAnswer{model: "sonnet", tokens: tt.ahead, res: sp}}
			actx := context.WithValue(ctx, aheadKey{}, a)
			res, err := reserveAndAllow(actx, l, set, q, "sonnet", quota.P0, tt.need)
			if err != nil {
				t.Fatal(err)
			}
			if res.Tokens() != tt.wantTokens {
				t.Errorf("reservation of %d tokens; want %d", res.Tokens(), tt.wantTokens)
			}
			snap, _ := l.Saturation(ctx, "sonnet")
			if snap.TokensUsed != tt.wantTokens || snap.RequestsUsed != 1 {
				t.Errorf("ledger holds %d tokens, %d requests; want %d, 1", snap.TokensUsed, snap.RequestsUsed, tt.wantTokens)
			}
			_ = res.Release(ctx)
		})
	}
}

// holdProbe answers like fixedProvider and records, during each call, the
// tokens sonnet's ledger holds: the turn's own reservation.
type holdProbe struct {
	ledger func() quota.Ledger
	held   []int
}

func (p *holdProbe) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.Stream(ctx, req, func(string) error { return nil })
}

func (p *holdProbe) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	if l := p.ledger(); l != nil && req.Model == "sonnet" {
		if snap, err := l.Saturation(context.Background(), "sonnet"); err == nil {
			p.held = append(p.held, snap.TokensUsed)
		}
	}
	return fixedProvider{}.Stream(ctx, req, emit)
}

// TestFleetReserveAheadLearnsTheSize: the quota reserved ahead starts at
// the most a turn can need and, once enough turns have shown what they
// need, is sized near that instead, so a turn in flight holds little more
// than its own estimate; the ledger is exact once each turn settled.
func TestFleetReserveAheadLearnsTheSize(t *testing.T) {
	var s *Server
	probe := &holdProbe{ledger: func() quota.Ledger {
		if s == nil {
			return nil
		}
		return s.Quota
	}}
	cfg := benchConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	cfg.Catalog.Enabled = false
	var err error
	s, err = New(context.Background(), isolate(t, cfg), Options{
		WrapProvider: func(string, provider.Provider) provider.Provider { return probe }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := context.Background()
	const turns = sizesNeeded + 10
	settled := 0 // tokens the finished turns were billed
	for i := range turns {
		if _, err := s.Gateway.Run(ctx, fleetTurn(i, "u"+strconv.Itoa(i)), discard{}); err != nil {
			t.Fatal(err)
		}
		if len(probe.held) != i+1 {
			t.Fatalf("turn %d: sonnet called %d times in all", i, len(probe.held))
		}
		probe.held[i] -= settled // this turn's own hold
		settled += 129
	}
	most := cfg.Budget.RequestInput + min(cfg.Budget.RequestOutput, cfg.Models[0].MaxOutputTokens)
	if first := probe.held[1]; first < most*9/10 {
		t.Errorf("turn 1 held %d tokens ahead; before sizes are known it holds the most a turn can need (~%d)", first, most)
	}
	last := probe.held[turns-1]
	if last >= most/2 {
		t.Errorf("turn %d held %d tokens; with %d sizes known the hold should be near a turn's need, far below %d", turns-1, last, turns-1, most)
	}
	snap, err := s.Quota.Saturation(ctx, "sonnet")
	if err != nil {
		t.Fatal(err)
	}
	if snap.TokensUsed != settled || snap.RequestsUsed != turns {
		t.Errorf("sonnet ledger after %d turns: %d tokens, %d requests; want %d, %d", turns, snap.TokensUsed, snap.RequestsUsed, settled, turns)
	}
	t.Logf("held ahead: turn 1 %d tokens, turn %d %d tokens (most %d)", probe.held[1], turns-1, last, most)
}

// TestFleetStatelessTurnsLeaveNoSessionCounter: a vendor door's turn is
// stateless, its session id its request's own, so its tokens count against
// no session: a counter per request would stay in Redis for the session
// TTL (24 h by default), millions of keys a day. A turn of a session keeps
// its counter, and both still take two round trips.
func TestFleetStatelessTurnsLeaveNoSessionCounter(t *testing.T) {
	s, rt := fleetTurns(t, nil)
	ctx := context.Background()
	if _, err := s.Gateway.Run(ctx, fleetTurn(0, "u"), discard{}); err != nil {
		t.Fatal(err)
	}
	sessionKeys := func() []string {
		keys, err := s.Redis.Keys(ctx, s.cfg.Fleet.KeyPrefix+"budget:budget:sess:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if keys := sessionKeys(); len(keys) != 1 {
		t.Fatalf("a session's turn left session counters %v; want one", keys)
	}
	rt.n.Store(0)
	const turns = 10
	for i := 1; i <= turns; i++ {
		turn := fleetTurn(i, "u")
		turn.SessionID, turn.Stateless = turn.RequestID, true
		if res, err := s.Gateway.Run(ctx, turn, discard{}); err != nil || res.Tier != "sonnet" {
			t.Fatalf("turn %d: %+v, %v", i, res, err)
		}
	}
	if keys := sessionKeys(); len(keys) != 1 {
		t.Errorf("after %d stateless turns the session counters are %v; want the session's one only", turns, keys)
	}
	if got := rt.n.Load(); got != 2*turns {
		t.Errorf("%d stateless turns made %d round trips; want 2 each", turns, got)
	}
}
