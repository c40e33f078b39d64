package adminauth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func login(a *Auth) *http.Cookie {
	rec := httptest.NewRecorder()
	a.StartSession(rec, httptest.NewRequest(http.MethodPost, "/dashboard/login", nil))
	return rec.Result().Cookies()[0]
}

func authorized(a *Auth, c *http.Cookie) bool {
	req := httptest.NewRequest(http.MethodGet, "/admin/breakers", nil)
	req.AddCookie(c)
	return a.Authorized(req)
}

func TestSessionsAreBounded(t *testing.T) {
	now := time.Now()
	a := New("tok", Options{MaxSessions: 3, Now: func() time.Time { return now }})
	var cs []*http.Cookie
	for range 4 {
		cs = append(cs, login(a))
		now = now.Add(time.Second)
	}
	if authorized(a, cs[0]) {
		t.Error("the oldest session survived a login past MaxSessions")
	}
	for i, c := range cs[1:] {
		if !authorized(a, c) {
			t.Errorf("session %d was ended; only the oldest should be", i+1)
		}
	}
	if len(a.sessions) != 3 {
		t.Errorf("%d sessions kept, want 3", len(a.sessions))
	}
}

func TestLoginThrottleForgetsRatherThanGrows(t *testing.T) {
	now := time.Now()
	a := New("tok", Options{Now: func() time.Time { return now }})
	for i := range maxClients + 10 {
		req := httptest.NewRequest(http.MethodPost, "/dashboard/login", nil)
		req.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1000", i>>16&255, i>>8&255, i&255)
		if ok, _ := a.AllowLogin(req); !ok {
			t.Fatalf("client %d refused on its first attempt", i)
		}
	}
	if len(a.logins) > maxClients {
		t.Fatalf("the throttle remembers %d clients; the bound is %d", len(a.logins), maxClients)
	}
}

func TestBearerAndCookie(t *testing.T) {
	a := New("tok", Options{})
	tests := []struct {
		name   string
		header string
		cookie string
		want   bool
	}{
		{"bearer token", "Bearer tok", "", true},
		{"wrong bearer", "Bearer nope", "", false},
		{"token as cookie", "", "tok", false},
		{"nothing", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/admin/breakers", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			if tt.cookie != "" {
				req.AddCookie(&http.Cookie{Name: CookieName, Value: tt.cookie})
			}
			if got := a.Authorized(req); got != tt.want {
				t.Errorf("Authorized = %v, want %v", got, tt.want)
			}
		})
	}
	if New("", Options{}).Authorized(httptest.NewRequest(http.MethodGet, "/", nil)) {
		t.Error("no token configured, yet a request was authorized")
	}
}

// TestFailuresAreBounded: failures recorded past the bound (attempts let
// through together that fail together) replace the oldest, so memory and
// the wait stay bounded.
func TestFailuresAreBounded(t *testing.T) {
	now := time.Now()
	a := New("tok", Options{FailedLoginsPerMinute: 3, Now: func() time.Time { return now }})
	for range 100 {
		a.LoginFailed()
		now = now.Add(time.Second)
	}
	if len(a.failures) != 3 {
		t.Fatalf("%d failures kept, want the bound, 3", len(a.failures))
	}
	req := httptest.NewRequest(http.MethodPost, "/dashboard/login", nil)
	if ok, wait := a.AllowLogin(req); ok || wait != 57*time.Second {
		t.Fatalf("AllowLogin = %v, %v; want false, 57s (the oldest kept failure is 3 s old)", ok, wait)
	}
}
