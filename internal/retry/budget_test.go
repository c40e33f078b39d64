package retry

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fmgate/fmgate/internal/redisbatch"
	"github.com/fmgate/fmgate/internal/redistest"
)

type newBudgetFunc func(t *testing.T, c BudgetConfig, clk *fakeClock) Budget

func TestMemoryBudget(t *testing.T) {
	testBudget(t, func(t *testing.T, c BudgetConfig, clk *fakeClock) Budget {
		return NewMemoryBudget(c, clk.Now)
	})
}

func TestRedisBudget(t *testing.T) {
	testBudget(t, func(t *testing.T, c BudgetConfig, clk *fakeClock) Budget {
		rdb, prefix := redistest.Client(t)
		b := NewRedisBudget(rdb, prefix, c)
		b.clock = clk.Now
		return b
	})
}

// withdrawAll counts withdrawals granted until the first refusal.
func withdrawAll(ctx context.Context, b Budget, limit int) int {
	n := 0
	for n < limit && b.Withdraw(ctx) {
		n++
	}
	return n
}

// testBudget is the conformance suite every Budget passes.
func testBudget(t *testing.T, newBudget newBudgetFunc) {
	ctx := context.Background()

	t.Run("exactness 10k requests at 10%", func(t *testing.T) {
		tests := []struct {
			name         string
			minPerSecond float64
			want         int
		}{
			{"no floor", 0, 1000},
			{"floor 5/s over 10s", 5, 1050},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				clk := newFakeClock()
				b := newBudget(t, BudgetConfig{Ratio: 0.1, MinPerSecond: tt.minPerSecond, Window: 10 * time.Second}, clk)
				for range 10_000 {
					b.Deposit(ctx)
				}
				got := withdrawAll(ctx, b, 5000)
				floor := int(tt.minPerSecond * 10)
				if got < 1000 || got > 1000+floor || got != tt.want {
					t.Errorf("granted %d retries, want %d (1000 + floor %d)", got, tt.want, floor)
				}
			})
		}
	})

	t.Run("floor without traffic", func(t *testing.T) {
		clk := newFakeClock()
		b := newBudget(t, BudgetConfig{Ratio: 0.2, MinPerSecond: 2, Window: 10 * time.Second}, clk)
		if got := withdrawAll(ctx, b, 100); got != 20 {
			t.Fatalf("granted %d retries on an idle budget, want 20 (2/s × 10s)", got)
		}
		clk.Advance(5 * time.Second)
		if b.Withdraw(ctx) {
			t.Error("floor refilled before its withdrawals left the window")
		}
		clk.Advance(6 * time.Second)
		if got := withdrawAll(ctx, b, 100); got != 20 {
			t.Errorf("after a full window granted %d, want the floor 20 again", got)
		}
	})

	t.Run("zero budget refuses", func(t *testing.T) {
		clk := newFakeClock()
		b := newBudget(t, BudgetConfig{Ratio: 0, MinPerSecond: 0, Window: time.Second}, clk)
		for range 100 {
			b.Deposit(ctx)
		}
		if b.Withdraw(ctx) {
			t.Error("a budget of ratio 0 and no floor granted a retry")
		}
	})

	t.Run("deposits expire with the window", func(t *testing.T) {
		clk := newFakeClock()
		b := newBudget(t, BudgetConfig{Ratio: 0.2, Window: 10 * time.Second}, clk)
		for range 100 {
			b.Deposit(ctx)
		}
		clk.Advance(9 * time.Second)
		if got := withdrawAll(ctx, b, 5); got != 5 {
			t.Fatalf("granted %d of 20 earned tokens inside the window", got)
		}
		clk.Advance(2 * time.Second)
		if b.Withdraw(ctx) {
			t.Error("tokens earned more than a window ago still granted a retry")
		}
	})

	t.Run("total outage stays within 1.1x plus floor", func(t *testing.T) {
		clk := newFakeClock()
		c := BudgetConfig{Ratio: 0.1, MinPerSecond: 5, Window: 10 * time.Second}
		b := newBudget(t, c, clk)
		const (
			requests   = 3000 // 60 s at 50 rps
			maxRetries = 5
			gap        = 20 * time.Millisecond
		)
		attempts := 0
		for range requests {
			b.Deposit(ctx)
			attempts++
			for r := 0; r < maxRetries && b.Withdraw(ctx); r++ {
				attempts++
			}
			clk.Advance(gap)
		}
		elapsed := requests * gap
		floor := int(c.MinPerSecond * (elapsed + c.Window).Seconds())
		if limit := int(1.1*requests) + floor; attempts > limit {
			t.Errorf("%d attempts for %d requests, want <= %d", attempts, requests, limit)
		}
		if attempts < int(1.1*requests) {
			t.Errorf("%d attempts: the budget granted less than its ratio", attempts)
		}
	})
}

