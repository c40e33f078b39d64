package retry

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redistest"
)

type newSendRateFunc func(t *testing.T, c SendRateConfig, clk *fakeClock) SendRate

func TestMemorySendRate(t *testing.T) {
	testSendRate(t, func(t *testing.T, c SendRateConfig, clk *fakeClock) SendRate {
		return NewMemorySendRate(c, clk.Now)
	})
}

func TestRedisSendRate(t *testing.T) {
	testSendRate(t, func(t *testing.T, c SendRateConfig, clk *fakeClock) SendRate {
		rdb, prefix := redistest.Client(t)
		r := NewRedisSendRate(rdb, prefix, c, clk.Now)
		r.clock = clk.Now
		return r
	})
}

// load offers calls to a model at perSecond for d on the fake clock; each
// granted call is throttled when throttle says so. It returns the calls
// granted and throttled.
type load struct {
	ctx   context.Context
	r     SendRate
	clk   *fakeClock
	model string
}

func (l load) run(perSecond float64, d time.Duration, throttle func(granted int) bool) (granted, throttled int) {
	step := time.Duration(float64(time.Second) / perSecond)
	for elapsed := time.Duration(0); elapsed < d; elapsed += step {
		if l.r.Allow(l.ctx, l.model) {
			granted++
			if throttle != nil && throttle(granted) {
				l.r.Throttled(l.ctx, l.model)
				throttled++
			}
		}
		l.clk.Advance(step)
	}
	return granted, throttled
}

func never(int) bool { return false }

// half throttles every other granted call, as a provider throttling 50% of
// calls whatever their rate.
func half(n int) bool { return n%2 == 1 }

// testSendRate is the conformance suite every SendRate passes.
func testSendRate(t *testing.T, newRate newSendRateFunc) {
	c := DefaultConfig().SendRate
	setup := func(t *testing.T) (load, *fakeClock) {
		clk := newFakeClock()
		return load{ctx: context.Background(), r: newRate(t, c, clk), clk: clk, model: "sonnet"}, clk
	}

	t.Run("a model that never throttled is not paced", func(t *testing.T) {
		l, _ := setup(t)
		for i := range 1000 {
			if !l.r.Allow(l.ctx, "sonnet") {
				t.Fatalf("call %d refused at one instant with no throttle", i)
			}
		}
	})

	t.Run("a throttle cuts the rate to 0.7 of the demand, then it grows back", func(t *testing.T) {
		l, _ := setup(t)
		if g, _ := l.run(20, 3*time.Second, never); g != 60 {
			t.Fatalf("before the throttle %d of 60 granted", g)
		}
		l.r.Throttled(l.ctx, "sonnet")
		// One token is left for the throttled call's retry, then 14/s.
		if !l.r.Allow(l.ctx, "sonnet") {
			t.Fatal("the throttled call's retry was refused")
		}
		if l.r.Allow(l.ctx, "sonnet") {
			t.Fatal("a second call at the same instant was granted")
		}
		// Over the next second the fill rate climbs from 14/s to
		// 0.4·(1−∛15)³+20 ≈ 18.7/s: about 16 of 20 calls.
		g, _ := l.run(20, time.Second, never)
		if g < 14 || g > 18 {
			t.Errorf("first second after the throttle: %d of 20 granted, want 14–18", g)
		}
		// The cubic's plateau (20/s) is reached after ∛15 ≈ 2.5 s; by 4 s
		// the whole demand is granted again.
		l.run(20, 3*time.Second, never)
		if g, _ := l.run(20, time.Second, never); g != 20 {
			t.Errorf("4 s after the throttle %d of 20 granted", g)
		}
	})

	t.Run("a model throttling half its calls is paced down to a few calls", func(t *testing.T) {
		l, _ := setup(t)
		l.run(20, 5*time.Second, never)
		g, th := l.run(20, 24*time.Second, half)
		// 480 calls offered. Unpaced, all 480 would be sent and 240
		// throttled; paced, each throttle cuts the rate to 0.7× and the
		// cubic climbs back in ∛(0.75·rate) s, which settles at a few calls
		// a second whatever the demand.
		if g > 96 || th > 48 {
			t.Errorf("%d of 480 calls sent (%d throttled) while half were throttled, want ≤ 20%% sent", g, th)
		}
		if g < 12 {
			t.Errorf("only %d calls in 24 s: the floor of 0.5/s keeps probing the model", g)
		}
		// The storm ends: the rate grows back to the whole demand within
		// seconds.
		l.run(20, 5*time.Second, never)
		if g, _ := l.run(20, time.Second, never); g != 20 {
			t.Errorf("5 s after the last throttle %d of 20 granted", g)
		}
	})

	t.Run("a model throttling every call is paced to the floor", func(t *testing.T) {
		l, _ := setup(t)
		l.run(20, 2*time.Second, never)
		g, _ := l.run(20, 20*time.Second, func(int) bool { return true })
		// The rate decays from 14/s in the first seconds, then settles
		// where the cubic climbs back to the rate of the last throttle in
		// about the time one token takes to fill: one to two calls a
		// second, above the floor of 0.5/s. Unpaced: 400 calls.
		if g < 10 || g > 40 {
			t.Errorf("%d of 400 calls sent in 20 s of throttling every call, want 10–40", g)
		}
	})

	t.Run("a throttle is forgotten after forgetAfter", func(t *testing.T) {
		l, clk := setup(t)
		l.r.Throttled(l.ctx, "sonnet")
		l.r.Allow(l.ctx, "sonnet") // the retry token
		if l.r.Allow(l.ctx, "sonnet") {
			t.Fatal("granted right after a throttle with no measured demand")
		}
		clk.Advance(c.ForgetAfter)
		for i := range 100 {
			if !l.r.Allow(l.ctx, "sonnet") {
				t.Fatalf("call %d refused %s after the last throttle", i, c.ForgetAfter)
			}
		}
	})

	t.Run("models are independent", func(t *testing.T) {
		l, _ := setup(t)
		l.r.Throttled(l.ctx, "sonnet")
		l.r.Allow(l.ctx, "sonnet")
		if l.r.Allow(l.ctx, "sonnet") {
			t.Fatal("sonnet not paced after a throttle")
		}
		for i := range 100 {
			if !l.r.Allow(l.ctx, "haiku") {
				t.Fatalf("haiku call %d refused: only sonnet throttled", i)
			}
		}
	})
}

