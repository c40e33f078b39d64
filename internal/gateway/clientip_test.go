package gateway

import (
	"net/http/httptest"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
)

func TestClientIPTrustsOnlyItsProxies(t *testing.T) {
	g := &Gateway{proxies: config.Server{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.7"}}.Proxies()}
	for _, tt := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy", "203.0.113.5:4000", nil, "203.0.113.5"},
		{"an untrusted peer's header is ignored", "203.0.113.5:4000", []string{"198.51.100.1"}, "203.0.113.5"},
		{"a trusted proxy names the client", "10.1.2.3:80", []string{"198.51.100.1"}, "198.51.100.1"},
		{"the client cannot prepend an address", "10.1.2.3:80", []string{"1.1.1.1, 198.51.100.1"}, "198.51.100.1"},
		{"two trusted hops", "192.0.2.7:443", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"hops over several headers", "10.1.2.3:80", []string{"1.1.1.1", "198.51.100.2, 10.0.0.1"}, "198.51.100.2"},
		{"a garbled hop stops the walk", "10.1.2.3:80", []string{"198.51.100.1, not-an-ip"}, "10.1.2.3"},
		{"every hop trusted", "10.1.2.3:80", []string{"10.0.0.9"}, "10.0.0.9"},
		{"IPv6 peer", "[2001:db8::1]:5000", []string{"198.51.100.1"}, "2001:db8::1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.peer
			for _, h := range tt.xff {
				r.Header.Add("X-Forwarded-For", h)
			}
			if got := g.clientIP(r); got != tt.want {
				t.Fatalf("clientIP = %q, want %q", got, tt.want)
			}
		})
	}
}
