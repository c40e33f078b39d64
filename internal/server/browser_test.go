package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/chromedp"

	"github.com/fmgate/fmgate/internal/browsertest"
	"github.com/fmgate/fmgate/internal/config"
)

const testAdminToken = "test-admin-token"

// fastConfig is the MangaAssist profile with a quicker simulator, so tests
// stream real answers in well under a second.
func fastConfig() config.Config {
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 40
		st.TokensPerSecond = 400
		cfg.Sim.Models[name] = st
	}
	// The catalog search is off here, so a slow search under -race on a
	// busy machine cannot degrade answers these tests check; its own tests
	// switch it on (withCatalog).
	cfg.Catalog.Enabled = false
	return cfg
}

func startServer(t *testing.T, cfg config.Config) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(context.Background(), isolate(t, cfg), Options{Catalog: sharedCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(srv.Close)
	return s, srv
}

func adminPut(t *testing.T, srv *httptest.Server, path, body string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT %s: status %d", path, resp.StatusCode)
	}
}

func hasJapanese(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return true
		}
	}
	return false
}

func TestChatPageInBrowser(t *testing.T) {
	cfg := fastConfig()
	cfg.Server.MaxMessageBytes = 200
	s, srv := startServer(t, cfg)
	// One turn first, so the page's first answer does not pay for loading
	// the simulator's tokenizer on a busy machine (a first-token timeout
	// would hand it to Haiku).
	warm, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(`{"sessionId":"warm","message":"hello","locale":"en"}`))
	warm.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(warm); err == nil {
		resp.Body.Close()
	}
	ctx := browsertest.New(t, 60*time.Second)

	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#conn[data-state="open"]`),
		chromedp.Click(`#locale-ja`),
	); err != nil {
		t.Fatalf("open page: %v", err)
	}

	ask := func(question string) (text, tier string, chunks string, degraded bool) {
		t.Helper()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll(".msg.bot").length`))
		if err != nil {
			t.Fatal(err)
		}
		bot := `document.querySelectorAll(".msg.bot")[` + strconv.Itoa(n) + `]`
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(`#message`, question),
			chromedp.Click(`#send`),
		); err != nil {
			t.Fatalf("ask %q: %v", question, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!(`+bot+` && `+bot+`.dataset.done)`)); err != nil {
			t.Fatalf("no answer to %q: %v", question, err)
		}
		text, _ = chromedp.Run(ctx, chromedp.Evaluate[string](bot+`.querySelector(".text").textContent`))
		tier, _ = chromedp.Run(ctx, chromedp.Evaluate[string](bot+`.dataset.tier || ""`))
		chunks, _ = chromedp.Run(ctx, chromedp.Evaluate[string](bot+`.dataset.chunks || "0"`))
		degraded, _ = chromedp.Run(ctx, chromedp.Evaluate[bool](`!!`+bot+`.querySelector(".degraded")`))
		return text, tier, chunks, degraded
	}

	// A Japanese question streams back a Japanese answer from the primary model.
	text, tier, chunks, degraded := ask("おすすめの少年漫画は？")
	if !hasJapanese(text) || len([]rune(text)) < 20 {
		t.Fatalf("answer %q is not a Japanese answer", text)
	}
	if tier != "sonnet" || degraded {
		t.Fatalf("tier %q degraded %v, want sonnet, not degraded", tier, degraded)
	}
	if chunks == "0" || chunks == "1" {
		t.Fatalf("answer rendered from %s chunk(s); want progressive chunks", chunks)
	}
	// The shopper sees the answer, not the model, tokens or cost behind it.
	shown, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("log").innerText`))
	for _, internal := range []string{"sonnet", "tok", "$", "回答元"} {
		if strings.Contains(shown, internal) {
			t.Fatalf("the chat page shows shoppers %q:\n%s", internal, shown)
		}
	}

	// Switch to English; with Sonnet down, Haiku answers and the page says degraded.
	adminPut(t, srv, "/admin/sim/sonnet", `{"outage":true}`)
	if err := chromedp.Do(ctx, chromedp.Click(`#locale-en`)); err != nil {
		t.Fatal(err)
	}
	placeholder, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("message").placeholder`))
	if !strings.HasPrefix(placeholder, "Ask anything") {
		t.Fatalf("placeholder after switching to English: %q", placeholder)
	}
	text, tier, _, degraded = ask("How long does shipping take?")
	if tier != "haiku" || !degraded || hasJapanese(text) {
		t.Fatalf("with sonnet down: tier %q degraded %v text %q", tier, degraded, text)
	}
	adminPut(t, srv, "/admin/sim/sonnet", `{"outage":false}`)

	// An error is shown, not swallowed.
	long := strings.Repeat("manga ", 50)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(`#message`, long),
		chromedp.Click(`#send`),
		chromedp.WaitVisible(`[data-testid="error"]`),
	); err != nil {
		t.Fatalf("error not shown: %v", err)
	}
	errText, _ := chromedp.Run(ctx, chromedp.TextContent(`[data-testid="error"]`))
	if !strings.Contains(errText, "200") {
		t.Fatalf("error text %q does not say the limit", errText)
	}

	// A dropped connection is noticed and re-established with backoff.
	s.Gateway.CloseConnections()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#conn[data-state="closed"]`)); err != nil {
		t.Fatalf("disconnect not shown: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#conn[data-state="open"]`)); err != nil {
		t.Fatalf("no reconnection: %v", err)
	}
	if _, tier, _, _ := ask("What manga do you recommend?"); tier != "sonnet" {
		t.Fatalf("after reconnecting: tier %q", tier)
	}

	// Operators open the page with ?debug=1 to see tier, tokens and cost.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/?debug=1"),
		chromedp.WaitVisible(`#conn[data-state="open"]`),
	); err != nil {
		t.Fatalf("open debug page: %v", err)
	}
	ask("What manga do you recommend?")
	stats, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll(".msg.bot .meta")].map(e => e.innerText).join("\n")`))
	if !strings.Contains(stats, "sonnet") || !strings.Contains(stats, " tok") || !strings.Contains(stats, "$0.0") {
		t.Fatalf("with ?debug=1 the answer's meta is %q; want tier, tokens and cost", stats)
	}
}

// TestChatPageShowsStatus: while the primary throttles, the chat page shows
// the gateway's status notice in the user's language, and removes it once
// the answer's text arrives.
func TestChatPageShowsStatus(t *testing.T) {
	_, srv := startServer(t, fastConfig())
	adminPut(t, srv, "/admin/sim/sonnet", `{"errorRate":{"throttled":1}}`)
	ctx := browsertest.New(t, 60*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#conn[data-state="open"]`),
		chromedp.Click(`#locale-ja`),
		chromedp.SendKeys(`#message`, "おすすめの漫画は？"),
		chromedp.Click(`#send`),
	); err != nil {
		t.Fatalf("ask: %v", err)
	}
	shown, err := chromedp.Run(ctx, chromedp.Poll[string](
		`(document.querySelector('.msg.bot [data-testid="status"]') || {}).textContent`))
	if err != nil {
		t.Fatalf("no status shown while the primary throttles: %v", err)
	}
	if !hasJapanese(shown) {
		t.Fatalf("status %q is not in Japanese", shown)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!document.querySelector('.msg.bot').dataset.done`)); err != nil {
		t.Fatalf("no answer: %v", err)
	}
	left, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('.msg.bot [data-testid="status"]')`))
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('.msg.bot .text').textContent`))
	if left || !hasJapanese(text) {
		t.Fatalf("after the answer: status still shown %v, text %q", left, text)
	}
}

// With auth.keys set, the bundled chat page asks its user for an API key
// (a browser cannot send Authorization on a WebSocket) and then answers,
// the key going as a subprotocol of the page's own connection.
func TestChatPageAsksForAnAPIKey(t *testing.T) {
	cfg := fastConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{"k-shop-テスト": {UserID: "shop-user", Tier: "standard"}}
	_, srv := startServer(t, cfg)
	ctx := browsertest.New(t, 60*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#conn[data-state="open"]`),
		chromedp.Click(`#locale-en`),
		chromedp.SendKeys(`#message`, "recommend a manga"),
		chromedp.Click(`#send`),
		chromedp.WaitVisible(`#keyform`),
	); err != nil {
		t.Fatalf("the page did not ask for a key: %v", err)
	}
	msg, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(".msg.bot .err").textContent`))
	if !strings.Contains(msg, "API key") {
		t.Fatalf("the refused message shows %q; want the page's own request for a key", msg)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(`#apikey`, "k-shop-テスト"),
		chromedp.Click(`#apikey-save`),
		chromedp.WaitVisible(`#conn[data-state="open"]`),
		chromedp.SendKeys(`#message`, "recommend a manga"),
		chromedp.Click(`#send`),
	); err != nil {
		t.Fatalf("entering the key: %v", err)
	}
	last := `document.querySelectorAll(".msg.bot")[1]`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!(`+last+` && `+last+`.dataset.done)`)); err != nil {
		t.Fatalf("no answer after the key was entered: %v", err)
	}
	done, _ := chromedp.Run(ctx, chromedp.Evaluate[string](last+`.dataset.done`))
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](last+`.querySelector(".text").textContent`))
	if done != "true" || text == "" {
		t.Fatalf("after the key: done=%q text=%q; want an answer", done, text)
	}
	hidden, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#keyform").hidden`))
	if !hidden {
		t.Fatal("the key form stayed open after an answer")
	}
}

