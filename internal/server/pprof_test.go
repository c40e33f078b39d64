package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPprofNeedsTheAdminToken(t *testing.T) {
	s, err := New(t.Context(), isolate(t, quickConfig()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler(testAdminToken))
	defer srv.Close()
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/debug/pprof/", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code, _ := get("/debug/pprof/heap?debug=1", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("with a wrong token: %d", code)
	}
	code, body := get("/debug/pprof/heap?debug=1", testAdminToken)
	if code != http.StatusOK || !strings.Contains(body, "heap profile") {
		t.Fatalf("heap profile: %d %.80q", code, body)
	}
}