func TestRedisBudgetFallsBackToLocal(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b := NewRedisBudget(rdb, "fmgate-test-down:", BudgetConfig{Ratio: 0.5, Window: 10 * time.Second})
	ctx := context.Background()
	for range 10 {
		b.Deposit(ctx)
	}
	if got := withdrawAll(ctx, b, 100); got != 5 {
		t.Errorf("with Redis down granted %d retries, want the local budget's 5", got)
	}
}

func TestRedisBudgetSharedAcrossInstances(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	c := BudgetConfig{Ratio: 0.1, Window: 10 * time.Second}
	a, b := NewRedisBudget(rdb, prefix, c), NewRedisBudget(rdb, prefix, c)
	ctx := context.Background()
	for range 100 {
		a.Deposit(ctx)
	}
	if got := withdrawAll(ctx, b, 100); got != 10 {
		t.Errorf("instance b granted %d retries from a's 100 requests, want 10", got)
	}
	if a.Withdraw(ctx) {
		t.Error("instance a granted a retry the fleet already spent")
	}
}

func BenchmarkMemoryBudget(b *testing.B) {
	ctx := context.Background()
	budget := NewMemoryBudget(DefaultConfig().Budget, time.Now)
	b.Run("deposit+withdraw", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			budget.Deposit(ctx)
			budget.Withdraw(ctx)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				budget.Deposit(ctx)
				budget.Withdraw(ctx)
			}
		})
	})
}

func BenchmarkRedisBudget(b *testing.B) {
	rdb, prefix := redistest.Client(b)
	ctx := context.Background()
	budget := NewRedisBudget(rdb, prefix, DefaultConfig().Budget)
	b.ReportAllocs()
	for b.Loop() {
		budget.Withdraw(ctx)
	}
}

// TestRedisBudgetBatched runs the suite the way a fleet turn calls the
// budget: inside a Redis batch (redisbatch), where deposits are queued and
// sent ahead of the next call.
func TestRedisBudgetBatched(t *testing.T) {
	testBudget(t, func(t *testing.T, c BudgetConfig, clk *fakeClock) Budget {
		rdb, prefix := redistest.Client(t)
		rdb.AddHook(redisbatch.Hook())
		b := NewRedisBudget(rdb, prefix, c)
		b.clock = clk.Now
		bt := redisbatch.New(rdb, 2*time.Second, nil)
		t.Cleanup(func() { bt.Close(context.Background()) })
		return batchedBudget{b, bt}
	})
}

type batchedBudget struct {
	Budget
	b *redisbatch.Batch
}

func (x batchedBudget) Deposit(ctx context.Context) { x.Budget.Deposit(redisbatch.With(ctx, x.b)) }
func (x batchedBudget) Withdraw(ctx context.Context) bool {
	return x.Budget.Withdraw(redisbatch.With(ctx, x.b))
}

// TestRedisBudgetDepositsKeepTheSlotsBounded: deposits alone (no retry
// ever asks for the balance) still sweep the slots that left the window.
func TestRedisBudgetDepositsKeepTheSlotsBounded(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	c := BudgetConfig{Ratio: 0.1, Window: 10 * time.Second}
	clk := newFakeClock()
	b := NewRedisBudget(rdb, prefix, c)
	b.clock = clk.Now
	ctx := context.Background()
	for range 200 { // 100 s of deposits, two a second
		b.Deposit(ctx)
		b.Deposit(ctx)
		clk.Advance(500 * time.Millisecond)
	}
	n, err := rdb.HLen(ctx, b.key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > budgetSlots+1 {
		t.Fatalf("the budget holds %d slots after 100 s of deposits, want 1..%d", n, budgetSlots+1)
	}
	if got := withdrawAll(ctx, b, 1000); got == 0 || got > 2*10 {
		t.Errorf("granted %d retries from the last window's 20 requests", got)
	}
}
