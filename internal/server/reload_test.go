package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
)

// reloadable is the config file of the reload tests; write renders it.
type reloadable struct {
	path, dir     string
	redis, prefix string // fleet mode when redis is set
}

// limits are the fields the reload tests change.
type limits struct {
	perMinute     int     // rateLimit.user.perMinute.rate
	sonnetIn      float64 // models[0].inputPerMTok
	sonnetOut     float64 // models[0].outputPerMTok
	sonnetRPM     int     // quota.models.sonnet.rpm
	addr, extraYA string
}

func newReloadable(t *testing.T, fleet bool) *reloadable {
	t.Helper()
	dir := t.TempDir()
	r := &reloadable{path: filepath.Join(dir, "fmgate.yaml"), dir: dir}
	if fleet {
		r.redis, r.prefix = redistest.Addr(), fleetConfig(t)
	}
	return r
}

func (r *reloadable) write(t *testing.T, l limits) {
	t.Helper()
	if l.addr == "" {
		l.addr = "127.0.0.1:8080"
	}
	yml := fmt.Sprintf(`server: {addr: %q}
catalog: {enabled: false}
judge: {sampleRate: 0}
eventStore: {path: %q}
events:
  wal: {dir: %q}
  sinks: {jsonl: {path: %q}}
deadline: {firstByte: 20s}
auth:
  trustUserHeader: true
  keys:
    sk-queued-p1: {userId: queued-user, priority: P1}
rateLimit:
  user:
    perMinute: {rate: %d, per: 1m}
models:
  - {name: sonnet, provider: sim, modelId: anthropic.claude-3-sonnet-20240229-v1:0, inputPerMTok: %g, outputPerMTok: %g,
     contextWindow: 200000, maxOutputTokens: 1024, confidence: 1.0, promptCaching: "off"}
  - {name: haiku, provider: sim, modelId: anthropic.claude-3-haiku-20240307-v1:0, inputPerMTok: 0.25, outputPerMTok: 1.25,
     contextWindow: 200000, maxOutputTokens: 1024, confidence: 0.7, promptCaching: "off"}
quota:
  safetyMargin: 1
  models:
    sonnet: {tpm: 10000000, rpm: %d}
    haiku: {tpm: 10000000, rpm: 10000}
sim:
  models:
    sonnet: {ttftMs: 5, tokensPerSecond: 3000}
    haiku: {ttftMs: 5, tokensPerSecond: 3000}
fleet: {redis: %q, keyPrefix: %q}
%s`, l.addr, filepath.Join(r.dir, "events.db"), filepath.Join(r.dir, "wal"), r.spans(), l.perMinute,
		l.sonnetIn, l.sonnetOut, l.sonnetRPM, r.redis, r.prefix, l.extraYA)
	if err := os.WriteFile(r.path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *reloadable) spans() string { return filepath.Join(r.dir, "events.jsonl") }

// start loads the file and serves a gateway from it; its log goes to logs.
func (r *reloadable) start(t *testing.T, logs io.Writer, wrap func(string, provider.Provider) provider.Provider) (*Server, *httptest.Server) {
	t.Helper()
	cfg, err := config.Load(r.path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), cfg, Options{ConfigPath: r.path, Catalog: sharedCatalog(t), WrapProvider: wrap,
		Log: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(srv.Close)
	return s, srv
}

// holding pauses a stream whose question says HOLD after its first
// chunk, until release is closed: a turn in flight across a reload.
type holding struct {
	provider.Provider
	release chan struct{}
}

func (h *holding) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	hold := strings.Contains(req.Messages[len(req.Messages)-1].Content, "HOLD")
	return h.Provider.Stream(ctx, req, func(text string) error {
		if err := emit(text); err != nil {
			return err
		}
		if hold {
			hold = false
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
}

// reloadAnswer is POST /admin/reload's answer, either way.
type reloadAnswer struct {
	Status int
	ReloadResult
	Error struct {
		Code     string   `json:"code"`
		Message  string   `json:"message"`
		Problems []string `json:"problems"`
	} `json:"error"`
}

func postReload(t *testing.T, srv *httptest.Server) reloadAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/admin/reload", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a reloadAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	a.Status = resp.StatusCode
	return a
}

// chatAs posts one JSON /v1/chat with the given headers.
func chatAs(t *testing.T, srv *httptest.Server, header http.Header, session, message string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"sessionId": session, "message": message, "locale": "en"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(string(body)))
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("chat: %v", err)
		return answer{}
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Errorf("decode: %v", err)
	}
	a.Status = resp.StatusCode
	return a
}

func userHeader(user string) http.Header { return http.Header{"X-User-Id": {user}} }

// doneFrame is the end of a streamed answer.
type doneFrame struct {
	Type    string  `json:"type"`
	Tier    string  `json:"tier"`
	Code    string  `json:"code"`
	CostUSD float64 `json:"costUsd"`
	Tokens  struct {
		Input  int `json:"input"`
		Output int `json:"output"`
	} `json:"tokens"`
}

// streamHeld starts a streamed /v1/chat; started is closed at its first
// chunk, and its last frame comes on the returned channel.
func streamHeld(t *testing.T, srv *httptest.Server, user, message string, started chan<- struct{}) <-chan doneFrame {
	done := make(chan doneFrame, 1)
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		body := fmt.Sprintf(`{"sessionId":"s-%s","message":%q,"locale":"en","stream":true}`, user, message)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-Id", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("stream: %v", err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		first := true
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var f doneFrame
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				t.Errorf("frame %q: %v", data, err)
				return
			}
			if f.Type == "chunk" && first {
				first = false
				close(started)
			}
			if f.Type == "done" || f.Type == "error" {
				done <- f
				return
			}
		}
		t.Errorf("stream ended without done or error: %v", sc.Err())
	}()
	return done
}

