package server

import (
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

const anthropicKeyEnv = "FMGATE_TEST_ANTHROPIC_KEY"

// onAnthropic puts the named tiers of cfg on the anthropic provider, served
// by the simulator on Anthropic's wire (as `fmgate sim` would), and returns
// that upstream simulator.
func onAnthropic(t *testing.T, cfg *config.Config, tiers ...string) *sim.Sim {
	t.Helper()
	t.Setenv(anthropicKeyEnv, "sk-sim")
	// The tests assert outcomes, not timing: deadlines generous enough for
	// a wire hop under the race detector on a busy machine.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	up, err := sim.New(cfg.SimConfig(), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(simserver.Handler(up))
	t.Cleanup(srv.Close)
	for i, m := range cfg.Models {
		if slices.Contains(tiers, m.Name) {
			m.Provider, m.APIKeyEnv, m.Endpoint = "anthropic", anthropicKeyEnv, srv.URL
			cfg.Models[i] = m
		}
	}
	return up
}

func setUpstream(t *testing.T, up *sim.Sim, model string, change func(*sim.Settings)) {
	t.Helper()
	st, _ := up.Settings(model)
	change(&st)
	if err := up.SetSettings(model, st); err != nil {
		t.Fatal(err)
	}
}

// TestAnthropicTierThrottledIsRetriedThenFallsBack: Sonnet served through
// the anthropic provider keeps answering 429 rate_limit_error; the gateway
// retries it, then Haiku answers, degraded, with a 200.
func TestAnthropicTierThrottledIsRetriedThenFallsBack(t *testing.T) {
	cfg := quickConfig()
	up := onAnthropic(t, &cfg, "sonnet")
	setUpstream(t, up, "sonnet", func(st *sim.Settings) { st.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 1} })
	sc := newScenario(t, cfg)
	a := sc.chat("u1", "Recommend a fantasy manga", "en")
	if a.Status != 200 || a.Tier != "haiku" || !a.Degraded || a.Text == "" {
		t.Fatalf("answer %+v: want a degraded 200 from haiku", a)
	}
	sonnet := sc.upstream["sonnet"]
	if sonnet.calls.Load() < 2 || sonnet.throttled.Load() != sonnet.calls.Load() {
		t.Fatalf("sonnet called %d times, %d throttled: want a retry of the throttled call before the fallback", sonnet.calls.Load(), sonnet.throttled.Load())
	}
}

// TestAnthropicTierCutMidStreamEndsInAnErrorFrame: the upstream connection
// drops after the first tokens reached the client; the stream ends with an
// error frame, never a done.
func TestAnthropicTierCutMidStreamEndsInAnErrorFrame(t *testing.T) {
	cfg := quickConfig()
	up := onAnthropic(t, &cfg, "sonnet", "haiku")
	setUpstream(t, up, "sonnet", func(st *sim.Settings) { st.CutAfterTokens = 30 })
	sc := newScenario(t, cfg)
	got := streamTurn(t, sc.srv.URL, "u1", 0)
	if !strings.Contains(got, `"type":"chunk"`) || !strings.Contains(got, `"type":"error"`) || strings.Contains(got, `"type":"done"`) {
		t.Fatalf("stream %s: want chunks then an error frame, no done", got)
	}
}

// TestScenarioSonnetDownHaikuOnAnthropic is the MangaAssist outage through a
// real adapter: Sonnet (the primary) is down, Haiku is served by Anthropic
// through anthropic-sdk-go; every turn is a 200 from Haiku.
func TestScenarioSonnetDownHaikuOnAnthropic(t *testing.T) {
	cfg := quickConfig()
	up := onAnthropic(t, &cfg, "haiku")
	sc := newScenario(t, cfg)
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	const n = 40
	tiers, statuses := sc.run(n, 4, "Which manga should I read next?")
	if statuses[200] != n || tiers["haiku"] != n {
		t.Fatalf("statuses %v tiers %v: want %d answers from haiku, all 200", statuses, tiers, n)
	}
	if up.Usage("haiku").OutputTokens == 0 {
		t.Fatal("the Anthropic upstream billed nothing: haiku did not answer through the adapter")
	}
}

