package anthropic

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		give http.Header
		want time.Duration
	}{
		{"none", http.Header{}, 0},
		{"seconds", http.Header{"Retry-After": {"2"}}, 2 * time.Second},
		{"milliseconds win", http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}}, 1500 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {now.Add(3 * time.Second).Format(http.TimeFormat)}}, 3 * time.Second},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryAfter(tt.give, now); got != tt.want {
				t.Fatalf("retryAfter(%v) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	tests := []struct {
		typ    string
		status int
		want   string
	}{
		{"rate_limit_error", 429, "throttled"},
		{"overloaded_error", 529, "unavailable"},
		{"", 529, "unavailable"},
		{"api_error", 500, "unavailable"},
		{"timeout_error", 504, "timeout"},
		{"invalid_request_error", 400, "validation"},
		{"authentication_error", 401, "access_denied"},
		{"permission_error", 403, "access_denied"},
		{"billing_error", 402, "access_denied"},
		{"not_found_error", 404, "not_found"},
		{"", 502, "unavailable"},
		{"", 422, "validation"},
	}
	for _, tt := range tests {
		if got := kindOf(tt.typ, tt.status); string(got) != tt.want {
			t.Errorf("kindOf(%q, %d) = %q, want %q", tt.typ, tt.status, got, tt.want)
		}
	}
}
