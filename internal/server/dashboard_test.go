package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fmgate/fmgate/internal/browsertest"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// dashboardScenario is a gateway with the event store that has served a
// scripted mix of turns: normal answers, a primary-model outage (Haiku,
// cache and FAQ answer), and a TPM cut on the primary.
type dashboardScenario struct {
	*scenario
	turns  int      // turns answered (each leaves one turn span)
	traces []string // their trace ids
}

func newDashboardScenario(t *testing.T) *dashboardScenario {
	t.Helper()
	cfg := quickConfig()
	cfg.EventStore.Path = filepath.Join(t.TempDir(), "events.db")
	cfg.Alerts.Interval = 200 * time.Millisecond // the alerts panel shows the outage the scenario causes
	// Every trace kept whole: the waterfall drawn is checked against all of
	// a turn's spans, which the store keeps only for sampled turns.
	cfg.Events.Sampling.Rate = 1
	ds := &dashboardScenario{scenario: newScenario(t, cfg)}
	// The scenario's prompts are shorter than a vendor's shortest cached
	// prefix: Sonnet caches prefixes of any length, so that the cost view
	// has prompt cache figures to show; Haiku keeps its minimum, and none.
	adminPut(t, ds.srv, "/admin/sim/sonnet", `{"cacheMinTokens":0}`)

	var mu sync.Mutex
	ask := func(user, message, locale string) {
		a := ds.chat(user, message, locale)
		if a.Status != http.StatusOK || a.TraceID == "" {
			t.Fatalf("turn for %s: status %d %+v", user, a.Status, a.Error)
		}
		mu.Lock()
		ds.turns++
		ds.traces = append(ds.traces, a.TraceID)
		mu.Unlock()
	}
	// Normal answers from eight users in two locales; the first question is
	// asked again during the outage and served from the response cache.
	cached := "What is a good manga for someone who likes cooking?"
	ask("dash-u0", cached, "en")
	parallel(16, 4, func(i int) {
		locale, msg := "en", fmt.Sprintf("Recommend a fantasy manga like series %d", i)
		if i%3 == 0 {
			locale, msg = "ja", fmt.Sprintf("おすすめの少年漫画を教えてください（%d）", i)
		}
		ask(fmt.Sprintf("dash-u%d", i%8), msg, locale)
	})

	// The primary is down: Haiku answers; with Haiku down too, the cache
	// and the FAQ do.
	adminPut(t, ds.srv, "/admin/sim/sonnet", `{"outage":true}`)
	parallel(8, 4, func(i int) {
		ask(fmt.Sprintf("dash-o%d", i%4), fmt.Sprintf("Which manga should I read next, take %d?", i), "en")
	})
	adminPut(t, ds.srv, "/admin/sim/haiku", `{"outage":true}`)
	ask("dash-c0", cached, "en")
	ask("dash-c1", "How long does shipping take?", "en")
	adminPut(t, ds.srv, "/admin/sim/haiku", `{"outage":false}`)
	adminPut(t, ds.srv, "/admin/sim/sonnet", `{"outage":false}`)

	// The provider cuts Sonnet's TPM: live chat downshifts to Haiku.
	adminPut(t, ds.srv, "/admin/sim/sonnet", `{"tpmCeiling":8000}`)
	adminPut(t, ds.srv, "/admin/quota/sonnet", `{"tpm":8000,"rpm":1000}`)
	parallel(16, 4, func(i int) {
		ask(fmt.Sprintf("dash-q%d", i%8), "What should I read after Frieren?", "en")
	})
	adminPut(t, ds.srv, "/admin/quota/sonnet", `{}`)
	adminPut(t, ds.srv, "/admin/sim/sonnet", `{"tpmCeiling":0}`)

	// The emitter writes in batches: wait until the store has every turn.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var rep struct {
			Total struct {
				Turns int `json:"turns"`
			} `json:"total"`
		}
		ds.getJSON("/admin/cost?by=total", &rep)
		if rep.Total.Turns == ds.turns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("event store has %d turns, %d were answered", rep.Total.Turns, ds.turns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ds
}

// parallel runs f(0..n-1), conc at a time.
func parallel(n, conc int, f func(i int)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// getJSON reads an admin endpoint with the bearer token into v.
func (sc *scenario) getJSON(path string, v any) {
	sc.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, sc.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		sc.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		sc.t.Fatalf("GET %s: status %d %s", path, resp.StatusCode, e.Error.Message)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		sc.t.Fatalf("GET %s: %v", path, err)
	}
}

// page drives the dashboard in one browser tab.
type page struct {
	t   *testing.T
	ctx context.Context
}

func (p page) eval(expr string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

func (p page) num(expr string) float64 {
	p.t.Helper()
	s := p.eval(expr)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		p.t.Fatalf("%s = %q, not a number", expr, s)
	}
	return f
}

// wait polls a JavaScript condition; on timeout it fails with what the page
// shows in its banner and error boxes.
func (p page) wait(what, cond string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond)); err != nil {
		shown, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](
			`[document.getElementById("banner").textContent, ...[...document.querySelectorAll(".error")].map(e => e.textContent)].filter(Boolean).join(" | ")`))
		p.t.Fatalf("%s: %v (page shows: %q)", what, err, shown)
	}
}

// open shows a view (by its hash route) and waits for it to finish loading.
func (p page) open(hash string) {
	p.t.Helper()
	p.eval(`document.getElementById("view").dataset.state = "stale"; location.hash = ` + strconv.Quote(hash) + `; ""`)
	p.wait("open "+hash, `document.getElementById("view").dataset.state === "ready"`)
	p.t.Logf("%s loaded in %s ms (measured by the page: first request to last answer rendered)", hash, p.eval(`document.getElementById("view").dataset.loadMs`))
}

func (p page) text(sel string) string {
	p.t.Helper()
	return strings.TrimSpace(p.eval(`(document.querySelector(` + strconv.Quote(sel) + `) || {textContent: "<missing>"}).textContent`))
}

// screenshot saves the page under docs/screenshots when FMGATE_SCREENSHOTS=1.
func (p page) screenshot(name string) {
	p.t.Helper()
	p.screenshotWith(name, false)
}

