package server

import (
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/gateway"
)

// guardEdge refuses what no route can serve before routing, and bounds how
// long a client may take to send a request body.
//
// A path that is not UTF-8 once unescaped (GET /%ff) is a 400, never a file
// lookup that fails with a 500. A body must arrive within bodyTimeout of the
// request's start; a slower client (a slow-loris body) is cut with 408. The
// deadline is per request and ends with the body, so WebSockets and long SSE
// answers, which read no body while they stream, are not affected.
func guardEdge(bodyTimeout time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !utf8.ValidString(r.URL.Path) {
			gateway.WriteError(w, &gateway.Error{Status: http.StatusBadRequest, Code: gateway.CodeInvalidRequest,
				Message: "The URL path is not valid UTF-8 once unescaped."})
			return
		}
		if r.Body != nil && r.Body != http.NoBody && bodyTimeout > 0 {
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(time.Now().Add(bodyTimeout)) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// guardHost answers 421 to a request whose Host is not one of patterns
// (config.Config.HostPatterns: host names or path.Match patterns, matched
// without the port and case-insensitively); nil patterns allow any host.
// Browsers send the name they resolved, so a page on a name rebound to the
// gateway's address is refused here, before it reaches a route that trusts
// X-User-Id. /healthz and /readyz are exempt: probes name the pod's address.
func guardHost(patterns []string, next http.Handler) http.Handler {
	if len(patterns) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || hostAllowed(r.Host, patterns) {
			next.ServeHTTP(w, r)
			return
		}
		gateway.WriteError(w, &gateway.Error{Status: http.StatusMisdirectedRequest, Code: "misdirected_request",
			Message: "This gateway does not serve host " + truncate(r.Host, 100) + "; add it to server.allowedHosts to allow it."})
	})
}

// hostAllowed reports whether the Host header host, without its port,
// matches one of patterns.
func hostAllowed(host string, patterns []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" {
		return false
	}
	for _, p := range patterns {
		if strings.HasPrefix(p, "[") && strings.HasSuffix(p, "]") && strings.Contains(p, ":") {
			p = p[1 : len(p)-1] // an IPv6 address written as in a URL
		}
		p = strings.ToLower(p)
		if ok, _ := path.Match(p, host); ok {
			return true
		}
	}
	return false
}

// deadlineBody lifts the connection's read deadline once the body has been
// read to its end, so that the rest of the request — a stream that may last
// minutes — runs without it. A body not read to its end keeps the deadline:
// the server discards what is left of it before answering, and must not
// wait for a client that stopped sending.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(func() { _ = b.rc.SetReadDeadline(time.Time{}) })
	}
	return n, err
}
