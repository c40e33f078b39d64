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

func always(int) bool { return true }

// capacity throttles the calls beyond perSecond in each second of clk, as a
// provider's quota does.
func capacity(clk *fakeClock, perSecond int) func(int) bool {
	second, used := int64(-1), 0
	return func(int) bool {
		if s := clk.Now().Unix(); s != second {
			second, used = s, 0
		}
		used++
		return used > perSecond
	}
}

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

	t.Run("a model throttling half its calls whatever their rate is sent them all", func(t *testing.T) {
		l, _ := setup(t)
		l.run(20, 5*time.Second, never)
		g, th := l.run(20, 24*time.Second, half)
		// 480 calls offered, half of those sent throttled: fewer calls
		// would not be throttled less, so pacing would only take answers
		// away from the model.
		if g < 456 {
			t.Errorf("%d of 480 calls sent (%d throttled) to a model throttling half of them, want ≥ 95%%", g, th)
		}
	})

	t.Run("a model over its capacity is sent about 2.5 times what it accepts", func(t *testing.T) {
		l, clk := setup(t)
		l.run(20, 5*time.Second, never)
		g, th := l.run(20, 20*time.Second, capacity(clk, 5))
		// 400 offered, 100 accepted: unpaced, 300 would be throttled.
		t.Logf("%d sent, %d throttled", g, th)
		if g < 200 || g > 300 {
			t.Errorf("%d of 400 calls sent (%d throttled) to a model accepting 5/s, want 200–300 (about 2.5 × 100)", g, th)
		}
	})

	t.Run("a model throttling every call is probed at about the floor", func(t *testing.T) {
		l, _ := setup(t)
		l.run(20, 2*time.Second, never)
		first, _ := l.run(20, 10*time.Second, always)
		g, _ := l.run(20, 10*time.Second, always)
		// What the model accepted before the storm fades over the first
		// seconds; then it is sent its floor of 0.5/s and, now and then, a
		// call the refused share leaves room for. Unpaced: 200 calls.
		t.Logf("%d sent in the first 10 s, %d in the next 10 s", first, g)
		if first > 120 || g < 5 || g > 15 {
			t.Errorf("%d then %d of 200 calls sent in two 10 s of throttling every call, want ≤ 120 then 5–15", first, g)
		}
	})

	t.Run("the rate comes back within seconds of the storm's end", func(t *testing.T) {
		l, _ := setup(t)
		l.run(20, 2*time.Second, never)
		l.run(20, 20*time.Second, always)
		var secs int
		for secs = 1; secs <= 30; secs++ {
			if g, _ := l.run(20, time.Second, never); g == 20 {
				break
			}
		}
		t.Logf("all calls sent again %d s after the storm", secs)
		if secs > 20 {
			t.Errorf("%d s after the storm a second's calls are not all sent, want ≤ 20 s", secs)
		}
	})

	t.Run("models are independent", func(t *testing.T) {
		l, _ := setup(t)
		l.run(20, 5*time.Second, always)
		if g, _ := l.run(20, time.Second, nil); g > 5 {
			t.Fatalf("sonnet sent %d of 20 after 5 s of throttling every call", g)
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
	// a's calls to sonnet are all throttled for 5 s.
	la := load{ctx: ctx, r: a, clk: clk, model: "sonnet"}
	la.run(20, 5*time.Second, always)
	// b has made no call and seen no throttle, yet is paced from its first
	// calls: the counts are the fleet's.
	lb := load{ctx: ctx, r: b, clk: clk, model: "sonnet"}
	if g, _ := lb.run(20, time.Second, nil); g > 5 {
		t.Errorf("b sent %d of 20 calls right after the fleet saw sonnet throttle every call, want ≤ 5", g)
	}
}

func TestRedisSendRateFallsBackToLocal(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	clk := newFakeClock()
	r := NewRedisSendRate(rdb, "fmgate-test-down:", DefaultConfig().SendRate, clk.Now)
	ctx := context.Background()
	var granted int
	for range 100 {
		if r.Allow(ctx, "sonnet") {
			granted++
			r.Throttled(ctx, "sonnet")
		}
	}
	// The first 10 calls are too few to pace on; then a few of the
	// rest. Unpaced: 100.
	if granted > 15 {
		t.Errorf("with Redis down %d of 100 calls sent to a model throttling each: the instance's own send rate does not pace it", granted)
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
