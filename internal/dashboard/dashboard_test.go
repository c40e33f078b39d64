package dashboard

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/adminauth"
)

const token = "s3cret-admin-token"

// handlerFor is the dashboard for admin token tok, with default options.
func handlerFor(tok string) http.Handler { return Handler(adminauth.New(tok, adminauth.Options{})) }

// session logs in to h and returns the session cookie.
func session(t *testing.T, h http.Handler) *http.Cookie {
	t.Helper()
	resp := postLogin(t, h, token, false)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login: status %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	return resp.Cookies()[0]
}

// opens reports whether the dashboard page opens with cookie c.
func opens(t *testing.T, h http.Handler, c *http.Cookie) bool {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/dashboard/", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	return do(t, h, req).StatusCode == http.StatusOK
}

func do(t *testing.T, h http.Handler, req *http.Request) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRoutesNeedTheAdminToken(t *testing.T) {
	h := handlerFor(token)
	sid := session(t, h).Value
	tests := []struct {
		name         string
		method       string
		path         string
		cookie       string
		bearer       string
		wantStatus   int
		wantLocation string
		wantBody     string
	}{
		{name: "bare prefix", path: "/dashboard", wantStatus: http.StatusMovedPermanently, wantLocation: "/dashboard/"},
		{name: "page without login", path: "/dashboard/", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "bundle without login", path: "/dashboard/app.js", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "wrong cookie", path: "/dashboard/", cookie: "nope", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "the admin token is not a session", path: "/dashboard/", cookie: token, wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "session prefix is not the session", path: "/dashboard/", cookie: sid[:10], wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "login form is public", path: "/dashboard/login", wantStatus: http.StatusOK, wantBody: `name="token"`},
		{name: "page with cookie", path: "/dashboard/", cookie: sid, wantStatus: http.StatusOK, wantBody: `src="app.js"`},
		{name: "bundle with cookie", path: "/dashboard/app.js", cookie: sid, wantStatus: http.StatusOK, wantBody: "/admin/live"},
		{name: "styles with cookie", path: "/dashboard/app.css", cookie: sid, wantStatus: http.StatusOK, wantBody: ".waterfall"},
		{name: "page with bearer", path: "/dashboard/", bearer: token, wantStatus: http.StatusOK, wantBody: `id="tab-canary"`},
		{name: "wrong bearer", path: "/dashboard/", bearer: "nope", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "unknown file", path: "/dashboard/nope.js", cookie: sid, wantStatus: http.StatusNotFound},
		{name: "other method without login", method: http.MethodPost, path: "/dashboard/", wantStatus: http.StatusSeeOther, wantLocation: "/dashboard/login"},
		{name: "other method with login", method: http.MethodDelete, path: "/dashboard/app.js", cookie: sid, wantStatus: http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			req := httptest.NewRequest(method, tt.path, nil)
			if tt.cookie != "" {
				req.AddCookie(&http.Cookie{Name: CookieName, Value: tt.cookie})
			}
			if tt.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+tt.bearer)
			}
			resp := do(t, h, req)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if got := resp.Header.Get("Location"); got != tt.wantLocation {
				t.Fatalf("Location %q, want %q", got, tt.wantLocation)
			}
			if b := body(t, resp); !strings.Contains(b, tt.wantBody) {
				t.Fatalf("body lacks %q:\n%.300s", tt.wantBody, b)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Content-Security-Policy") == "" {
				t.Fatalf("security headers missing: %v", resp.Header)
			}
			// Under no-referrer the page's own posts would say "Origin: null",
			// which the gateway refuses.
			if got := resp.Header.Get("Referrer-Policy"); got != "same-origin" {
				t.Fatalf("Referrer-Policy %q, want same-origin", got)
			}
		})
	}
}

