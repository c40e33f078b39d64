package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
	"github.com/fmgate/fmgate/internal/retry"
)

// deploymentCalls reads fmgate_deployment_calls_total{tier,deployment,outcome}.
func deploymentCalls(t *testing.T, sc *scenario, dep, outcome string) int {
	t.Helper()
	fams, err := sc.s.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "fmgate_deployment_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tier"] == "sonnet" && labels["deployment"] == dep && labels["outcome"] == outcome {
				return int(m.GetCounter().GetValue())
			}
		}
	}
	return 0
}

// Two deployments of Sonnet on the simulator, in memory and in a fleet:
// calls split by their weights; one deployment throttled on every call
// sheds its share to the other and no turn falls to Haiku; both down,
// the cascade goes on to Haiku.
func TestTwoSonnetDeployments(t *testing.T) {
	for _, fleet := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "fleet"}[fleet], func(t *testing.T) {
			cfg := quickConfig()
			cfg.Models[0].Deployments = []config.Deployment{{Name: "east", Weight: 3}, {Name: "west", Weight: 1}}
			for m, c := range cfg.Quota.Models { // the tier's quota is not what is tested here
				c.TPM, c.RPM = 1<<40, 1<<40
				cfg.Quota.Models[m] = c
			}
			// Nor the deadlines: a call slowed by a busy machine must not
			// fall to Haiku, which only the deployments' faults may cause.
			cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
			// The split is exact at any count (smooth weighted round robin;
			// internal/deploy checks it over 2,000 calls): 200 turns show
			// it through the whole pipeline.
			const turns = 200
			if fleet {
				cfg.Fleet.Redis = redistest.Addr()
				cfg.Fleet.KeyPrefix = fleetConfig(t)
			}
			sc := newScenario(t, cfg)

			tiers, statuses := sc.run(turns, 8, "Recommend a manga")
			east, west := deploymentCalls(t, sc, "east", "ok"), deploymentCalls(t, sc, "west", "ok")
			t.Logf("%d turns: tiers %v, statuses %v; east %d, west %d", turns, tiers, statuses, east, west)
			if tiers["sonnet"] != turns || east+west != turns {
				t.Fatalf("tiers %v, statuses %v, deployments %d+%d: want every turn on sonnet's deployments", tiers, statuses, east, west)
			}
			if share := float64(east) / float64(turns); share < 0.75-0.05 || share > 0.75+0.05 {
				t.Fatalf("east took %.1f%% of the calls at weights 3:1, want 75%% ± 5", 100*share)
			}

			adminPut(t, sc.srv, "/admin/sim/"+url.PathEscape("sonnet@east"), `{"errorRate":{"throttled":1}}`)
			westBefore := west
			if a := sc.chat("probe", "Recommend a manga", "en"); a.Tier != "sonnet" {
				t.Fatalf("the first turn with east throttled: %+v", a)
			}
			status, body := adminDo(t, sc.srv.URL, http.MethodGet, "/admin/deployments", "")
			if status != http.StatusOK || !strings.Contains(body, `"deployment":"east","weight":3,"strategy":"weighted","breaker":"closed","inFlight":0`) || !strings.Contains(body, `"throttled":true`) {
				t.Fatalf("GET /admin/deployments right after east was throttled: %d %s", status, body)
			}
			westBefore++
			tiers, _ = sc.run(100, 8, "Recommend a manga")
			if tiers["sonnet"] != 100 {
				t.Fatalf("with east throttled: tiers %v, want all 100 on sonnet", tiers)
			}
			if got := deploymentCalls(t, sc, "west", "ok") - westBefore; got != 100 {
				t.Fatalf("west answered %d of 100 with east throttled", got)
			}
			if deploymentCalls(t, sc, "east", "throttled") == 0 {
				t.Fatal("east was never seen throttled")
			}

			adminPut(t, sc.srv, "/admin/sim/"+url.PathEscape("sonnet@west"), `{"outage":true}`)
			tiers, _ = sc.run(20, 4, "Recommend a manga")
			if tiers["haiku"] != 20 {
				t.Fatalf("with both deployments down: tiers %v, want all 20 on haiku", tiers)
			}
		})
	}
}

// A deployment's own ceiling (deployments[].tpm/rpm) is kept in the quota
// ledger: once it is full the calls go to its sibling, and the tier's
// answers stay Sonnet's.
func TestDeploymentCeiling(t *testing.T) {
	cfg := quickConfig()
	cfg.Models[0].Deployments = []config.Deployment{{Name: "east", Weight: 9, TPM: 1_000_000, RPM: 2}, {Name: "west"}}
	cfg.Quota.SafetyMargin = 1 // the ceiling as written: 2 requests
	sc := newScenario(t, cfg)
	for i := range 8 {
		if a := sc.chat(fmt.Sprintf("ceil-%d", i), "Recommend a manga", "en"); a.Tier != "sonnet" || a.Degraded {
			t.Fatalf("turn %d: %+v", i, a)
		}
	}
	east, west := deploymentCalls(t, sc, "east", "ok"), deploymentCalls(t, sc, "west", "ok")
	if east != 2 || west != 6 {
		t.Fatalf("east %d, west %d of 8 with east's ceiling at 2 requests a minute; want 2 and 6", east, west)
	}
	snap, err := sc.s.Quota.Saturation(context.Background(), "sonnet@east")
	if err != nil || snap.RequestsUsed != 2 {
		t.Fatalf("east's ledger: %+v, %v", snap, err)
	}
	// The live state the dashboard and alerts read lists the deployment's
	// quota and breaker beside its tier's.
	st, err := sc.s.readState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	quotaOf, breakers := map[string]int{}, map[string]string{}
	for _, q := range st.Quota {
		quotaOf[q.Model] = q.RPMUsed
	}
	for _, b := range st.Breakers {
		breakers[b.Name] = b.State
	}
	if quotaOf["sonnet@east"] != 2 || breakers["sonnet@east"] != "closed" || breakers["sonnet@west"] != "closed" {
		t.Fatalf("live state: quota %v, breakers %v; want each deployment listed", quotaOf, breakers)
	}
}

