package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

type harness struct {
	r     *Retrier
	clk   *fakeClock
	waits []time.Duration
	calls int
}

// newHarness returns a Retrier on a fake clock whose Sleep advances the
// clock, with no budget, no pressure and no pacing unless the test sets
// them.
func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	r, err := New(cfg, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{r: r, clk: newFakeClock()}
	r.Now = h.clk.Now
	r.Sleep = func(ctx context.Context, d time.Duration) error {
		h.waits = append(h.waits, d)
		h.clk.Advance(d)
		return ctx.Err()
	}
	r.Budget, r.Pressure, r.Rate = Unlimited{}, Steady{}, Unpaced{}
	return h
}

// failing returns a call failing with errs in turn (the last one repeats);
// a nil entry succeeds. Each call takes took on the fake clock.
func (h *harness) failing(took time.Duration, errs ...error) func(context.Context, int) error {
	return func(_ context.Context, attempt int) error {
		if attempt != h.calls {
			panic("attempt numbers out of order")
		}
		h.calls++
		h.clk.Advance(took)
		return errs[min(attempt, len(errs)-1)]
	}
}

func noneConfig() Config {
	c := DefaultConfig()
	c.Strategy = StrategyNone
	return c
}

func TestDoErrorClasses(t *testing.T) {
	tests := []struct {
		name         string
		give         []error
		wantAttempts int
		wantStop     Stop
		wantErr      bool
	}{
		{"throttled: 3 retries", []error{perr(provider.KindThrottled)}, 4, StopExhausted, true},
		{"unavailable: 2 retries", []error{perr(provider.KindUnavailable)}, 3, StopExhausted, true},
		{"not ready: 2 retries", []error{perr(provider.KindNotReady)}, 3, StopExhausted, true},
		{"model timeout: 1 retry", []error{perr(provider.KindTimeout)}, 2, StopExhausted, true},
		{"unknown 503: as unavailable", []error{&provider.Error{Kind: provider.KindUnknown, Status: 503}}, 3, StopExhausted, true},
		{"validation: none", []error{perr(provider.KindValidation)}, 1, StopNotRetryable, true},
		{"access denied: none", []error{perr(provider.KindAccessDenied)}, 1, StopNotRetryable, true},
		{"not found: none", []error{perr(provider.KindNotFound)}, 1, StopNotRetryable, true},
		{"guardrail: never", []error{perr(provider.KindGuardrail)}, 1, StopNotRetryable, true},
		{"canceled: none", []error{context.Canceled}, 1, StopNotRetryable, true},
		{"plain error: none", []error{errors.New("boom")}, 1, StopNotRetryable, true},
		{"final throttled: never", []error{Final(perr(provider.KindThrottled))}, 1, StopFinal, true},
		{"final after a retry", []error{perr(provider.KindUnavailable), Final(perr(provider.KindUnavailable))}, 2, StopFinal, true},
		{"success after two failures", []error{perr(provider.KindThrottled), perr(provider.KindUnavailable), nil}, 3, StopSuccess, false},
		{"class of the latest error governs", []error{perr(provider.KindThrottled), perr(provider.KindThrottled), perr(provider.KindTimeout)}, 3, StopExhausted, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, DefaultConfig())
			rep, err := h.r.Do(context.Background(), "sonnet", h.failing(0, tt.give...))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if want := tt.give[min(rep.Attempts-1, len(tt.give)-1)]; err != want {
				t.Errorf("Do returned %v, not the last call's error %v", err, want)
			}
			if rep.Attempts != tt.wantAttempts || h.calls != tt.wantAttempts || rep.Stop != tt.wantStop {
				t.Errorf("attempts %d (calls %d), stop %s; want %d, %s", rep.Attempts, h.calls, rep.Stop, tt.wantAttempts, tt.wantStop)
			}
			if rep.Retries != rep.Attempts-1 || len(h.waits) != rep.Retries {
				t.Errorf("retries %d, waits %d for %d attempts", rep.Retries, len(h.waits), rep.Attempts)
			}
			if want := provider.KindOf(err); rep.LastKind != want {
				t.Errorf("LastKind %q, want %q", rep.LastKind, want)
			}
		})
	}
}

