package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/redistest"
)

// keyPost sends body to path with key as its bearer key.
func keyPost(t *testing.T, base, key, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// floodDoors are the ways a turn may come in, each as a client sends it:
// streamed and whole, on every door that runs chat turns.
var floodDoors = []struct{ name, path, body string }{
	{"chat", "/v1/chat", `{"sessionId":"%s","message":"Recommend a fantasy manga","locale":"en"}`},
	{"chat-sse", "/v1/chat", `{"sessionId":"%s","message":"Recommend a fantasy manga","locale":"en","stream":true}`},
	{"openai-stream", "/v1/chat/completions", `{"model":"sonnet","stream":true,"messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`},
	{"openai", "/v1/chat/completions", `{"model":"sonnet","messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`},
	{"responses-stream", "/v1/responses", `{"model":"sonnet","stream":true,"input":"Recommend a fantasy manga"}`},
	{"anthropic-stream", "/v1/messages", `{"model":"sonnet","max_tokens":300,"stream":true,"messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`},
	{"bedrock-stream", "/model/sonnet/converse-stream", `{"messages":[{"role":"user","content":[{"text":"Recommend a fantasy manga"}]}]}`},
	{"bedrock-invoke", "/model/sonnet/invoke", `{"anthropic_version":"bedrock-2023-05-31","max_tokens":300,"messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`},
	{"ws", "/ws", ""},
}

// refusedForBudget reports whether a door's answer is a refusal for a
// budget, before the answer or in its stream.
func refusedForBudget(body string) bool {
	return strings.Contains(body, "budget_exceeded") || strings.Contains(body, "budget for this month")
}

// floodKey sends waves of turns with one key, spread over the fleet's
// instances and over every door, streamed and whole, many at once, until a
// whole wave is refused, and returns how many were served and refused for
// the budget.
func floodKey(t *testing.T, fleet []*scenario, key string, wave int) (served, refused int) {
	t.Helper()
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatalf("after %d waves the key is still served: %d served", round, served)
		}
		s, r := floodWave(t, fleet, key, fmt.Sprintf("w%d", round), wave)
		served += s
		refused += r
		if s == 0 {
			return served, refused
		}
	}
}

func floodWave(t *testing.T, fleet []*scenario, key, name string, turns int) (served, refused int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range turns {
		sc := fleet[i%len(fleet)]
		d := floodDoors[(i/len(fleet))%len(floodDoors)]
		wg.Go(func() {
			var ok, budget bool
			var got string
			if d.name == "ws" {
				a := wsKeyTurn(t, sc.srv.URL, key, "Recommend a fantasy manga")
				ok, budget, got = a.Status == http.StatusOK, a.Error.Code == "budget_exceeded", a.Error.Code+" "+a.Error.Message
			} else {
				var status int
				body := d.body
				if strings.Contains(body, "%s") { // the gateway's own door: a session each
					body = fmt.Sprintf(body, "flood-"+name+"-"+strconv.Itoa(i))
				}
				status, got = keyPost(t, sc.srv.URL, key, d.path, body)
				budget = refusedForBudget(got)
				ok = status == http.StatusOK && !budget
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ok:
				served++
			case budget:
				refused++
			default:
				t.Errorf("turn %d on %s: %.300s", i, d.name, got)
			}
		})
	}
	wg.Wait()
	return served, refused
}

// billed is what the fleet's upstreams billed for their answers.
func billed(fleet []*scenario) float64 {
	var usd float64
	for _, sc := range fleet {
		for _, c := range sc.upstream {
			usd += c.billed()
		}
	}
	return usd
}

// keyBudgetConfig is a config whose only budget in the way is one key's
// month: the users' daily budget and the rate limits are off.
func keyBudgetConfig() config.Config {
	cfg := quickConfig()
	cfg.Budget.DailyCostUSD = 0
	cfg.RateLimit.User = ratelimit.UserRules{}
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{
		"sk-team-a": {UserID: "team-a-app", Tenant: "team-a", MonthlyCostUSD: 0.05},
		"sk-team-b": {UserID: "team-b-app", Tenant: "team-b"},
	}
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 300 // many turns in flight at once
		cfg.Sim.Models[name] = st
	}
	return cfg
}

