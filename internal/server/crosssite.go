package server

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/fmgate/fmgate/internal/gateway"
)

// guardCrossSite protects every chat entry point — POST /v1/chat, /v1/batch
// and the vendors' front doors, whatever is mounted under them — from
// requests a browser page on another site can make:
//
//   - the body must be declared JSON (application/json or a +json type),
//     otherwise 415: an HTML form or a no-CORS fetch can only send text/plain,
//     form or multipart bodies;
//   - an Origin header, when present, must be this server's own origin or
//     match one of originPatterns (host patterns as for the WebSocket, e.g.
//     "shop.example.com" or "*.example.com"), otherwise 403. SDKs and
//     servers send no Origin; browsers always send it on a cross-site POST.
//
// Requests under /admin/ and /dashboard are guarded by guardOperator
// instead, which does not count them as turns.
//
// Each refusal is counted as a refused turn (Gateway.Refuse).
func guardCrossSite(originPatterns []string, g *gateway.Gateway, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || isOperatorPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		refuse := func(err error) {
			t := &gateway.Turn{Route: "sendMessage", Surface: "http"}
			if strings.HasPrefix(r.URL.Path, "/v1/batch") {
				t.Route, t.Surface = "batch", "batch"
			}
			key, _ := gateway.Bearer(r)
			_ = g.Authenticate(r, key, "", t) // the caller, when the request names one
			gateway.WriteError(w, g.Refuse(r.Context(), t, err))
		}
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, r.Host, originPatterns) {
			refuse(&gateway.Error{Status: http.StatusForbidden, Code: "forbidden_origin",
				Message: "Requests from origin " + truncate(origin, 100) + " are not allowed; add its host to server.originPatterns to allow it."})
			return
		}
		if !isJSON(r.Header.Get("Content-Type")) {
			refuse(&gateway.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
				Message: "Send the body as JSON with Content-Type: application/json."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// guardOperator protects the operator routes — everything under /admin/
// and /dashboard — whose state-changing requests (any method but GET, HEAD
// and OPTIONS) a browser would otherwise send from a page on another site
// with the dashboard's session cookie attached:
//
//   - an Origin header, when present, must be this server's own origin or
//     the host of externalURL (server.externalURL, the address operators
//     reach the gateway at behind a proxy), otherwise 403;
//   - a body must be declared JSON, otherwise 415, unless the request
//     carries a bearer credential (which a page on another site cannot set
//     without a CORS preflight the gateway never grants, and which is then
//     the only credential looked at), or is the dashboard's login form.
//
// curl and scripts send no Origin, so a bearer request from them passes
// whatever its Content-Type. server.originPatterns, which opens the chat
// routes to other sites, does not apply here.
func guardOperator(externalURL string, next http.Handler) http.Handler {
	var patterns []string
	if u, err := url.Parse(externalURL); err == nil && u.Host != "" {
		patterns = []string{u.Host}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isOperatorPath(r.URL.Path) || r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, r.Host, patterns) {
			gateway.WriteError(w, &gateway.Error{Status: http.StatusForbidden, Code: "forbidden_origin",
				Message: "Requests from origin " + truncate(origin, 100) + " may not change the gateway's state; if operators reach it at that address, set server.externalURL to it."})
			return
		}
		_, hasBearer := gateway.Bearer(r)
		loginForm := r.Method == http.MethodPost && r.URL.Path == "/dashboard/login"
		if r.ContentLength != 0 && !hasBearer && !loginForm && !isJSON(r.Header.Get("Content-Type")) {
			gateway.WriteError(w, &gateway.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
				Message: "Send the body as JSON with Content-Type: application/json."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isOperatorPath reports whether path is the admin API's or the dashboard's.
func isOperatorPath(path string) bool {
	return strings.HasPrefix(path, "/admin/") || path == "/dashboard" || strings.HasPrefix(path, "/dashboard/")
}

// isJSON reports whether a Content-Type declares JSON.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// originAllowed reports whether origin is host itself or matches a pattern.
func originAllowed(origin, host string, patterns []string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // includes "null", sent by sandboxed and file: pages
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
			return true
		}
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
