package deploy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
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

func pool(t *testing.T, strategy string, state State, weights ...int) (*Pool, []*fake) {
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