func TestDoBackoffGrowsPerClass(t *testing.T) {
	h := newHarness(t, noneConfig())
	rep, _ := h.r.Do(context.Background(), "sonnet", h.failing(0, perr(provider.KindThrottled)))
	want := []time.Duration{200 * time.Millisecond, 600 * time.Millisecond, 1800 * time.Millisecond}
	if len(h.waits) != len(want) {
		t.Fatalf("waits %v, want %v", h.waits, want)
	}
	for i := range want {
		if h.waits[i] != want[i] {
			t.Errorf("wait %d = %v, want %v", i, h.waits[i], want[i])
		}
	}
	if rep.Wait != 2600*time.Millisecond {
		t.Errorf("report wait %v", rep.Wait)
	}
}

func TestDoRetryAfterHonoured(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter time.Duration
		want       time.Duration
	}{
		{"longer than backoff", 1200 * time.Millisecond, 1200 * time.Millisecond},
		{"beyond the cap", 12 * time.Second, 12 * time.Second},
		{"shorter than backoff", 50 * time.Millisecond, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, noneConfig())
			err := &provider.Error{Kind: provider.KindThrottled, RetryAfter: tt.retryAfter}
			h.r.Do(context.Background(), "sonnet", h.failing(0, err, nil))
			if len(h.waits) != 1 || h.waits[0] != tt.want {
				t.Errorf("waits %v, want [%v]", h.waits, tt.want)
			}
		})
	}
}

// countingBudget counts calls and grants everything.
type countingBudget struct{ deposits, withdrawals atomic.Int64 }

func (b *countingBudget) Deposit(context.Context) { b.deposits.Add(1) }
func (b *countingBudget) Withdraw(context.Context) bool {
	b.withdrawals.Add(1)
	return true
}

func TestDoStopsBeforeTheDeadline(t *testing.T) {
	tests := []struct {
		name         string
		deadline     time.Duration
		took         time.Duration
		give         error
		wantAttempts int
		wantWait     time.Duration
		wantStop     Stop
	}{
		{"retry-after leaves no time for an attempt", time.Second, 0,
			&provider.Error{Kind: provider.KindThrottled, RetryAfter: 800 * time.Millisecond}, 1, 0, StopDeadline},
		{"retry-after fits with minAttemptTime", 2 * time.Second, 0,
			&provider.Error{Kind: provider.KindTimeout, RetryAfter: 700 * time.Millisecond}, 2, 700 * time.Millisecond, StopExhausted},
		{"slow failures in a 3 s turn", 3 * time.Second, 400 * time.Millisecond,
			perr(provider.KindThrottled), 3, 800 * time.Millisecond, StopDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, noneConfig())
			b := &countingBudget{}
			h.r.Budget = b
			// The deadline is real (far off) so the context stays live; the
			// fake clock starts tt.deadline before it.
			dl := time.Now().Add(time.Hour)
			h.clk.Set(dl.Add(-tt.deadline))
			ctx, cancel := context.WithDeadline(context.Background(), dl)
			defer cancel()
			rep, err := h.r.Do(ctx, "sonnet", h.failing(tt.took, tt.give))
			if err != tt.give {
				t.Errorf("err = %v", err)
			}
			if rep.Attempts != tt.wantAttempts || rep.Wait != tt.wantWait || rep.Stop != tt.wantStop {
				t.Errorf("attempts %d wait %v stop %s; want %d %v %s", rep.Attempts, rep.Wait, rep.Stop, tt.wantAttempts, tt.wantWait, tt.wantStop)
			}
			if got := b.withdrawals.Load(); got != int64(rep.Retries) {
				t.Errorf("%d withdrawals for %d retries: a skipped retry spent budget", got, rep.Retries)
			}
			if b.deposits.Load() != 1 {
				t.Errorf("%d deposits, want 1 per Do", b.deposits.Load())
			}
		})
	}
}

func TestDoBudgetRefuses(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	h.r.Budget = NewMemoryBudget(BudgetConfig{Ratio: 0, MinPerSecond: 0, Window: time.Second}, h.clk.Now)
	rep, err := h.r.Do(context.Background(), "sonnet", h.failing(0, perr(provider.KindThrottled)))
	if err == nil || rep.Attempts != 1 || !rep.BudgetRefused || rep.Stop != StopBudget {
		t.Errorf("report %+v, err %v: want one attempt and a budget refusal", rep, err)
	}
}

func TestDoOutageBoundedByBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Budget.Ratio = 0.1
	h := newHarness(t, cfg)
	h.r.Budget = NewMemoryBudget(cfg.Budget, h.clk.Now)
	h.r.Sleep = func(context.Context, time.Duration) error { return nil }
	start := h.clk.Now()
	const requests = 3000
	attempts := 0
	for range requests {
		rep, _ := h.r.Do(context.Background(), "sonnet", func(context.Context, int) error {
			return perr(provider.KindUnavailable)
		})
		attempts += rep.Attempts
		h.clk.Advance(20 * time.Millisecond)
	}
	elapsed := h.clk.Now().Sub(start)
	floor := int(cfg.Budget.MinPerSecond * (elapsed + cfg.Budget.Window).Seconds())
	if limit := int(1.1*requests) + floor; attempts > limit {
		t.Errorf("%d attempts for %d requests under a total outage, want <= %d", attempts, requests, limit)
	}
}

func TestDoSkipsOpenModel(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	p := NewMemoryPressure(DefaultConfig().Pressure, h.clk.Now)
	h.r.Pressure = p
	for range 10 {
		p.Record(context.Background(), "sonnet", OutcomeFailed)
	}
	rep, err := h.r.Do(context.Background(), "sonnet", h.failing(0, nil))
	if !errors.Is(err, ErrPressureOpen) {
		t.Fatalf("err = %v, want ErrPressureOpen", err)
	}
	if h.calls != 0 || rep.Attempts != 0 || rep.Level != LevelCircuitOpen || rep.Stop != StopPressureOpen {
		t.Errorf("calls %d, report %+v", h.calls, rep)
	}
	if _, err := h.r.Do(context.Background(), "haiku", h.failing(0, nil)); err != nil {
		t.Errorf("another model was skipped: %v", err)
	}
}

func TestDoFeedsPressure(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	h.r.Pressure = NewMemoryPressure(DefaultConfig().Pressure, h.clk.Now)
	ctx := context.Background()
	call := h.failing(0, perr(provider.KindUnavailable))
	do := func() Report {
		h.calls = 0
		rep, _ := h.r.Do(ctx, "sonnet", call)
		return rep
	}

	// NORMAL allows 2 retries, but the first failure moves the model to
	// SLIGHT (1 retry) and the second to HIGH, where the one retry is spent.
	if rep := do(); rep.Attempts != 2 || rep.Level != LevelHigh || rep.Stop != StopExhausted {
		t.Fatalf("first turn: %+v", rep)
	}
	total := 2
	for total < 10 {
		rep := do()
		total += rep.Attempts
		if rep.Stop == StopPressureOpen {
			break
		}
	}
	if total != 10 {
		t.Fatalf("circuit opened after %d failures, want minSamples 10", total)
	}
	if rep := do(); rep.Attempts != 0 || rep.Stop != StopPressureOpen {
		t.Fatalf("turn after the circuit opened: %+v", rep)
	}

	h.clk.Advance(30 * time.Second)
	h.calls = 0
	rep, err := h.r.Do(ctx, "sonnet", h.failing(0, nil))
	if err != nil || rep.Level != LevelRecovery {
		t.Fatalf("probe after cooldown: %+v, %v", rep, err)
	}
}

func TestDoCancellationsDoNotBlameTheModel(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	p := NewMemoryPressure(DefaultConfig().Pressure, h.clk.Now)
	h.r.Pressure = p
	for _, err := range []error{context.Canceled, perr(provider.KindValidation), perr(provider.KindGuardrail)} {
		for range 20 {
			h.calls = 0
			h.r.Do(context.Background(), "sonnet", h.failing(0, err))
		}
	}
	if got := p.Level(context.Background(), "sonnet"); got != LevelNormal {
		t.Errorf("client-side failures raised pressure to %s", got)
	}
}

func TestDoCanceledWhileWaiting(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	h.r.Sleep = func(context.Context, time.Duration) error { return context.Canceled }
	give := perr(provider.KindThrottled)
	rep, err := h.r.Do(context.Background(), "sonnet", h.failing(0, give))
	if err != give || rep.Attempts != 1 || rep.Stop != StopCanceled || rep.Wait != 0 {
		t.Errorf("report %+v, err %v", rep, err)
	}
}