// A key's monthly budget holds however its turns arrive: from three
// instances sharing Redis (and from one instance in memory), many streams
// and JSON turns at once, the key never spends more than its budget and
// one turn's estimate; another key is not held back by it; and once it is
// spent, every door refuses the key in its own vendor's words.
func TestKeyBudgetHoldsUnderAFlood(t *testing.T) {
	for _, fleetMode := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "fleet"}[fleetMode], func(t *testing.T) {
			cfg := keyBudgetConfig()
			n := 1
			if fleetMode {
				cfg.Fleet.Redis = redistest.Addr()
				cfg.Fleet.KeyPrefix = fleetConfig(t)
				n = 3
			}
			var fleet []*scenario
			for range n {
				fleet = append(fleet, newScenario(t, cfg))
			}
			served, refused := floodKey(t, fleet, "sk-team-a", 36)
			// What the models billed, whatever the gateway counted.
			spent := billed(fleet)
			m := cfg.Models[0]
			oneTurn := m.Price().Cost(provider.Usage{InputTokens: cfg.Budget.RequestInput, OutputTokens: cfg.Budget.RequestOutput})
			budgetUSD := cfg.Auth.Keys["sk-team-a"].MonthlyCostUSD
			t.Logf("%d served, %d refused; the models billed $%.5f against a $%.2f monthly key budget (one turn's estimate at most $%.5f)", served, refused, spent, budgetUSD, oneTurn)
			if served == 0 || refused == 0 {
				t.Fatalf("%d served, %d refused: the flood must both spend the budget and be stopped by it", served, refused)
			}
			if spent > budgetUSD+oneTurn {
				t.Fatalf("the models billed $%.5f against a $%.2f key budget: more than one turn ($%.5f) over", spent, budgetUSD, oneTurn)
			}
			// Every door charged the key what it spent.
			counted, err := fleet[0].s.enforcer.Spend(context.Background(), []budget.Account{{Scope: budget.ScopeKey, ID: stateHasher(cfg).Hash("sk-team-a")}})
			if err != nil {
				t.Fatal(err)
			}
			if d := counted[0].MonthUSD - spent; d > 1e-6 || d < -1e-6 {
				t.Fatalf("the key's budget counted $%.6f, the models billed $%.6f: some door's turns were not charged to the key", counted[0].MonthUSD, spent)
			}

			// Spent: each door refuses the key a turn whose estimate (up to
			// 1,024 tokens of answer) is over what is left, naming the
			// key's budget.
			base := fleet[len(fleet)-1].srv.URL
			for _, d := range []struct{ path, body, want string }{
				{"/v1/chat", `{"sessionId":"after","message":"Hi"}`, "budget_exceeded"},
				{"/v1/chat/completions", `{"model":"sonnet","messages":[{"role":"user","content":"Hi"}]}`, "API key's budget for this month"},
				{"/v1/messages", `{"model":"sonnet","max_tokens":1024,"messages":[{"role":"user","content":"Hi"}]}`, "API key's budget for this month"},
				{"/v1/responses", `{"model":"sonnet","input":"Hi"}`, "API key's budget for this month"},
				{"/model/sonnet/converse", `{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}`, "API key's budget for this month"},
				{"/model/sonnet/invoke-with-response-stream", `{"anthropic_version":"bedrock-2023-05-31","max_tokens":1024,"messages":[{"role":"user","content":"Hi"}]}`, "API key's budget for this month"},
			} {
				status, body := keyPost(t, base, "sk-team-a", d.path, d.body)
				if status == http.StatusOK || !strings.Contains(body, d.want) {
					t.Errorf("%s after the key's budget is spent: %d %s; want a refusal naming %q", d.path, status, body, d.want)
				}
			}
			if a := wsKeyTurn(t, base, "sk-team-a", "Hi"); a.Error.Code != "budget_exceeded" {
				t.Errorf("/ws after the key's budget is spent: %+v; want budget_exceeded", a)
			}
			if status, body := keyPost(t, base, "sk-team-b", "/v1/chat/completions", `{"model":"sonnet","messages":[{"role":"user","content":"Hi"}]}`); status != http.StatusOK {
				t.Fatalf("another key: %d %s; want it served", status, body)
			}
		})
	}
}

