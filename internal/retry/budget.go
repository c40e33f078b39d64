package retry

import (
	"context"
	"math"
	"sync"
	"time"
)

// Budget bounds retries relative to traffic so that retries cannot multiply
// the load on a failing provider: each first attempt deposits, each retry
// must withdraw. Over any window, withdrawals are at most ratio × deposits
// plus a floor of minPerSecond × window.
type Budget interface {
	// Deposit records a first attempt.
	Deposit(ctx context.Context)
	// Withdraw takes one retry from the budget and reports whether it may
	// be made.
	Withdraw(ctx context.Context) bool
}

// Budget arithmetic is in integer micro-tokens so that 10,000 deposits of
// 0.1 add up to exactly 1,000 retries, in Go and in Lua alike.
const (
	tokenUnits  = 1_000_000
	budgetSlots = 10
)

// ledger holds the budget's derived integer parameters.
type ledger struct {
	deposit int64 // units earned per first attempt
	reserve int64 // floor, in units, available in every window
	slot    time.Duration
}

func newLedger(c BudgetConfig) ledger {
	return ledger{
		deposit: int64(math.Round(c.Ratio * tokenUnits)),
		reserve: int64(math.Round(c.MinPerSecond * c.Window.Seconds() * tokenUnits)),
		slot:    c.Window / budgetSlots,
	}
}

// MemoryBudget is the in-process Budget: a sliding window of budgetSlots
// slots, each holding the net units deposited minus withdrawn in it. Tokens
// expire with their slot, so a busy hour does not bank retries for a later
// outage.
type MemoryBudget struct {
	l   ledger
	now func() time.Time

	mu    sync.Mutex
	slots [budgetSlots]budgetSlot
}

type budgetSlot struct {
	idx   int64
	units int64
}

// NewMemoryBudget returns a budget for one process. c must be valid; now is
// the clock (time.Now in production).
func NewMemoryBudget(c BudgetConfig, now func() time.Time) *MemoryBudget {
	return &MemoryBudget{l: newLedger(c), now: now}
}

func (b *MemoryBudget) current() *budgetSlot {
	idx := b.now().UnixNano() / int64(b.l.slot)
	s := &b.slots[idx%budgetSlots]
	if s.idx != idx {
		*s = budgetSlot{idx: idx}
	}
	return s
}

// Deposit implements Budget.
func (b *MemoryBudget) Deposit(context.Context) {
	b.mu.Lock()
	b.current().units += b.l.deposit
	b.mu.Unlock()
}

// Withdraw implements Budget.
func (b *MemoryBudget) Withdraw(context.Context) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.current()
	sum := b.l.reserve
	for i := range b.slots {
		if s := &b.slots[i]; s.idx > cur.idx-budgetSlots {
			sum += s.units
		}
	}
	if sum < tokenUnits {
		return false
	}
	cur.units -= tokenUnits
	return true
}

// Unlimited is a Budget that never refuses, for tests and for deployments
// that bound retries elsewhere.
type Unlimited struct{}

// Deposit implements Budget.
func (Unlimited) Deposit(context.Context) {}

// Withdraw implements Budget.
func (Unlimited) Withdraw(context.Context) bool { return true }