// waitQueued waits until n turns wait in the quota queue.
func waitQueued(t *testing.T, srv *httptest.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var q struct {
			Queue struct {
				Depth int `json:"depth"`
			} `json:"queue"`
		}
		if err := json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/quota")), &q); err != nil {
			t.Fatal(err)
		}
		if q.Queue.Depth >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue depth %d, want %d", q.Queue.Depth, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// costOf is what in and out tokens cost at per-million prices.
func costOf(in, out int, inPerMTok, outPerMTok float64) float64 {
	return (float64(in)*inPerMTok + float64(out)*outPerMTok) / 1e6
}

func sameCost(got, want float64) bool { return math.Abs(got-want) < 1e-9 }

// A reload changes the rate limit, a price and a quota ceiling while a
// stream and a queued turn are in flight: both finish under the config
// they started with, the next turns get the new limit and the new price,
// and the buckets keep what they counted.
func TestReloadKeepsTurnsInFlightAndAppliesNewLimits(t *testing.T) {
	for _, mode := range []string{"memory", "fleet"} {
		t.Run(mode, func(t *testing.T) {
			f := newReloadable(t, mode == "fleet")
			before := limits{perMinute: 2, sonnetIn: 3, sonnetOut: 15, sonnetRPM: 1}
			f.write(t, before)
			h := &holding{release: make(chan struct{})}
			var logs syncBuffer
			s, srv := f.start(t, &logs, func(_ string, p provider.Provider) provider.Provider {
				return &holding{Provider: p, release: h.release}
			})
			if mode == "fleet" && s.Redis == nil {
				t.Fatal("fleet.redis set but the server built no Redis client")
			}

			// A stream takes sonnet's one request a minute and pauses
			// mid-answer; a P1 turn waits in the queue behind it.
			started := make(chan struct{})
			stream := streamHeld(t, srv, "streamer", "HOLD: recommend a manga", started)
			select {
			case <-started:
			case <-time.After(10 * time.Second):
				t.Fatal("the held stream sent no chunk")
			}
			queued := make(chan answer, 1)
			go func() {
				queued <- chatAs(t, srv, http.Header{"Authorization": {"Bearer sk-queued-p1"}}, "s-queued", "recommend a manga")
			}()
			waitQueued(t, srv, 1)

			// The old limit: two a minute.
			for i := range 2 {
				if a := chatAs(t, srv, userHeader("limited"), "s-limited", "recommend a manga"); a.Status != http.StatusOK {
					t.Fatalf("turn %d of 2 a minute: %d %+v", i+1, a.Status, a.Error)
				}
			}
			if a := chatAs(t, srv, userHeader("limited"), "s-limited", "recommend a manga"); a.Status != http.StatusTooManyRequests || a.Error.Code != "rate_limited" {
				t.Fatalf("third turn under 2 a minute: %d %+v, want 429 rate_limited", a.Status, a.Error)
			}

			after := limits{perMinute: 4, sonnetIn: 30, sonnetOut: 150, sonnetRPM: 1000}
			f.write(t, after)
			rel := postReload(t, srv)
			if rel.Status != http.StatusOK {
				t.Fatalf("reload: %d %+v", rel.Status, rel.Error)
			}
			for _, want := range []string{"rateLimit.user.perMinute.rate", "models[0].inputPerMTok", "models[0].outputPerMTok", "quota.models.sonnet.rpm"} {
				if !slices.Contains(rel.Changed, want) {
					t.Errorf("reload changed %q, want %s among them", rel.Changed, want)
				}
			}
			if rel.PromptVersion == "" || rel.PromptChanged {
				t.Errorf("reload: prompt %q changed %v, want the same prompt named", rel.PromptVersion, rel.PromptChanged)
			}

			// The turns in flight finish unharmed, under the old price.
			close(h.release)
			var d doneFrame
			select {
			case d = <-stream:
			case <-time.After(20 * time.Second):
				t.Fatal("the held stream did not finish after the reload")
			}
			if d.Type != "done" || d.Tier != "sonnet" || d.Tokens.Output == 0 {
				t.Fatalf("the stream in flight ended with %+v, want done from sonnet", d)
			}
			if want := costOf(d.Tokens.Input, d.Tokens.Output, before.sonnetIn, before.sonnetOut); !sameCost(d.CostUSD, want) {
				t.Errorf("the stream in flight cost %v, want %v at the price it started with", d.CostUSD, want)
			}
			var q answer
			select {
			case q = <-queued:
			case <-time.After(20 * time.Second):
				t.Fatal("the queued turn did not finish after the reload")
			}
			if q.Status != http.StatusOK || q.Tier != "sonnet" || q.Degraded {
				t.Fatalf("the queued turn: %d tier %s degraded %v %+v, want sonnet's answer", q.Status, q.Tier, q.Degraded, q.Error)
			}
			if want := costOf(q.Usage.Input, q.Usage.Output, before.sonnetIn, before.sonnetOut); !sameCost(q.CostUSD, want) {
				t.Errorf("the queued turn cost %v, want %v at the price it started with", q.CostUSD, want)
			}

			// The buckets kept their state: the user who spent the minute
			// under the old limit is not handed a fresh one.
			if a := chatAs(t, srv, userHeader("limited"), "s-limited", "recommend a manga"); a.Status != http.StatusTooManyRequests {
				t.Fatalf("the limited user right after the reload: %d, want still 429", a.Status)
			}
			// The new limit: four a minute, at the new price.
			for i := range 4 {
				a := chatAs(t, srv, userHeader("fresh"), "s-fresh", "recommend a manga")
				if a.Status != http.StatusOK {
					t.Fatalf("turn %d of 4 a minute: %d %+v", i+1, a.Status, a.Error)
				}
				if a.Tier != "sonnet" {
					t.Fatalf("turn %d after the reload answered by %s, want sonnet under its new ceiling", i+1, a.Tier)
				}
				if want := costOf(a.Usage.Input, a.Usage.Output, after.sonnetIn, after.sonnetOut); !sameCost(a.CostUSD, want) {
					t.Errorf("a turn after the reload cost %v, want %v at the new price", a.CostUSD, want)
				}
			}
			if a := chatAs(t, srv, userHeader("fresh"), "s-fresh", "recommend a manga"); a.Status != http.StatusTooManyRequests {
				t.Fatalf("fifth turn under 4 a minute: %d, want 429", a.Status)
			}
			if !strings.Contains(logs.String(), `"msg":"config reloaded"`) {
				t.Errorf("no reload in the log:\n%s", logs.String())
			}
		})
	}
}