// A team's and a feature's budgets (budget.teams, budget.features) stop
// their turns and only theirs.
func TestTeamAndFeatureBudgets(t *testing.T) {
	cfg := quickConfig()
	cfg.Budget.DailyCostUSD = 0
	cfg.RateLimit.User = ratelimit.UserRules{}
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{
		"sk-a1": {UserID: "a1", Tenant: "acme"},
		"sk-a2": {UserID: "a2", Tenant: "acme"},
		"sk-z":  {UserID: "z", Tenant: "zeta"},
	}
	cfg.Budget.Teams = map[string]budget.Limits{"acme": {DailyCostUSD: 0.005}}
	cfg.Budget.Features = map[string]budget.Limits{"gift-finder": {MonthlyCostUSD: 0.05}}
	sc := newScenario(t, cfg)

	// acme's two keys share the team's day: once one has spent it, the
	// other is refused too, and zeta is not.
	spendUntilRefused := func(key, feature string) string {
		t.Helper()
		for i := range 100 {
			body := `{"model":"sonnet","messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`
			req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat/completions", bytes.NewReader([]byte(body)))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if feature != "" {
				req.Header.Set("X-Fmgate-Feature", feature)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusPaymentRequired {
				return string(b)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s turn %d: %d %s", key, i, resp.StatusCode, b)
			}
		}
		t.Fatalf("%s was never refused", key)
		return ""
	}
	if body := spendUntilRefused("sk-a1", ""); !strings.Contains(body, "team's budget for today") {
		t.Fatalf("refusal %s; want the team's daily budget named", body)
	}
	if status, body := keyPost(t, sc.srv.URL, "sk-a2", "/v1/chat", `{"sessionId":"a2","message":"Hi"}`); status != http.StatusPaymentRequired || !strings.Contains(body, "team_daily_cost") && !strings.Contains(body, "team's budget") {
		t.Fatalf("acme's other key: %d %s; want refused by the team's budget", status, body)
	}
	if status, body := keyPost(t, sc.srv.URL, "sk-z", "/v1/chat", `{"sessionId":"z","message":"Hi"}`); status != http.StatusOK {
		t.Fatalf("zeta: %d %s; want served", status, body)
	}
	if body := spendUntilRefused("sk-z", "gift-finder"); !strings.Contains(body, "feature's budget for this month") {
		t.Fatalf("refusal %s; want the feature's monthly budget named", body)
	}
	if status, body := keyPost(t, sc.srv.URL, "sk-z", "/v1/chat", `{"sessionId":"z2","message":"Hi"}`); status != http.StatusOK {
		t.Fatalf("zeta outside the feature: %d %s; want served", status, body)
	}
}