func TestDoRealSleepHonoursContext(t *testing.T) {
	r, err := New(noneConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	rep, _ := r.Do(ctx, "sonnet", func(context.Context, int) error {
		calls++
		cancel() // the client leaves during the first attempt
		return perr(provider.KindThrottled)
	})
	if calls != 1 || rep.Stop != StopCanceled {
		t.Errorf("calls %d, report %+v", calls, rep)
	}
}

func TestPolicyPerLevel(t *testing.T) {
	r, err := New(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		class       provider.Kind
		level       Level
		wantBase    time.Duration
		wantRetries int
	}{
		{provider.KindThrottled, LevelNormal, 200 * time.Millisecond, 3},
		{provider.KindThrottled, LevelSlight, 400 * time.Millisecond, 2},
		{provider.KindThrottled, LevelHigh, time.Second, 0},
		{provider.KindThrottled, LevelRecovery, 600 * time.Millisecond, 1},
		{provider.KindThrottled, LevelCircuitOpen, 200 * time.Millisecond, 0},
		{provider.KindTimeout, LevelNormal, 100 * time.Millisecond, 1},
		{provider.KindTimeout, LevelSlight, 200 * time.Millisecond, 0},
		{provider.KindUnknown, LevelNormal, 100 * time.Millisecond, 5},
		{provider.KindUnknown, LevelSlight, 200 * time.Millisecond, 2},
		{provider.KindGuardrail, LevelNormal, 100 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.class)+"/"+tt.level.String(), func(t *testing.T) {
			p := r.Policy(tt.class, tt.level)
			if p.Backoff.Base != tt.wantBase || p.MaxRetries != tt.wantRetries {
				t.Errorf("base %v retries %d, want %v %d", p.Backoff.Base, p.MaxRetries, tt.wantBase, tt.wantRetries)
			}
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	c := DefaultConfig()
	c.Budget.Ratio = 3
	if _, err := New(c, nil); err == nil {
		t.Error("New accepted an invalid config")
	}
}

func BenchmarkRetrierDoSuccess(b *testing.B) {
	r, err := New(DefaultConfig(), rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	ok := func(context.Context, int) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		r.Do(ctx, "sonnet", ok)
	}
}

// storm runs turns at 20/s for 30 s against a primary that answers, then
// for 24 s lets throttle decide which of its calls are throttled (a game
// day's throttle storm), each turn falling back to a secondary (one call)
// when the primary gave no answer, with the default budget and pressure.
// It returns the upstream calls per turn in the storm, the share of turns
// the primary answered, and its retries per turn.
func storm(t *testing.T, paced bool, throttle func(h *harness) bool) (perTurn, primaryShare, retries float64) {
	h := newHarness(t, DefaultConfig())
	h.r.Sleep = func(ctx context.Context, d time.Duration) error { return ctx.Err() }
	h.r.Budget = NewMemoryBudget(DefaultConfig().Budget, h.clk.Now)
	h.r.Pressure = NewMemoryPressure(DefaultConfig().Pressure, h.clk.Now)
	if paced {
		h.r.Rate = NewMemorySendRate(DefaultConfig().SendRate, h.clk.Now)
	}
	ctx := context.Background()
	var calls, primary, retried, n int
	for range 600 {
		if _, err := h.r.Do(ctx, "sonnet", func(context.Context, int) error { return nil }); err != nil {
			t.Fatal(err)
		}
		h.clk.Advance(50 * time.Millisecond)
	}
	for i := range 480 {
		n++
		tctx := fakeDeadline{ctx, h.clk.Now().Add(3 * time.Second)}
		rep, err := h.r.Do(tctx, "sonnet", func(context.Context, int) error {
			calls++
			if throttle(h) {
				return perr(provider.KindThrottled)
			}
			primary++
			return nil
		})
		retried += rep.Retries
		if err != nil {
			calls++
			if _, err := h.r.Do(tctx, "haiku", func(context.Context, int) error { return nil }); err != nil {
				t.Fatalf("turn %d: the secondary failed: %v", i, err)
			}
		}
		h.clk.Advance(50 * time.Millisecond)
	}
	return float64(calls) / float64(n), float64(primary) / float64(n), float64(retried) / float64(n)
}

// fakeDeadline is a live context whose deadline is on the fake clock.
type fakeDeadline struct {
	context.Context
	dl time.Time
}

func (f fakeDeadline) Deadline() (time.Time, bool) { return f.dl, true }

// TestDoThrottleStormCarriesThePrimarysShare: a primary throttling half of
// its calls whatever their rate answers close to half of the turns, paced
// or not; its retries stay within the budget's 20%.
func TestDoThrottleStormCarriesThePrimarysShare(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	half := func(*harness) bool { return rng.Float64() < 0.5 }
	perTurn, share, retries := storm(t, true, half)
	t.Logf("50%% throttled: %.3f calls per turn, %.0f%% of turns answered by the primary, %.3f retries per turn", perTurn, 100*share, retries)
	if share < 0.45 {
		t.Errorf("the primary answered %.0f%% of the turns while it accepted half of its calls, want ≥ 45%%", 100*share)
	}
	// The budget would allow about 0.55 retries a turn (20% of 1.5
	// deposits, plus 5/s over 20 turns/s); at HIGH, where the storm puts
	// the primary within seconds, a throttle is not retried.
	if retries > 0.35 {
		t.Errorf("%.3f retries per turn, want ≤ 0.35: a model at HIGH pressure is not retried", retries)
	}
}

// TestDoThrottleStormOverCapacityIsPaced: a primary accepting 5 calls a
// second under a demand of 20 gets about twice what it accepts, and the
// turns beyond go to the secondary unsent: far fewer upstream calls per
// turn than unpaced, for the same share answered by the primary.
func TestDoThrottleStormOverCapacityIsPaced(t *testing.T) {
	overCapacity := func() func(h *harness) bool {
		second, used := int64(-1), 0
		return func(h *harness) bool {
			if s := h.clk.Now().Unix(); s != second {
				second, used = s, 0
			}
			used++
			return used > 5
		}
	}
	unpaced, unpacedShare, _ := storm(t, false, overCapacity())
	paced, share, retries := storm(t, true, overCapacity())
	t.Logf("primary at 5/s of 20/s: calls per turn %.3f unpaced, %.3f paced (primary's share %.0f%% unpaced, %.0f%% paced, %.3f retries per turn)",
		unpaced, paced, 100*unpacedShare, 100*share, retries)
	if unpaced < 1.8 {
		t.Fatalf("unpaced %.3f calls per turn: the storm does not stress the retry loop", unpaced)
	}
	if paced > 1.6 {
		t.Errorf("paced %.3f calls per turn, want ≤ 1.6", paced)
	}
	if share < 0.9*unpacedShare {
		t.Errorf("paced, the primary answered %.0f%% of the turns, unpaced %.0f%%: pacing took answers away", 100*share, 100*unpacedShare)
	}
}

func TestDoSkipsPacedModel(t *testing.T) {
	h := newHarness(t, DefaultConfig())
	rate := NewMemorySendRate(DefaultConfig().SendRate, h.clk.Now)
	h.r.Rate = rate
	ctx := context.Background()
	// Every call throttled for a while: the model is paced.
	for range 20 {
		_, _ = h.r.Do(ctx, "sonnet", func(context.Context, int) error { return perr(provider.KindThrottled) })
	}
	h.calls = 0
	rep, err := h.r.Do(ctx, "sonnet", h.failing(0, nil))
	if !errors.Is(err, ErrPaced) || rep.Stop != StopPaced || rep.Attempts != 0 || h.calls != 0 {
		t.Fatalf("right after a throttle: %+v, %v, %d calls; want ErrPaced and no call", rep, err, h.calls)
	}
	if _, err := h.r.Do(ctx, "haiku", h.failing(0, nil)); err != nil {
		t.Errorf("another model was paced: %v", err)
	}
	h.clk.Advance(30 * time.Second)
	h.calls = 0
	if _, err := h.r.Do(ctx, "sonnet", h.failing(0, nil)); err != nil || h.calls != 1 {
		t.Errorf("30 s later: %v, %d calls", err, h.calls)
	}
}

func TestSetConfigAppliesToTheNextPolicy(t *testing.T) {
	r, err := New(DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.MaxRetries = 1
	cfg.Base = 50 * time.Millisecond
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if p := r.Policy(provider.KindUnknown, LevelNormal); p.MaxRetries != 1 || p.Backoff.Base != 50*time.Millisecond {
		t.Fatalf("after SetConfig: %+v, want 1 retry from 50ms", p)
	}
	cfg.MaxRetries = -1
	if err := r.SetConfig(cfg); err == nil {
		t.Fatal("SetConfig took maxRetries -1")
	}
	if p := r.Policy(provider.KindUnknown, LevelNormal); p.MaxRetries != 1 {
		t.Fatalf("after a refused SetConfig: %+v, want 1 retry still", p)
	}
}