// An empty conversation greets its user, in the page's language, with a
// few questions to start from; one click asks one of them.
func TestChatPageGreetsWithSuggestions(t *testing.T) {
	s, srv := startServer(t, fastConfig())
	ctx := browsertest.New(t, 60*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#conn[data-state="open"]`),
		chromedp.Click(`#locale-ja`),
		chromedp.WaitVisible(`#welcome .suggestion`),
	); err != nil {
		t.Fatalf("open page: %v", err)
	}
	greeting, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#welcome p").textContent`))
	n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#welcome .suggestion").length`))
	first, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#welcome .suggestion").textContent`))
	if !hasJapanese(greeting) || n < 2 || !hasJapanese(first) {
		t.Fatalf("greeting %q with %d suggestions (first %q); want a Japanese greeting and questions", greeting, n, first)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`#welcome .suggestion`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!!document.querySelector(".msg.bot[data-done='true']")`)); err != nil {
		t.Fatalf("the suggested question was not answered: %v", err)
	}
	asked, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector(".msg.user .text").textContent`))
	hidden, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#welcome").hidden`))
	if asked != first || !hidden {
		t.Fatalf("asked %q (want %q), welcome hidden %v", asked, first, hidden)
	}

	// The demo profile takes the page's word for who it is: this browser's
	// turns are its own user's, not every visitor's under one address.
	user, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`localStorage.getItem("user") || ""`))
	if !strings.HasPrefix(user, "web-") {
		t.Fatalf("the page named no user of its own: %q", user)
	}
	want, anon := s.hasher.Hash(user), s.hasher.Hash("anon:127.0.0.1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var rep struct {
			Rows []struct {
				Key string `json:"key"`
			} `json:"rows"`
		}
		_ = json.Unmarshal([]byte(adminGet(t, srv.URL+"/admin/cost?by=user&from=-1h")), &rep)
		var keys []string
		for _, r := range rep.Rows {
			keys = append(keys, r.Key)
		}
		if slices.Contains(keys, want) && !slices.Contains(keys, anon) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cost by user %v; want the page's own user %s (not the address's %s)", keys, want, anon)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
