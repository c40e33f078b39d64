package server

import (
	"encoding/json"
	"net/http"
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
