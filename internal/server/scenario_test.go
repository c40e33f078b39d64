package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// counting wraps a provider and counts upstream attempts and their
// outcomes, and what the answers cost at the tier's price: the spend as the
// vendor would bill it, whatever the gateway counted.
type counting struct {
	provider.Provider
	calls, throttled atomic.Int64
	price            budget.Price
	billedNano       atomic.Int64
}

// billed is what the upstream's answers cost, in USD.
func (c *counting) billed() float64 { return float64(c.billedNano.Load()) / 1e9 }

func (c *counting) bill(r *provider.Response) {
	if r != nil {
		c.billedNano.Add(int64(c.price.Cost(r.Usage)*1e9 + 0.5))
	}
}

func (c *counting) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	c.calls.Add(1)
	r, err := c.Provider.Complete(ctx, req)
	if provider.KindOf(err) == provider.KindThrottled {
		c.throttled.Add(1)
	}
	c.bill(r)
	return r, err
}

// CountTokens passes on to the provider's own count, where it has one.
func (c *counting) CountTokens(ctx context.Context, req *provider.Request) (int, error) {
	if tc, ok := c.Provider.(provider.TokenCounter); ok {
		return tc.CountTokens(ctx, req)
	}
	return 0, errors.ErrUnsupported
}

func (c *counting) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	c.calls.Add(1)
	r, err := c.Provider.Stream(ctx, req, emit)
	if provider.KindOf(err) == provider.KindThrottled {
		c.throttled.Add(1)
	}
	c.bill(r)
	return r, err
}

type scenario struct {
	t        *testing.T
	s        *Server
	srv      *httptest.Server
	upstream map[string]*counting
}

// quickConfig answers in tens of milliseconds so scenarios run many turns.
func quickConfig() config.Config {
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 5
		st.TokensPerSecond = 3000
		cfg.Sim.Models[name] = st
	}
	// The catalog search is off here, so a slow search under -race on a
	// busy machine cannot degrade answers these tests check; its own tests
	// switch it on (withCatalog).
	cfg.Catalog.Enabled = false
	return cfg
}

func newScenario(t *testing.T, cfg config.Config) *scenario {
	t.Helper()
	return newScenarioSim(t, cfg, sim.Options{})
}

// newScenarioSim is newScenario with the simulator's options (its random
// source, for a conversation that must come out the same twice).
func newScenarioSim(t *testing.T, cfg config.Config, simOpts sim.Options) *scenario {
	t.Helper()
	sc := &scenario{t: t, upstream: map[string]*counting{}}
	s, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t), SimOptions: simOpts, WrapProvider: func(model string, p provider.Provider) provider.Provider {
		c := &counting{Provider: p}
		tier, _, _ := strings.Cut(model, "@") // a deployment bills at its tier's price
		if m, ok := cfg.Model(tier); ok {
			c.price = m.Price()
		}
		sc.upstream[model] = c
		return c
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sc.s = s
	sc.srv = httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(sc.srv.Close)
	return sc
}

type answer struct {
	Status     int
	RequestID  string  `json:"requestId"`
	Text       string  `json:"text"`
	Tier       string  `json:"tier"`
	Degraded   bool    `json:"degraded"`
	Confidence float64 `json:"confidence"`
	CostUSD    float64 `json:"costUsd"`
	TraceID    string  `json:"traceId"`
	Usage      struct {
		Input      int `json:"input"`
		Output     int `json:"output"`
		CacheRead  int `json:"cacheRead"`
		CacheWrite int `json:"cacheWrite"`
	} `json:"usage"`
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// chat sends message in user's own session ("s-" + user).
func (sc *scenario) chat(user, message, locale string) answer {
	sc.t.Helper()
	return sc.chatSession(user, "s-"+user, message, locale)
}

// chatSession sends message in user's session and reads the JSON answer.
func (sc *scenario) chatSession(user, session, message, locale string) answer {
	sc.t.Helper()
	body, _ := json.Marshal(map[string]any{"sessionId": session, "message": message, "locale": locale})
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		sc.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		sc.t.Fatalf("decode: %v", err)
	}
	a.Status = resp.StatusCode
	return a
}

