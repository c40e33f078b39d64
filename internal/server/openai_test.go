package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// openaiUpstream serves cfg's simulated models on the OpenAI wire and
// points cfg's primary tier at it through the openai provider. It returns
// the upstream simulator and a count of the chat completion calls it got.
func openaiUpstream(t *testing.T, cfg *config.Config) (*sim.Sim, *atomic.Int64) {
	up, calls, _ := openaiUpstreamStreams(t, cfg)
	return up, calls
}

// openaiUpstreamStreams is openaiUpstream that also counts the calls that
// asked for a stream.
func openaiUpstreamStreams(t *testing.T, cfg *config.Config) (up *sim.Sim, calls, streamed *atomic.Int64) {
	t.Helper()
	up, err := sim.New(cfg.SimConfig(), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls, streamed = new(atomic.Int64), new(atomic.Int64)
	h := simserver.Handler(up)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			calls.Add(1)
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			var req struct {
				Stream bool `json:"stream"`
			}
			if json.Unmarshal(body, &req) == nil && req.Stream {
				streamed.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg.Models[0].Provider = "openai"
	cfg.Models[0].Endpoint = srv.URL + "/v1"
	return up, calls, streamed
}

// TestCostReconcilesOpenAI is TestCostReconciles with the primary tier on
// the openai provider. JSON and streamed turns against a flaky upstream
// are billed with the upstream's own usage: the model cost in the events
// equals the upstream's billing within 0.1%. A stream the client abandons
// ends before the upstream reports usage, so its figures are the gateway's
// estimate of what arrived: the input exactly, the output short by no more
// than the few tokens the upstream generated after fmgate hung up.
func TestCostReconcilesOpenAI(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		got, billed := reconcileOpenAI(t, func(sc *scenario, i int) {
			if i%2 == 0 {
				sc.chat(fmt.Sprintf("u%d", i), "おすすめの漫画を教えて", "ja")
				return
			}
			streamTurn(t, sc.srv.URL, fmt.Sprintf("u%d", i), 0)
		})
		if got.estimated != 0 {
			t.Errorf("%d attempts flagged %s; every answered turn has the upstream's usage", got.estimated, gateway.FlagUsageEstimated)
		}
		if rel := math.Abs(got.cost-billed.cost) / billed.cost; rel > 0.001 {
			t.Errorf("sonnet: events sum to $%.6f, the upstream billed $%.6f (%.3f%% apart; limit 0.1%%)", got.cost, billed.cost, rel*100)
		}
	})
	// With upstream "client", a JSON client's answer is asked for whole:
	// billed with the upstream's usage all the same.
	t.Run("whole answers", func(t *testing.T) {
		var streamed, calls *atomic.Int64
		got, billed := reconcileOpenAI(t, func(sc *scenario, i int) {
			sc.chat(fmt.Sprintf("u%d", i), "おすすめの漫画を教えて", "ja")
		}, func(cfg *config.Config) *sim.Sim {
			cfg.Models[0].Upstream = config.UpstreamClient
			var up *sim.Sim
			up, calls, streamed = openaiUpstreamStreams(t, cfg)
			return up
		})
		if n := streamed.Load(); n != 0 || calls.Load() == 0 {
			t.Errorf("%d of %d upstream calls streamed; a JSON client's answer is asked for whole", n, calls.Load())
		}
		if got.estimated != 0 {
			t.Errorf("%d attempts flagged %s; every answered turn has the upstream's usage", got.estimated, gateway.FlagUsageEstimated)
		}
		if rel := math.Abs(got.cost-billed.cost) / billed.cost; rel > 0.001 {
			t.Errorf("sonnet: events sum to $%.6f, the upstream billed $%.6f (%.3f%% apart; limit 0.1%%)", got.cost, billed.cost, rel*100)
		}
	})
	t.Run("abandoned", func(t *testing.T) {
		var abandoned atomic.Int64
		got, billed := reconcileOpenAI(t, func(sc *scenario, i int) {
			if got := streamTurn(t, sc.srv.URL, fmt.Sprintf("u%d", i), 2); !strings.Contains(got, "event: done") {
				abandoned.Add(1)
			}
		})
		n := int(abandoned.Load())
		if n == 0 {
			t.Fatal("no stream was abandoned before its done frame; the test did not cancel mid-stream")
		}
		if got.estimated == 0 || got.estimated > n { // some abandoned turns were haiku's
			t.Errorf("%d sonnet attempts of %d abandoned turns flagged %s", got.estimated, n, gateway.FlagUsageEstimated)
		}
		const perTurn = 8 // tokens generated after the hang-up, at most
		if got.usage.InputTokens != billed.usage.InputTokens ||
			got.usage.OutputTokens > billed.usage.OutputTokens || got.usage.OutputTokens < billed.usage.OutputTokens-perTurn*n {
			t.Errorf("%d abandoned streams: events %+v, upstream billed %+v; want the input exact and the output short by at most %d tokens a stream",
				n, got.usage, billed.usage, perTurn)
		}
	})
}