// alertNames lists the alerts of GET /admin/alerts by state.
func alertNames(t *testing.T, srv *httptest.Server) (firing, recent []string) {
	t.Helper()
	var l alerts.List
	if err := json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/alerts")), &l); err != nil {
		t.Fatal(err)
	}
	for _, a := range l.Firing {
		firing = append(firing, a.Name)
	}
	for _, a := range l.Recent {
		recent = append(recent, a.Name)
	}
	return firing, recent
}

// A file that does not validate, or that changes what needs a restart, is
// refused whole: the old limit stays, and the response, the log, the
// alerts and the spans say why; the next good reload clears the alert.
func TestRefusedReloadKeepsTheConfigInForce(t *testing.T) {
	f := newReloadable(t, false)
	good := limits{perMinute: 2, sonnetIn: 3, sonnetOut: 15, sonnetRPM: 1000}
	f.write(t, good)
	var logs syncBuffer
	s, srv := f.start(t, &logs, nil)

	oldLimitHolds := func(user string) {
		t.Helper()
		for i := range 2 {
			if a := chatAs(t, srv, userHeader(user), "s-"+user, "recommend a manga"); a.Status != http.StatusOK {
				t.Fatalf("turn %d of 2 a minute: %d %+v", i+1, a.Status, a.Error)
			}
		}
		if a := chatAs(t, srv, userHeader(user), "s-"+user, "recommend a manga"); a.Status != http.StatusTooManyRequests {
			t.Fatalf("third turn: %d, want 429 under the limit in force", a.Status)
		}
	}

	bad := good
	bad.perMinute = -1
	bad.extraYA = "budget: {dailyCostUsd: -3}\n"
	f.write(t, bad)
	rel := postReload(t, srv)
	if rel.Status != http.StatusUnprocessableEntity || rel.Error.Code != "invalid_config" {
		t.Fatalf("invalid file: %d %+v, want 422 invalid_config", rel.Status, rel.Error)
	}
	for _, field := range []string{"rateLimit.user.perMinute", "budget.dailyCostUsd"} {
		if !slices.ContainsFunc(rel.Error.Problems, func(p string) bool { return strings.HasPrefix(p, field) }) {
			t.Errorf("problems %q name no %s", rel.Error.Problems, field)
		}
	}
	if !strings.Contains(rel.Error.Message, "config in force is unchanged") {
		t.Errorf("message %q does not say the config in force stays", rel.Error.Message)
	}
	if !strings.Contains(logs.String(), "config reload refused") || !strings.Contains(logs.String(), "budget.dailyCostUsd") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
	if firing, _ := alertNames(t, srv); !slices.Contains(firing, "FmgateConfigReloadFailed") {
		t.Errorf("alerts firing %q, want FmgateConfigReloadFailed", firing)
	}
	oldLimitHolds("a")

	restart := good
	restart.perMinute = 5
	restart.addr = "127.0.0.1:9999"
	f.write(t, restart)
	rel = postReload(t, srv)
	if rel.Status != http.StatusUnprocessableEntity || rel.Error.Code != "needs_restart" ||
		!slices.Contains(rel.Error.Problems, "server.addr: needs a restart") {
		t.Fatalf("a new listen address: %d %+v, want 422 needs_restart naming server.addr", rel.Status, rel.Error)
	}
	oldLimitHolds("b")

	configHash := func() string {
		t.Helper()
		var v struct {
			Graph struct {
				ConfigHash string `json:"configHash"`
			} `json:"graph"`
		}
		if err := json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/versions")), &v); err != nil {
			t.Fatal(err)
		}
		return v.Graph.ConfigHash
	}
	hashBefore := configHash()
	good.perMinute = 5
	f.write(t, good)
	if rel = postReload(t, srv); rel.Status != http.StatusOK || !slices.Equal(rel.Changed, []string{"rateLimit.user.perMinute.rate"}) {
		t.Fatalf("good file: %d changed %q %+v", rel.Status, rel.Changed, rel.Error)
	}
	if h := configHash(); h == hashBefore || h == "" {
		t.Errorf("config hash %q after the reload, was %q: want the new config's", h, hashBefore)
	}
	firing, recent := alertNames(t, srv)
	if slices.Contains(firing, "FmgateConfigReloadFailed") || !slices.Contains(recent, "FmgateConfigReloadFailed") {
		t.Errorf("after a good reload: firing %q recent %q, want the reload alert resolved", firing, recent)
	}
	for i := range 3 {
		if a := chatAs(t, srv, userHeader("c"), "s-c", "recommend a manga"); a.Status != http.StatusOK {
			t.Fatalf("turn %d under 5 a minute: %d", i+1, a.Status)
		}
	}

	s.Close() // the spans are written
	var codes []string
	for _, e := range readSpans(t, f.spans()) {
		if e.Name == "config_reload" {
			codes = append(codes, string(e.Outcome.Status)+"/"+e.Outcome.ErrorCode)
		}
	}
	if want := []string{"failed/invalid_config", "failed/needs_restart", "ok/reloaded"}; !slices.Equal(codes, want) {
		t.Errorf("config_reload spans %q, want %q", codes, want)
	}
}

