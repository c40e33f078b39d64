package server

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// TestCostReconciles runs JSON, streamed and cancelled turns, some with a
// flaky primary, and checks that the model cost in the events equals the
// simulator's own billing (its usage × the price table) to within 0.1%, and
// that every turn's whole cost includes its non-model components.
func TestCostReconciles(t *testing.T) {
	cfg := quickConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 20
		st.TokensPerSecond = 300 // slow enough to cancel mid-stream
		cfg.Sim.Models[name] = st
	}
	reconcileCosts(t, cfg, nil, true)
}

// reconcileCosts runs the turns of TestCostReconciles with a flaky sonnet
// and checks the events against the simulators' billing. billing is the
// simulator serving each model over a vendor's wire (nil or absent: the
// gateway's in-process one). With abandon, a third of the streams are
// abandoned mid-answer; that needs a provider the gateway bills exactly
// for a cut stream (a vendor's wire reports no usage for one, so the
// gateway's figure there is an estimate).
func reconcileCosts(t *testing.T, cfg config.Config, billing map[string]*sim.Sim, abandon bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	sc := newScenario(t, cfg)
	simOf := func(model string) *sim.Sim {
		if s, ok := billing[model]; ok {
			return s
		}
		return sc.s.Sim
	}
	st, _ := simOf("sonnet").Settings("sonnet")
	st.ErrorRate = map[provider.Kind]float64{provider.KindUnavailable: 0.2}
	if err := simOf("sonnet").SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	var cancelled, partial int
	var mu sync.Mutex
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("u%d", i)
			kind := i % 3
			if !abandon && kind == 2 {
				kind = 1
			}
			switch kind {
			case 0: // JSON answer
				sc.chat(user, "おすすめの漫画を教えて", "ja")
			case 1: // streamed to the end
				streamTurn(t, sc.srv.URL, user, 0)
			case 2: // the client goes away after the first frames
				got := streamTurn(t, sc.srv.URL, user, 2)
				mu.Lock()
				cancelled++
				if !strings.Contains(got, "event: done") {
					partial++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if abandon && partial == 0 {
		t.Fatalf("none of the %d cancelled streams ended before its done frame; the test did not cancel mid-stream", cancelled)
	}
	// Wait for the turns of the cancelled streams to settle their attempts.
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.s.Gateway.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	sc.s.Close()

	spans := readSpans(t, path)
	modelCost := map[string]float64{}
	turns, turnCompute, records := 0, 0, 0
	for _, e := range spans {
		switch e.Name {
		case "model_attempt":
			modelCost[e.Node.NodeID] += e.Resource.CostUSD
		case "turn":
			turns++
			if e.Resource.CostUSD > 0 {
				turnCompute++
			}
		case "record":
			if e.Resource.CostUSD > 0 {
				records++
			}
		}
	}
	for _, m := range cfg.Models {
		billed := m.Price().Cost(simOf(m.Name).Usage(m.Name)) // every input class at its price

		got := modelCost[m.Name]
		t.Logf("%s: events $%.6f, simulator $%.6f", m.Name, got, billed)
		if billed == 0 && got == 0 {
			continue
		}
		if rel := math.Abs(got-billed) / billed; rel > 0.001 {
			t.Errorf("%s: events sum to $%.6f, the simulator billed $%.6f (%.3f%% apart; limit 0.1%%)", m.Name, got, billed, rel*100)
		}
	}
	if modelCost["sonnet"] == 0 {
		t.Fatal("no sonnet cost recorded")
	}
	if turns != 48 || turnCompute != turns {
		t.Fatalf("%d turn spans, %d with a compute cost; want 48 and 48", turns, turnCompute)
	}
	if records == 0 {
		t.Fatal("no record span carried a storage cost")
	}
}

// streamTurn asks for an SSE answer in user's own session; with stopAfter
// > 0 it closes the connection after that many frames. It returns what it
// read.
func streamTurn(t *testing.T, base, user string, stopAfter int) string {
	return streamIn(t, base, user, "s-"+user, "Recommend a long fantasy manga series and explain why", "en", stopAfter)
}