func postLogin(t *testing.T, h http.Handler, value string, tls bool) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/dashboard/login", strings.NewReader(url.Values{"token": {value}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if tls {
		req = httptest.NewRequest(http.MethodPost, "https://gw.example/dashboard/login", strings.NewReader(url.Values{"token": {value}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return do(t, h, req)
}

func TestLogin(t *testing.T) {
	tests := []struct {
		name        string
		adminToken  string
		externalURL string
		give        string
		tls         bool
		wantStatus  int
		wantCookie  bool
		wantSecure  bool
		wantError   string
	}{
		{name: "right token", adminToken: token, give: token, wantStatus: http.StatusSeeOther, wantCookie: true},
		{name: "right token over TLS", adminToken: token, give: token, tls: true, wantStatus: http.StatusSeeOther, wantCookie: true, wantSecure: true},
		{name: "behind an https external URL", adminToken: token, externalURL: "https://gw.example", give: token, wantStatus: http.StatusSeeOther, wantCookie: true, wantSecure: true},
		{name: "http external URL", adminToken: token, externalURL: "http://127.0.0.1:8080", give: token, wantStatus: http.StatusSeeOther, wantCookie: true},
		{name: "surrounding spaces are ignored", adminToken: token, give: "  " + token + "\n", wantStatus: http.StatusSeeOther, wantCookie: true},
		{name: "wrong token", adminToken: token, give: "guess", wantStatus: http.StatusUnauthorized, wantError: "not the admin token"},
		{name: "longer token", adminToken: token, give: token + "x", wantStatus: http.StatusUnauthorized, wantError: "not the admin token"},
		{name: "empty", adminToken: token, give: "", wantStatus: http.StatusBadRequest, wantError: "Enter the admin token"},
		{name: "no admin token configured", adminToken: "", give: "anything", wantStatus: http.StatusUnauthorized, wantError: "No admin token is configured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := postLogin(t, Handler(adminauth.New(tt.adminToken, adminauth.Options{ExternalURL: tt.externalURL})), tt.give, tt.tls)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			b := body(t, resp)
			if !strings.Contains(b, tt.wantError) {
				t.Fatalf("page lacks %q:\n%s", tt.wantError, b)
			}
			cookies := resp.Cookies()
			if !tt.wantCookie {
				if len(cookies) != 0 {
					t.Fatalf("a failed login set cookies %v", cookies)
				}
				return
			}
			if resp.Header.Get("Location") != "/dashboard/" {
				t.Fatalf("redirect to %q", resp.Header.Get("Location"))
			}
			if len(cookies) != 1 {
				t.Fatalf("cookies %v", cookies)
			}
			c := cookies[0]
			if c.Name != CookieName || len(c.Value) != 64 || strings.Contains(c.Value, token) || c.Path != "/" || !c.HttpOnly ||
				c.SameSite != http.SameSiteStrictMode || c.Secure != tt.wantSecure || c.MaxAge != int(adminauth.DefaultSessionTTL/time.Second) {
				t.Fatalf("cookie %+v: want %s=<random session id>; Path=/; Max-Age=12h; HttpOnly; SameSite=Strict; Secure %v", c, CookieName, tt.wantSecure)
			}
		})
	}
}

func TestLogoutRevokesTheSession(t *testing.T) {
	h := handlerFor(token)
	c := session(t, h)
	req := httptest.NewRequest(http.MethodPost, "/dashboard/logout", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp := do(t, h, req)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/login" {
		t.Fatalf("status %d location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cs := resp.Cookies()
	if len(cs) != 1 || cs[0].Name != CookieName || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Fatalf("cookies %v: want %s expired", cs, CookieName)
	}
	// A copy of the cookie kept elsewhere is worthless now.
	if opens(t, h, c) {
		t.Fatal("the session still opens the dashboard after logout")
	}
}

func TestSessionsExpireAndEndWithTheToken(t *testing.T) {
	now := time.Now()
	auth := adminauth.New(token, adminauth.Options{SessionTTL: time.Hour, Now: func() time.Time { return now }})
	h := Handler(auth)
	c := session(t, h)
	if !opens(t, h, c) {
		t.Fatal("a fresh session does not open the dashboard")
	}
	now = now.Add(time.Hour)
	if opens(t, h, c) {
		t.Fatal("the session still opens the dashboard after its expiry")
	}
	// A gateway started with another admin token knows no old session.
	c = session(t, handlerFor(token))
	if opens(t, handlerFor("an0ther-admin-token"), c) {
		t.Fatal("a session opened under the old admin token works under the new one")
	}
}

func TestLoginAttemptsAreLimitedPerClient(t *testing.T) {
	now := time.Now()
	h := Handler(adminauth.New(token, adminauth.Options{Now: func() time.Time { return now }}))
	for i := range adminauth.DefaultLoginsPerMinute {
		if resp := postLogin(t, h, "guess", false); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: status %d, want 401", i+1, resp.StatusCode)
		}
	}
	// Even the right token waits: the limit is on attempts, not failures.
	resp := postLogin(t, h, token, false)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" || len(resp.Cookies()) != 0 {
		t.Fatalf("attempt %d: status %d Retry-After %q cookies %v; want 429, 60, none",
			adminauth.DefaultLoginsPerMinute+1, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Cookies())
	}
	if b := body(t, resp); !strings.Contains(b, "Too many sign-in attempts") {
		t.Fatalf("429 page: %s", b)
	}
	// Another client is not held back by this one.
	req := httptest.NewRequest(http.MethodPost, "/dashboard/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "192.0.2.77:4000"
	if resp := do(t, h, req); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("another client: status %d", resp.StatusCode)
	}
	now = now.Add(time.Minute)
	if resp := postLogin(t, h, token, false); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a minute later: status %d, want a login", resp.StatusCode)
	}
}