func (p page) screenshotWith(name string, tooltip bool) {
	p.t.Helper()
	if os.Getenv("FMGATE_SCREENSHOTS") != "1" {
		return
	}
	if !tooltip {
		p.eval(`document.getElementById("tooltip").hidden = true; ""`)
	}
	buf, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("saved %s", filepath.Join(dir, name))
}

func TestDashboardAuth(t *testing.T) {
	sc := newScenario(t, quickConfig())
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		name         string
		method, path string
		header       string
		wantStatus   int
		wantLocation string
	}{
		{name: "dashboard without login", method: http.MethodGet, path: "/dashboard/", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "a view's bundle without login", method: http.MethodGet, path: "/dashboard/app.js", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "login form", method: http.MethodGet, path: "/dashboard/login", wantStatus: http.StatusOK},
		{name: "live stream without token", method: http.MethodGet, path: "/admin/live", wantStatus: http.StatusUnauthorized},
		{name: "cost without token", method: http.MethodGet, path: "/admin/cost", wantStatus: http.StatusUnauthorized},
		{name: "dashboard with bearer", method: http.MethodGet, path: "/dashboard/", header: "Bearer " + testAdminToken, wantStatus: http.StatusOK},
		{name: "chat page is still served", method: http.MethodGet, path: "/", wantStatus: http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, sc.srv.URL+tt.path, nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Location") != tt.wantLocation {
				t.Fatalf("status %d Location %q, want %d %q", resp.StatusCode, resp.Header.Get("Location"), tt.wantStatus, tt.wantLocation)
			}
		})
	}

	// The cookie set by the login form opens the admin API too.
	form := url.Values{"token": {testAdminToken}}
	resp, err := noRedirect.PostForm(sc.srv.URL+"/dashboard/login", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "fmgate_admin" {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil {
		t.Fatalf("login: status %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	req, _ := http.NewRequest(http.MethodGet, sc.srv.URL+"/admin/cost?by=total", nil)
	req.AddCookie(cookie)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin API with the login cookie: status %d", resp.StatusCode)
	}
	if cookie.Value == testAdminToken || strings.Contains(cookie.Value, testAdminToken) {
		t.Fatalf("the login cookie carries the admin token: %q", cookie.Value)
	}
	adminStatus := func(c *http.Cookie) int {
		req, _ := http.NewRequest(http.MethodGet, sc.srv.URL+"/admin/breakers", nil)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The admin token itself is no cookie credential.
	if st := adminStatus(&http.Cookie{Name: "fmgate_admin", Value: testAdminToken}); st != http.StatusUnauthorized {
		t.Fatalf("admin API with the raw token as cookie: status %d, want 401", st)
	}
	// Logout revokes the session on the server, for the admin API too.
	req, _ = http.NewRequest(http.MethodPost, sc.srv.URL+"/dashboard/logout", nil)
	req.AddCookie(cookie)
	if resp, err = noRedirect.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := adminStatus(cookie); st != http.StatusUnauthorized {
		t.Fatalf("admin API with a logged-out session: status %d, want 401", st)
	}
}

func TestDashboardInBrowser(t *testing.T) {
	if _, err := os.Stat(browsertest.Path()); err != nil {
		t.Skipf("headless Chromium not installed at %s: %v", browsertest.Path(), err)
	}
	ds := newDashboardScenario(t)
	ctx := browsertest.New(t, 80*time.Second)
	p := page{t: t, ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1400, 1000)); err != nil {
		t.Fatal(err)
	}

	// Not signed in: the dashboard sends the browser to the login form.
	if err := chromedp.Do(ctx, chromedp.Navigate(ds.srv.URL+"/dashboard/")); err != nil {
		t.Fatal(err)
	}
	if loc := p.eval(`location.pathname`); loc != "/dashboard/login" {
		t.Fatalf("unauthenticated /dashboard/ shows %s, want the login page", loc)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(`#token`, "wrong-token"),
		chromedp.Click(`#signin`),
		chromedp.WaitVisible(`[data-testid="login-error"]`),
		chromedp.SendKeys(`#token`, testAdminToken),
		chromedp.Click(`#signin`),
		chromedp.WaitVisible(`#view`),
	); err != nil {
		t.Fatalf("log in: %v", err)
	}
	if loc := p.eval(`location.pathname`); loc != "/dashboard/" {
		t.Fatalf("after login the browser is at %s", loc)
	}
	p.wait("live indicator", `document.getElementById("live").dataset.state === "live"`)

	t.Run("live ops", func(t *testing.T) {
		p := page{t: t, ctx: ctx}
		p.open("#/ops")
		p.wait("live figures", `+document.querySelector('[data-testid="live-turns"] .tile-value').dataset.value > 0`)
		if fb := p.num(`document.querySelector('[data-testid="live-fallbacks"] .tile-value').dataset.value`); fb <= 0 {
			t.Fatalf("tier mix shows %v turns served by a fallback; the outage and the TPM cut made some", fb)
		}
		if row := p.eval(`[...document.querySelectorAll('[data-testid="tiers"] tbody tr')].map(r => r.cells[0].textContent).join(",")`); !strings.Contains(row, "sonnet") || strings.Contains(row, "anthropic.") {
			t.Errorf("tier mix rows %q: want the primary named sonnet, ids mapped to names", row)
		}
		badges := p.num(`String(document.querySelectorAll('[data-testid="tiers"] .badge').length)`)
		if badges == 0 {
			t.Fatalf("no tier is marked as a fallback in the tier mix: %s", p.text(`[data-testid="tier-mix"]`))
		}
		for _, id := range []string{"live-p50", "live-p95", "live-p99", "live-ttft"} {
			if v := p.text(`[data-testid="` + id + `"] .tile-value`); !strings.HasSuffix(v, " ms") {
				t.Errorf("%s shows %q, want milliseconds", id, v)
			}
		}
		if v := p.text(`[data-testid="live-error-rate"] .tile-value`); !strings.HasSuffix(v, "%") {
			t.Errorf("error rate shows %q, want a percentage", v)
		}
		p.wait("stored history", `document.querySelector('[data-testid="series"]').dataset.state === "ready"`)
		// Fallbacks count turns: at most the 26 turns asked while a model was
		// down or cut, however many spans each turn's fallback wrote.
		note := p.text(`[data-testid="series"] .panel-body .note`)
		var turns, failed, fallbacks int
		if _, err := fmt.Sscanf(strings.ReplaceAll(note, ",", ""), "%d turns %d failed spans %d turns served by a fallback tier", &turns, &failed, &fallbacks); err != nil {
			t.Fatalf("stored history note %q: %v", note, err)
		}
		if fallbacks == 0 || fallbacks > 26 {
			t.Errorf("stored history: %d fallback turns of %d turns; want between 1 and the 26 asked during the outages", fallbacks, turns)
		}
		// The alerts the rules raised are listed as GET /admin/alerts has them.
		p.wait("alerts panel", `document.querySelector('[data-testid="alerts"]').dataset.state === "ready"`)
		for try := 0; ; try++ {
			var al struct {
				Firing, Pending []struct{ Name string }
			}
			ds.getJSON("/admin/alerts", &al)
			shown := p.text(`[data-testid="alerts"]`)
			want := "Nothing firing"
			if rows := append(al.Firing, al.Pending...); len(rows) > 0 {
				want = rows[0].Name
			}
			if strings.Contains(shown, want) {
				break
			}
			if try == 3 {
				t.Fatalf("alerts panel shows %q; GET /admin/alerts has %+v", shown, al)
			}
			time.Sleep(2 * time.Second) // the panel refreshes every 5 s; an alert may just have changed
		}
		p.screenshot("dashboard-ops.png")

		// A later turn shows up without reloading the page.
		before := p.num(`document.querySelector('[data-testid="live-turns"] .tile-value').dataset.value`)
		p.eval(`window.__sameDocument = true; ""`)
		if a := ds.chat("dash-late", "Any new isekai this month?", "en"); a.Status != http.StatusOK {
			t.Fatalf("late turn: %d", a.Status)
		}
		ds.turns++
		p.wait("turn count to rise", fmt.Sprintf(`+document.querySelector('[data-testid="live-turns"] .tile-value').dataset.value > %v && window.__sameDocument === true`, before))

		// A dropped stream is shown and re-established.
		p.eval(`window.__liveStates = []; new MutationObserver(() => window.__liveStates.push(document.getElementById("live").dataset.state)).observe(document.getElementById("live"), {attributes: true}); ""`)
		ds.srv.CloseClientConnections()
		p.wait("disconnected indicator", `window.__liveStates.some(s => s !== "live")`)
		p.wait("reconnection", `document.getElementById("live").dataset.state === "live"`)
	})

	var clickedTrace string
	t.Run("cost", func(t *testing.T) {
		p := page{t: t, ctx: ctx}
		p.open("#/cost?range=1h")
		var total struct {
			Total struct {
				CostUSD float64 `json:"costUsd"`
				Turns   int     `json:"turns"`
			} `json:"total"`
		}
		ds.getJSON("/admin/cost?by=total&from=-1h", &total)
		if got, want := p.text(`[data-testid="cost-total"] .tile-value`), fmt.Sprintf("$%.4f", total.Total.CostUSD); got != want {
			t.Fatalf("total cost shows %s, the API says %s", got, want)
		}
		// Costs move by the minute: the view follows them at that pace.
		if st := p.text(`#status`); !strings.Contains(st, "refreshes every 1 min") {
			t.Fatalf("cost view status %q; want it refreshed every minute", st)
		}
		if got := p.text(`[data-testid="cost-turns"] .tile-value`); got != strconv.Itoa(total.Total.Turns) || total.Total.Turns != ds.turns {
			t.Fatalf("turns shows %s, the API says %d, %d were served", got, total.Total.Turns, ds.turns)
		}
		if got := p.text(`[data-testid="cost-per-turn"] .tile-value`); len(got) != len("$0.000000") || got[0] != '$' {
			t.Fatalf("cost per turn shows %q, want $ with 6 decimals", got)
		}
		for _, id := range []string{"by-tier", "by-locale", "by-model", "top-users", "anomalies", "rising"} {
			if st := p.eval(`document.querySelector('[data-testid="` + id + `"]').dataset.state`); st != "ready" {
				t.Errorf("panel %s is %s: %s", id, st, p.text(`[data-testid="`+id+`"]`))
			}
		}
		if n := p.num(`document.querySelector('[data-testid="by-locale-table"]').dataset.rows`); n != 2 {
			t.Errorf("per-locale table has %v rows, want en and ja", n)
		}
		if n := p.num(`document.querySelector('[data-testid="top-users-table"]').dataset.rows`); n < 8 {
			t.Errorf("top users lists %v users", n)
		}
		if s := p.text(`[data-testid="anomaly-stats"]`); !strings.Contains(s, "median $") {
			t.Errorf("anomaly statistics: %q", s)
		}
		// Over one hour the monthly ceiling is a fraction of a cent: nobody
		// is flagged, and the note says why, the scaling on hover.
		if n := p.num(`String(document.querySelectorAll('[data-testid="top-users-table"] .badge').length)`); n != 0 {
			t.Errorf("%v users flagged over a monthly ceiling pro-rated to one hour", n)
		}
		if tip := p.eval(`document.querySelector('[data-testid="ceiling-note"]').title`); !strings.Contains(tip, "per user per month ×") {
			t.Errorf("ceiling note's hover text %q does not explain the scaling", tip)
		}
		// The per-model table names the spans without a model, and its
		// share column is inside the panel.
		if rows := p.eval(`[...document.querySelectorAll('[data-testid="by-model-table"] tbody tr')].map(r => r.cells[0].textContent).join("|")`); strings.Contains(rows, "(none)") || !strings.Contains(rows, "non-model work") {
			t.Errorf("per-model rows %q: want the model-less spans named", rows)
		}
		for _, id := range []string{"by-model", "by-prompt"} {
			if out := p.eval(`(() => { const panel = document.querySelector('[data-testid="` + id + `"]').getBoundingClientRect(); return String([...document.querySelectorAll('[data-testid="` + id + `-table"] tr')].filter(r => r.lastElementChild.getBoundingClientRect().right > panel.right + 0.5).length); })()`); out != "0" {
				t.Errorf("%s rows of the %s table are cut off on the right", out, id)
			}
		}
		checkPromptCache(t, p, ds)

		// A version filter narrows the figures to the matching spans.
		var versions struct {
			Model []struct {
				Version string `json:"version"`
			} `json:"model"`
		}
		ds.getJSON("/admin/cost/versions?from=-1h", &versions)
		haiku := ""
		for _, m := range versions.Model {
			if strings.Contains(m.Version, "haiku") {
				haiku = m.Version
			}
		}
		if haiku == "" {
			t.Fatalf("no haiku in the versions seen: %+v", versions.Model)
		}
		setModel := func(v string) {
			p.wait("model filter options", fmt.Sprintf(`[...document.getElementById("f-model").options].some(o => o.value === %q)`, v))
			p.eval(fmt.Sprintf(`(() => { document.getElementById("view").dataset.state = "stale"; const s = document.getElementById("f-model"); s.value = %q; s.dispatchEvent(new Event("change")); return ""; })()`, v))
			p.wait("filtered view", `document.getElementById("view").dataset.state === "ready"`)
		}
		setModel(haiku)
		var filtered struct {
			Total struct {
				CostUSD float64 `json:"costUsd"`
			} `json:"total"`
		}
		ds.getJSON("/admin/cost?by=total&from=-1h&model="+url.QueryEscape(haiku), &filtered)
		if got, want := p.text(`[data-testid="cost-total"] .tile-value`), fmt.Sprintf("$%.4f", filtered.Total.CostUSD); got != want || filtered.Total.CostUSD >= total.Total.CostUSD {
			t.Fatalf("with model=%s the total shows %s, the API says %s (unfiltered $%.4f)", haiku, got, want, total.Total.CostUSD)
		}
		setModel("")

		// A custom range over the same hour shows the same total.
		p.eval(`document.getElementById("view").dataset.state = "stale"; document.querySelector('[data-range="custom"]').click(); ""`)
		p.wait("custom range", `location.hash.includes("range=custom") && !document.getElementById("custom").hidden && document.getElementById("view").dataset.state === "ready"`)
		if got, want := p.text(`[data-testid="cost-total"] .tile-value`), fmt.Sprintf("$%.4f", total.Total.CostUSD); got != want {
			t.Fatalf("custom range total %s, want %s", got, want)
		}

		// Drill down: feature → its users → a user's turns → a turn's spans.
		p.eval(`document.querySelector('[data-testid="drill-features"] tbody tr').click(); ""`)
		p.wait("a feature's users", `document.querySelector('[data-testid="drill"]').dataset.level === "feature" && document.getElementById("view").dataset.state === "ready"`)
		p.eval(`document.querySelector('[data-testid="drill-users"] tbody tr').click(); ""`)
		p.wait("a user's turns", `document.querySelector('[data-testid="drill"]').dataset.level === "user" && document.getElementById("view").dataset.state === "ready"`)
		clickedTrace = p.eval(`document.querySelector('[data-testid="drill-turns"] tbody tr td:nth-child(2)').title`)
		p.eval(`document.querySelector('[data-testid="drill-turns"] tbody tr').click(); ""`)
		p.wait("the turn's waterfall", `document.querySelector('[data-testid="drill"]').dataset.level === "turn" && !!document.querySelector('[data-testid="waterfall"]')`)
		var trace struct {
			Spans []struct {
				SpanID string `json:"span_id"`
				Name   string `json:"name"`
			} `json:"spans"`
		}
		ds.getJSON("/admin/cost/trace/"+clickedTrace, &trace)
		rows := p.num(`String(document.querySelectorAll('[data-testid="waterfall"] [data-testid="span"]').length)`)
		if len(trace.Spans) < 4 || int(rows) != len(trace.Spans) {
			t.Fatalf("waterfall of %s draws %v spans, the trace has %d", clickedTrace, rows, len(trace.Spans))
		}
		if root := p.eval(`document.querySelector('[data-testid="span"]').dataset.name`); root != "turn" {
			t.Errorf("first waterfall row is %q, want the turn span", root)
		}
		// Hovering a model attempt shows its model, tokens, cost and versions.
		p.eval(`document.querySelector('[data-testid="span"][data-name="model_attempt"]').dispatchEvent(new MouseEvent("mouseenter", {clientX: 600, clientY: 400})); ""`)
		tip := p.text(`#tooltip`)
		for _, want := range []string{"model:", "tokens:", "cost: $", "prompt:", "graph:"} {
			if !strings.Contains(tip, want) {
				t.Errorf("span tooltip %q lacks %q", tip, want)
			}
		}
		// Breadcrumbs lead back up.
		p.eval(`document.querySelector('[data-testid="crumbs"] a[data-level="0"]').click(); ""`)
		p.wait("back to all features", `document.querySelector('[data-testid="drill"]').dataset.level === "all" && document.getElementById("view").dataset.state === "ready"`)

		// A turn the outage sent to a fallback, opened by its address: the
		// failed attempt and the fallback show in the waterfall.
		var turns struct {
			Rows []struct {
				Key       string `json:"key"`
				Spans     int    `json:"spans"`
				Fallbacks int    `json:"fallbacks"`
				Turn      struct {
					UserIDHash string `json:"userIdHash"`
					Feature    string `json:"feature"`
				} `json:"turn"`
			} `json:"rows"`
		}
		ds.getJSON("/admin/cost?by=turn&from=-1h&limit=200", &turns)
		best := -1
		for i, r := range turns.Rows {
			if r.Fallbacks > 0 && (best < 0 || r.Spans > turns.Rows[best].Spans) {
				best = i
			}
		}
		if best < 0 {
			t.Fatal("no turn with a fallback in the store")
		}
		fb := turns.Rows[best]
		p.open("#/cost?range=1h&feature=" + url.QueryEscape(fb.Turn.Feature) + "&user=" + fb.Turn.UserIDHash + "&trace=" + fb.Key)
		if n := p.num(`document.querySelector('[data-testid="waterfall"]').dataset.spans`); int(n) != fb.Spans {
			t.Fatalf("waterfall of the fallback turn draws %v spans, the store counts %d", n, fb.Spans)
		}
		if p.num(`String(document.querySelectorAll('[data-testid="span"][data-status="failed"], [data-testid="span"][data-status="fallback"]').length)`) == 0 {
			t.Fatalf("the fallback turn's waterfall marks no failed or fallback span")
		}
		p.eval(`(() => { const all = document.querySelectorAll('[data-testid="span"][data-name="model_attempt"]'), r = all[all.length - 1];
			const b = r.getBoundingClientRect(); r.dispatchEvent(new MouseEvent("mouseenter", {clientX: b.left + 420, clientY: b.bottom})); return ""; })()`)
		p.screenshotWith("dashboard-cost.png", true)

		// An API error is shown in words where its figures would be.
		p.open("#/cost?range=custom&from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z")
		if msg := p.text(`[data-testid="cost-totals"] [data-testid="error"]`); !strings.Contains(msg, "from must be before to") || !strings.Contains(msg, "HTTP 400") {
			t.Fatalf("a refused query shows %q, want the server's message", msg)
		}
	})

	t.Run("quality", func(t *testing.T) {
		if clickedTrace == "" {
			t.Skip("needs the turn opened in the cost view")
		}
		p := page{t: t, ctx: ctx}
		p.open("#/quality?range=1h")
		if n := p.text(`[data-testid="eval-count"] .tile-value`); n != "0" {
			t.Fatalf("scored turns before any score: %s", n)
		}
		submit := func(id, score string) string {
			p.eval(`document.getElementById("eval-id").value = ` + strconv.Quote(id) + `; document.getElementById("eval-score").value = ` + strconv.Quote(score) +
				`; document.querySelector('[data-testid="eval-result"]').textContent = ""; document.getElementById("eval-submit").click(); ""`)
			p.wait("eval result", `/Recorded|HTTP|score:/.test(document.querySelector('[data-testid="eval-result"]').textContent)`)
			return p.text(`[data-testid="eval-result"]`)
		}
		if msg := submit("not-a-trace", "0.5"); !strings.Contains(msg, "traceId") || !strings.Contains(msg, "HTTP 400") {
			t.Fatalf("bad id: the form shows %q, want the server's message", msg)
		}
		if msg := submit(clickedTrace, "0.75"); !strings.Contains(msg, "Recorded") {
			t.Fatalf("good score: %q", msg)
		}
		p.wait("the score in the view", `document.querySelector('[data-testid="eval-count"] .tile-value').textContent === "1" && document.getElementById("view").dataset.state === "ready"`)
		if m := p.text(`[data-testid="eval-mean"] .tile-value`); m != "0.750" {
			t.Fatalf("mean score shows %s, want 0.750", m)
		}
		for _, by := range []string{"graph", "prompt", "model"} {
			if n := p.num(`document.querySelector('[data-testid="eval-` + by + `"]').dataset.rows`); n < 1 {
				t.Errorf("eval by %s has no row", by)
			}
		}
		p.screenshot("dashboard-quality.png")
	})

	t.Run("capacity", func(t *testing.T) {
		p := page{t: t, ctx: ctx}
		p.open("#/capacity?range=1h")
		var snap struct {
			Quota []struct {
				Model      string  `json:"model"`
				TPMCeiling float64 `json:"tpmCeiling"`
			} `json:"quota"`
		}
		ds.getJSON("/admin/live/snapshot", &snap)
		p.wait("capacity table", `!!document.querySelector('[data-testid="cap-table"]')`)
		if n := p.num(`document.querySelector('[data-testid="cap-table"]').dataset.rows`); int(n) < len(snap.Quota) || len(snap.Quota) == 0 {
			t.Fatalf("capacity table has %v rows for %d models", n, len(snap.Quota))
		}
		for _, q := range snap.Quota {
			cell := p.eval(fmt.Sprintf(`[...document.querySelectorAll('[data-testid="cap-table"] tbody tr')].find(r => r.cells[0].textContent === %q)?.cells[2].textContent || ""`, q.Model))
			if want := fmt.Sprintf("/ %s", commas(q.TPMCeiling)); !strings.HasSuffix(cell, want) {
				t.Errorf("%s: TPM cell %q, want the ceiling %s", q.Model, cell, want)
			}
		}
		p.wait("stored tokens", `document.querySelector('[data-testid="cap-series"]').dataset.state === "ready"`)
		p.screenshot("dashboard-capacity.png")
	})

	t.Run("canary", func(t *testing.T) {
		p := page{t: t, ctx: ctx}
		var v struct {
			Model []struct {
				Version string `json:"version"`
			} `json:"model"`
		}
		ds.getJSON("/admin/cost/versions?from=-1h", &v)
		var sonnet, haiku string
		for _, m := range v.Model {
			switch {
			case strings.Contains(m.Version, "sonnet"):
				sonnet = m.Version
			case strings.Contains(m.Version, "haiku"):
				haiku = m.Version
			}
		}
		if sonnet == "" || haiku == "" {
			t.Fatalf("versions %+v: want both models", v.Model)
		}
		p.open("#/canary?range=1h&dim=model&a=" + url.QueryEscape(sonnet) + "&b=" + url.QueryEscape(haiku))
		var cmp struct {
			A, B struct {
				Turns int `json:"turns"`
			}
			Verdict struct {
				Status   string   `json:"status"`
				Reasons  []string `json:"reasons"`
				MinTurns int      `json:"minTurns"`
				Checks   []struct {
					Name    string `json:"name"`
					OK      bool   `json:"ok"`
					Skipped string `json:"skipped"`
				} `json:"checks"`
			} `json:"verdict"`
		}
		ds.getJSON("/admin/cost/compare?dim=model&from=-1h&a="+url.QueryEscape(sonnet)+"&b="+url.QueryEscape(haiku), &cmp)
		a := p.text(`[data-testid="row-turns"] td[data-side="a"]`)
		b := p.text(`[data-testid="row-turns"] td[data-side="b"]`)
		if a != strconv.Itoa(cmp.A.Turns) || b != strconv.Itoa(cmp.B.Turns) || cmp.A.Turns == 0 || cmp.B.Turns == 0 {
			t.Fatalf("canary turns A %s B %s; the API says %d and %d", a, b, cmp.A.Turns, cmp.B.Turns)
		}
		// The page shows the gateway's verdict, reasons and thresholds; it
		// judges nothing by rules of its own.
		checkVerdict := func(what string, status string, reasons []string) {
			t.Helper()
			want := map[string]string{"pass": "ok", "fail": "bad", "not_comparable": "na"}[status]
			shown := p.text(`[data-testid="verdict"]`)
			level := p.eval(`document.querySelector('[data-testid="verdict"]').dataset.level || ""`)
			if got := p.eval(`document.querySelector('[data-testid="verdict"]').dataset.status || ""`); got != status || want == "" || level != want {
				t.Fatalf("%s: the page's verdict is %q (level %q, status %q); the gateway's is %s (level %q)", what, shown, level, got, status, want)
			}
			for _, r := range reasons {
				if !strings.Contains(shown, r) {
					t.Errorf("%s: verdict %q lacks the gateway's reason %q", what, shown, r)
				}
			}
		}
		checkVerdict("sonnet against haiku", cmp.Verdict.Status, cmp.Verdict.Reasons)
		if th := p.text(`[data-testid="thresholds"] [data-limit="minTurns"]`); !strings.HasSuffix(th, " "+commas(float64(cmp.Verdict.MinTurns))) || cmp.Verdict.MinTurns != 50 {
			t.Fatalf("thresholds show %q; the gateway needs %d turns a side", th, cmp.Verdict.MinTurns)
		}
		for _, c := range cmp.Verdict.Checks {
			badge := p.eval(fmt.Sprintf(`(document.querySelector('[data-check=%q] .badge') || {textContent: ""}).textContent`, c.Name))
			want := map[bool]string{true: "ok", false: "regressed"}[c.OK]
			if c.Skipped != "" {
				want = ""
			}
			if badge != want {
				t.Errorf("check %s: the page shows %q, the gateway says ok=%v skipped=%q", c.Name, badge, c.OK, c.Skipped)
			}
		}
		p.screenshot("dashboard-canary.png")

		// A version against itself is not comparable, and says so without
		// the green of a pass.
		p.open("#/canary?range=1h&dim=model&a=" + url.QueryEscape(sonnet) + "&b=" + url.QueryEscape(sonnet))
		ds.getJSON("/admin/cost/compare?dim=model&from=-1h&a="+url.QueryEscape(sonnet)+"&b="+url.QueryEscape(sonnet), &cmp)
		if cmp.Verdict.Status != "not_comparable" {
			t.Fatalf("the gateway's verdict on a version against itself is %s", cmp.Verdict.Status)
		}
		checkVerdict("same version", cmp.Verdict.Status, cmp.Verdict.Reasons)
	})
}

// A turn that was not sampled keeps its turn span and cost records whole
// and its other spans as tallies. The turns list counts all of them, and the
// waterfall draws as many: the whole spans in their tree, the tallies under
// the turn span, marked as figures only.
func TestDashboardWaterfallOfUnsampledTurn(t *testing.T) {
	if _, err := os.Stat(browsertest.Path()); err != nil {
		t.Skipf("headless Chromium not installed at %s: %v", browsertest.Path(), err)
	}
	cfg := quickConfig()
	cfg.Events.Sampling.Enabled = true
	cfg.Events.Sampling.Rate = 0 // a quick turn that succeeds is then never sampled
	for i := range cfg.Models {
		cfg.Models[i].PromptCaching = config.PromptCachingOff // the cost view without a prompt cache
	}
	sc := newScenario(t, cfg)
	if a := sc.chat("wf-user", "Recommend a fantasy manga like Frieren", "en"); a.Status != http.StatusOK {
		t.Fatalf("turn: status %d", a.Status)
	}
	type turnRow struct {
		Key   string `json:"key"`
		Spans int    `json:"spans"`
		Turn  struct {
			UserIDHash string `json:"userIdHash"`
			Feature    string `json:"feature"`
		} `json:"turn"`
	}
	var row turnRow
	var whole int
	deadline := time.Now().Add(10 * time.Second)
	for {
		var turns struct {
			Rows []turnRow `json:"rows"`
		}
		sc.getJSON("/admin/cost?by=turn&from=-1h", &turns)
		if len(turns.Rows) == 1 {
			row = turns.Rows[0]
			var trace struct {
				Spans []json.RawMessage `json:"spans"`
			}
			sc.getJSON("/admin/cost/trace/"+row.Key, &trace)
			whole = len(trace.Spans)
			if whole > 0 && whole < row.Spans {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("turns %+v, %d of them stored whole: want one turn, not sampled, with spans kept as tallies", turns.Rows, whole)
		}
		time.Sleep(50 * time.Millisecond)
	}

	p := signIn(t, sc.srv.URL)
	p.open("#/cost?range=1h&feature=" + url.QueryEscape(row.Turn.Feature) + "&user=" + row.Turn.UserIDHash)
	p.wait("the user's turns", `!!document.querySelector('[data-testid="drill-turns"]')`)
	// The simulator caches no prompt this short: the page shows no cache columns.
	noPromptCache(t, p)
	if n := p.text(`[data-testid="drill-turns"] tbody tr td:nth-child(6)`); n != strconv.Itoa(row.Spans) {
		t.Fatalf("the turns list counts %s spans, the store %d", n, row.Spans)
	}
	p.eval(`document.querySelector('[data-testid="drill-turns"] tbody tr').click(); ""`)
	p.wait("the turn's waterfall", `!!document.querySelector('[data-testid="waterfall"]')`)
	drawn := p.num(`String(document.querySelectorAll('[data-testid="waterfall"] [data-testid="span"]').length)`)
	tallied := p.num(`String(document.querySelectorAll('[data-testid="waterfall"] [data-testid="span"][data-tally="1"]').length)`)
	if int(drawn) != row.Spans || int(tallied) != row.Spans-whole {
		t.Fatalf("the waterfall draws %v spans, %v of them figures only; the turn has %d spans, %d stored whole", drawn, tallied, row.Spans, whole)
	}
	if p.eval(`document.querySelector('[data-testid="waterfall"]').dataset.spans`) != strconv.Itoa(row.Spans) {
		t.Errorf("the waterfall's summary counts %s spans, want %d", p.eval(`document.querySelector('[data-testid="waterfall"]').dataset.spans`), row.Spans)
	}
	// The tallies hang under the turn span, and the page says why they are bare.
	if d := p.eval(`[...document.querySelectorAll('[data-testid="span"][data-tally="1"]')].map(r => r.dataset.depth).filter(d => d !== "1").join(",")`); d != "" {
		t.Errorf("tallies drawn at depths %s, want 1 (under the turn span)", d)
	}
	if note := p.text(`[data-testid="tallied"]`); !strings.Contains(note, "not sampled") {
		t.Errorf("the waterfall does not say why some spans are figures only: %q", note)
	}
}

// signIn opens the dashboard of the gateway at base in a new headless
// browser, signed in with the admin token.
func signIn(t *testing.T, base string) page {
	t.Helper()
	ctx := browsertest.New(t, 60*time.Second)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1400, 1000),
		chromedp.Navigate(base+"/dashboard/"),
		chromedp.SendKeys(`#token`, testAdminToken),
		chromedp.Click(`#signin`),
		chromedp.WaitVisible(`#view`),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	return page{t: t, ctx: ctx}
}

// costRow is what the cost page shows of a row of GET /admin/cost.
type costRow struct {
	Key              string  `json:"key"`
	TokensIn         int64   `json:"tokensIn"`
	CacheReadTokens  int64   `json:"cacheReadTokens"`
	CacheWriteTokens int64   `json:"cacheWriteTokens"`
	CacheSavedUSD    float64 `json:"cacheSavedUsd"`
	CacheReadRatio   float64 `json:"cacheReadRatio"`
}

// cacheColumns are the prompt cache's column headers of a cost table.
var cacheColumns = []string{"cache read", "cache write", "read %", "saved"}

// tableCells returns a table's header and its rows' cell texts.
func (p page) tableCells(testid string) ([]string, [][]string) {
	p.t.Helper()
	var out struct {
		Head []string
		Rows [][]string
	}
	js := p.eval(`(() => { const t = document.querySelector('[data-testid="` + testid + `"]'); if (!t) return "{}";
		return JSON.stringify({Head: [...t.tHead.rows[0].cells].map(c => c.textContent),
			Rows: [...t.tBodies[0].rows].map(r => [...r.cells].map(c => c.textContent))}); })()`)
	if err := json.Unmarshal([]byte(js), &out); err != nil {
		p.t.Fatalf("table %s: %v", testid, err)
	}
	return out.Head, out.Rows
}

// checkPromptCache checks the prompt cache's figures of the cost page
// against the API: the total's tile, and per model and per prompt version
// the tokens read and written, the read ratio and the money saved, in
// every row; the other breakdowns have no such columns.
func checkPromptCache(t *testing.T, p page, ds *dashboardScenario) {
	t.Helper()
	money := func(s string) float64 {
		neg := strings.HasPrefix(s, "-")
		f, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimPrefix(s, "-"), "$"), 64)
		if err != nil {
			t.Fatalf("%q is not an amount in dollars", s)
		}
		if neg {
			f = -f
		}
		return f
	}
	percent := func(s string) float64 {
		f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil {
			t.Fatalf("%q is not a percentage", s)
		}
		return f / 100
	}
	var total struct {
		Total costRow `json:"total"`
	}
	ds.getJSON("/admin/cost?by=total&from=-1h", &total)
	tt := total.Total
	if tt.CacheReadTokens == 0 || tt.CacheWriteTokens == 0 {
		t.Fatalf("the scenario's turns read %d and wrote %d tokens through Sonnet's prompt cache; want both", tt.CacheReadTokens, tt.CacheWriteTokens)
	}
	tile, sub := p.text(`[data-testid="cost-cache"] .tile-value`), p.text(`[data-testid="cost-cache"] .tile-sub`)
	wantSub := fmt.Sprintf("%s read · %s written · ", commas(float64(tt.CacheReadTokens)), commas(float64(tt.CacheWriteTokens)))
	if !strings.HasSuffix(tile, "% read") || math.Abs(percent(strings.TrimSuffix(tile, " read"))-tt.CacheReadRatio) > 0.0005 ||
		!strings.HasPrefix(sub, wantSub) || !strings.HasSuffix(sub, " saved") ||
		math.Abs(money(strings.TrimSuffix(strings.TrimPrefix(sub, wantSub), " saved"))-tt.CacheSavedUSD) > 0.00005 {
		t.Errorf("prompt cache tile %q / %q; the API's total: %+v", tile, sub, tt)
	}
	for _, by := range []string{"model", "prompt"} {
		var rep struct {
			Rows []costRow `json:"rows"`
		}
		ds.getJSON("/admin/cost?by="+by+"&from=-1h&limit=101", &rep)
		head, rows := p.tableCells("by-" + by + "-table")
		col := map[string]int{}
		for i, h := range head {
			col[h] = i
		}
		for _, c := range cacheColumns {
			if _, ok := col[c]; !ok {
				t.Fatalf("per-%s table has columns %q, want the prompt cache's %q too", by, head, cacheColumns)
			}
		}
		if len(rows) != len(rep.Rows) {
			t.Fatalf("per-%s table has %d rows, the API %d", by, len(rows), len(rep.Rows))
		}
		read := false
		for i, want := range rep.Rows {
			got := rows[i]
			if got[col["cache read"]] != commas(float64(want.CacheReadTokens)) || got[col["cache write"]] != commas(float64(want.CacheWriteTokens)) ||
				math.Abs(percent(got[col["read %"]])-want.CacheReadRatio) > 0.0005 || math.Abs(money(got[col["saved"]])-want.CacheSavedUSD) > 0.00005 {
				t.Errorf("per-%s row %d shows %q for the prompt cache; the API says %+v", by, i, got, want)
			}
			read = read || want.CacheReadTokens > 0
		}
		if !read {
			t.Errorf("no %s read anything from the prompt cache: %+v", by, rep.Rows)
		}
	}
	for _, id := range []string{"by-tier-table", "by-locale-table"} {
		if head, _ := p.tableCells(id); slices.Contains(head, "cache read") {
			t.Errorf("%s has the prompt cache's columns: %q", id, head)
		}
	}
}

