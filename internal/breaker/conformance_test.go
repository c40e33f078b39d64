package breaker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// harness builds breakers for the conformance suite. advance lets time pass:
// the memory harness moves a fake clock, the Redis one sleeps (so the suite
// keeps its durations tiny).
type harness struct {
	factory Factory
	advance func(time.Duration)
}

// suiteConfig has durations small enough for real-time Redis runs and a
// window long enough that nothing expires unless a test waits for it.
func suiteConfig() Config {
	return Config{
		FailureThreshold: 5,
		FailureRate:      1,
		MinCalls:         100,
		Window:           10 * time.Second,
		OpenTimeout:      100 * time.Millisecond,
		Stages:           []int{1, 3, 10},
		HalfOpenWait:     10 * time.Second,
	}
}

func runConformance(t *testing.T, newHarness func(t *testing.T) harness) {
	t.Run("failure threshold", func(t *testing.T) {
		h := newHarness(t)
		b := h.factory("m", suiteConfig(), nil)
		for i := range 4 {
			record(t, b, "F")
			wantState(t, b, Closed, "after failure %d", i+1)
		}
		record(t, b, "F")
		wantState(t, b, Open, "after the fifth failure")
		_, err := b.Allow(context.Background())
		var oe *OpenError
		if !errors.As(err, &oe) || !errors.Is(err, ErrOpen) {
			t.Fatalf("Allow while open = %v, want *OpenError matching ErrOpen", err)
		}
		if oe.State != Open || oe.Name != "m" || oe.RetryAfter <= 0 || oe.RetryAfter > 100*time.Millisecond {
			t.Errorf("OpenError = %+v, want open, name m, 0 < RetryAfter <= 100ms", oe)
		}
	})

	t.Run("failure rate", func(t *testing.T) {
		tests := []struct {
			name string
			give string // outcomes, in order
			want State
		}{
			{"four calls are below minCalls", "FFFS", Closed},
			{"fifth call at 80 percent opens", "FFFSF", Open},
			{"40 percent stays closed", "FFSSS", Closed},
			{"exactly 50 percent opens", "SFSFSF", Open},
			{"a success never opens", "FFSSSS", Closed},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				h := newHarness(t)
				cfg := suiteConfig()
				cfg.FailureThreshold, cfg.FailureRate, cfg.MinCalls = 100, 0.5, 5
				b := h.factory("m", cfg, nil)
				record(t, b, tt.give)
				wantState(t, b, tt.want, "after %s", tt.give)
			})
		}
	})

	t.Run("window expiry forgets old failures", func(t *testing.T) {
		h := newHarness(t)
		cfg := suiteConfig()
		cfg.FailureThreshold, cfg.Window = 3, 200*time.Millisecond
		b := h.factory("m", cfg, nil)
		record(t, b, "FF")
		h.advance(250 * time.Millisecond)
		record(t, b, "F")
		s := snapshot(t, b)
		if s.State != Closed || s.Calls != 1 || s.Failures != 1 {
			t.Fatalf("after expiry: %+v, want closed with 1 call, 1 failure", s)
		}
		record(t, b, "FF")
		wantState(t, b, Open, "after three failures within the window")
	})

	t.Run("progressive recovery 1 then 3 then 10", func(t *testing.T) {
		h := newHarness(t)
		var tr transitions
		b := h.factory("m", suiteConfig(), tr.add)
		record(t, b, "FFFFF")
		h.advance(100 * time.Millisecond)
		wantState(t, b, HalfOpen, "after openTimeout")
		for stage, n := range []int{1, 3, 10} {
			ps := admit(t, b, n)
			s := snapshot(t, b)
			if s.State != HalfOpen || s.Stage != stage || s.StageProbes != n || s.InFlight != n {
				t.Fatalf("stage %d: snapshot %+v", stage, s)
			}
			for _, p := range ps[:n-1] {
				p.Done(context.Background(), true)
			}
			if _, err := b.Allow(context.Background()); !errors.Is(err, ErrOpen) {
				t.Fatalf("stage %d with one probe outstanding admitted an extra call (err %v)", stage, err)
			}
			ps[n-1].Done(context.Background(), true)
		}
		s := snapshot(t, b)
		if s.State != Closed || s.Calls != 0 || s.Failures != 0 {
			t.Fatalf("after the last stage: %+v, want closed with an empty window", s)
		}
		want := []string{"closed->open", "open->half_open", "half_open->closed"}
		if got := tr.get(); !slices.Equal(got, want) {
			t.Errorf("transitions = %v, want %v", got, want)
		}
	})

	t.Run("failed probe re-opens for a new period", func(t *testing.T) {
		h := newHarness(t)
		b := h.factory("m", suiteConfig(), nil)
		record(t, b, "FFFFF")
		h.advance(100 * time.Millisecond)
		admit(t, b, 1)[0].Done(context.Background(), true)
		ps := admit(t, b, 3)
		before := snapshot(t, b)
		ps[1].Done(context.Background(), false)
		s := snapshot(t, b)
		if s.State != Open || s.Generation == before.Generation || s.RetryAfter <= 50*time.Millisecond {
			t.Fatalf("after a failed probe: %+v, want a fresh open period", s)
		}
		ps[0].Done(context.Background(), true)
		ps[2].Done(context.Background(), true)
		wantState(t, b, Open, "after stale successes")
		h.advance(100 * time.Millisecond)
		admit(t, b, 1) // recovery restarts at the first stage
		if _, err := b.Allow(context.Background()); !errors.Is(err, ErrOpen) {
			t.Fatalf("recovery did not restart at one probe (err %v)", err)
		}
	})

	t.Run("stale generation outcomes are ignored", func(t *testing.T) {
		h := newHarness(t)
		cfg := suiteConfig()
		cfg.FailureThreshold, cfg.Stages = 1, []int{2}
		b := h.factory("m", cfg, nil)
		old, err := b.Allow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		record(t, b, "F")
		h.advance(100 * time.Millisecond)
		a := admit(t, b, 2)
		a[0].Done(context.Background(), false)
		h.advance(100 * time.Millisecond)
		bp := admit(t, b, 2)
		a[1].Done(context.Background(), true) // previous half-open period
		if s := snapshot(t, b); s.State != HalfOpen || s.Succeeded != 0 {
			t.Fatalf("a probe of the previous half-open period counted: %+v", s)
		}
		bp[0].Done(context.Background(), true)
		bp[0].Done(context.Background(), true) // Done is idempotent
		if s := snapshot(t, b); s.State != HalfOpen || s.Succeeded != 1 {
			t.Fatalf("a repeated Done counted twice: %+v", s)
		}
		bp[1].Done(context.Background(), true)
		wantState(t, b, Closed, "after the stage passed")
		old.Done(context.Background(), false) // issued before the first opening
		wantState(t, b, Closed, "after a stale closed-state failure")
	})

	t.Run("halfOpenWait frees a wedged probe", func(t *testing.T) {
		h := newHarness(t)
		cfg := suiteConfig()
		cfg.HalfOpenWait = 100 * time.Millisecond
		var tr transitions
		b := h.factory("m", cfg, tr.add)
		record(t, b, "FFFFF")
		h.advance(100 * time.Millisecond)
		wedged := admit(t, b, 1)[0]
		_, err := b.Allow(context.Background())
		var oe *OpenError
		if !errors.As(err, &oe) || oe.State != HalfOpen || oe.RetryAfter <= 0 || oe.RetryAfter > 100*time.Millisecond {
			t.Fatalf("Allow with the probe outstanding = %v, want half-open refusal within halfOpenWait", err)
		}
		h.advance(100 * time.Millisecond)
		wantState(t, b, Open, "after the probe outstayed halfOpenWait")
		h.advance(100 * time.Millisecond)
		admit(t, b, 1)
		wedged.Done(context.Background(), true)
		if s := snapshot(t, b); s.State != HalfOpen || s.Succeeded != 0 || s.InFlight != 1 {
			t.Fatalf("the wedged probe's late outcome counted: %+v", s)
		}
		want := []string{"closed->open", "open->half_open", "half_open->open", "open->half_open"}
		if got := tr.get(); !slices.Equal(got, want) {
			t.Errorf("transitions = %v, want %v", got, want)
		}
	})

	t.Run("a released probe gives its place to the next caller", func(t *testing.T) {
		h := newHarness(t)
		var tr transitions
		b := h.factory("m", suiteConfig(), tr.add)
		record(t, b, "FFFFF")
		h.advance(100 * time.Millisecond)
		throttled := admit(t, b, 1)[0]
		if _, err := b.Allow(context.Background()); !errors.Is(err, ErrOpen) {
			t.Fatalf("a second probe was admitted beside the first (err %v)", err)
		}
		throttled.Release(context.Background())
		if s := snapshot(t, b); s.State != HalfOpen || s.InFlight != 0 || s.Admitted != 0 || s.Succeeded != 0 {
			t.Fatalf("after the release: %+v, want half open with the probe's place free and no verdict", s)
		}
		next := admit(t, b, 1)[0]
		throttled.Done(context.Background(), false) // after Release, Done is void
		throttled.Release(context.Background())
		if s := snapshot(t, b); s.State != HalfOpen || s.InFlight != 1 {
			t.Fatalf("a released permit's later outcome counted: %+v", s)
		}
		next.Done(context.Background(), true)
		ps := admit(t, b, 3)
		ps[0].Release(context.Background())
		ps[1].Done(context.Background(), true)
		ps[2].Done(context.Background(), true)
		wantState(t, b, HalfOpen, "with two of the second stage's three probes passed")
		admit(t, b, 1)[0].Done(context.Background(), true)
		if s := snapshot(t, b); s.Stage != 2 {
			t.Fatalf("the stage did not advance once its probes passed: %+v", s)
		}
		closedPermit := admit(t, b, 10)
		for _, p := range closedPermit {
			p.Done(context.Background(), true)
		}
		wantState(t, b, Closed, "after every stage passed")
		p, err := b.Allow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Release(context.Background()) // a closed-state permit holds no place: no effect
		if s := snapshot(t, b); s.State != Closed || s.Calls != 0 {
			t.Fatalf("a released closed-state permit counted: %+v", s)
		}
		want := []string{"closed->open", "open->half_open", "half_open->closed"}
		if got := tr.get(); !slices.Equal(got, want) {
			t.Errorf("transitions = %v, want %v", got, want)
		}
	})

	t.Run("concurrent Allow admits exactly the stage's probes", func(t *testing.T) {
		h := newHarness(t)
		b := h.factory("m", suiteConfig(), nil)
		record(t, b, "FFFFF")
		h.advance(100 * time.Millisecond)
		for _, n := range []int{1, 3, 10} {
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				mu      sync.Mutex
				permits []Permit
				other   atomic.Int32
			)
			for range 1000 {
				wg.Go(func() {
					<-start
					p, err := b.Allow(context.Background())
					switch {
					case err == nil:
						mu.Lock()
						permits = append(permits, p)
						mu.Unlock()
					case !errors.Is(err, ErrOpen):
						other.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if len(permits) != n || other.Load() != 0 {
				t.Fatalf("1000 racing Allows admitted %d (and %d errors), want exactly %d", len(permits), other.Load(), n)
			}
			for _, p := range permits {
				p.Done(context.Background(), true)
			}
		}
		wantState(t, b, Closed, "after all stages")
	})
}

// record makes one call per outcome: 'S' success, 'F' failure.
func record(t *testing.T, b Breaker, outcomes string) {
	t.Helper()
	for i, o := range outcomes {
		p, err := b.Allow(context.Background())
		if err != nil {
			t.Fatalf("Allow for outcome %d of %s: %v", i, outcomes, err)
		}
		p.Done(context.Background(), o == 'S')
	}
}

// admit takes n permits, failing the test if any is refused.
func admit(t *testing.T, b Breaker, n int) []Permit {
	t.Helper()
	ps := make([]Permit, n)
	for i := range ps {
		p, err := b.Allow(context.Background())
		if err != nil {
			t.Fatalf("Allow %d of %d: %v", i+1, n, err)
		}
		ps[i] = p
	}
	return ps
}

func snapshot(t *testing.T, b Breaker) Snapshot {
	t.Helper()
	s, err := b.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantState(t *testing.T, b Breaker, want State, format string, args ...any) {
	t.Helper()
	if s := snapshot(t, b); s.State != want {
		t.Fatalf("state %s, want %s: "+format, append([]any{s.State, want}, args...)...)
	}
}

// transitions collects OnTransition calls as "from->to".
type transitions struct {
	mu  sync.Mutex
	got []string
}

func (tr *transitions) add(_ string, from, to State) {
	tr.mu.Lock()
	tr.got = append(tr.got, from.String()+"->"+to.String())
	tr.mu.Unlock()
}

func (tr *transitions) get() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.got)
}

// fakeClock is a manually advanced clock for the memory breaker.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