// TestCostReconcilesThroughAnthropic is TestCostReconciles with both tiers
// on the anthropic provider. JSON and streamed turns with a flaky primary:
// the model cost in the events equals the upstream simulator's own billing
// within 0.1%. Abandoned streams: Anthropic reports usage only in its final
// event, so their output is the gateway's estimate, flagged usage_estimated
// in the events, and within 25% of what the upstream billed (the upstream
// also bills the tokens in flight when the client left, which no client sees).
func TestCostReconcilesThroughAnthropic(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		got := reconcileThroughAnthropic(t, 36, func(sc *scenario, i int) {
			user := fmt.Sprintf("u%d", i)
			if i%2 == 0 {
				sc.chat(user, "おすすめの漫画を教えて", "ja")
				return
			}
			streamTurn(t, sc.srv.URL, user, 0)
		})
		if got.estimated != 0 {
			t.Errorf("%d attempts with estimated usage; Anthropic reported every one", got.estimated)
		}
		got.check(t, 0.001)
	})
	t.Run("abandoned", func(t *testing.T) {
		got := reconcileThroughAnthropic(t, 12, func(sc *scenario, i int) {
			streamTurn(t, sc.srv.URL, fmt.Sprintf("u%d", i), 2)
		})
		if got.estimated == 0 {
			t.Error("no attempt flagged usage_estimated: the streams were not abandoned mid-answer")
		}
		// Which tier was streaming when a client left is a matter of timing:
		// a fallback call cancelled before Anthropic's message_start bills
		// nothing here while the simulator counted its input. The estimate
		// is held to the whole bill.
		got.checkTotal(t, 0.25)
	})
}

type reconciliation struct {
	events, billed map[string]float64
	estimated      int
}

func (r reconciliation) check(t *testing.T, limit float64) {
	t.Helper()
	if r.events["sonnet"] == 0 {
		t.Fatal("no sonnet cost recorded")
	}
	for name, billed := range r.billed {
		got := r.events[name]
		t.Logf("%s: events $%.6f, upstream simulator $%.6f", name, got, billed)
		if billed == 0 && got == 0 {
			continue
		}
		if rel := math.Abs(got-billed) / billed; rel > limit {
			t.Errorf("%s: events sum to $%.6f, the upstream billed $%.6f (%.3f%% apart; limit %.1f%%)", name, got, billed, rel*100, limit*100)
		}
	}
}

// checkTotal compares the events' model cost with the upstream's bill, all
// tiers together.
func (r reconciliation) checkTotal(t *testing.T, limit float64) {
	t.Helper()
	var got, billed float64
	for name, b := range r.billed {
		billed += b
		got += r.events[name]
		t.Logf("%s: events $%.6f, upstream simulator $%.6f", name, r.events[name], b)
	}
	if billed == 0 {
		t.Fatal("the upstream billed nothing")
	}
	if rel := math.Abs(got-billed) / billed; rel > limit {
		t.Errorf("events sum to $%.6f, the upstream billed $%.6f (%.3f%% apart; limit %.1f%%)", got, billed, rel*100, limit*100)
	}
}

// reconcileThroughAnthropic runs n turns (turn(sc, i), concurrently) on a
// gateway whose tiers are both on the anthropic provider, Sonnet failing
// 20% of calls, and returns the model cost in the events and the upstream's.
func reconcileThroughAnthropic(t *testing.T, n int, turn func(sc *scenario, i int)) reconciliation {
	t.Helper()
	cfg := quickConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 20
		st.TokensPerSecond = 300 // slow enough to abandon mid-stream
		cfg.Sim.Models[name] = st
	}
	up := onAnthropic(t, &cfg, "sonnet", "haiku")
	setUpstream(t, up, "sonnet", func(st *sim.Settings) {
		st.ErrorRate = map[provider.Kind]float64{provider.KindUnavailable: 0.2}
	})
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	sc := newScenario(t, cfg)

	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); turn(sc, i) }()
	}
	wg.Wait()
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.s.Gateway.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	sc.s.Close()

	r := reconciliation{events: map[string]float64{}, billed: map[string]float64{}}
	for _, e := range readSpans(t, path) {
		if e.Name != "model_attempt" {
			continue
		}
		r.events[e.Node.NodeID] += e.Resource.CostUSD
		if slices.Contains(e.Resource.CapabilityFlagsActive, gateway.FlagUsageEstimated) {
			r.estimated++
		}
	}
	for _, m := range cfg.Models {
		r.billed[m.Name] = m.Price().Cost(up.Usage(m.Name)) // every input class at its price
	}
	return r
}