// run sends n turns from n distinct users, conc at a time, and tallies tiers.
func (sc *scenario) run(n, conc int, message string) (tiers map[string]int, statuses map[int]int) {
	tiers, statuses = map[string]int{}, map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a := sc.chat(fmt.Sprintf("u%d-%d", time.Now().UnixNano()%1e6, i), message, "en")
			mu.Lock()
			tiers[a.Tier]++
			statuses[a.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return tiers, statuses
}

func (sc *scenario) attempts() int64 {
	var n int64
	for _, c := range sc.upstream {
		n += c.calls.Load()
	}
	return n
}

func TestScenarioPrimaryDown(t *testing.T) {
	sc := newScenario(t, quickConfig())
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	const n = 60
	tiers, statuses := sc.run(n, 6, "Which manga should I read next?")
	if statuses[200] != n {
		t.Fatalf("statuses %v: every turn must be a 200", statuses)
	}
	if tiers["haiku"] != n {
		t.Fatalf("tiers %v: with sonnet down every turn must be answered by haiku", tiers)
	}
	t.Logf("sonnet down: tiers %v, upstream attempts %d for %d turns (sonnet %d, haiku %d)",
		tiers, sc.attempts(), n, sc.upstream["sonnet"].calls.Load(), sc.upstream["haiku"].calls.Load())
	if got := sc.upstream["sonnet"].calls.Load(); got > n/2 {
		t.Fatalf("sonnet was called %d times for %d turns; its breaker should have stopped the calls", got, n)
	}
}

func TestScenarioBothModelsDown(t *testing.T) {
	sc := newScenario(t, quickConfig())
	// A question answered while the models were up is in the response cache.
	cached := "Which comedy manga is the funniest?"
	if a := sc.chat("warm", cached, "en"); a.Tier != "sonnet" {
		t.Fatalf("warm-up answered by %q", a.Tier)
	}
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	adminPut(t, sc.srv, "/admin/sim/haiku", `{"outage":true}`)

	tests := []struct {
		question string
		locale   string
		wantTier string
	}{
		{cached, "en", "cache"},
		{"How long does shipping take?", "en", "faq"},
		{"送料と配送日数を教えてください", "ja", "faq"},
		{"Tell me a joke about cats", "en", "graceful"},
	}
	for i, tt := range tests {
		a := sc.chat(fmt.Sprintf("down-%d", i), tt.question, tt.locale)
		if a.Status != 200 || a.Tier != tt.wantTier || !a.Degraded || a.Text == "" {
			t.Errorf("%q: status %d tier %q degraded %v text %q; want 200 from %s", tt.question, a.Status, a.Tier, a.Degraded, a.Text, tt.wantTier)
		}
	}
	// The fallback tiers answer in the message's language, as the models
	// do, whatever the locale field says.
	langs := []struct {
		question, locale string
		wantTier         string
		wantJA           bool
		wantIn           string
	}{
		{"支払いの方法を教えて", "en", "faq", true, "クレジットカード"},
		{"I want to cancel my order", "ja", "faq", false, "cancel an order"},
		{"猫の冗談を言って", "en", "graceful", true, ""},
		{"Tell me a joke about dogs", "ja", "graceful", false, ""},
	}
	for i, tt := range langs {
		a := sc.chat(fmt.Sprintf("lang-%d", i), tt.question, tt.locale)
		if a.Tier != tt.wantTier || hasJapanese(a.Text) != tt.wantJA || !strings.Contains(a.Text, tt.wantIn) {
			t.Errorf("%q (locale %s): tier %q text %q; want a %s answer in the message's language", tt.question, tt.locale, a.Tier, a.Text, tt.wantTier)
		}
	}
	// Many more turns: still no 5xx.
	_, statuses := sc.run(40, 8, "Tell me about new releases")
	for code, n := range statuses {
		if code >= 500 {
			t.Fatalf("%d turns got %d with both models down", n, code)
		}
	}
}

func TestScenarioPrimaryThrottling(t *testing.T) {
	sc := newScenario(t, quickConfig())
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"errorRate":{"throttled":0.5}}`)
	const n = 120
	tiers, statuses := sc.run(n, 6, "Recommend a fantasy manga")
	models := tiers["sonnet"] + tiers["haiku"]
	amp := float64(sc.attempts()) / n
	t.Logf("sonnet throttling 50%%: tiers %v, statuses %v, answered by a model %.1f%%, upstream attempts/turn %.2f (sonnet %d, haiku %d, sonnet throttles %d)",
		tiers, statuses, 100*float64(models)/n, amp, sc.upstream["sonnet"].calls.Load(), sc.upstream["haiku"].calls.Load(), sc.upstream["sonnet"].throttled.Load())
	if statuses[200] != n {
		t.Fatalf("statuses %v", statuses)
	}
	if float64(models) < 0.95*n {
		t.Fatalf("only %d of %d turns answered by a model", models, n)
	}
}

// TestScenarioThrottleStormCarriesThePrimarysShare is the game day's
// throttle storm on one instance: Sonnet answers a while, then throttles
// half of its calls whatever their rate. Sonnet goes on answering about
// half of the turns (pacing it would not make it throttle less), its
// throttled turns go to Haiku at once, and its retries stay few: the storm
// puts it at HIGH pressure, where a throttle is not retried.
func TestScenarioThrottleStormCarriesThePrimarysShare(t *testing.T) {
	sc := newScenario(t, quickConfig())
	if _, statuses := sc.run(60, 6, "Recommend a fantasy manga"); statuses[200] != 60 {
		t.Fatalf("before the storm: statuses %v", statuses)
	}
	before, sonnetBefore := sc.attempts(), sc.upstream["sonnet"].calls.Load()
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"errorRate":{"throttled":0.5}}`)
	const n = 300
	tiers, statuses := sc.run(n, 6, "Recommend a fantasy manga")
	if statuses[200] != n || tiers["sonnet"]+tiers["haiku"] < n*95/100 {
		t.Fatalf("in the storm: statuses %v, tiers %v", statuses, tiers)
	}
	amp := float64(sc.attempts()-before) / n
	sonnetCalls := sc.upstream["sonnet"].calls.Load() - sonnetBefore
	t.Logf("tiers %v, upstream attempts/turn %.3f, sonnet %d calls (%d throttled)", tiers, amp, sonnetCalls, sc.upstream["sonnet"].throttled.Load())
	if tiers["sonnet"] < n*40/100 {
		t.Errorf("sonnet answered %d of %d turns while accepting half of its calls, want ≥ 40%%", tiers["sonnet"], n)
	}
	if sonnetCalls > n*115/100 {
		t.Errorf("%d sonnet calls for %d turns: more than 15%% retries in a storm", sonnetCalls, n)
	}
}

