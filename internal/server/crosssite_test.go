package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestCrossSitePostsAreRefused: a page on another site cannot run paid turns
// through a visitor's browser: every chat entry point wants a JSON body and
// an Origin, when sent, of this server or server.originPatterns. Paths not
// mounted yet (a vendor's front door) are guarded the same way.
func TestCrossSitePostsAreRefused(t *testing.T) {
	cfg := fastConfig()
	cfg.Server.OriginPatterns = []string{"*.shop.example"}
	_, srv := startServer(t, cfg)
	const chat = `{"sessionId":"s","message":"hello","locale":"en"}`
	tests := []struct {
		name        string
		path        string
		contentType string
		origin      string
		wantStatus  int
		wantCode    string
	}{
		{"text/plain from another site", "/v1/chat", "text/plain", "http://evil.example", 403, "forbidden_origin"},
		{"json from another site", "/v1/chat", "application/json", "http://evil.example", 403, "forbidden_origin"},
		{"opaque origin", "/v1/chat", "application/json", "null", 403, "forbidden_origin"},
		{"text/plain without origin", "/v1/chat", "text/plain", "", 415, "unsupported_media_type"},
		{"form without origin", "/v1/chat", "application/x-www-form-urlencoded", "", 415, "unsupported_media_type"},
		{"no content type", "/v1/chat", "", "", 415, "unsupported_media_type"},
		{"batch as text/plain", "/v1/batch", "text/plain", "", 415, "unsupported_media_type"},
		{"vendor door as text/plain", "/v1/chat/completions", "text/plain;charset=UTF-8", "", 415, "unsupported_media_type"},
		{"vendor door from another site", "/v1/messages", "application/json", "https://evil.example", 403, "forbidden_origin"},
		{"json, no origin (an SDK)", "/v1/chat", "application/json", "", 200, ""},
		{"json with charset", "/v1/chat", "application/json; charset=utf-8", "", 200, ""},
		{"same origin (the chat page)", "/v1/chat", "application/json", srv.URL, 200, ""},
		{"allowed pattern", "/v1/chat", "application/json", "https://www.shop.example", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+tt.path, strings.NewReader(chat))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			req.Header.Set("X-User-Id", "origin-user")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tt.wantStatus || body.Error.Code != tt.wantCode {
				t.Fatalf("status %d %+v, want %d %q", resp.StatusCode, body.Error, tt.wantStatus, tt.wantCode)
			}
			if tt.wantStatus != 200 && body.Error.Message == "" {
				t.Fatal("refusal without a message")
			}
		})
	}
}

// TestOperatorCrossSiteRequestsAreRefused: a page on another site cannot
// change the gateway's state through an operator's browser, which would
// attach the dashboard's session cookie: a foreign Origin is refused, and so
// is a body that is not JSON unless a bearer token (which such a page cannot
// set) carries it. The login form, curl and scripts keep working.
func TestOperatorCrossSiteRequestsAreRefused(t *testing.T) {
	cfg := fastConfig()
	cfg.Server.OriginPatterns = []string{"*.shop.example"}
	cfg.Server.ExternalURL = "https://gw.example"
	_, srv := startServer(t, cfg)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(t *testing.T, origin string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/dashboard/login", strings.NewReader(url.Values{"token": {testAdminToken}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := login(t, srv.URL)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login from the gateway's own page: status %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	session := resp.Cookies()[0]
	if resp := login(t, "https://evil.example"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("login from another site: status %d cookies %v, want 403 and none", resp.StatusCode, resp.Cookies())
	}

	const (
		reload = "/admin/versions/reload"
		sim    = "/admin/sim/sonnet"
		faults = `{"outage":false}`
	)
	tests := []struct {
		name        string
		method      string
		path        string
		body        string
		contentType string
		origin      string
		cookie      bool
		bearer      bool
		wantStatus  int
		wantCode    string
	}{
		{"text/plain from another site", "POST", reload, "x", "text/plain", "http://evil.example", true, false, 403, "forbidden_origin"},
		{"json from another site", "POST", reload, "{}", "application/json", "http://evil.example", true, false, 403, "forbidden_origin"},
		{"chat's allowed origins are not operators'", "POST", reload, "{}", "application/json", "https://www.shop.example", true, false, 403, "forbidden_origin"},
		{"opaque origin", "PUT", sim, faults, "application/json", "null", true, false, 403, "forbidden_origin"},
		{"empty body from another site", "POST", reload, "", "", "http://evil.example", true, false, 403, "forbidden_origin"},
		{"bearer from another site", "POST", reload, "", "", "http://evil.example", false, true, 403, "forbidden_origin"},
		{"logout from another site", "POST", "/dashboard/logout", "", "", "http://evil.example", true, false, 403, "forbidden_origin"},
		{"text/plain without origin", "POST", reload, "x", "text/plain", "", true, false, 415, "unsupported_media_type"},
		{"form body with the cookie", "PUT", sim, "outage=true", "application/x-www-form-urlencoded", "", true, false, 415, "unsupported_media_type"},
		{"no content type with the cookie", "PUT", sim, faults, "", "", true, false, 415, "unsupported_media_type"},
		{"the dashboard's own fetch", "PUT", sim, faults, "application/json", srv.URL, true, false, 200, ""},
		{"through the proxy at externalURL", "POST", reload, "", "", "https://gw.example", true, false, 200, ""},
		{"empty POST with the cookie", "POST", reload, "", "", "", true, false, 200, ""},
		{"curl -X POST with the token", "POST", reload, "", "", "", false, true, 200, ""},
		{"curl -d with the token", "PUT", sim, faults, "application/x-www-form-urlencoded", "", false, true, 200, ""},
		{"reading from another site is not refused here", "GET", "/admin/breakers", "", "", "http://evil.example", true, false, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, body)
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			if tt.cookie {
				req.AddCookie(session)
			}
			if tt.bearer {
				req.Header.Set("Authorization", "Bearer "+testAdminToken)
			}
			resp, err := noRedirect.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var got struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&got)
			if resp.StatusCode != tt.wantStatus || got.Error.Code != tt.wantCode {
				t.Fatalf("status %d %+v, want %d %q", resp.StatusCode, got.Error, tt.wantStatus, tt.wantCode)
			}
			if tt.wantStatus != 200 && got.Error.Message == "" {
				t.Fatal("refusal without a message")
			}
		})
	}
}
