package budget

import (
	"context"
	"errors"

	"math"
	"testing"
)

// A turn whose system prompt the vendor is expected to read from its cache
// is estimated at the cache-read price: a user near the daily budget is
// still served.
func TestCheckPricesExpectedCacheReads(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	e := newEnforcer(t, cfg, noon(), nil)
	price := Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.3}
	req := Request{UserID: "u", SessionID: "s", MaxOutput: 100, Parts: Parts{System: words(3000), User: "hi"}}
	plain, err := e.Check(ctx, req, price)
	if err != nil {
		t.Fatal(err)
	}
	req.ExpectCached = 2900
	cached, err := e.Check(ctx, req, price)
	if err != nil {
		t.Fatal(err)
	}
	if cached.CachedTokens != 2900 || cached.InputTokens != plain.InputTokens {
		t.Fatalf("plan: %d cached of %d, want 2900 of %d", cached.CachedTokens, cached.InputTokens, plain.InputTokens)
	}
	want := plain.CostUSD - 2900*(3-0.3)/1e6
	if math.Abs(cached.CostUSD-want) > 1e-12 {
		t.Fatalf("estimate with cache reads $%g, want $%g (without: $%g)", cached.CostUSD, want, plain.CostUSD)
	}
	// Spend so that only the cheaper estimate fits the day's budget.
	spent := cfg.DailyCostUSD - (plain.CostUSD+cached.CostUSD)/2
	if err := e.Record(ctx, "u", "s", nil, Hold{}, 0, 0, spent); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Check(ctx, req, price); err != nil {
		t.Errorf("with the reads expected: %v", err)
	}
	req.ExpectCached = 0
	if _, err := e.Check(ctx, req, price); !errors.Is(err, ErrExceeded) {
		t.Errorf("without: err = %v, want the daily budget exceeded", err)
	}
	req.ExpectCached = 1 << 30
	if p, err := e.Check(ctx, req, price); err != nil || p.CachedTokens != p.InputTokens {
		t.Errorf("more expected than sent: %d cached of %d (err %v)", p.CachedTokens, p.InputTokens, err)
	}
}
