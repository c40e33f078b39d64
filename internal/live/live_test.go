package live

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"window too short", func(c *Config) { c.Window = 500 * time.Millisecond }, "window: must be between 1s and 1h"},
		{"window not whole seconds", func(c *Config) { c.Window = 1500 * time.Millisecond }, "window: must be a whole number of seconds"},
		{"interval too short", func(c *Config) { c.Interval = 10 * time.Millisecond }, "interval: must be at least 100ms"},
		{"interval beyond window", func(c *Config) { c.Interval = 2 * time.Minute }, "interval: must not exceed window"},
		{"history shorter than interval", func(c *Config) { c.History = 500 * time.Millisecond }, "history: must be at least interval"},
		{"history too long", func(c *Config) { c.Interval = 100 * time.Millisecond; c.History = 24 * time.Hour }, "history: must hold at most 100000 snapshots"},
		{"no subscribers", func(c *Config) { c.MaxSubscribers = 0 }, "maxSubscribers: must be between 1 and 10000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.give(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestNewFillsDefaults(t *testing.T) {
	a := New(Config{}, nil, newClock().Now)
	if a.cfg != DefaultConfig() {
		t.Fatalf("config = %+v, want defaults %+v", a.cfg, DefaultConfig())
	}
	if len(a.ring) != 60 || len(a.history.buf) != 900 {
		t.Fatalf("ring %d buckets, history %d slots; want 60 and 900", len(a.ring), len(a.history.buf))
	}
}