// noPromptCache checks that a cost page whose spans never read or wrote a
// prompt cache shows no empty cache columns and no cache tile.
func noPromptCache(t *testing.T, p page) {
	t.Helper()
	for _, id := range []string{"by-model-table", "by-prompt-table"} {
		head, rows := p.tableCells(id)
		if len(head) == 0 {
			t.Fatalf("no table %s on the cost page", id)
		}
		for _, c := range cacheColumns {
			if slices.Contains(head, c) {
				t.Errorf("%s shows an empty %q column over %d rows without prompt caching", id, c, len(rows))
			}
		}
	}
	if p.eval(`String(!!document.querySelector('[data-testid="cost-cache"]'))`) != "false" {
		t.Errorf("the totals show a prompt cache tile without prompt caching: %q", p.text(`[data-testid="cost-cache"]`))
	}
}

// commas formats an integer the way the page does ("68,000").
func commas(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestDashboardLoadLargeStore times each view against an event store
// pre-filled with synthetic traffic over the last 24 hours, as the page
// itself measures it (from the first request to the last answer rendered,
// data-load-ms). Opt in with the number of spans:
//
//	FMGATE_DASHBOARD_SPANS=1000000 go test -run TestDashboardLoadLargeStore -v ./internal/server
func TestDashboardLoadLargeStore(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FMGATE_DASHBOARD_SPANS"))
	if n <= 0 {
		t.Skip("set FMGATE_DASHBOARD_SPANS to the number of spans to time the views against")
	}
	if _, err := os.Stat(browsertest.Path()); err != nil {
		t.Skipf("headless Chromium not installed at %s: %v", browsertest.Path(), err)
	}
	cfg := quickConfig()
	cfg.EventStore.Path = filepath.Join(t.TempDir(), "events.db")
	start := time.Now()
	fillStore(t, cfg.EventStore, n)
	t.Logf("wrote %d spans in %v", n, time.Since(start).Round(time.Millisecond))

	sc := newScenario(t, cfg)
	ctx := browsertest.New(t, 10*time.Minute)
	p := page{t: t, ctx: ctx}
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1400, 1000),
		chromedp.Navigate(sc.srv.URL+"/dashboard/login"),
		chromedp.SendKeys(`#token`, testAdminToken),
		chromedp.Click(`#signin`),
		chromedp.WaitVisible(`#view`),
	); err != nil {
		t.Fatal(err)
	}
	loadMs := func() string { return p.eval(`document.getElementById("view").dataset.loadMs`) }
	slowest := func() string {
		return p.eval(`performance.getEntriesByType("resource").filter(e => e.name.includes("/admin/") && !e.name.includes("/admin/live")).sort((a, b) => b.duration - a.duration).slice(0, 3)
			.map(e => new URL(e.name).pathname + "?by=" + (new URL(e.name).searchParams.get("by") || "") + " " + Math.round(e.duration) + " ms").join(", ")`)
	}
	for _, hash := range []string{"#/ops?range=24h", "#/cost?range=24h", "#/quality?range=24h", "#/capacity?range=24h", "#/canary?range=24h&dim=prompt"} {
		p.eval(`performance.clearResourceTimings(); ""`)
		p.open(hash)
		t.Logf("  slowest requests: %s", slowest())
	}
	// The drill-down, one level at a time.
	p.open("#/cost?range=24h")
	for _, level := range []struct{ table, want string }{{"drill-features", "feature"}, {"drill-users", "user"}, {"drill-turns", "turn"}} {
		p.eval(`performance.clearResourceTimings(); ""`)
		p.eval(`document.querySelector('[data-testid="` + level.table + `"] tbody tr').click(); ""`)
		p.wait(level.want, `document.querySelector('[data-testid="drill"]')?.dataset.level === "`+level.want+`" && document.getElementById("view").dataset.state === "ready"`)
		t.Logf("cost drill-down to %s loaded in %s ms; slowest requests: %s", level.want, loadMs(), slowest())
	}
}

