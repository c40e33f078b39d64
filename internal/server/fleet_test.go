package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fmgate/fmgate/internal/browsertest"
	"github.com/fmgate/fmgate/internal/live"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redistest"
)

// fleetConfig puts every policy's state in the test Redis, under a key
// prefix of the test's own.
func fleetConfig(t *testing.T) (cfgPrefix string) {
	t.Helper()
	_, prefix := redistest.Client(t)
	return prefix
}

func TestFleetModeServesTurnsFromRedisState(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	sc := newScenario(t, cfg)
	if sc.s.Redis == nil {
		t.Fatal("fleet.redis set but the server built no Redis client")
	}
	a := sc.chat("fleet-user", "おすすめの漫画は？", "ja")
	if a.Status != 200 || a.Tier != "sonnet" || !hasJapanese(a.Text) {
		t.Fatalf("fleet turn: %+v", a)
	}
	// The state went to Redis: the quota ledger there counts this turn.
	snap, err := sc.s.Quota.Saturation(context.Background(), "sonnet")
	if err != nil || snap.RequestsUsed != 1 {
		t.Fatalf("redis ledger: %+v, %v", snap, err)
	}
	// A second instance on the same Redis sees the first one's breaker.
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	sc.run(10, 2, "recommend a manga")
	s2, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	snap2, err := s2.Breakers.Get("sonnet").Snapshot(context.Background())
	if err != nil || snap2.State.String() == "closed" {
		t.Fatalf("second instance sees sonnet breaker %v (%v); want it opened by the first", snap2.State, err)
	}
}

func TestRedisDownStillServesTurns(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = "127.0.0.1:1" // nothing listens here
	cfg.Fleet.KeyPrefix = "fmgate-down:"
	s, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler(testAdminToken))
	defer srv.Close()
	sc := &scenario{t: t, s: s, srv: srv}
	tiers, statuses := sc.run(12, 3, "How long does shipping take?")
	if statuses[200] != 12 {
		t.Fatalf("with Redis down: statuses %v tiers %v", statuses, tiers)
	}
	t.Logf("Redis down: tiers %v", tiers)
}

