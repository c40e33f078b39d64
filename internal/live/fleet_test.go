package live

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/redistest"
)

// fleetImpl is a Fleet under test and how to make one of its windows
// expire.
type fleetImpl struct {
	name   string
	fleet  Fleet
	expire func(t *testing.T, instance string, ttl time.Duration)
}

func fleetImpls(t *testing.T) []fleetImpl {
	clk := newClock()
	mem := NewMemoryFleet(clk.Now)
	rdb, prefix := redistest.Client(t)
	return []fleetImpl{
		{"memory", mem, func(*testing.T, string, time.Duration) { clk.Advance(time.Hour) }},
		{"redis", NewRedisFleet(rdb, prefix+"live:"), func(t *testing.T, instance string, ttl time.Duration) {
			// Redis expires the key itself: check the TTL it was given,
			// then let the key go as the expiry would.
			left, err := rdb.PTTL(context.Background(), prefix+"live:"+instance).Result()
			if err != nil || left <= 0 || left > ttl {
				t.Fatalf("%s's window has TTL %v (%v); want (0, %v]", instance, left, err, ttl)
			}
			rdb.Del(context.Background(), prefix+"live:"+instance)
		}},
	}
}

func TestFleetConformance(t *testing.T) {
	for _, impl := range fleetImpls(t) {
		t.Run(impl.name, func(t *testing.T) {
			ctx := context.Background()
			f := impl.fleet
			if ws, err := f.Windows(ctx); err != nil || len(ws) != 0 {
				t.Fatalf("empty fleet: %v, %v", ws, err)
			}
			if err := f.Publish(ctx, Window{}, time.Second); err == nil {
				t.Error("a window without an instance id was accepted")
			}
			a := Window{Instance: "a", At: t0, Seconds: 60, Turns: 5, Tiers: map[string]int64{"sonnet": 5}}
			a.Lat = latency(10, 20, 30).wire()
			b := Window{Instance: "b", At: t0, Seconds: 60, Turns: 2, Failed: 1}
			for _, w := range []Window{a, b, {Instance: "a", At: t0.Add(time.Second), Seconds: 60, Turns: 7}} {
				if err := f.Publish(ctx, w, 3*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := f.Windows(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ws) != 2 || ws[0].Instance != "a" || ws[0].Turns != 7 || ws[1].Instance != "b" || ws[1].Failed != 1 {
				t.Fatalf("windows %+v; want a (its latest, 7 turns) and b", ws)
			}
			impl.expire(t, "a", 3*time.Second)
			if impl.name == "redis" {
				impl.expire(t, "b", 3*time.Second)
			}
			if ws, err := f.Windows(ctx); err != nil || len(ws) != 0 {
				t.Fatalf("after expiry: %+v, %v; want none", ws, err)
			}
		})
	}
}

func latency(ms ...int64) *hist {
	var h hist
	for _, v := range ms {
		h.add(v)
	}
	return &h
}

// TestFleetSnapshotMergesInstances: three aggregators sharing a fleet show
// the same figures as one aggregator that saw every span — percentiles of
// the merged histograms, not an average of each instance's percentiles —
// with a line per instance, and an instance that stops publishing drops out.
func TestFleetSnapshotMergesInstances(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	fleet := NewMemoryFleet(clk.Now)
	cfg := Config{Window: 60 * time.Second, Interval: time.Second}
	all := New(cfg, nil, clk.Now) // the reference: every span in one window
	var aggs []*Aggregator
	for i := range 3 {
		a := New(cfg, nil, clk.Now)
		a.SetFleet(fleet, fmt.Sprintf("gw-%d", i))
		aggs = append(aggs, a)
	}
	clk.Advance(10 * time.Second)
	now := clk.Now()
	feed := func(a *Aggregator, evs ...events.Event) {
		if err := a.Write(ctx, evs); err != nil {
			t.Fatal(err)
		}
		if err := all.Write(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	// gw-0: 90 fast turns; gw-1: 10 slow ones; gw-2: 5 failures.
	for i := range 90 {
		tr := turn(turnSpec{end: now.Add(-time.Duration(i) * 100 * time.Millisecond), duration: time.Duration(40+i) * time.Millisecond, model: "sonnet"})
		feed(aggs[0], stream(tr, 20*time.Millisecond), tr)
	}
	for i := range 10 {
		tr := turn(turnSpec{end: now.Add(-time.Second), duration: time.Duration(3000+100*i) * time.Millisecond, fallback: "haiku"})
		feed(aggs[1], stream(tr, 900*time.Millisecond), tr)
	}
	for range 5 {
		feed(aggs[2], turn(turnSpec{end: now, duration: time.Second, status: events.StatusFailed, code: "timeout"}))
	}
	feed(aggs[0], attempt("sonnet", now, 300, 200, 0.01))
	for _, a := range aggs {
		a.publish(ctx)
	}

	want := all.Snapshot(ctx)
	got := aggs[1].Snapshot(ctx)
	if got.FleetError != "" {
		t.Fatal(got.FleetError)
	}
	if got.Turns != 105 || got.Errors != 5 || got.Tiers["haiku"] != 10 || got.TokensPerMinute["sonnet"] != want.TokensPerMinute["sonnet"] {
		t.Fatalf("fleet figures: turns %d errors %d tiers %v tokens %v; want 105, 5, 10 haiku, %v",
			got.Turns, got.Errors, got.Tiers, got.TokensPerMinute, want.TokensPerMinute)
	}
	for _, c := range []struct {
		name      string
		got, want Percentiles
	}{{"latency", got.LatencyMs, want.LatencyMs}, {"ttft", got.TTFTMs, want.TTFTMs}} {
		if deref(c.got.P50) != deref(c.want.P50) || deref(c.got.P95) != deref(c.want.P95) || deref(c.got.P99) != deref(c.want.P99) {
			t.Errorf("%s percentiles %v/%v/%v; one window over every span says %v/%v/%v", c.name,
				deref(c.got.P50), deref(c.got.P95), deref(c.got.P99), deref(c.want.P50), deref(c.want.P95), deref(c.want.P99))
		}
	}
	if len(got.Instances) != 3 || got.Instances[0].ID != "gw-0" || got.Instances[0].Turns != 90 ||
		got.Instances[1].Turns != 10 || got.Instances[2].Errors != 5 || got.Instances[0].TurnsPerSecond != 1.5 {
		t.Fatalf("instances %+v", got.Instances)
	}

	// gw-2 goes silent: past the TTL it is out of the view and its turns
	// out of the figures.
	clk.Advance(5 * time.Second)
	aggs[0].publish(ctx)
	aggs[1].publish(ctx)
	got = aggs[0].Snapshot(ctx)
	if len(got.Instances) != 2 || got.Turns != 100 || got.Errors != 0 {
		t.Fatalf("after gw-2 went silent: instances %+v, turns %d, errors %d; want gw-0 and gw-1, 100 turns, 0 errors",
			got.Instances, got.Turns, got.Errors)
	}
}

// TestNoFleetSnapshotIsLocal: without a fleet a snapshot has no breakdown
// (the JSON is unchanged).
func TestNoFleetSnapshotIsLocal(t *testing.T) {
	clk := newClock()
	a := New(Config{}, nil, clk.Now)
	_ = a.Write(context.Background(), []events.Event{turn(turnSpec{end: clk.Now(), duration: time.Second})})
	s := a.Snapshot(context.Background())
	if s.Turns != 1 || s.Instances != nil || s.FleetError != "" {
		t.Fatalf("snapshot %+v", s)
	}
}

// failingFleet is a fleet whose store is down.
type failingFleet struct{}

func (failingFleet) Publish(context.Context, Window, time.Duration) error {
	return fmt.Errorf("redis: connection refused")
}
func (failingFleet) Windows(context.Context) ([]Window, error) {
	return nil, fmt.Errorf("redis: connection refused")
}

// TestFleetDownShowsThisInstance: when the fleet's store is down the
// snapshot keeps this instance's figures and says why.
func TestFleetDownShowsThisInstance(t *testing.T) {
	clk := newClock()
	a := New(Config{}, nil, clk.Now)
	a.SetFleet(failingFleet{}, "gw-0")
	_ = a.Write(context.Background(), []events.Event{turn(turnSpec{end: clk.Now(), duration: time.Second})})
	a.publish(context.Background())
	s := a.Snapshot(context.Background())
	if s.Turns != 1 || s.FleetError == "" || len(s.Instances) != 1 || s.Instances[0].ID != "gw-0" {
		t.Fatalf("snapshot with the fleet down: turns %d, fleetError %q, instances %+v", s.Turns, s.FleetError, s.Instances)
	}
}

// TestRedisFleetPrefixIsLiteral: a key prefix with pattern characters
// matches only its own windows.
func TestRedisFleetPrefixIsLiteral(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := redistest.Client(t)
	odd := NewRedisFleet(rdb, prefix+"a[1]*:")
	other := NewRedisFleet(rdb, prefix+"a1x:")
	if err := odd.Publish(ctx, Window{Instance: "gw-odd", At: t0}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := other.Publish(ctx, Window{Instance: "gw-other", At: t0}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ws, err := odd.Windows(ctx)
	if err != nil || len(ws) != 1 || ws[0].Instance != "gw-odd" {
		t.Fatalf("windows under a prefix with pattern characters: %+v, %v; want gw-odd alone", ws, err)
	}
}

// commands counts the commands a client sends, pipelined or not.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// TestRedisFleetReadsTheRegistryNotTheKeyspace: the windows are found
// through the registry in two commands however many other keys Redis
// holds, and an instance gone for longer than registryKeep leaves it.
func TestRedisFleetReadsTheRegistryNotTheKeyspace(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := redistest.Client(t)
	// Many keys under the same prefix that are not windows (a shared
	// Redis holds far more, elsewhere).
	p := rdb.Pipeline()
	for i := range 20_000 {
		p.Set(ctx, prefix+"live:other:"+strconv.Itoa(i), "x", time.Minute)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	f := NewRedisFleet(rdb, prefix+"live:")
	f.now = clk.Now
	for _, id := range []string{"gone", "a", "b"} {
		if err := f.Publish(ctx, Window{Instance: id, At: clk.Now()}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if id == "gone" {
			rdb.Del(ctx, prefix+"live:gone") // its window expired
			clk.Advance(registryKeep + time.Second)
		}
	}
	var cmds commands
	rdb.AddHook(&cmds)
	ws, err := f.Windows(ctx)
	if err != nil || len(ws) != 2 || ws[0].Instance != "a" || ws[1].Instance != "b" {
		t.Fatalf("windows %+v, %v; want a and b", ws, err)
	}
	if n := cmds.n.Load(); n != 2 {
		t.Errorf("Windows sent %d commands, want 2 (the registry, then the windows)", n)
	}
	ids, err := rdb.ZRange(ctx, prefix+"live:"+registryKey, 0, -1).Result()
	if err != nil || !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("registry holds %v (%v); want a and b, the instance gone for %v dropped", ids, err, registryKeep)
	}
	if err := f.Publish(ctx, Window{Instance: registryKey}, time.Minute); err == nil {
		t.Error("an instance id that is the registry's key was accepted")
	}
}