// A key's model list (auth.keys.*.models) refuses the tiers it does not
// name on every door, in the door's own words, and its turns cascade only
// through the tiers it names; the embedding tiers are in the same list,
// and the model lists show only what the key may use.
func TestKeyModelAllowList(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{
		"sk-haiku": {UserID: "cheap-app", Models: []string{"haiku"}},
		"sk-embed": {UserID: "search-app", Models: []string{"cohere-embed"}},
	}
	sc := newScenario(t, cfg)
	converse := `{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}`
	invoke := `{"anthropic_version":"bedrock-2023-05-31","max_tokens":100,"messages":[{"role":"user","content":"Hi"}]}`
	for _, d := range []struct{ path, body, want string }{
		{"/v1/chat/completions", `{"model":"sonnet","messages":[{"role":"user","content":"Hi"}]}`, `"type":"permission_error"`},
		{"/v1/chat/completions", `{"model":"sonnet","stream":true,"messages":[{"role":"user","content":"Hi"}]}`, `"type":"permission_error"`},
		{"/v1/responses", `{"model":"sonnet","input":"Hi"}`, `"type":"permission_error"`},
		{"/v1/responses", `{"model":"sonnet","input":"Hi","stream":true}`, `"type":"permission_error"`},
		{"/v1/messages", `{"model":"sonnet","max_tokens":100,"messages":[{"role":"user","content":"Hi"}]}`, `"type":"permission_error"`},
		{"/v1/messages", `{"model":"sonnet","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`, `"type":"permission_error"`},
		{"/model/sonnet/converse", converse, "may not use"},
		{"/model/sonnet/converse-stream", converse, "may not use"},
		{"/model/sonnet/invoke", invoke, "may not use"},
		{"/model/sonnet/invoke-with-response-stream", invoke, "may not use"},
		{"/v1/embeddings", `{"model":"titan-embed","input":"manga"}`, `"type":"permission_error"`},
	} {
		status, body := keyPost(t, sc.srv.URL, "sk-haiku", d.path, d.body)
		if status != http.StatusForbidden || !strings.Contains(body, d.want) || !strings.Contains(body, "may use haiku") {
			t.Errorf("%s %s with a haiku-only key: %d %s; want 403 %s naming what the key may use", d.path, d.body, status, body, d.want)
		}
		if d.path == "/v1/embeddings" {
			continue
		}
		allowed := strings.NewReplacer("/model/sonnet/", "/model/haiku/", `"sonnet"`, `"haiku"`).Replace(d.path + " " + d.body)
		path, body2, _ := strings.Cut(allowed, " ")
		if status, body := keyPost(t, sc.srv.URL, "sk-haiku", path, body2); status != http.StatusOK {
			t.Errorf("%s asking for haiku: %d %s", path, status, body)
		}
	}
	// The gateway's own door starts at the first tier: the key's turn
	// goes to haiku, and sonnet is never called for it.
	before := sc.upstream["sonnet"].calls.Load()
	status, body := keyPost(t, sc.srv.URL, "sk-haiku", "/v1/chat", `{"sessionId":"s","message":"Recommend a manga"}`)
	var a answer
	_ = json.Unmarshal([]byte(body), &a)
	if status != http.StatusOK || a.Tier != "haiku" {
		t.Fatalf("/v1/chat: %d %s; want answered by haiku", status, body)
	}
	if ws := wsKeyTurn(t, sc.srv.URL, "sk-haiku", "Recommend a manga"); ws.Tier != "haiku" {
		t.Fatalf("/ws: %+v; want answered by haiku", ws)
	}
	if n := sc.upstream["sonnet"].calls.Load(); n != before {
		t.Fatalf("sonnet called %d times for a haiku-only key", n-before)
	}
	// The model lists show what the key may use.
	for _, h := range []map[string]string{{"Authorization": "Bearer sk-haiku"}, {"x-api-key": "sk-haiku", "anthropic-version": "2023-06-01"}} {
		req, _ := http.NewRequest(http.MethodGet, sc.srv.URL+"/v1/models", nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"haiku"`) || strings.Contains(string(b), `"sonnet"`) {
			t.Errorf("GET /v1/models with %v: %d %s; want haiku listed and sonnet not", h, resp.StatusCode, b)
		}
	}
	// A key of an embedding tier embeds with it, falls to no other, and
	// has no chat model.
	if status, body := keyPost(t, sc.srv.URL, "sk-embed", "/v1/embeddings", `{"model":"cohere-embed","input":"manga"}`); status != http.StatusOK {
		t.Errorf("the embedding key on its tier: %d %s", status, body)
	}
	if status, body := keyPost(t, sc.srv.URL, "sk-embed", "/v1/embeddings", `{"model":"titan-embed","input":"manga"}`); status != http.StatusForbidden || !strings.Contains(body, "may use cohere-embed") {
		t.Errorf("the embedding key on another embedding tier: %d %s; want 403", status, body)
	}
	if status, body := keyPost(t, sc.srv.URL, "sk-embed", "/v1/chat", `{"sessionId":"e","message":"Hi"}`); status != http.StatusForbidden || !strings.Contains(body, "no chat model") {
		t.Errorf("the embedding key on /v1/chat: %d %s; want 403", status, body)
	}
	// The model list names tiers the config has.
	bad := cfg
	bad.Auth.Keys = map[string]config.Caller{"sk-x": {UserID: "x", Models: []string{"opus"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `unknown model tier "opus"`) || !strings.Contains(err.Error(), "titan-embed") {
		t.Fatalf("validate: %v; want the unknown tier named, and the embedding tiers among those it may be", err)
	}
}

// wsKeyTurn sends one turn over /ws with key as its bearer key and returns
// the done frame (or the error frame's code as Error.Code).
func wsKeyTurn(t *testing.T, base, key, message string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	return wsSend(ctx, t, c, message)
}

// wsSend sends one turn on an open WebSocket and reads to its last frame.
func wsSend(ctx context.Context, t *testing.T, c *websocket.Conn, message string) answer {
	t.Helper()
	id := fmt.Sprintf("r-%d", time.Now().UnixNano())
	frame, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": id, "sessionId": "ws-" + id, "message": message})
	if err := c.Write(ctx, websocket.MessageText, frame); err != nil {
		t.Fatal(err)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading /ws: %v", err)
		}
		var f struct {
			Type    string  `json:"type"`
			Tier    string  `json:"tier"`
			Code    string  `json:"code"`
			Message string  `json:"message"`
			CostUSD float64 `json:"costUsd"`
		}
		_ = json.Unmarshal(data, &f)
		switch f.Type {
		case "done":
			return answer{Status: http.StatusOK, Tier: f.Tier, CostUSD: f.CostUSD}
		case "error":
			var a answer
			a.Error.Code, a.Error.Message = f.Code, f.Message
			return a
		}
	}
}

// A batch job runs as the key that posted it: its items are held to the
// key's budget and model list like live turns, so a batch cannot spend
// past a key's budget or reach a tier the key may not use.
func TestBatchItemsAreHeldToTheirKey(t *testing.T) {
	cfg := keyBudgetConfig()
	cfg.Auth.Keys = map[string]config.Caller{"sk-batch": {UserID: "batch-app", MonthlyCostUSD: 0.004, Models: []string{"haiku"}}}
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 5
		cfg.Sim.Models[name] = st
	}
	sc := newScenario(t, cfg)
	msgs := make([]map[string]string, 40)
	for i := range msgs {
		msgs[i] = map[string]string{"message": fmt.Sprintf("Describe manga series number %d in one line", i), "locale": "en"}
	}
	body, _ := json.Marshal(map[string]any{"messages": msgs})
	status, got := keyPost(t, sc.srv.URL, "sk-batch", "/v1/batch", string(body))
	var job struct {
		JobID string `json:"jobId"`
	}
	if err := json.Unmarshal([]byte(got), &job); status != http.StatusAccepted || err != nil {
		t.Fatalf("POST /v1/batch: %d %s", status, got)
	}
	var st batchStatus
	waitFor(t, "the batch job done", func() (bool, string) {
		req, _ := http.NewRequest(http.MethodGet, sc.srv.URL+"/v1/batch/"+job.JobID, nil)
		req.Header.Set("Authorization", "Bearer sk-batch")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		st = batchStatus{}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		return st.Status == "done" || st.Status == "canceled", st.Status
	})
	refused, served := 0, 0
	for _, r := range st.Results {
		switch {
		case strings.Contains(string(r.Error), "budget_exceeded"):
			refused++
		case r.Tier == "haiku":
			served++
		case r.Tier != "":
			t.Fatalf("an item answered by %q for a haiku-only key", r.Tier)
		}
	}
	if n := sc.upstream["sonnet"].calls.Load(); n != 0 {
		t.Fatalf("sonnet called %d times for a haiku-only key's batch", n)
	}
	if served == 0 || refused == 0 {
		t.Fatalf("%d served, %d refused of %d items: the key's budget must both serve and stop the batch", served, refused, len(st.Results))
	}
	spend, err := sc.s.enforcer.Spend(context.Background(), []budget.Account{{Scope: budget.ScopeKey, ID: stateHasher(cfg).Hash("sk-batch")}})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := cfg.Model("haiku")
	oneTurn := m.Price().Cost(provider.Usage{InputTokens: cfg.Budget.RequestInput, OutputTokens: cfg.Budget.RequestOutput})
	if spend[0].MonthUSD <= 0 || spend[0].MonthUSD > 0.004+oneTurn {
		t.Fatalf("the key spent $%.5f of $0.004 (one turn at most $%.5f)", spend[0].MonthUSD, oneTurn)
	}
}

// A key's concurrency cap (auth.keys.*.concurrent) holds across a fleet:
// with its slots taken by turns in flight, more are refused with 429 on
// any instance, and a slot is free again once a turn ends.
func TestKeyConcurrencyCap(t *testing.T) {
	cfg := keyBudgetConfig()
	cfg.Auth.Keys = map[string]config.Caller{"sk-two": {UserID: "two-at-a-time", Concurrent: 2}}
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 800 // the first turns are still in flight when the rest arrive
		cfg.Sim.Models[name] = st
	}
	fleet := []*scenario{newScenario(t, cfg), newScenario(t, cfg)}
	var mu sync.Mutex
	statuses := map[int]int{}
	var refusal string
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			status, body := keyPost(t, fleet[i%2].srv.URL, "sk-two", "/v1/chat", fmt.Sprintf(`{"sessionId":"c-%d","message":"Hi"}`, i))
			mu.Lock()
			defer mu.Unlock()
			statuses[status]++
			if status == http.StatusTooManyRequests {
				refusal = body
			}
		})
	}
	wg.Wait()
	if statuses[http.StatusOK] != 2 || statuses[http.StatusTooManyRequests] != 4 || !strings.Contains(refusal, "2 requests in progress") {
		t.Fatalf("6 turns at once on a key capped at 2: %v (%s); want 2 served and 4 refused naming the cap", statuses, refusal)
	}
	for i, sc := range fleet {
		if status, body := keyPost(t, sc.srv.URL, "sk-two", "/v1/chat", `{"sessionId":"after","message":"Hi"}`); status != http.StatusOK {
			t.Fatalf("after the turns ended, instance %d: %d %s", i+1, status, body)
		}
	}
}