// Reloads take turns, and one started without a file says so.
func TestReloadWithoutAFile(t *testing.T) {
	sc := newScenario(t, quickConfig())
	rel := postReload(t, sc.srv)
	if rel.Status != http.StatusBadRequest || rel.Error.Code != "no_config_file" {
		t.Fatalf("reload without -config: %d %+v", rel.Status, rel.Error)
	}
	if firing, _ := alertNames(t, sc.srv); slices.Contains(firing, "FmgateConfigReloadFailed") {
		t.Error("a reload with no file to read raised the reload alert")
	}
}

// TestReloadChangesAGuardrailsProfile: a reload applies a profile's new
// checks to the next turn of a key held to it, and refuses a config that
// removes a profile a run-time key still names, keeping the one in force.
func TestReloadChangesAGuardrailsProfile(t *testing.T) {
	f := newReloadable(t, false)
	base := limits{perMinute: 100, sonnetIn: 3, sonnetOut: 15, sonnetRPM: 1000}
	withProfile := func(checks string) limits {
		l := base
		l.extraYA = "guardrails:\n  profiles:\n    storefront: " + checks + "\n"
		return l
	}
	f.write(t, withProfile("{email: redact}"))
	var mu sync.Mutex
	var last []provider.Message
	_, srv := f.start(t, io.Discard, func(_ string, p provider.Provider) provider.Provider {
		return seeing{Provider: p, mu: &mu, last: &last}
	})
	k := createKey(t, srv.URL, `{"name":"shop","userId":"shop","guardrails":"storefront"}`)
	seen := func(message string) string {
		t.Helper()
		if a := shopTurn(t, srv.URL, k.Secret, "shop", message); a.Status != http.StatusOK {
			t.Fatalf("turn: %+v", a)
		}
		mu.Lock()
		defer mu.Unlock()
		return last[len(last)-1].Content
	}
	const msg = "Mail taro@example.com or call 090-1234-5678"
	if got := seen(msg); !strings.Contains(got, "[EMAIL]") || !strings.Contains(got, "090-1234-5678") {
		t.Fatalf("before the reload the model saw %q; want the e-mail redacted only", got)
	}
	f.write(t, withProfile("{email: redact, phone: redact}"))
	if a := postReload(t, srv); a.Status != http.StatusOK || !slices.Contains(a.Changed, "guardrails.profiles.storefront.phone") {
		t.Fatalf("reload adding a check to the profile: %+v", a)
	}
	if got := seen(msg); !strings.Contains(got, "[PHONE]") {
		t.Fatalf("after the reload the model saw %q; want the phone number redacted too", got)
	}
	f.write(t, base)
	a := postReload(t, srv)
	if a.Status != http.StatusUnprocessableEntity || a.Error.Code != codeInvalidConfig ||
		!strings.Contains(strings.Join(a.Error.Problems, " "), k.Key.ID) {
		t.Fatalf("reload removing the key's profile: %+v; want 422 naming the key", a)
	}
	if got := seen(msg); !strings.Contains(got, "[PHONE]") {
		t.Fatalf("after the refused reload the model saw %q; the profile in force should stay", got)
	}
}