// fillStore writes n spans of synthetic turns (8 spans each) spread over the
// last 24 hours straight into the event store at cfg.Path.
func fillStore(t *testing.T, cfg eventstore.Config, n int) {
	t.Helper()
	ctx := context.Background()
	st, err := eventstore.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	features := []string{"discovery_recommend", "faq", "order_status", "cross_title_link", "search", "summary"}
	locales := []string{"ja", "en", "ko", "fr"}
	models := []string{"anthropic.claude-3-sonnet-20240229-v1:0", "anthropic.claude-3-haiku-20240307-v1:0"}
	prompts := []string{"mangaassist-system@aaaaaaaaaaaa", "mangaassist-system@bbbbbbbbbbbb"}
	const perTurn = 8
	turns := n / perTurn
	step := 24 * time.Hour / time.Duration(max(turns, 1))
	t0 := time.Now().Add(-24 * time.Hour)
	batch := make([]events.Event, 0, 1000)
	for i := range turns {
		at := t0.Add(time.Duration(i) * step)
		trace := fmt.Sprintf("%016x%016x", uint64(i)*2654435761, uint64(i))
		root := fmt.Sprintf("%016x", uint64(i)<<8|1)
		attr := events.Attribution{Feature: features[i%len(features)], Surface: "http", Locale: locales[i%len(locales)], UserTier: "standard"}
		user := fmt.Sprintf("%032x", i%5000)
		graph, prompt, model := "v1", prompts[(i/7)%2], models[i%5/4]
		for j := 1; j < perTurn; j++ {
			e := events.Event{SchemaVersion: 3, TraceID: trace, SpanID: fmt.Sprintf("%016x", uint64(i)<<8|uint64(j+1)), ParentSpanID: root,
				UserIDHash: user, SessionID: "s" + user[:8], TSStart: at.Add(time.Duration(j) * 10 * time.Millisecond), Name: "admit",
				Node: events.Node{GraphVersion: graph, NodeID: "admit"}, Attribution: attr, Outcome: events.Outcome{Status: events.StatusOK}}
			if j == 4 {
				e.Name, e.Node.NodeID = "model_attempt", "model_attempt"
				e.Artifact = events.Artifact{ArtifactKind: events.KindLLMCall, ModelID: model, PromptVersion: prompt}
				e.Resource = events.Resource{TokensIn: 800 + i%400, TokensOut: 200 + i%300, CostUSD: 0.001 + float64(i%100)/50000}
			}
			e.TSEnd, e.DurationMS = e.TSStart.Add(40*time.Millisecond), 40
			batch = append(batch, e)
		}
		r := events.Event{SchemaVersion: 3, TraceID: trace, SpanID: root, UserIDHash: user, SessionID: "s" + user[:8],
			TSStart: at, TSEnd: at.Add(600 * time.Millisecond), DurationMS: 600, Name: "turn",
			Node: events.Node{GraphVersion: graph, NodeID: "turn"}, Artifact: events.Artifact{ModelID: model, PromptVersion: prompt},
			Attribution: attr, Outcome: events.Outcome{Status: events.StatusOK}}
		if i%100 == 0 {
			v := float64(i%10) / 10
			r.Outcome.EvalScore = &v
		}
		batch = append(batch, r)
		if len(batch) >= 1000 || i == turns-1 {
			if err := st.Write(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}
