package server

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/quota"
	"github.com/fmgate/fmgate/internal/ratelimit"
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

// rateLimit.ip bounds one address whoever its users say they are; behind
// a trusted proxy the address is X-Forwarded-For's, and from anyone else
// that header is ignored.
func TestPerAddressLimit(t *testing.T) {
	send := func(sc *scenario, user, xff string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat", strings.NewReader(`{"sessionId":"s-`+user+`","message":"Hello"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-Id", user)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cfg := quickConfig()
	cfg.RateLimit.IP = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 2, Per: time.Minute}}
	sc := newScenario(t, cfg)
	got := []int{send(sc, "a", ""), send(sc, "b", "198.51.100.1"), send(sc, "c", "198.51.100.2")}
	if got[0] != 200 || got[1] != 200 || got[2] != 429 {
		t.Fatalf("three users from one address, forging X-Forwarded-For: %v, want 200 200 429", got)
	}
	cfg.Server.TrustedProxies = []string{"127.0.0.1"}
	sc = newScenario(t, cfg)
	got = []int{send(sc, "a", "198.51.100.1"), send(sc, "b", "198.51.100.1"), send(sc, "c", "198.51.100.2"), send(sc, "d", "198.51.100.1")}
	if got[0] != 200 || got[1] != 200 || got[2] != 200 || got[3] != 429 {
		t.Fatalf("behind a trusted proxy: %v, want 200 200 200 429 (the third from another client)", got)
	}
}

// An API key's monthly quota (auth.keys.*.monthlyRequests) counts its
// turns on every door, whoever sends them.
func TestKeyMonthlyQuota(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{"sk-plan": {UserID: "team-a", MonthlyRequests: 2}, "sk-free": {UserID: "team-b"}}
	sc := newScenario(t, cfg)
	post := func(key, path, body string) (int, string) {
		t.Helper()
		return keyPost(t, sc.srv.URL, key, path, body)
	}
	const oai, anth = `{"model":"sonnet","messages":[{"role":"user","content":"Hi"}]}`, `{"model":"sonnet","max_tokens":100,"messages":[{"role":"user","content":"Hi"}]}`
	if s, b := post("sk-plan", "/v1/chat/completions", oai); s != 200 {
		t.Fatalf("first turn: %d %s", s, b)
	}
	if s, b := post("sk-plan", "/v1/messages", anth); s != 200 {
		t.Fatalf("second turn, another door: %d %s", s, b)
	}
	if s, b := post("sk-plan", "/v1/chat/completions", oai); s != 429 || !strings.Contains(b, "for the month") {
		t.Fatalf("third turn: %d %s, want 429 naming the monthly quota", s, b)
	}
	if s, b := post("sk-free", "/v1/chat/completions", oai); s != 200 {
		t.Fatalf("a key without a quota: %d %s", s, b)
	}
}
