package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// writeTiers writes a reload test's config file with the model tiers given
// as YAML list items, names their names in order; each tier gets its
// cascade entry, a quota and simulator settings.
func (r *reloadable) writeTiers(t *testing.T, models string, names ...string) {
	t.Helper()
	yml := fmt.Sprintf(`server: {addr: "127.0.0.1:8080"}
catalog: {enabled: false}
judge: {sampleRate: 0}
eventStore: {path: %q}
events:
  wal: {dir: %q}
  sinks: {jsonl: {path: %q}}
deadline: {firstByte: 20s}
auth: {trustUserHeader: true}
models:
%s
fallback:
  tiers:
%s
    - {name: cache, confidence: 0.5}
    - {name: faq, confidence: 0.3}
    - {name: graceful, confidence: 0.1}
quota:
  models:
%s
sim:
  models:
%s
fleet: {redis: %q, keyPrefix: %q}
`, filepath.Join(r.dir, "events.db"), filepath.Join(r.dir, "wal"), r.spans(), models,
		each(names, "    - {name: %s, confidence: 0.8}"), each(names, "    %s: {tpm: 10000000, rpm: 100000}"),
		each(names, "    %s: {ttftMs: 5, tokensPerSecond: 3000}"), r.redis, r.prefix)
	if err := os.WriteFile(r.path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// each is format applied to each of names, a line each.
func each(names []string, format string) string {
	lines := make([]string, len(names))
	for i, n := range names {
		lines[i] = fmt.Sprintf(format, n)
	}
	return strings.Join(lines, "\n")
}

// tierCalls counts the model calls each provider the gateway was given
// took, by the tier name it was built for.
type tierCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *tierCalls) wrap(release chan struct{}) func(string, provider.Provider) provider.Provider {
	return func(tier string, p provider.Provider) provider.Provider {
		return &counted{Provider: &holding{Provider: p, release: release}, tier: tier, c: c}
	}
}

func (c *tierCalls) of(tier string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[tier]
}

type counted struct {
	provider.Provider
	tier string
	c    *tierCalls
}

func (p *counted) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	p.c.mu.Lock()
	p.c.n[p.tier]++
	p.c.mu.Unlock()
	return p.Provider.Stream(ctx, req, emit)
}