type billing struct {
	usage provider.Usage
	cost  float64
	// estimated counts the attempts whose event says the usage is an
	// estimate.
	estimated int
}

// reconcileOpenAI runs 32 turns against a gateway whose sonnet tier is an
// upstream on the OpenAI wire (failing 20% of calls), checks haiku's
// in-process billing within 0.1%, and returns sonnet's figures in the
// events and in the upstream's billing.
//
// upstream, when given, starts the upstream for cfg instead of openaiUpstream.
func reconcileOpenAI(t *testing.T, turn func(sc *scenario, i int), upstream ...func(*config.Config) *sim.Sim) (got, billed billing) {
	cfg := quickConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 20
		st.TokensPerSecond = 300 // slow enough to cancel mid-stream
		cfg.Sim.Models[name] = st
	}
	// A loaded machine must not turn slow first tokens into timeouts: the
	// test is about billing.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 30*time.Second, 20*time.Second
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	var up *sim.Sim
	if len(upstream) > 0 {
		up = upstream[0](&cfg)
	} else {
		up, _ = openaiUpstream(t, &cfg)
	}
	sim.CountTokens("load the tokenizer before the first deadline")
	st, _ := up.Settings("sonnet")
	st.ErrorRate = map[provider.Kind]float64{provider.KindUnavailable: 0.2}
	if err := up.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	sc := newScenario(t, cfg)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turn(sc, i)
		}()
	}
	wg.Wait()
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.s.Gateway.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	sc.s.Close()

	events := map[string]billing{}
	for _, e := range readSpans(t, path) {
		if e.Name == "model_attempt" {
			b := events[e.Node.NodeID]
			b.cost += e.Resource.CostUSD
			b.usage.InputTokens += e.Resource.TokensIn
			b.usage.OutputTokens += e.Resource.TokensOut
			if slices.Contains(e.Resource.CapabilityFlagsActive, gateway.FlagUsageEstimated) {
				b.estimated++
			}
			events[e.Node.NodeID] = b
		}
	}
	billedBy := map[string]*sim.Sim{"sonnet": up, "haiku": sc.s.Sim}
	for _, m := range cfg.Models {
		u := billedBy[m.Name].Usage(m.Name)
		b := billing{usage: provider.Usage{InputTokens: u.Input(), OutputTokens: u.OutputTokens}, cost: m.Price().Cost(u)}
		t.Logf("%s (%s): events %+v, simulator %+v", m.Name, m.Provider, events[m.Name], b)
		if m.Name == "sonnet" {
			got, billed = events[m.Name], b
			continue
		}
		if b.cost == 0 && events[m.Name].cost == 0 {
			continue
		}
		if rel := math.Abs(events[m.Name].cost-b.cost) / b.cost; rel > 0.001 {
			t.Errorf("%s: events sum to $%.6f, the simulator billed $%.6f (%.3f%% apart; limit 0.1%%)", m.Name, events[m.Name].cost, b.cost, rel*100)
		}
	}
	if got.cost == 0 {
		t.Fatal("no sonnet cost recorded")
	}
	return got, billed
}