func write(t *testing.T, a *Aggregator, evs ...events.Event) {
	t.Helper()
	if err := a.Write(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotTurnFigures(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	now := clk.Now()
	var evs []events.Event
	// 10 turns, 100 ms .. 1000 ms: 6 on sonnet, 2 degraded to haiku, 2
	// failed with no model: one rate limited (a refusal, not an error), one
	// with no code (an error).
	for i := 1; i <= 10; i++ {
		s := turnSpec{end: now.Add(-time.Duration(i) * time.Second), duration: time.Duration(i*100) * time.Millisecond, model: "sonnet"}
		switch i {
		case 3, 4:
			s.status, s.fallback, s.model = events.StatusFallback, "haiku", "haiku"
		case 5:
			s.status, s.code, s.model = events.StatusFailed, "rate_limited", ""
		case 6:
			s.status, s.model = events.StatusFailed, ""
		}
		evs = append(evs, turn(s))
	}
	write(t, a, evs...)

	s := a.Snapshot(context.Background())
	if s.Turns != 10 || s.Errors != 1 || s.Refused != 1 {
		t.Fatalf("turns %d errors %d refused %d, want 10, 1 and 1", s.Turns, s.Errors, s.Refused)
	}
	if s.ErrorRate != 0.1 {
		t.Errorf("errorRate = %v, want 0.1", s.ErrorRate)
	}
	if s.TurnsPerSecond != 10.0/60 {
		t.Errorf("turnsPerSecond = %v, want %v", s.TurnsPerSecond, 10.0/60)
	}
	if want := map[string]int64{"unknown": 1}; !maps.Equal(s.ErrorsByCode, want) {
		t.Errorf("errorsByCode = %v, want %v", s.ErrorsByCode, want)
	}
	if want := map[string]int64{"rate_limited": 1}; !maps.Equal(s.RefusedByCode, want) {
		t.Errorf("refusedByCode = %v, want %v", s.RefusedByCode, want)
	}
	if want := map[string]int64{"sonnet": 6, "haiku": 2, "none": 2}; !maps.Equal(s.Tiers, want) {
		t.Errorf("tiers = %v, want %v", s.Tiers, want)
	}
	// Nearest rank of 100..1000 step 100: p50 = 500 (bucket [496,511]),
	// p95 = p99 = 1000 (the largest, where interpolation is clamped).
	wantLat := Percentiles{P50: ptr(503.5), P95: ptr(1000), P99: ptr(1000)}
	if got := s.LatencyMs; *got.P50 != *wantLat.P50 || *got.P95 != *wantLat.P95 || *got.P99 != *wantLat.P99 {
		t.Errorf("latency = %v/%v/%v, want 503.5/1000/1000", *got.P50, *got.P95, *got.P99)
	}
	if s.TTFTMs.P50 != nil {
		t.Errorf("ttft p50 = %v, want null (no stream spans)", *s.TTFTMs.P50)
	}
}

func TestTTFTCorrelation(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	now := clk.Now()
	t1 := turn(turnSpec{end: now, duration: 2 * time.Second, model: "sonnet"})
	t2 := turn(turnSpec{end: now, duration: 3 * time.Second, model: "sonnet"})
	t3 := turn(turnSpec{end: now, duration: time.Second, model: "sonnet"}) // no stream: not a TTFT sample
	other := turn(turnSpec{end: now, duration: time.Second})
	stray := stream(other, 5*time.Millisecond) // its turn never arrives
	stray.TraceID = "ffffffffffffffffffffffffffffffff"

	// Stream and turn in one batch, and across two batches.
	write(t, a, stream(t1, 300*time.Millisecond), stray, t1, stream(t2, 700*time.Millisecond))
	write(t, a, t2, t3, other)

	s := a.Snapshot(context.Background())
	if s.Turns != 4 {
		t.Fatalf("turns = %d, want 4", s.Turns)
	}
	// Two samples, 300 and 700 ms: p50 is the first, whose bucket
	// [288,303] interpolates to 295.5, clamped up to the smallest sample;
	// p99 is the second, interpolated in [672,703].
	if s.TTFTMs.P50 == nil || *s.TTFTMs.P50 != 300 || *s.TTFTMs.P99 != 687.5 {
		t.Fatalf("ttft p50 %v p99 %v, want 300 and 687.5", deref(s.TTFTMs.P50), deref(s.TTFTMs.P99))
	}
	if n := len(a.pending.m); n != 1 {
		t.Errorf("%d stream spans still pending, want 1 (the stray)", n)
	}
}

func TestTTFTPendingIsBounded(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	now := clk.Now()
	first := turn(turnSpec{end: now, duration: time.Second})
	write(t, a, stream(first, 100*time.Millisecond))
	for range maxPendingStreams {
		write(t, a, stream(turn(turnSpec{end: now, duration: time.Second}), 200*time.Millisecond))
	}
	if n := len(a.pending.m); n != maxPendingStreams {
		t.Fatalf("%d pending, want the cap %d", n, maxPendingStreams)
	}
	write(t, a, first) // its stream span was evicted
	if s := a.Snapshot(context.Background()); s.TTFTMs.P50 != nil {
		t.Fatalf("ttft p50 = %v, want null: the oldest stream span is evicted first", *s.TTFTMs.P50)
	}
}

func TestWindowExpiry(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	write(t, a, turn(turnSpec{end: clk.Now(), duration: 100 * time.Millisecond, model: "sonnet"}))
	clk.Advance(30 * time.Second)
	write(t, a,
		turn(turnSpec{end: clk.Now(), duration: 200 * time.Millisecond, model: "sonnet"}),
		turn(turnSpec{end: clk.Now(), duration: 300 * time.Millisecond, status: events.StatusFailed, code: "overloaded"}),
	)
	tests := []struct {
		advance      time.Duration
		turns, errs  int64
		p50          *float64
		errorsByCode int
	}{
		{0, 3, 1, ptr(203.5), 1},                // t0+30s: all three
		{29 * time.Second, 3, 1, ptr(203.5), 1}, // t0+59s: the first is still in
		{time.Second, 2, 1, ptr(203.5), 1},      // t0+60s: the first has left
		{29 * time.Second, 2, 1, ptr(203.5), 1}, // t0+89s: the last two still in
		{time.Second, 0, 0, nil, 0},             // t0+90s: empty
		{time.Hour, 0, 0, nil, 0},               // long after
	}
	for i, tt := range tests {
		clk.Advance(tt.advance)
		s := a.Snapshot(context.Background())
		if s.Turns != tt.turns || s.Errors != tt.errs || len(s.ErrorsByCode) != tt.errorsByCode {
			t.Fatalf("step %d: turns %d errors %d codes %v; want %d, %d, %d codes", i, s.Turns, s.Errors, s.ErrorsByCode, tt.turns, tt.errs, tt.errorsByCode)
		}
		if (s.LatencyMs.P50 == nil) != (tt.p50 == nil) || (tt.p50 != nil && *s.LatencyMs.P50 != *tt.p50) {
			t.Fatalf("step %d: p50 %v, want %v", i, deref(s.LatencyMs.P50), deref(tt.p50))
		}
	}
}

func TestLateAndFutureSpans(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	now := clk.Now()
	write(t, a,
		turn(turnSpec{end: now.Add(-60 * time.Second), duration: time.Second}), // just outside
		turn(turnSpec{end: now.Add(-59 * time.Second), duration: time.Second}), // just inside
		turn(turnSpec{end: now.Add(10 * time.Second), duration: time.Second}),  // skewed: counts now
	)
	if s := a.Snapshot(context.Background()); s.Turns != 2 {
		t.Fatalf("turns = %d, want 2", s.Turns)
	}
	if got := a.Stats().LateSpans; got != 1 {
		t.Fatalf("late spans = %d, want 1", got)
	}
	clk.Advance(time.Second) // the one 59 s old leaves; the future one stays
	if s := a.Snapshot(context.Background()); s.Turns != 1 {
		t.Fatalf("turns = %d, want 1", s.Turns)
	}
}

func TestCostAndTokensPerMinute(t *testing.T) {
	clk := newClock()
	cfg := DefaultConfig()
	cfg.Window = 30 * time.Second // per-minute figures double the window's sums
	a := New(cfg, nil, clk.Now)
	now := clk.Now()
	cache := turn(turnSpec{end: now, duration: time.Second, fallback: "cache"})
	cacheSpan := events.Event{Name: "cache", TraceID: cache.TraceID, TSEnd: now, Resource: events.Resource{CostUSD: 0.0001}}
	write(t, a,
		attempt("sonnet", now, 1000, 200, 0.006),
		attempt("sonnet", now.Add(-10*time.Second), 500, 100, 0.003),
		attempt("haiku", now, 300, 50, 0.0005),
		attempt("", now, 0, 0, 0), // a throttled attempt: no tokens, no model
		cacheSpan, cache,
	)
	s := a.Snapshot(context.Background())
	if want := map[string]float64{"sonnet": 3600, "haiku": 700}; !maps.Equal(s.TokensPerMinute, want) {
		t.Errorf("tokensPerMinute = %v, want %v", s.TokensPerMinute, want)
	}
	if want := (0.006 + 0.003 + 0.0005 + 0.0001) * 2; math.Abs(s.CostUSDPerMinute-want) > 1e-15 {
		t.Errorf("costUsdPerMinute = %v, want %v", s.CostUSDPerMinute, want)
	}
	if s.WindowSeconds != 30 || s.Tiers["cache"] != 1 {
		t.Errorf("windowSeconds %d tiers %v; want 30 and cache:1", s.WindowSeconds, s.Tiers)
	}
}

func TestKeysAreBounded(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	for i := range maxKeys + 10 {
		write(t, a, turn(turnSpec{end: clk.Now(), duration: time.Second, status: events.StatusFailed, code: strings.Repeat("x", i+1)}))
	}
	s := a.Snapshot(context.Background())
	if len(s.ErrorsByCode) != maxKeys+1 || s.ErrorsByCode["other"] != 10 {
		t.Fatalf("%d codes, other=%d; want %d codes and other=10", len(s.ErrorsByCode), s.ErrorsByCode["other"], maxKeys+1)
	}
}

func TestStateIsJoined(t *testing.T) {
	clk := newClock()
	state := func(context.Context) (State, error) {
		return State{
			Breakers: []Breaker{{Name: "sonnet", State: "open"}, {Name: "haiku", State: "closed"}},
			Quota: []Quota{
				{Model: "sonnet", TPMUsed: 170_000, TPMCeiling: 340_000, RPMUsed: 1530, RPMCeiling: 1700},
				{Model: "haiku", TPMUsed: 10, TPMCeiling: 850_000, RPMUsed: 1, RPMCeiling: 3400, Saturation: 0.75},
			},
			Queue:    QueueState{Depth: 3, ByPriority: map[string]int{"P1": 1, "P3": 2}, OldestWait: 1500 * time.Millisecond},
			Pressure: []Pressure{{"sonnet@west", "NORMAL"}, {"sonnet", "NORMAL"}, {"sonnet@east", "HIGH"}},
		}, nil
	}
	a := New(DefaultConfig(), state, clk.Now)
	s := a.Snapshot(context.Background())
	if s.StateError != "" {
		t.Fatalf("stateError = %q", s.StateError)
	}
	wantB := []Breaker{{"haiku", "closed"}, {"sonnet", "open"}}
	if len(s.Breakers) != 2 || s.Breakers[0] != wantB[0] || s.Breakers[1] != wantB[1] {
		t.Errorf("breakers = %v, want %v (sorted)", s.Breakers, wantB)
	}
	wantQ := []Quota{
		{Model: "haiku", TPMUsed: 10, TPMCeiling: 850_000, RPMUsed: 1, RPMCeiling: 3400, Saturation: 0.75},
		{Model: "sonnet", TPMUsed: 170_000, TPMCeiling: 340_000, RPMUsed: 1530, RPMCeiling: 1700, Saturation: 0.9},
	}
	if len(s.Quota) != 2 || s.Quota[0] != wantQ[0] || s.Quota[1] != wantQ[1] {
		t.Errorf("quota = %+v, want %+v", s.Quota, wantQ)
	}
	if want := []Pressure{{"sonnet", "NORMAL"}, {"sonnet@east", "HIGH"}, {"sonnet@west", "NORMAL"}}; !slices.Equal(s.Pressure, want) {
		t.Errorf("pressure = %v, want %v (sorted)", s.Pressure, want)
	}
	if s.Queue.Depth != 3 || s.Queue.OldestWaitMs != 1500 || !maps.Equal(s.Queue.ByPriority, map[string]int{"P1": 1, "P3": 2}) {
		t.Errorf("queue = %+v", s.Queue)
	}
	if len(s.Projections) != 2 || s.Projections[0].Model != "haiku" || s.Projections[0].SecondsToExhaustion != nil {
		t.Errorf("projections = %+v, want haiku and sonnet, both null without history", s.Projections)
	}
}

func TestStateError(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), func(context.Context) (State, error) {
		return State{Breakers: []Breaker{{Name: "x", State: "open"}}}, errors.New("redis: connection refused")
	}, clk.Now)
	write(t, a, turn(turnSpec{end: clk.Now(), duration: 40 * time.Millisecond, model: "sonnet"}))
	s := a.Snapshot(context.Background())
	if s.StateError != "state: redis: connection refused" {
		t.Fatalf("stateError = %q", s.StateError)
	}
	if s.Turns != 1 || s.LatencyMs.P50 == nil || *s.LatencyMs.P50 != 40 {
		t.Fatalf("span figures lost on a state error: turns %d p50 %v", s.Turns, s.LatencyMs.P50)
	}
	if len(s.Breakers) != 0 || len(s.Quota) != 0 || s.Queue.Depth != 0 {
		t.Fatalf("state figures kept on error: %+v %+v %+v", s.Breakers, s.Quota, s.Queue)
	}
	b, _ := json.Marshal(s)
	if !strings.Contains(string(b), `"stateError":"state: redis: connection refused"`) {
		t.Fatalf("JSON lacks stateError: %s", b)
	}
	ok := New(DefaultConfig(), nil, clk.Now)
	b, _ = json.Marshal(ok.Snapshot(context.Background()))
	if strings.Contains(string(b), "stateError") {
		t.Fatalf("stateError present when fine: %s", b)
	}
}

