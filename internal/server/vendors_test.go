package server

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// TestSonnetOnBedrockHaikuOnAnthropic is the real-provider profile: Sonnet
// through the Bedrock adapter (aws-sdk-go-v2) and Haiku through the
// Anthropic adapter (anthropic-sdk-go), each against the simulator on its
// vendor's wire. Sonnet answers while it is up; when Bedrock has an outage
// Haiku on Anthropic answers every turn and no client sees a 5xx.
func TestSonnetOnBedrockHaikuOnAnthropic(t *testing.T) {
	cfg := quickConfig()
	haikuUp := onAnthropic(t, &cfg, "haiku")
	sonnetUp, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	sc := newScenario(t, onBedrock(cfg, endpoint))

	tiers, statuses := sc.run(6, 3, "おすすめの少年漫画は？")
	if statuses[200] != 6 || tiers["sonnet"] != 6 {
		t.Fatalf("healthy: tiers %v statuses %v; want Sonnet on Bedrock answering all", tiers, statuses)
	}
	setUpstream(t, sonnetUp, "sonnet", func(st *sim.Settings) { st.Outage = true })
	const n = 30
	tiers, statuses = sc.run(n, 3, "Which manga should I read next?")
	if statuses[200] != n || tiers["haiku"] != n {
		t.Fatalf("Bedrock down: tiers %v statuses %v; want Haiku on Anthropic answering all %d with a 200", tiers, statuses, n)
	}
	if haikuUp.Usage("haiku").OutputTokens == 0 {
		t.Fatal("the Anthropic upstream billed nothing: Haiku did not answer through it")
	}
}

// TestCostReconcilesBedrockAndAnthropic: with Sonnet on Bedrock and Haiku on
// Anthropic, the model cost in the events equals what the two upstream
// simulators billed.
func TestCostReconcilesBedrockAndAnthropic(t *testing.T) {
	cfg := quickConfig()
	haikuUp := onAnthropic(t, &cfg, "haiku")
	sonnetUp, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	reconcileCosts(t, onBedrock(cfg, endpoint), map[string]*sim.Sim{"sonnet": sonnetUp, "haiku": haikuUp}, false)
}

// TestAttemptEventsKeepTheVendorsCode: a model attempt refused by Bedrock's
// throttling carries the normalised kind in outcome.error_code and Bedrock's
// own exception name in outcome.vendor_code.
func TestAttemptEventsKeepTheVendorsCode(t *testing.T) {
	cfg := quickConfig()
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 10*time.Second, 8*time.Second
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false // every span reaches the log
	st := cfg.Sim.Models["sonnet"]
	st.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 1}
	_, endpoint := bedrockUpstream(t, st)
	sc := newScenario(t, onBedrock(cfg, endpoint))
	if a := sc.chat("vendor-code", "Which manga should I read next?", "en"); a.Status != 200 || a.Tier != "haiku" {
		t.Fatalf("answer %+v: want haiku after Bedrock throttled", a)
	}
	sc.s.Close() // flush the emitter
	found := false
	for _, e := range readSpans(t, path) {
		if e.Name == "model_attempt" && e.Outcome.ErrorCode == string(provider.KindThrottled) {
			if e.Outcome.VendorCode != "ThrottlingException" {
				t.Fatalf("throttled attempt's vendor_code %q, want ThrottlingException", e.Outcome.VendorCode)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no throttled model_attempt event")
	}
}