// A throttling upstream is retried, then the turn falls back to the next
// tier: the client gets a degraded answer, never a 5xx.
func TestOpenAIThrottlingRetriedThenFallsBack(t *testing.T) {
	cfg := quickConfig()
	up, calls := openaiUpstream(t, &cfg)
	st, _ := up.Settings("sonnet")
	st.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 1}
	if err := up.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	sc := newScenario(t, cfg)
	a := sc.chat("u1", "Recommend a manga", "en")
	if a.Status != http.StatusOK || a.Tier != "haiku" || !a.Degraded || a.Text == "" {
		t.Fatalf("status %d tier %q degraded %v text %q; want haiku's degraded answer", a.Status, a.Tier, a.Degraded, a.Text)
	}
	if n := calls.Load(); n < 2 {
		t.Fatalf("the upstream got %d calls; want the throttled call retried", n)
	}
}

// A stream the upstream drops mid-answer ends with an error frame, never
// a done frame.
func TestOpenAIMidStreamCutEndsInErrorFrame(t *testing.T) {
	cfg := quickConfig()
	up, _ := openaiUpstream(t, &cfg)
	st, _ := up.Settings("sonnet")
	st.CutAfterTokens = 10
	if err := up.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	sc := newScenario(t, cfg)
	got := streamTurn(t, sc.srv.URL, "u1", 0)
	if !strings.Contains(got, `"type":"chunk"`) || !strings.Contains(got, `"type":"error"`) || strings.Contains(got, `"type":"done"`) {
		t.Fatalf("stream:\n%s", got)
	}
}

// OpenAI counts cached tokens inside prompt_tokens. A turn on an openai
// tier whose prompt was mostly read from the cache costs what OpenAI bills
// for it (each token priced once, cached ones at the cached rate), on a
// whole answer and on a stream, and the OpenAI door reports the usage as
// OpenAI would.
func TestOpenAICachedTokensArePricedOnce(t *testing.T) {
	const prompt, cached, completion = 2000, 1500, 100
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`,
		prompt, completion, prompt+completion, cached)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Stream bool `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"Try One Piece."},"finish_reason":"stop"}],"usage":%s}`, usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{"content":"Try One Piece."},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprintf(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[],"usage":%s}`+"\n\ndata: [DONE]\n\n", usage)
	}))
	t.Cleanup(up.Close)
	const in, out = 0.15, 0.6 // $/MTok; cached input defaults to half
	want := (float64(prompt-cached)*in + float64(cached)*in/2 + float64(completion)*out) / 1e6

	for _, upstream := range []string{config.UpstreamClient, config.UpstreamStream} {
		t.Run(upstream, func(t *testing.T) {
			cfg := quickConfig()
			m := &cfg.Models[0]
			m.Provider, m.Endpoint, m.ModelID, m.Upstream = "openai", up.URL+"/v1", "gpt-test", upstream
			m.InputPerMTok, m.OutputPerMTok, m.CachedInputPerMTok = in, out, 0
			sc := newScenario(t, cfg)
			a := sc.chat("cached-"+upstream, "recommend a manga", "en")
			if a.Status != 200 || a.Tier != "sonnet" {
				t.Fatalf("turn: %+v", a)
			}
			if math.Abs(a.CostUSD-want) > want*0.001 {
				t.Fatalf("cost $%.8f; OpenAI bills $%.8f for %d prompt tokens of which %d cached", a.CostUSD, want, prompt, cached)
			}
			if a.Usage.Input != prompt {
				t.Fatalf("input tokens %d; want the whole prompt, %d", a.Usage.Input, prompt)
			}

			req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"sonnet","messages":[{"role":"user","content":"recommend a manga"}]}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-User-Id", "door-"+upstream)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Usage struct {
					Prompt  int `json:"prompt_tokens"`
					Details struct {
						Cached int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
				t.Fatalf("door: %d, %v", resp.StatusCode, err)
			}
			if body.Usage.Prompt != prompt || body.Usage.Details.Cached != cached {
				t.Fatalf("the OpenAI door reports %+v; want prompt_tokens %d with %d cached, as OpenAI does", body.Usage, prompt, cached)
			}
		})
	}
}