// A reload adds a tier, removes one, and gives another two deployments,
// while a stream runs on the tier it removes: the stream finishes on the
// provider it started with, the next turns cascade over the new tiers,
// and the models list, the deployments and the metrics name them. A tier
// that cannot connect is refused whole, the tiers in force unchanged.
func TestReloadChangesTheModelTiers(t *testing.T) {
	for _, mode := range []string{"memory", "fleet"} {
		t.Run(mode, func(t *testing.T) {
			f := newReloadable(t, mode == "fleet")
			f.writeTiers(t, `  - {name: sonnet, provider: sim, modelId: sim-sonnet, inputPerMTok: 3, outputPerMTok: 15, maxOutputTokens: 1024, contextWindow: 200000, confidence: 0.8, promptCaching: "off"}
  - {name: haiku, provider: sim, modelId: sim-haiku, inputPerMTok: 0.25, outputPerMTok: 1.25, maxOutputTokens: 1024, contextWindow: 200000, confidence: 0.8, promptCaching: "off"}`, "sonnet", "haiku")
			release := make(chan struct{})
			calls := &tierCalls{n: map[string]int{}}
			var logs syncBuffer
			s, srv := f.start(t, &logs, calls.wrap(release))

			started := make(chan struct{})
			stream := streamHeld(t, srv, "streamer", "HOLD: recommend a manga", started)
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the held stream sent no chunk")
			}

			f.writeTiers(t, `  - {name: opus, provider: sim, modelId: sim-opus, inputPerMTok: 15, outputPerMTok: 75, maxOutputTokens: 1024, contextWindow: 200000, confidence: 0.8, promptCaching: "off"}
  - {name: haiku, provider: sim, modelId: sim-haiku, inputPerMTok: 0.25, outputPerMTok: 1.25, maxOutputTokens: 1024, contextWindow: 200000, confidence: 0.8, promptCaching: "off",
     deployments: [{name: a, weight: 1}, {name: b, weight: 1}]}`, "opus", "haiku")
			rel := postReload(t, srv)
			if rel.Status != http.StatusOK {
				t.Fatalf("reload: %d %+v", rel.Status, rel.Error)
			}
			if !slices.ContainsFunc(rel.Changed, func(p string) bool { return strings.HasPrefix(p, "models") }) {
				t.Errorf("reload changed %q, want the models among them", rel.Changed)
			}

			// The stream in flight ends on sonnet, which is no tier any more.
			close(release)
			select {
			case d := <-stream:
				if d.Type != "done" || d.Tier != "sonnet" || d.Tokens.Output == 0 {
					t.Fatalf("the stream in flight ended with %+v, want done from sonnet", d)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the held stream did not finish after the reload")
			}

			for i := range 3 {
				a := chatAs(t, srv, userHeader(fmt.Sprintf("u%d", i)), fmt.Sprintf("s%d", i), "recommend a manga")
				if a.Status != http.StatusOK || a.Tier != "opus" || a.Degraded {
					t.Fatalf("turn %d after the reload: %d tier %q degraded %v %+v, want opus's answer", i, a.Status, a.Tier, a.Degraded, a.Error)
				}
			}
			if calls.of("opus") != 3 || calls.of("sonnet") != 1 {
				t.Errorf("calls: opus %d sonnet %d, want 3 on the new tier and sonnet's one stream", calls.of("opus"), calls.of("sonnet"))
			}

			// A tier that cannot connect: refused, opus still serves.
			f.writeTiers(t, `  - {name: opus, provider: sim, modelId: sim-opus, inputPerMTok: 15, outputPerMTok: 75, maxOutputTokens: 1024, contextWindow: 200000, confidence: 0.8, promptCaching: "off"}
  - {name: gpt, provider: openai, modelId: gpt-4o-mini, endpoint: "https://127.0.0.1:1/v1", caFile: /nonexistent/ca.pem,
     inputPerMTok: 0.15, outputPerMTok: 0.6, maxOutputTokens: 1024, contextWindow: 200000, confidence: 0.8}`, "opus", "gpt")
			if rel := postReload(t, srv); rel.Status != http.StatusUnprocessableEntity || rel.Error.Code != "invalid_config" ||
				!strings.Contains(strings.Join(rel.Error.Problems, ";"), "models[1].caFile") {
				t.Fatalf("a tier that cannot be built: %d %+v, want 422 invalid_config naming it", rel.Status, rel.Error)
			}
			if a := chatAs(t, srv, userHeader("after"), "s-after", "recommend a manga"); a.Status != http.StatusOK || a.Tier != "opus" {
				t.Fatalf("after the refused reload: %d tier %q, want opus in force", a.Status, a.Tier)
			}
			// With opus down, haiku answers from its two deployments.
			if err := s.Sim.SetSettings("opus", simDown(t, s, "opus")); err != nil {
				t.Fatal(err)
			}
			for i := range 4 {
				a := chatAs(t, srv, userHeader(fmt.Sprintf("h%d", i)), fmt.Sprintf("h%d", i), "recommend a manga")
				if a.Status != http.StatusOK || a.Tier != "haiku" {
					t.Fatalf("turn %d with opus down: %d tier %q %+v, want haiku", i, a.Status, a.Tier, a.Error)
				}
			}
			var deps struct {
				Deployments []struct {
					Tier       string `json:"tier"`
					Deployment string `json:"deployment"`
				} `json:"deployments"`
			}
			if err := json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/deployments")), &deps); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range deps.Deployments {
				names = append(names, d.Tier+"@"+d.Deployment)
			}
			if !slices.Equal(names, []string{"haiku@a", "haiku@b"}) {
				t.Errorf("deployments %q, want haiku@a and haiku@b", names)
			}
			models := adminGet(t, srv.URL+"/v1/models")
			if !strings.Contains(models, `"opus"`) || strings.Contains(models, `"sonnet"`) {
				t.Errorf("models list after the reload: %s", models)
			}
			// Metrics name the new tier, and the removed one for the turn
			// that was still running on it (they come through the event
			// stream: wait for them a little).
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				m := grepLines(adminGet(t, srv.URL+"/metrics"), "fmgate_model_attempts_total{")
				if strings.Contains(m, `{model="sim-opus",outcome="ok"} 4`) && strings.Contains(m, `{model="sim-sonnet",outcome="ok"} 1`) &&
					!strings.Contains(m, `"other"`) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("metrics do not count each tier's attempts by its model id:\n%s", m)
				}
			}

		})
	}
}

// simDown is model's simulator settings with an outage.
func simDown(t *testing.T, s *Server, model string) sim.Settings {
	t.Helper()
	st, ok := s.Sim.Settings(model)
	if !ok {
		t.Fatalf("the simulator has no %s", model)
	}
	st.Outage = true
	return st
}

// grepLines are the lines of text that contain sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