func TestRedisSendRateSharedByTheFleet(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := redistest.Client(t)
	clk := newFakeClock()
	c := DefaultConfig().SendRate
	instance := func() *RedisSendRate {
		r := NewRedisSendRate(rdb, prefix, c, clk.Now)
		r.clock = clk.Now
		return r
	}
	a, b := instance(), instance()
	// Both instances call sonnet at 10/s: the fleet's demand is 20/s.
	for range 60 {
		a.Allow(ctx, "sonnet")
		b.Allow(ctx, "sonnet")
		clk.Advance(100 * time.Millisecond)
	}
	a.Throttled(ctx, "sonnet")
	// b never saw a throttle, yet shares the bucket: over the next second
	// the two together get about 14 of their 20 calls (one instance alone
	// at 20/s would get 16; the instances' calls reach Redis in batches
	// every syncEvery, so the fleet's demand is measured more coarsely),
	// not b's 10 plus a's share.
	var ga, gb int
	for range 10 {
		if a.Allow(ctx, "sonnet") {
			ga++
		}
		if b.Allow(ctx, "sonnet") {
			gb++
		}
		clk.Advance(100 * time.Millisecond)
	}
	if ga+gb < 10 || ga+gb > 18 || gb == 10 {
		t.Errorf("after a's throttle: a %d, b %d of 10 each; want 10–18 together, b paced too", ga, gb)
	}
}

func TestRedisSendRateFallsBackToLocal(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	clk := newFakeClock()
	r := NewRedisSendRate(rdb, "fmgate-test-down:", DefaultConfig().SendRate, clk.Now)
	ctx := context.Background()
	r.Throttled(ctx, "sonnet")
	r.Allow(ctx, "sonnet")
	if r.Allow(ctx, "sonnet") {
		t.Error("with Redis down a throttled model is not paced by the instance's own send rate")
	}
	if !r.Allow(ctx, "haiku") {
		t.Error("with Redis down an unthrottled model is refused")
	}
}

// countingHook counts the commands a Redis client sends.
type countingHook struct{ n int }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n++
		return next(ctx, cmd)
	}
}
func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n += len(cmds)
		return next(ctx, cmds)
	}
}

func TestRedisSendRateUnthrottledCostsFewRoundTrips(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	hook := &countingHook{}
	rdb.AddHook(hook)
	clk := newFakeClock()
	r := NewRedisSendRate(rdb, prefix, DefaultConfig().SendRate, clk.Now)
	r.clock = clk.Now
	ctx := context.Background()
	// 100 calls a second for 10 s to a model that does not throttle: one
	// sync every 250 ms, not one round trip per call.
	for range 1000 {
		if !r.Allow(ctx, "sonnet") {
			t.Fatal("refused with no throttle")
		}
		clk.Advance(10 * time.Millisecond)
	}
	// A script's first run may cost an EVALSHA and an EVAL.
	if hook.n > 45 {
		t.Errorf("%d Redis commands for 1000 calls in 10 s, want about 40", hook.n)
	}
}