// A deployment keeps a pressure level of its own: with east throttling
// every call, east's level rises while west, answering every turn, stays
// NORMAL, and so does the tier, whose retries keep the configured policy.
// GET /admin/deployments, the live view and /metrics show each
// deployment's level; in a fleet, another instance sees east's too.
func TestThrottledDeploymentPressure(t *testing.T) {
	for _, fleet := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "fleet"}[fleet], func(t *testing.T) {
			cfg := quickConfig()
			cfg.Models[0].Deployments = []config.Deployment{{Name: "east"}, {Name: "west"}}
			for m, c := range cfg.Quota.Models {
				c.TPM, c.RPM = 1<<40, 1<<40
				cfg.Quota.Models[m] = c
			}
			cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
			if fleet {
				cfg.Fleet.Redis = redistest.Addr()
				cfg.Fleet.KeyPrefix = fleetConfig(t)
			}
			sc := newScenario(t, cfg)
			adminPut(t, sc.srv, "/admin/sim/"+url.PathEscape("sonnet@east"), `{"errorRate":{"throttled":1}}`)
			tiers, statuses := sc.run(40, 4, "Recommend a manga")
			if tiers["sonnet"] != 40 {
				t.Fatalf("with east throttled: tiers %v, statuses %v; want all 40 on sonnet", tiers, statuses)
			}
			if deploymentCalls(t, sc, "east", "throttled") == 0 || deploymentCalls(t, sc, "west", "ok") != 40 {
				t.Fatalf("east throttled %d times, west answered %d of 40", deploymentCalls(t, sc, "east", "throttled"), deploymentCalls(t, sc, "west", "ok"))
			}
			ctx := context.Background()
			levels := sc.s.Retrier.Pressure.Levels(ctx, []string{"sonnet@east", "sonnet@west", "sonnet"})
			if east := levels[0]; east != retry.LevelSlight && east != retry.LevelHigh {
				t.Fatalf("east's pressure after throttling every call: %s, want SLIGHT or HIGH", east)
			}
			if levels[1] != retry.LevelNormal || levels[2] != retry.LevelNormal {
				t.Fatalf("west's pressure %s, the tier's %s: want both NORMAL", levels[1], levels[2])
			}
			// The tier's retries keep the configured policy.
			if got, want := sc.s.Retrier.Policy(provider.KindUnavailable, levels[2]), sc.s.Retrier.Policy(provider.KindUnavailable, retry.LevelNormal); got != want {
				t.Fatalf("the tier's retry policy %+v, want the configured %+v", got, want)
			}

			seen := func(base string) map[string]string {
				t.Helper()
				status, body := adminDo(t, base, http.MethodGet, "/admin/deployments", "")
				var out struct {
					Deployments []struct {
						Deployment, Pressure string
					}
				}
				if err := json.Unmarshal([]byte(body), &out); status != http.StatusOK || err != nil {
					t.Fatalf("GET /admin/deployments: %d %s (%v)", status, body, err)
				}
				m := map[string]string{}
				for _, d := range out.Deployments {
					m[d.Deployment] = d.Pressure
				}
				return m
			}
			want := map[string]string{"east": levels[0].String(), "west": "NORMAL"}
			if got := seen(sc.srv.URL); !maps.Equal(got, want) {
				t.Fatalf("GET /admin/deployments shows pressure %v, want %v", got, want)
			}
			st, err := sc.s.readState(ctx)
			if err != nil {
				t.Fatal(err)
			}
			inLive := map[string]string{}
			for _, p := range st.Pressure {
				inLive[p.Name] = p.Level
			}
			if inLive["sonnet@east"] != levels[0].String() || inLive["sonnet@west"] != "NORMAL" || inLive["sonnet"] != "NORMAL" || inLive["haiku"] != "NORMAL" {
				t.Fatalf("the live view's pressure: %v", inLive)
			}
			if got := pressureGauge(t, sc, "east"); got != strings.ToLower(levels[0].String()) {
				t.Fatalf("fmgate_deployment_pressure for east: %q, want %s", got, levels[0])
			}
			if got := pressureGauge(t, sc, "west"); got != "normal" {
				t.Fatalf("fmgate_deployment_pressure for west: %q, want normal", got)
			}
			if fleet {
				// Another instance, whose own simulator never throttled
				// east, weighs east's level all the same.
				other := newScenario(t, cfg)
				if got := seen(other.srv.URL); !maps.Equal(got, want) {
					t.Fatalf("another instance shows pressure %v, want %v", got, want)
				}
			}
		})
	}
}

// pressureGauge is the level fmgate_deployment_pressure marks 1 for
// deployment dep of sonnet.
func pressureGauge(t *testing.T, sc *scenario, dep string) string {
	t.Helper()
	fams, err := sc.s.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "fmgate_deployment_pressure" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tier"] == "sonnet" && labels["deployment"] == dep && m.GetGauge().GetValue() == 1 {
				return labels["level"]
			}
		}
	}
	return ""
}
