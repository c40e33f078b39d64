package deploy

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
	"github.com/fmgate/fmgate/internal/retry"
)

func stateConformance(t *testing.T, open func(t *testing.T) State) {
	ctx := context.Background()
	t.Run("calls in flight count until they end or lapse", func(t *testing.T) {
		s := open(t)
		for _, id := range []string{"a", "b", "c"} {
			if err := s.Begin(ctx, "sonnet", "east", id, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Begin(ctx, "sonnet", "west", "d", 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := s.End(ctx, "sonnet", "east", "a", 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stats(ctx, "sonnet", []string{"east", "west", "north"})
		if err != nil || st[0].InFlight != 2 || st[1].InFlight != 1 || st[2].InFlight != 0 {
			t.Fatalf("Stats = %+v, %v; want 2, 1, 0 in flight", st, err)
		}
		time.Sleep(100 * time.Millisecond)
		if st, _ := s.Stats(ctx, "sonnet", []string{"west"}); st[0].InFlight != 0 {
			t.Fatalf("a lapsed call still counts: %+v", st)
		}
		if st, _ := s.Stats(ctx, "haiku", []string{"east"}); st[0].InFlight != 0 {
			t.Fatalf("tiers share counts: %+v", st)
		}
	})
	t.Run("latency is a moving average", func(t *testing.T) {
		s := open(t)
		if err := s.Begin(ctx, "t", "d", "1", time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := s.End(ctx, "t", "d", "1", 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		st, _ := s.Stats(ctx, "t", []string{"d"})
		if st[0].Latency != 100*time.Millisecond {
			t.Fatalf("first latency %s, want 100ms", st[0].Latency)
		}
		_ = s.End(ctx, "t", "d", "2", 200*time.Millisecond)
		st, _ = s.Stats(ctx, "t", []string{"d"})
		if want := 120 * time.Millisecond; st[0].Latency < want-time.Millisecond || st[0].Latency > want+time.Millisecond {
			t.Fatalf("average %s, want about %s", st[0].Latency, want)
		}
	})
	t.Run("a throttle is extended, never shortened, and ends", func(t *testing.T) {
		s := open(t)
		start := time.Now()
		for _, d := range []time.Duration{300 * time.Millisecond, 10 * time.Millisecond} {
			if err := s.Throttle(ctx, "t", "d", d); err != nil {
				t.Fatal(err)
			}
		}
		st, _ := s.Stats(ctx, "t", []string{"d", "other"})
		if !st[1].ThrottledUntil.IsZero() {
			t.Fatalf("an untouched deployment is throttled: %+v", st[1])
		}
		if left := st[0].ThrottledUntil.Sub(start); left < 250*time.Millisecond || left > 400*time.Millisecond {
			t.Fatalf("throttled for %s from the start, want about 300ms", left)
		}
		time.Sleep(350 * time.Millisecond)
		if st, _ := s.Stats(ctx, "t", []string{"d"}); time.Now().Before(st[0].ThrottledUntil) {
			t.Fatalf("still throttled: %+v", st[0])
		}
	})
}

func TestMemoryStateConformance(t *testing.T) {
	stateConformance(t, func(t *testing.T) State { return NewMemory(nil) })
}

func TestRedisStateConformance(t *testing.T) {
	stateConformance(t, func(t *testing.T) State {
		c, prefix := redistest.Client(t)
		return NewRedis(c, prefix)
	})
}

// fake is a deployment's provider: it answers, throttles or fails.
type fake struct {
	mode  atomic.Value // "ok", "throttle", "fail", "invalid"
	calls atomic.Int64
	model atomic.Value
}

func newFake() *fake { f := &fake{}; f.mode.Store("ok"); return f }

func (f *fake) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	f.calls.Add(1)
	f.model.Store(req.Model)
	switch f.mode.Load() {
	case "throttle":
		return nil, &provider.Error{Kind: provider.KindThrottled, Model: req.Model, RetryAfter: time.Second}
	case "fail":
		return nil, &provider.Error{Kind: provider.KindUnavailable, Model: req.Model}
	case "invalid":
		return nil, &provider.Error{Kind: provider.KindValidation, Model: req.Model}
	}
	return &provider.Response{Text: "ok from " + req.Model}, nil
}

func (f *fake) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	r, err := f.Complete(ctx, req)
	if err != nil {
		return nil, err
	}
	return r, emit(r.Text)
}

func pool(t testing.TB, strategy string, state State, weights ...int) (*Pool, []*fake) {
	t.Helper()
	names := []string{"east", "west", "north"}
	var deps []Deployment
	var fakes []*fake
	for i, w := range weights {
		f := newFake()
		fakes = append(fakes, f)
		deps = append(deps, Deployment{Name: names[i], Model: "sonnet@" + names[i], Weight: w, Provider: f,
			Breaker: breaker.NewMemory("sonnet@"+names[i], breaker.DefaultConfig(), time.Now)})
	}
	p, err := New("sonnet", deps, strategy, state, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, fakes
}

func TestWeightsAreHonoured(t *testing.T) {
	p, f := pool(t, Weighted, nil, 3, 1)
	for range 2000 {
		if _, err := p.Complete(context.Background(), &provider.Request{Model: "sonnet"}); err != nil {
			t.Fatal(err)
		}
	}
	east, west := f[0].calls.Load(), f[1].calls.Load()
	if east != 1500 || west != 500 {
		t.Fatalf("east %d, west %d of 2,000 at weights 3:1; want 1,500 and 500", east, west)
	}
	if f[0].model.Load() != "sonnet@east" {
		t.Fatalf("the deployment was asked for %v", f[0].model.Load())
	}
}

// A throttled deployment sheds its calls to its sibling: no call fails,
// and it is spared until its cooldown ends.
func TestThrottledDeploymentSheds(t *testing.T) {
	p, f := pool(t, Weighted, nil, 1, 1)
	f[0].mode.Store("throttle")
	for i := range 100 {
		r, err := p.Complete(context.Background(), &provider.Request{Model: "sonnet"})
		if err != nil || r.Text != "ok from sonnet@west" {
			t.Fatalf("call %d: %v, %v", i, r, err)
		}
	}
	if n := f[0].calls.Load(); n != 1 {
		t.Fatalf("the throttled deployment was called %d times in its cooldown, want once", n)
	}
	// A failing deployment sheds too, and its breaker opens.
	p, f = pool(t, Weighted, nil, 1, 1)
	f[1].mode.Store("fail")
	for range 50 {
		if _, err := p.Complete(context.Background(), &provider.Request{Model: "sonnet"}); err != nil {
			t.Fatal(err)
		}
	}
	snaps, _ := p.Snapshots(context.Background())
	if snaps[1].Breaker != "open" {
		t.Fatalf("west's breaker %s after failing every call", snaps[1].Breaker)
	}
	// A request's own fault is not shed: another deployment would refuse it too.
	p, f = pool(t, Weighted, nil, 1, 1)
	f[0].mode.Store("invalid")
	f[1].mode.Store("invalid")
	if _, err := p.Complete(context.Background(), &provider.Request{Model: "sonnet"}); provider.KindOf(err) != provider.KindValidation {
		t.Fatalf("err = %v", err)
	}
	if f[0].calls.Load()+f[1].calls.Load() != 1 {
		t.Fatal("an invalid request was tried on a second deployment")
	}
	// Both down: the tier's error, for the cascade.
	p, f = pool(t, Weighted, nil, 1, 1)
	f[0].mode.Store("throttle")
	f[1].mode.Store("throttle")
	_, err := p.Complete(context.Background(), &provider.Request{Model: "sonnet"})
	if provider.KindOf(err) != provider.KindThrottled {
		t.Fatalf("both throttled: %v", err)
	}
}

// A fleet shares what it learns: a deployment one pool saw throttled is
// spared by another pool on the same Redis.
func TestThrottleIsFleetWide(t *testing.T) {
	c, prefix := redistest.Client(t)
	a, fa := pool(t, Weighted, NewRedis(c, prefix), 1, 1)
	b, fb := pool(t, Weighted, NewRedis(c, prefix), 1, 1)
	fa[0].mode.Store("throttle")
	fb[0].mode.Store("throttle")
	for range 4 {
		if _, err := a.Complete(context.Background(), &provider.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if _, err := b.Complete(context.Background(), &provider.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := fb[0].calls.Load(); n != 0 {
		t.Fatalf("the second instance called the throttled deployment %d times", n)
	}
}

// Least busy sends a call to the deployment with the fewest in flight for
// its weight; lowest latency to the fastest.
func TestLeastBusyAndLowestLatency(t *testing.T) {
	state := NewMemory(nil)
	p, f := pool(t, LeastBusy, state, 1, 1)
	ctx := context.Background()
	for _, id := range []string{"x", "y"} {
		_ = state.Begin(ctx, "sonnet", "east", id, time.Hour)
	}
	if _, err := p.Complete(ctx, &provider.Request{}); err != nil || f[1].calls.Load() != 1 {
		t.Fatalf("with east busy: west called %d times, %v", f[1].calls.Load(), err)
	}
	state = NewMemory(nil)
	p, f = pool(t, LowestLatency, state, 1, 1)
	_ = state.End(ctx, "sonnet", "east", "a", 300*time.Millisecond)
	_ = state.End(ctx, "sonnet", "west", "b", 50*time.Millisecond)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { _, _ = p.Complete(ctx, &provider.Request{}) })
	}
	wg.Wait()
	if f[1].calls.Load() < 9 {
		t.Fatalf("west (50ms) got %d of 10, east (300ms) %d", f[1].calls.Load(), f[0].calls.Load())
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New("sonnet", nil, "", nil, nil, nil); err == nil {
		t.Fatal("a pool without deployments")
	}
	_, err := New("sonnet", []Deployment{{Name: "a", Provider: newFake(), Breaker: breaker.NewMemory("a", breaker.DefaultConfig(), time.Now)}}, "random", nil, nil, nil)
	if err == nil || !errors.Is(err, err) {
		t.Fatal("an unknown strategy")
	}
}

// fullQuota has room for n calls on one ledger name, then none.
type fullQuota struct {
	name    string
	left    atomic.Int64
	settled atomic.Int64
}

func (q *fullQuota) Reserve(_ context.Context, model string, tokens int) (func(int), bool, error) {
	if model != q.name {
		return func(int) {}, true, nil
	}
	if q.left.Add(-1) < 0 {
		return nil, false, nil
	}
	return func(n int) { q.settled.Add(int64(n)) }, true, nil
}

// A deployment with its own ceiling is passed over once it is full, and
// its reservations are settled to the tokens billed.
func TestDeploymentQuota(t *testing.T) {
	p, f := pool(t, Weighted, nil, 1, 1)
	p.deps[0].Quota = "sonnet@east"
	q := &fullQuota{name: "sonnet@east"}
	q.left.Store(2)
	p.WithQuota(q, func(*provider.Request) int { return 100 })
	for i := range 10 {
		if _, err := p.Complete(context.Background(), &provider.Request{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if east, west := f[0].calls.Load(), f[1].calls.Load(); east != 2 || west != 8 {
		t.Fatalf("east %d, west %d; want east's 2 reservations, then west", east, west)
	}
	if q.settled.Load() != 0 {
		t.Fatalf("settled %d tokens; the fake bills none", q.settled.Load())
	}
}

// fixedPressure reports the levels it is given and counts what is
// recorded.
type fixedPressure struct {
	mu       sync.Mutex
	levels   map[string]retry.Level
	recorded map[string][]retry.Outcome
}

func (f *fixedPressure) Record(_ context.Context, name string, o retry.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.recorded == nil {
		f.recorded = map[string][]retry.Outcome{}
	}
	f.recorded[name] = append(f.recorded[name], o)
}

func (f *fixedPressure) Levels(_ context.Context, names []string) []retry.Level {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]retry.Level, len(names))
	for i, n := range names {
		out[i] = f.levels[n]
	}
	return out
}

// withPressure gives p's deployments their "<tier>@<name>" pressure.
func withPressure(p *Pool, pr Pressure) {
	for i := range p.deps {
		p.deps[i].Pressure = "sonnet@" + p.deps[i].Name
	}
	p.WithPressure(pr)
}

// Each deployment records its own outcomes: one that throttles every call
// rises to HIGH while its sibling, answering the calls it sheds, stays
// NORMAL, and so does the tier the pool's caller keeps.
func TestDeploymentPressureIsItsOwn(t *testing.T) {
	ctx := context.Background()
	pr := retry.NewMemoryPressure(retry.DefaultConfig().Pressure, time.Now)
	state := NewMemory(nil)
	p, f := pool(t, Weighted, state, 1, 1)
	withPressure(p, pr)
	f[0].mode.Store("throttle")
	for i := range 20 {
		// The throttle's cooldown would spare east after its first
		// throttle; lift it, so that east is tried whenever it is picked.
		state.mu.Lock()
		if d := state.deps[[2]string{"sonnet", "east"}]; d != nil {
			d.until = time.Time{}
		}
		state.mu.Unlock()
		if _, err := p.Complete(ctx, &provider.Request{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		pr.Record(ctx, "sonnet", retry.OutcomeOK) // the tier's call answered
	}
	got := pr.Levels(ctx, []string{"sonnet@east", "sonnet@west", "sonnet"})
	if got[0] != retry.LevelHigh || got[1] != retry.LevelNormal || got[2] != retry.LevelNormal {
		t.Fatalf("east throttling every call: east %s, west %s, tier %s; want HIGH, NORMAL, NORMAL", got[0], got[1], got[2])
	}
	if f[0].calls.Load() == 0 || f[1].calls.Load() != 20 {
		t.Fatalf("east called %d times, west %d of 20", f[0].calls.Load(), f[1].calls.Load())
	}
	snaps, err := p.Snapshots(ctx)
	if err != nil || snaps[0].Pressure != "HIGH" || snaps[1].Pressure != "NORMAL" {
		t.Fatalf("snapshots %+v, %v; want east HIGH, west NORMAL", snaps, err)
	}
	// Without pressure the snapshot says nothing of it.
	plain, _ := pool(t, Weighted, nil, 1, 1)
	if snaps, _ := plain.Snapshots(ctx); snaps[0].Pressure != "" {
		t.Fatalf("a pool without pressure reports %q", snaps[0].Pressure)
	}
}

// The outcomes recorded are the retrier's: an answer and a request's own
// fault are OK, a throttle a throttle, an outage a failure; a call whose
// caller gave up is not recorded.
func TestDeploymentPressureOutcomes(t *testing.T) {
	pr := &fixedPressure{}
	p, f := pool(t, Weighted, nil, 1)
	withPressure(p, pr)
	for _, mode := range []string{"ok", "invalid", "throttle", "fail"} {
		f[0].mode.Store(mode)
		p.state = NewMemory(nil) // no cooldown between the calls
		_, _ = p.Complete(context.Background(), &provider.Request{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = p.Complete(ctx, &provider.Request{})
	want := []retry.Outcome{retry.OutcomeOK, retry.OutcomeOK, retry.OutcomeThrottled, retry.OutcomeFailed}
	got := pr.recorded["sonnet@east"]
	if !slices.Equal(got, want) {
		t.Fatalf("recorded %v, want %v and nothing for the canceled call", got, want)
	}
}

// A deployment under pressure gets a smaller share of the calls, halved
// at each level, never none; one whose pressure circuit is open gets
// none; all open, the tier is unavailable.
func TestBalancerPrefersTheLessPressured(t *testing.T) {
	tests := []struct {
		name     string
		strategy string
		east     retry.Level
		wantEast int // of 900 calls at weights 1:1
	}{
		{"normal", Weighted, retry.LevelNormal, 450},
		{"slight", Weighted, retry.LevelSlight, 300},
		{"high", Weighted, retry.LevelHigh, 100},
		{"open", Weighted, retry.LevelCircuitOpen, 0},
		{"least busy, high", LeastBusy, retry.LevelHigh, 0}, // nothing in flight: ties go to the heavier
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, f := pool(t, tt.strategy, nil, 1, 1)
			withPressure(p, &fixedPressure{levels: map[string]retry.Level{"sonnet@east": tt.east}})
			for range 900 {
				if _, err := p.Complete(context.Background(), &provider.Request{}); err != nil {
					t.Fatal(err)
				}
			}
			if got := int(f[0].calls.Load()); got != tt.wantEast {
				t.Fatalf("east at %s got %d of 900 calls, want %d", tt.east, got, tt.wantEast)
			}
		})
	}
	// Lowest latency: a deployment under pressure counts as slower.
	state := NewMemory(nil)
	p, f := pool(t, LowestLatency, state, 1, 1)
	withPressure(p, &fixedPressure{levels: map[string]retry.Level{"sonnet@east": retry.LevelHigh}})
	ctx := context.Background()
	_ = state.End(ctx, "sonnet", "east", "a", 50*time.Millisecond)
	_ = state.End(ctx, "sonnet", "west", "b", 300*time.Millisecond)
	if _, err := p.Complete(ctx, &provider.Request{}); err != nil || f[1].calls.Load() != 1 {
		t.Fatalf("east (50ms, HIGH) against west (300ms, NORMAL): west called %d times, %v", f[1].calls.Load(), err)
	}
	// Every circuit open: no call, the tier's unavailable error.
	p, f = pool(t, Weighted, nil, 1, 1)
	withPressure(p, &fixedPressure{levels: map[string]retry.Level{"sonnet@east": retry.LevelCircuitOpen, "sonnet@west": retry.LevelCircuitOpen}})
	_, err := p.Complete(ctx, &provider.Request{})
	if provider.KindOf(err) != provider.KindUnavailable || f[0].calls.Load()+f[1].calls.Load() != 0 {
		t.Fatalf("every circuit open: %v after %d calls", err, f[0].calls.Load()+f[1].calls.Load())
	}
}

// A fleet's deployments share their pressure: a deployment one instance
// saw throttled is sent fewer calls by another.
func TestDeploymentPressureIsFleetWide(t *testing.T) {
	c, prefix := redistest.Client(t)
	ctx := context.Background()
	cfg := retry.DefaultConfig().Pressure
	a := retry.NewRedisPressure(c, prefix, "a", cfg, time.Now)
	b := retry.NewRedisPressure(c, prefix, "b", cfg, time.Now)
	for range 2 {
		a.Record(ctx, "sonnet@east", retry.OutcomeThrottled)
	}
	p, f := pool(t, Weighted, nil, 1, 1)
	withPressure(p, b)
	for range 90 {
		if _, err := p.Complete(ctx, &provider.Request{}); err != nil {
			t.Fatal(err)
		}
	}
	// b's own calls to east answer, so its local level stays NORMAL: the
	// HIGH it weighs is a's.
	if east := f[0].calls.Load(); east != 10 {
		t.Fatalf("east, HIGH on the other instance, got %d of 90 calls; want 10", east)
	}
}

// BenchmarkPoolComplete is a call through a pool of three deployments on
// the in-memory state, with and without the deployments' pressure: what
// reading the levels and recording the outcome adds to every call.
func BenchmarkPoolComplete(b *testing.B) {
	for _, withLevels := range []bool{false, true} {
		b.Run(map[bool]string{false: "no pressure", true: "memory pressure"}[withLevels], func(b *testing.B) {
			p, _ := pool(b, Weighted, NewMemory(nil), 3, 2, 1)
			if withLevels {
				withPressure(p, retry.NewMemoryPressure(retry.DefaultConfig().Pressure, time.Now))
			}
			ctx, req := context.Background(), &provider.Request{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Complete(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
