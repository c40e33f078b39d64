package budget

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestCheckCostHoldsAndRecords: a call priced before it runs (an
// embedding call) is held against its user's daily cost budget, refused
// when the day has no room for it, and shares the day with chat turns; the
// per-request input budget does not bound it.
func TestCheckCostHoldsAndRecords(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.DailyCostUSD = 0.01
	e := newEnforcer(t, cfg, noon(), nil)

	// Far more input than one chat request may carry, at a small price.
	first, err := e.CheckCost(ctx, "u", nil, 0.006, true)
	if err != nil || first.Hold.ID == "" || first.CostUSD != 0.006 {
		t.Fatalf("first call: plan %+v, err %v; want its cost held", first, err)
	}
	var ex *ExceededError
	if _, err := e.CheckCost(ctx, "u", nil, 0.006, true); !errors.As(err, &ex) || ex.Budget != BudgetDailyCost || !ex.Held {
		t.Fatalf("second call while the first is in flight: %v; want daily_cost refused as held", err)
	}
	if _, err := e.CheckCost(ctx, "other", nil, 0.006, true); err != nil {
		t.Fatalf("another user's call: %v", err)
	}
	if err := e.Record(ctx, "u", "", nil, first.Hold, 0, 0, 0.006); err != nil {
		t.Fatal(err)
	}
	// The day's spend now counts for chat turns too.
	_, err = e.Check(ctx, Request{UserID: "u", SessionID: "s", MaxOutput: 1024, Parts: Parts{User: "hi"}}, Price{InputPerMTok: 3, OutputPerMTok: 15})
	if !errors.As(err, &ex) || ex.Budget != BudgetDailyCost || ex.Held || ex.Used != 0.006 {
		t.Fatalf("a chat turn after the call: %v; want daily_cost refused with $0.006 spent", err)
	}
	if _, err := e.CheckCost(ctx, "u", nil, 0.005, false); !errors.As(err, &ex) || ex.Held || !strings.Contains(ex.Message("en"), "today's usage limit") {
		t.Fatalf("a call past the limit: %v; want daily_cost refused", err)
	}
	if p, err := e.CheckCost(ctx, "u", nil, 0.003, false); err != nil || p.Hold.ID != "" {
		t.Fatalf("a call that fits, unheld: %+v, %v", p, err)
	}
}

// TestCheckCostWithoutDailyBudget: with no daily budget nothing is held
// and nothing is read.
func TestCheckCostWithoutDailyBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DailyCostUSD = 0
	e := newEnforcer(t, cfg, noon(), brokenCounters{})
	p, err := e.CheckCost(context.Background(), "u", nil, 100, true)
	if err != nil || p.Hold.ID != "" || p.CountersErr != nil {
		t.Fatalf("plan %+v, err %v", p, err)
	}
	cfg.DailyCostUSD = 1
	e = newEnforcer(t, cfg, noon(), brokenCounters{})
	if p, err := e.CheckCost(context.Background(), "u", nil, 100, true); err != nil || p.CountersErr == nil {
		t.Fatalf("counters down: plan %+v, err %v; want admitted and reported", p, err)
	}
}
