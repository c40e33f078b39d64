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
// POSTs under /admin/ and /dashboard are left to their own authentication.
//
// Each refusal is counted as a refused turn (Gateway.Refuse).
func guardCrossSite(originPatterns []string, g *gateway.Gateway, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || strings.HasPrefix(r.URL.Path, "/admin/") || strings.HasPrefix(r.URL.Path, "/dashboard") {
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
