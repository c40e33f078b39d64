package server

import (
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/quota"
)

// A model's concurrency cap (quota.models.*.concurrent) holds: with Sonnet
// capped at one call in flight, of two chat turns at once one is Sonnet's
// and the other downshifts to Haiku at once rather than wait or reach a
// model that would throttle it.
func TestConcurrencyCapDownshiftsTheTurnOverIt(t *testing.T) {
	cfg := quickConfig()
	cfg.Quota.Models = map[string]quota.Ceiling{
		"sonnet": {TPM: 400_000, RPM: 2_000, Concurrent: 1},
		"haiku":  {TPM: 1_000_000, RPM: 4_000},
	}
	st := cfg.Sim.Models["sonnet"]
	st.TTFTMs = 600 // long enough for the second turn to find the first in flight
	cfg.Sim.Models["sonnet"] = st
	sc := newScenario(t, cfg)
	var wg sync.WaitGroup
	tiers := make([]string, 2)
	for i := range tiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := sc.chat(toolUser(), "Which manga should I read next?", "en")
			if a.Status != 200 {
				t.Errorf("turn %d: %+v", i, a)
			}
			tiers[i] = a.Tier
		}()
	}
	wg.Wait()
	if !(tiers[0] == "sonnet" && tiers[1] == "haiku" || tiers[0] == "haiku" && tiers[1] == "sonnet") {
		t.Fatalf("tiers %v; want one turn on Sonnet and the other on Haiku", tiers)
	}
	if a := sc.chat(toolUser(), "Which manga should I read next?", "en"); a.Tier != "sonnet" {
		t.Fatalf("after both ended: answered by %q, want sonnet again", a.Tier)
	}
}