func TestScenarioRecoveryIsProgressive(t *testing.T) {
	cfg := quickConfig()
	br := cfg.Breakers["sonnet"]
	br.OpenTimeout = 300 * time.Millisecond
	cfg.Breakers["sonnet"] = br
	// Adaptive pressure also shuts a failing model out; shorten its cooldown
	// to the breaker's so the test sees the breaker's recovery.
	cfg.Retry.Pressure.Cooldown = br.OpenTimeout
	sc := newScenario(t, cfg)
	ctx := context.Background()

	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	sc.run(10, 1, "Recommend a manga")
	// The breaker opened (and, with this short open timeout, may already be
	// half-open again).
	if snap, _ := sc.s.Breakers.Get("sonnet").Snapshot(ctx); snap.State.String() == "closed" {
		t.Fatalf("breaker still closed after an outage")
	}
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":false}`)
	time.Sleep(cfg.Breakers["sonnet"].OpenTimeout + 50*time.Millisecond)

	// Sequential turns: half-open admits the stages 1, 3, 10, then closes.
	var states []string
	sonnetAnswers := 0
	for i := 0; i < 30; i++ {
		a := sc.chat(fmt.Sprintf("rec-%d", i), "Recommend a manga", "en")
		if a.Tier == "sonnet" {
			sonnetAnswers++
		}
		snap, _ := sc.s.Breakers.Get("sonnet").Snapshot(ctx)
		states = append(states, fmt.Sprintf("%s/%d", snap.State, snap.Stage))
		if snap.State.String() == "closed" {
			break
		}
	}
	t.Logf("states after each turn: %v", states)
	if last := states[len(states)-1]; !strings.HasPrefix(last, "closed") {
		t.Fatalf("breaker never closed: %v", states)
	}
	if sonnetAnswers != 1+3+10 {
		t.Fatalf("closed after %d probe answers, want 14 (stages 1+3+10): %v", sonnetAnswers, states)
	}
	if !strings.HasPrefix(states[0], "half_open/1") {
		t.Fatalf("first probe should move half-open to stage 1: %v", states)
	}
}