// A state callback that ignores its deadline is abandoned after
// Interval/2; snapshots meanwhile wait on that same call instead of
// starting more, and the next call happens once it has returned.
func TestStateTimeout(t *testing.T) {
	clk := newClock()
	release := make(chan struct{})
	var calls atomic.Int32
	cfg := DefaultConfig()
	cfg.Interval = 100 * time.Millisecond
	a := New(cfg, func(context.Context) (State, error) {
		calls.Add(1)
		<-release
		return State{}, nil
	}, clk.Now)
	for i := range 2 {
		if s := a.Snapshot(context.Background()); s.StateError != "state: context deadline exceeded" {
			t.Fatalf("snapshot %d: stateError = %q", i, s.StateError)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls while the first hung, want 1", n)
	}
	close(release)
	for inFlight := true; inFlight; { // the abandoned call returns promptly now
		a.stateMu.Lock()
		inFlight = a.stateCall != nil
		a.stateMu.Unlock()
	}
	if s := a.Snapshot(context.Background()); s.StateError != "" || calls.Load() != 2 {
		t.Fatalf("after release: stateError %q, calls %d; want none and 2", s.StateError, calls.Load())
	}
}

// Snapshots taken at the same time share one state call.
func TestStateCallIsShared(t *testing.T) {
	clk := newClock()
	var calls atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	a := New(DefaultConfig(), func(context.Context) (State, error) {
		calls.Add(1)
		close(entered)
		<-release
		return State{Queue: QueueState{Depth: 7}}, nil
	}, clk.Now)
	results := make(chan Snapshot, 2)
	go func() { results <- a.Snapshot(context.Background()) }()
	<-entered
	go func() { results <- a.Snapshot(context.Background()) }()
	for { // wait until the second snapshot is waiting on the first call
		a.stateMu.Lock()
		shared := a.stateCall != nil && a.stateCall.waiters == 2
		a.stateMu.Unlock()
		if shared {
			break
		}
	}
	close(release)
	for range 2 {
		if s := <-results; s.StateError != "" || s.Queue.Depth != 7 {
			t.Fatalf("stateError %q depth %d", s.StateError, s.Queue.Depth)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d state calls, want 1", n)
	}
}

func TestSnapshotJSONShape(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	b, err := json.Marshal(a.Snapshot(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"t":"2026-03-01T12:00:00Z","windowSeconds":60,"turns":0,"turnsPerSecond":0,"errors":0,"errorRate":0,` +
		`"errorsByCode":{},"refused":0,"refusedByCode":{},"latencyMs":{"p50":null,"p95":null,"p99":null},"ttftMs":{"p50":null,"p95":null,"p99":null},` +
		`"tiers":{},"costUsdPerMinute":0,"tokensPerMinute":{},"queue":{"depth":0,"byPriority":{},"oldestWaitMs":0},` +
		`"breakers":[],"quota":[],"pressure":[],"projections":[]}`
	if string(b) != want {
		t.Fatalf("empty snapshot\n got %s\nwant %s", b, want)
	}
}

func TestNonFiniteCostIsIgnored(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	write(t, a, attempt("sonnet", clk.Now(), 1, 1, math.NaN()), attempt("sonnet", clk.Now(), 1, 1, math.Inf(1)), attempt("sonnet", clk.Now(), 1, 1, 0.5))
	s := a.Snapshot(context.Background())
	if s.CostUSDPerMinute != 0.5 {
		t.Fatalf("costUsdPerMinute = %v, want 0.5", s.CostUSDPerMinute)
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddingCallsAreNoChatTurns: an embedding call's turn span adds its
// cost and its attempt's tokens, but neither a turn nor a tier, a latency
// or an error: the live figures and their alerts follow the chat turns.
func TestEmbeddingCallsAreNoChatTurns(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	now := clk.Now()
	chat := turn(turnSpec{end: now, duration: 2 * time.Second, model: "sonnet"})
	embed := turn(turnSpec{end: now, duration: 20 * time.Millisecond, model: "amazon.titan-embed-text-v2:0"})
	embed.Node.NodeID = events.NodeEmbeddings
	embed.Resource.CostUSD = 0.001
	failed := turn(turnSpec{end: now, duration: 5 * time.Millisecond, status: events.StatusFailed, code: "upstream_failed"})
	failed.Node.NodeID = events.NodeEmbeddings
	write(t, a, chat, embed, failed, attempt("amazon.titan-embed-text-v2:0", now, 40, 0, 0.0000008))
	s := a.Snapshot(context.Background())
	if s.Turns != 1 || s.Errors != 0 || !maps.Equal(s.Tiers, map[string]int64{"sonnet": 1}) || *s.LatencyMs.P50 < 1900 {
		t.Fatalf("turns %d errors %d tiers %v p50 %v; want the chat turn alone", s.Turns, s.Errors, s.Tiers, *s.LatencyMs.P50)
	}
	if want := (0.001 + 0.0000008) * 60 / float64(s.WindowSeconds); math.Abs(s.CostUSDPerMinute-want) > 1e-12 {
		t.Errorf("costUsdPerMinute = %v, want %v", s.CostUSDPerMinute, want)
	}
	if s.TokensPerMinute["amazon.titan-embed-text-v2:0"] == 0 {
		t.Errorf("tokensPerMinute = %v; want the embedding model's", s.TokensPerMinute)
	}
}
