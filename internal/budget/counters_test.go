package budget

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/redistest"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// counterAdd is one Add of a conformance case.
type counterAdd struct {
	user, session, day string
	in, out            int
	cost               float64
}

func runCountersConformance(t *testing.T, newCounters func(t *testing.T) Counters) {
	ctx := context.Background()
	tests := []struct {
		name               string
		adds               []counterAdd
		user, session, day string
		want               Totals
	}{
		{name: "empty", user: "u", session: "s", day: "2026-01-01"},
		{
			name: "sums",
			adds: []counterAdd{{"u", "s", "2026-01-01", 100, 20, 0.0006}, {"u", "s", "2026-01-01", 50, 10, 0.0000125}},
			user: "u", session: "s", day: "2026-01-01",
			want: Totals{SessionInput: 150, SessionOutput: 30, DayCostUSD: 0.0006125},
		},
		{
			name: "day is per user and per day, session is per user",
			adds: []counterAdd{
				{"u", "s", "2026-01-01", 100, 20, 1},
				{"other", "s", "2026-01-02", 7, 3, 2},
				{"u", "s2", "2026-01-02", 5, 5, 0.5},
			},
			user: "u", session: "s", day: "2026-01-02",
			want: Totals{SessionInput: 100, SessionOutput: 20, DayCostUSD: 0.5},
		},
		{
			name: "a turn without a session counts its cost, not its tokens",
			adds: []counterAdd{{"u", "", "2026-01-01", 100, 20, 1}, {"u", "s", "2026-01-01", 5, 5, 0.5}},
			user: "u", session: "s", day: "2026-01-01",
			want: Totals{SessionInput: 5, SessionOutput: 5, DayCostUSD: 1.5},
		},
		{
			name: "no session reads as empty",
			adds: []counterAdd{{"u", "", "2026-01-01", 100, 20, 1}},
			user: "u", session: "", day: "2026-01-01",
			want: Totals{DayCostUSD: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounters(t)
			for _, a := range tt.adds {
				if err := c.Add(ctx, a.user, a.session, "", []Meter{UserDayMeter(a.user, a.day, 0)}, a.in, a.out, a.cost); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.Load(ctx, tt.user, tt.session, tt.day)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Load = %+v, want %+v", got, tt.want)
			}
		})
	}
	t.Run("concurrent adds are not lost", func(t *testing.T) {
		c := newCounters(t)
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() { _ = c.Add(ctx, "u", "s", "", []Meter{UserDayMeter("u", "d", 0)}, 10, 1, 0.01) })
		}
		wg.Wait()
		got, _ := c.Load(ctx, "u", "s", "d")
		if got.SessionInput != 500 || got.SessionOutput != 50 || got.DayCostUSD != 0.5 {
			t.Fatalf("Load = %+v", got)
		}
	})
	t.Run("holds keep concurrent turns within the limit", func(t *testing.T) {
		c := newCounters(t)
		const limit, each = 1_000, 300 // nano-USD
		if err := c.Add(ctx, "u", "s", "", []Meter{UserDayMeter("u", "d", 0)}, 1, 1, 100e-9); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		held := 0
		for i := range 20 {
			wg.Go(func() {
				refused, _, err := c.Hold(ctx, fmt.Sprint("turn-", i), each, []Meter{{Key: UserDayMeter("u", "d", 0).Key, Limit: limit, TTL: dayTTL}}, time.Hour)
				if err != nil {
					t.Error(err)
				}
				if refused < 0 {
					mu.Lock()
					held++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if held != 3 { // 100 spent + 3 × 300 = 1,000
			t.Fatalf("%d of 20 concurrent holds of %d under %d with 100 spent; want 3", held, each, limit)
		}
		if got, _ := c.Load(ctx, "u", "s", "d"); got.DayCostUSD != 100e-9 {
			t.Fatalf("holds counted as spent: %+v", got)
		}
	})
	t.Run("a hold ends when settled or released, and lapses", func(t *testing.T) {
		c := newCounters(t)
		day := UserDayMeter("u", "d", 0)
		day.Limit = 1_000
		hold := func(id string, nano int64, ttl time.Duration) bool {
			t.Helper()
			refused, _, err := c.Hold(ctx, id, nano, []Meter{day}, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return refused < 0
		}
		if !hold("a", 600, time.Hour) || hold("b", 600, time.Hour) {
			t.Fatal("want the first hold of 600 under 1,000 taken and the second refused")
		}
		// Settled at a real cost of 200: 800 left.
		if err := c.Add(ctx, "u", "s", "a", []Meter{day}, 10, 10, 200e-9); err != nil {
			t.Fatal(err)
		}
		if !hold("b", 600, time.Hour) {
			t.Fatal("the settled hold still counts")
		}
		if err := c.Release(ctx, "b", []Meter{day}); err != nil {
			t.Fatal(err)
		}
		if !hold("c", 800, 50*time.Millisecond) {
			t.Fatal("the released hold still counts")
		}
		if hold("d", 800, time.Hour) {
			t.Fatal("a hold in force was not counted")
		}
		time.Sleep(100 * time.Millisecond)
		if !hold("d", 800, time.Hour) {
			t.Fatal("a lapsed hold still counts")
		}
		other := UserDayMeter("other", "d", 0)
		other.Limit = 1_000
		if refused, _, _ := c.Hold(ctx, "x", 1_000, []Meter{other}, time.Hour); refused >= 0 {
			t.Fatal("holds are per user")
		}
	})
	t.Run("a hold is taken on every meter or on none", func(t *testing.T) {
		c := newCounters(t)
		key := Meter{Key: meterKey("key_month", "2026-01", "k"), Limit: 1_000, TTL: monthTTL}
		team := Meter{Key: meterKey("team_day", "d", "acme"), Limit: 500, TTL: dayTTL}
		free := UserDayMeter("u", "d", 0) // counted, never refused
		if err := c.Add(ctx, "u", "s", "", []Meter{free, key, team}, 1, 1, 100e-9); err != nil {
			t.Fatal(err)
		}
		refused, spent, err := c.Hold(ctx, "big", 450, []Meter{free, key, team}, time.Hour)
		if err != nil || refused != 2 || spent != 100 {
			t.Fatalf("450 more on a team with 100 of 500 spent: refused %d, spent %d, %v; want the team (2) refused with 100 spent", refused, spent, err)
		}
		// Nothing of the refused hold stayed on the key's meter: 900 fit there.
		if refused, _, err := c.Hold(ctx, "fits", 900, []Meter{key}, time.Hour); err != nil || refused != -1 {
			t.Fatalf("900 on the key after a refused hold: refused %d, %v; want held", refused, err)
		}
		// The key's meter now holds 900 and has spent 100: the next is refused by it.
		if refused, spent, err := c.Hold(ctx, "next", 10, []Meter{free, key, team}, time.Hour); err != nil || refused != 1 || spent != 100 {
			t.Fatalf("10 more with the key's budget held: refused %d, spent %d, %v; want the key (1)", refused, spent, err)
		}
		// Settling the hold charges its meters and ends it on each.
		if err := c.Add(ctx, "u", "s", "fits", []Meter{free, key}, 1, 1, 300e-9); err != nil {
			t.Fatal(err)
		}
		if refused, _, err := c.Hold(ctx, "after", 350, []Meter{free, key, team}, time.Hour); err != nil || refused != -1 {
			t.Fatalf("350 after the hold settled at 300 (key 400 of 1,000, team 100 of 500 spent): refused %d, %v; want held", refused, err)
		}
		if got, _ := c.Load(ctx, "u", "s", "d"); got.DayCostUSD != 400e-9 {
			t.Fatalf("the user's day: %+v, want 400 nano-USD spent", got)
		}
		got, err := c.Spent(ctx, []Meter{key, team, {Key: meterKey("key_month", "2026-02", "k")}})
		if err != nil || len(got) != 3 || got[0] != 400 || got[1] != 100 || got[2] != 0 {
			t.Fatalf("Spent = %v, %v; want [400 100 0] (holds not counted, an unused meter 0)", got, err)
		}
	})
}

func TestMemoryCountersConformance(t *testing.T) {
	runCountersConformance(t, func(t *testing.T) Counters { return NewMemoryCounters(time.Hour, nil) })
}

func TestRedisCountersConformance(t *testing.T) {
	runCountersConformance(t, func(t *testing.T) Counters {
		c, prefix := redistest.Client(t)
		return NewRedisCounters(c, prefix, time.Hour)
	})
}

func TestMemoryCountersForgetIdleSessions(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	c := NewMemoryCounters(time.Hour, clk.Now)
	_ = c.Add(ctx, "u", "s", "", []Meter{UserDayMeter("u", "2026-01-01", 0)}, 100, 10, 1)
	clk.Advance(59 * time.Minute)
	if got, _ := c.Load(ctx, "u", "s", "2026-01-01"); got.SessionInput != 100 {
		t.Fatalf("session forgotten early: %+v", got)
	}
	clk.Advance(2 * time.Minute)
	got, _ := c.Load(ctx, "u", "s", "2026-01-01")
	if got.SessionInput != 0 || got.DayCostUSD != 1 {
		t.Fatalf("after the session TTL: %+v, want session gone and day kept", got)
	}
	clk.Advance(dayTTL)
	_ = c.Add(ctx, "x", "y", "", []Meter{UserDayMeter("x", "2026-01-03", 0)}, 1, 1, 0) // sweeps
	if len(c.meters) != 1 || len(c.sessions) != 1 {
		t.Fatalf("expired entries kept: %d meters, %d sessions", len(c.meters), len(c.sessions))
	}
}

func TestRedisCountersExpire(t *testing.T) {
	ctx := context.Background()
	c, prefix := redistest.Client(t)
	rc := NewRedisCounters(c, prefix, time.Hour)
	month := Meter{Key: meterKey("key_month", "2026-01", "k"), TTL: monthTTL}
	if err := rc.Add(ctx, "u", "s", "", []Meter{UserDayMeter("u", "2026-01-01", 0), month}, 1, 1, 0.1); err != nil {
		t.Fatal(err)
	}
	keys := rc.meterKeys([]Meter{UserDayMeter("u", "2026-01-01", 0), month})
	for key, want := range map[string]time.Duration{rc.sessionKey("u", "s"): time.Hour, keys[0]: dayTTL, keys[1]: monthTTL} {
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil || ttl <= want-time.Minute || ttl > want {
			t.Errorf("TTL of %s = %s, %v; want about %s", key, ttl, err, want)
		}
	}
}

// TestRedisHoldsSumHeals: a meter's holds are summed beside them (held), and
// a hold taken or ended by an instance that keeps no sum (one of a rolling
// upgrade, writing and deleting the h: fields only) is in, or out of, that
// sum within a second.
func TestRedisHoldsSumHeals(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	c := NewRedisCounters(rdb, prefix, time.Hour)
	ctx := context.Background()
	day := UserDayMeter("u", "d", 0)
	day.Limit = 1_000
	key := prefix + "budget:" + day.Key
	if refused, _, err := c.Hold(ctx, "a", 300, []Meter{day}, time.Hour); err != nil || refused >= 0 {
		t.Fatalf("first hold: refused %d, %v", refused, err)
	}
	if held, _ := rdb.HGet(ctx, key, "held").Int64(); held != 300 {
		t.Fatalf("held = %d after a hold of 300", held)
	}
	// An earlier instance holds 600 without the sum.
	expiry := time.Now().Add(time.Hour).UnixMilli()
	if err := rdb.HSet(ctx, key, "h:earlier", fmt.Sprintf("600:%d", expiry)).Err(); err != nil {
		t.Fatal(err)
	}
	fits := func(id string, nano int64) bool {
		t.Helper()
		refused, _, err := c.Hold(ctx, id, nano, []Meter{day}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return refused < 0
	}
	within3s(t, "the earlier instance's hold counted", func() bool {
		if !fits("probe", 200) {
			return true // 300 + 600 + 200 > 1,000: the earlier instance's hold counts
		}
		if err := c.Release(ctx, "probe", []Meter{day}); err != nil {
			t.Fatal(err)
		}
		return false
	})
	// It ends its hold with a bare HDEL: out of the sum within a second.
	if err := rdb.HDel(ctx, key, "h:earlier").Err(); err != nil {
		t.Fatal(err)
	}
	within3s(t, "the earlier instance's ended hold out of the sum", func() bool { return fits("after", 600) })
	if held, _ := rdb.HGet(ctx, key, "held").Int64(); held != 900 {
		t.Fatalf("held = %d with holds of 300 and 600 in force", held)
	}
}

// within3s fails t unless cond holds within 3 seconds, polled every 100ms.
func within3s(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 3 s: %s", what)
		}
	}
}

// TestRedisRefusedHoldLeavesNoKey: a hold refused on a meter never written
// (larger than its limit) creates no key, which would have no expiry.
func TestRedisRefusedHoldLeavesNoKey(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	c := NewRedisCounters(rdb, prefix, time.Hour)
	ctx := context.Background()
	day := UserDayMeter("u", "d", 0)
	day.Limit = 100
	if refused, _, err := c.Hold(ctx, "big", 500, []Meter{day}, time.Hour); err != nil || refused != 0 {
		t.Fatalf("refused %d, %v; want the hold refused on its only meter", refused, err)
	}
	if n, err := rdb.Exists(ctx, prefix+"budget:"+day.Key).Result(); err != nil || n != 0 {
		t.Fatalf("the refused meter's key exists (%d, %v)", n, err)
	}
}

// A stateless turn (no session) leaves no session counter behind: one per
// request of a vendor door would otherwise live for the session TTL (24 h
// by default), in the process or in Redis.
func TestCountersKeepNoStatelessSession(t *testing.T) {
	ctx := context.Background()
	day := []Meter{UserDayMeter("u", "2026-01-01", 0)}
	m := NewMemoryCounters(time.Hour, nil)
	for range 100 {
		if err := m.Add(ctx, "u", "", "", day, 10, 10, 0.01); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.sessions) != 0 {
		t.Errorf("memory counters keep %d sessions for stateless turns", len(m.sessions))
	}
	c, prefix := redistest.Client(t)
	rc := NewRedisCounters(c, prefix, time.Hour)
	if err := rc.Add(ctx, "u", "", "", day, 10, 10, 0.01); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, prefix+"budget:sess:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("Redis holds session keys for a stateless turn: %v", keys)
	}
	if ttl, err := c.PTTL(ctx, rc.meterKeys(day)[0]).Result(); err != nil || ttl <= dayTTL-time.Minute || ttl > dayTTL {
		t.Errorf("TTL of the day's meter = %s, %v; want about %s", ttl, err, dayTTL)
	}
	if got, err := rc.Load(ctx, "u", "", "2026-01-01"); err != nil || got != (Totals{DayCostUSD: 0.01}) {
		t.Errorf("Load = %+v, %v; want the day's cost only", got, err)
	}
}