// TestFailedLoginsAreBoundedAcrossClients: guessing the token from many
// addresses is no faster than the bound on failures: past it every client
// waits, with the right token too, until the oldest failure is a minute old.
func TestFailedLoginsAreBoundedAcrossClients(t *testing.T) {
	now := time.Now()
	h := Handler(adminauth.New(token, adminauth.Options{Now: func() time.Time { return now }}))
	loginFrom := func(client int, value string) *http.Response {
		req := httptest.NewRequest(http.MethodPost, "/dashboard/login", strings.NewReader(url.Values{"token": {value}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = fmt.Sprintf("198.51.100.%d:4000", client)
		return do(t, h, req)
	}
	// Right tokens and empty forms are no failures.
	for i := range 3 {
		if resp := loginFrom(200+i, token); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("a right token: status %d", resp.StatusCode)
		}
		if resp := loginFrom(210+i, ""); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("an empty form: status %d", resp.StatusCode)
		}
	}
	// Each address stays under its own limit; the first failure is 10 s
	// older than the rest.
	for i := range adminauth.DefaultFailedLoginsPerMinute {
		if resp := loginFrom(i, "guess"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i+1, resp.StatusCode)
		}
		if i == 0 {
			now = now.Add(10 * time.Second)
		}
	}
	resp := loginFrom(100, token)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "50" || len(resp.Cookies()) != 0 {
		t.Fatalf("after %d failures, a new client with the right token: status %d Retry-After %q cookies %v; want 429, 50, none",
			adminauth.DefaultFailedLoginsPerMinute, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Cookies())
	}
	if b := body(t, resp); !strings.Contains(b, "Too many sign-in attempts") {
		t.Fatalf("429 page: %s", b)
	}
	// Once the oldest failure is a minute old, one more attempt may go.
	now = now.Add(50 * time.Second)
	if resp := loginFrom(100, token); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("when the oldest failure is a minute old: status %d, want a login", resp.StatusCode)
	}
}

func TestLoginBodyIsBounded(t *testing.T) {
	big := strings.Repeat("a", maxLoginBody+10)
	req := httptest.NewRequest(http.MethodPost, "/dashboard/login", strings.NewReader("token="+big))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp := do(t, handlerFor(token), req)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d for a %d-byte form", resp.StatusCode, len(big))
	}
}

// The login page's inline style is allowed by its hash only; a style that
// drifts from the hash would be blocked and the form shown unstyled.
func TestLoginStyleMatchesItsCSPHash(t *testing.T) {
	resp := do(t, handlerFor(token), httptest.NewRequest(http.MethodGet, "/dashboard/login", nil))
	b := body(t, resp)
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindStringSubmatch(b)
	if m == nil {
		t.Fatal("no inline style")
	}
	sum := sha256.Sum256([]byte(m[1]))
	want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, want) {
		t.Fatalf("CSP %q does not allow the page's style %s", csp, want)
	}
}

// The page must not load anything from another origin: no CDN at run time.
func TestBundleIsSelfContained(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "app.css"} {
		b, err := dist.ReadFile("dist/" + name)
		if err != nil {
			t.Fatalf("%s not embedded (run go generate ./internal/dashboard): %v", name, err)
		}
		for _, bad := range []string{"https://cdn", "//unpkg.com", "//cdn.jsdelivr", "fonts.googleapis"} {
			if strings.Contains(string(b), bad) {
				t.Fatalf("%s refers to %s", name, bad)
			}
		}
	}
}
