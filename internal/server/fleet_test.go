package server

import (
	"context"
	"net/http/httptest"
	"testing"

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