type batchStatus struct {
	Status    string `json:"status"`
	Total     int    `json:"total"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	Results   []struct {
		Tier  string          `json:"tier"`
		Error json.RawMessage `json:"error"`
	} `json:"results"`
}

func (sc *scenario) batch(n int) string {
	sc.t.Helper()
	msgs := make([]map[string]string, n)
	for i := range msgs {
		msgs[i] = map[string]string{"message": fmt.Sprintf("Describe manga series number %d in one line", i), "locale": "en"}
	}
	body, _ := json.Marshal(map[string]any{"messages": msgs, "feature": "catalog_enrichment"})
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/batch", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "batch-driver")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		sc.t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		JobID string `json:"jobId"`
	}
	json.NewDecoder(resp.Body).Decode(&got)
	if resp.StatusCode != http.StatusAccepted || got.JobID == "" {
		sc.t.Fatalf("batch submit: %d %+v", resp.StatusCode, got)
	}
	return got.JobID
}

func (sc *scenario) batchStatus(id string) batchStatus {
	sc.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, sc.srv.URL+"/v1/batch/"+id, nil)
	req.Header.Set("X-User-Id", "batch-driver")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		sc.t.Fatal(err)
	}
	defer resp.Body.Close()
	var st batchStatus
	json.NewDecoder(resp.Body).Decode(&st)
	return st
}

func TestScenarioTPMCut(t *testing.T) {
	cfg := quickConfig()
	sc := newScenario(t, cfg)
	ctx := context.Background()

	// The provider cuts our Sonnet TPM: the simulator enforces the new
	// ceiling like Bedrock would, and the operator pushes it to the ledger.
	const cut = 8000
	adminPut(t, sc.srv, "/admin/sim/sonnet", fmt.Sprintf(`{"tpmCeiling":%d}`, cut))
	adminPut(t, sc.srv, "/admin/quota/sonnet", fmt.Sprintf(`{"tpm":%d,"rpm":1000}`, cut))

	job := sc.batch(20)
	tiers, statuses := sc.run(60, 6, "What should I read after Frieren?")
	if statuses[200] != 60 {
		t.Fatalf("P0 statuses %v: live chat must keep being answered", statuses)
	}
	if tiers["haiku"] == 0 || tiers["sonnet"] == 0 {
		t.Fatalf("tiers %v: P0 should use sonnet until it saturates, then downshift to haiku", tiers)
	}
	if n := sc.upstream["sonnet"].throttled.Load(); n != 0 {
		t.Fatalf("the simulator throttled sonnet %d times: reservations let the ceiling be crossed", n)
	}
	snap, _ := sc.s.Quota.Saturation(ctx, "sonnet")
	paused := sc.batchStatus(job)
	t.Logf("after the cut: P0 tiers %v; sonnet saturation %.2f; batch %d/%d done", tiers, snap.Saturation, paused.Completed, paused.Total)
	if paused.Completed == paused.Total {
		t.Fatalf("batch finished during the cut: P3 should pause at 70%% saturation")
	}
	// While saturated, the batch makes no progress.
	time.Sleep(300 * time.Millisecond)
	if still := sc.batchStatus(job); still.Completed != paused.Completed {
		t.Fatalf("batch progressed from %d to %d while sonnet was saturated", paused.Completed, still.Completed)
	}

	// The provider restores the ceiling: the batch resumes and completes.
	adminPut(t, sc.srv, "/admin/quota/sonnet", `{}`)
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"tpmCeiling":0}`)
	deadline := time.Now().Add(20 * time.Second)
	var st batchStatus
	for time.Now().Before(deadline) {
		if st = sc.batchStatus(job); st.Status == "done" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st.Status != "done" || st.Completed != st.Total || st.Failed != 0 {
		t.Fatalf("batch after restore: %+v", st)
	}
	if n := sc.upstream["sonnet"].throttled.Load(); n != 0 {
		t.Fatalf("sonnet throttled %d times", n)
	}
}

func TestScenarioRateLimitedUser(t *testing.T) {
	sc := newScenario(t, quickConfig())
	var (
		mu      sync.Mutex
		ok      int
		limited []*http.Response
		wg      sync.WaitGroup
	)
	for range 15 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat", strings.NewReader(`{"sessionId":"s","message":"hello","locale":"en"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-User-Id", "eager")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				limited = append(limited, resp)
			default:
				t.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	// The per-user burst is 10: 15 simultaneous turns admit 10 (one more if
	// a token refilled meanwhile) and refuse the rest.
	if ok < 10 || ok > 11 || len(limited) != 15-ok {
		t.Fatalf("%d admitted, %d limited; want 10 admitted, 5 limited", ok, len(limited))
	}
	for _, h := range []string{"Retry-After", "RateLimit", "RateLimit-Policy"} {
		if limited[0].Header.Get(h) == "" {
			t.Errorf("429 lacks %s header: %v", h, limited[0].Header)
		}
	}
	// Another user is unaffected.
	if a := sc.chat("patient", "hello", "en"); a.Status != 200 {
		t.Fatalf("another user got %d", a.Status)
	}
}