// TestFleetLiveFiguresAreFleetWide: three gateways sharing a Redis prefix
// each answer turns; the live snapshot of any one of them counts the
// whole fleet's turns, with a line per instance.
func TestFleetLiveFiguresAreFleetWide(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	cfg.Fleet.Size = 3
	var srvs []*httptest.Server
	for i := range 3 {
		s, err := New(context.Background(), isolate(t, cfg), Options{InstanceID: fmt.Sprintf("gw-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		srv := httptest.NewServer(s.Handler(testAdminToken))
		t.Cleanup(srv.Close)
		srvs = append(srvs, srv)
	}
	for i, srv := range srvs {
		sc := &scenario{t: t, srv: srv}
		for j := range i + 1 { // 1, 2 and 3 turns
			if a := sc.chat(fmt.Sprintf("live-%d-%d", i, j), "おすすめの漫画は？", "ja"); a.Status != 200 {
				t.Fatalf("gw-%d: %+v", i, a)
			}
		}
	}
	// Each instance publishes its window every second: poll, bounded.
	var snap live.Snapshot
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := json.Unmarshal([]byte(adminGet(t, srvs[0].URL+"/admin/live/snapshot")), &snap); err != nil {
			t.Fatal(err)
		}
		if (snap.Turns == 6 && len(snap.Instances) == 3) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if snap.Turns != 6 || len(snap.Instances) != 3 || snap.FleetError != "" {
		t.Fatalf("gw-0's snapshot: %d turns, instances %+v, fleetError %q; want the fleet's 6 turns over 3 instances",
			snap.Turns, snap.Instances, snap.FleetError)
	}
	for i, l := range snap.Instances {
		if l.ID != fmt.Sprintf("gw-%d", i) || l.Turns != int64(i+1) || l.LastSeen.IsZero() {
			t.Errorf("instance line %d: %+v; want gw-%d with %d turns", i, l, i, i+1)
		}
	}
	if snap.LatencyMs.P99 == nil {
		t.Error("no fleet latency percentiles")
	}

	// The live ops view lists the instances.
	ctx := browsertest.New(t, 60*time.Second)
	p := page{t: t, ctx: ctx}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srvs[1].URL+"/dashboard/"),
		chromedp.WaitVisible(`#token`),
		chromedp.SendKeys(`#token`, testAdminToken),
		chromedp.Click(`#signin`),
		chromedp.WaitVisible(`#view`),
	); err != nil {
		t.Fatalf("log in: %v", err)
	}
	p.open("#/ops")
	p.wait("instance list", `document.querySelectorAll('[data-testid="instance-list"] tbody tr').length === 3`)
	if ids := p.eval(`[...document.querySelectorAll('[data-testid="instance-list"] tbody tr')].map(r => r.cells[0].textContent).join(",")`); ids != "gw-0,gw-1,gw-2" {
		t.Errorf("live ops lists instances %q; want gw-0,gw-1,gw-2", ids)
	}
}

// TestInstanceIDMayNotNameTheRegistry: an instance id starting with # (the
// live figures' registry key) stops the gateway at start, saying so.
func TestInstanceIDMayNotNameTheRegistry(t *testing.T) {
	_, err := New(context.Background(), quickConfig(), Options{InstanceID: "#instances", Catalog: sharedCatalog(t)})
	if err == nil || !strings.Contains(err.Error(), "may not start with #") {
		t.Fatalf("New with instance id #instances: %v; want the id refused", err)
	}
}

// TestDailyBudgetHoldsAcrossTheFleet floods one user's daily budget from
// three instances sharing Redis, many turns at once, streamed and JSON:
// each turn holds its estimated cost before its model is called, so the
// user's spend never passes the budget by more than one turn's estimate,
// however many turns were in flight when it ran out.
func TestDailyBudgetHoldsAcrossTheFleet(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	cfg.Budget.DailyCostUSD = 0.05
	cfg.RateLimit.User = ratelimit.UserRules{} // the budget, not the rate limit, is what stops this user
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 300 // many turns in flight at once
		cfg.Sim.Models[name] = st
	}
	var fleet []*scenario
	for range 3 {
		fleet = append(fleet, newScenario(t, cfg))
	}

	const turns = 60
	var mu sync.Mutex
	spent, served, refused := 0.0, 0, 0
	var wg sync.WaitGroup
	for i := range turns {
		sc := fleet[i%3]
		wg.Go(func() {
			session := fmt.Sprintf("flood-%d", i)
			var status int
			var cost float64
			if i%2 == 0 {
				a := sc.chatSession("flood-user", session, "Recommend a fantasy manga", "en")
				status, cost = a.Status, a.CostUSD
			} else {
				body := streamIn(t, sc.srv.URL, "flood-user", session, "Recommend a fantasy manga", "en", 0)
				status = http.StatusPaymentRequired
				if i := strings.Index(body, `"costUsd":`); i >= 0 && strings.Contains(body, `"type":"done"`) {
					status = http.StatusOK
					_, _ = fmt.Sscanf(body[i+len(`"costUsd":`):], "%g", &cost)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			spent += cost
			switch status {
			case http.StatusOK:
				served++
			case http.StatusPaymentRequired:
				refused++
			default:
				t.Errorf("turn %d: status %d", i, status)
			}
		})
	}
	wg.Wait()
	// One turn's estimate: its whole input and every output token it may
	// be granted, at Sonnet's price.
	m := cfg.Models[0]
	oneTurn := m.Price().Cost(provider.Usage{InputTokens: cfg.Budget.RequestInput, OutputTokens: cfg.Budget.RequestOutput})
	t.Logf("%d served, %d refused; spent $%.5f of a $%.2f budget (one turn's estimate at most $%.5f)", served, refused, spent, cfg.Budget.DailyCostUSD, oneTurn)
	if served == 0 || refused == 0 {
		t.Fatalf("%d served, %d refused: the flood must both spend the budget and be stopped by it", served, refused)
	}
	if spent > cfg.Budget.DailyCostUSD+oneTurn {
		t.Fatalf("spent $%.5f against a $%.2f budget: more than one turn ($%.5f) over", spent, cfg.Budget.DailyCostUSD, oneTurn)
	}
}
