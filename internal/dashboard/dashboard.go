// Package dashboard serves fmgate's operator dashboards at /dashboard: live
// ops, cost (with drill-down to a turn's span waterfall), quality, capacity
// and canary comparison. The page is a small JavaScript bundle built from
// web/ with esbuild into dist/, which is committed and compiled into the
// binary with go:embed, so running the gateway needs neither Node nor any
// file on disk. The page reads the admin API (/admin/*) from the same
// origin with the session cookie set at login (see internal/adminauth).
package dashboard

//go:generate sh web/build.sh

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/adminauth"
)

//go:embed dist
var dist embed.FS

// CookieName is the cookie that carries the dashboard session id (never the
// admin token) from the login form to the dashboard and the admin API.
const CookieName = adminauth.CookieName

// Prefix is where the dashboards are mounted.
const Prefix = "/dashboard"

// maxLoginBody bounds the login form.
const maxLoginBody = 8 << 10

// Handler serves /dashboard and everything under it. GET /dashboard/login
// shows a form for the admin token; POST /dashboard/login checks it (at most
// auth's attempts per minute per client, and failures per minute across
// clients, then 429 with Retry-After) and opens a session; POST /dashboard/logout ends it. Every other route needs
// a session (or an Authorization: Bearer header) and otherwise redirects to
// the login page. An Auth without a token accepts no login.
func Handler(auth *adminauth.Auth) http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h := &handler{auth: auth, files: http.FileServerFS(sub)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"/login", h.loginForm)
	mux.HandleFunc("POST "+Prefix+"/login", h.login)
	mux.HandleFunc("POST "+Prefix+"/logout", h.logout)
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
	})
	mux.Handle(Prefix+"/", h.requireLogin(http.StripPrefix(Prefix, h.static())))
	return securityHeaders(mux)
}

type handler struct {
	auth  *adminauth.Auth
	files http.Handler
}

func (h *handler) requireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.auth.Authorized(r) {
			http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// static serves the bundle; the page itself is never cached so a new
// binary's bundle is picked up at once.
func (h *handler) static() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			w.Header().Set("Cache-Control", "no-store")
		} else {
			w.Header().Set("Cache-Control", "private, max-age=300")
		}
		h.files.ServeHTTP(w, r)
	})
}

func (h *handler) loginForm(w http.ResponseWriter, r *http.Request) {
	renderLogin(w, http.StatusOK, "")
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if ok, wait := h.auth.AllowLogin(r); !ok {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		renderLogin(w, http.StatusTooManyRequests, "Too many sign-in attempts; try again in "+strconv.Itoa(secs)+" s.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		renderLogin(w, http.StatusBadRequest, "The form could not be read; try again.")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	switch {
	case !h.auth.Enabled():
		renderLogin(w, http.StatusUnauthorized, "No admin token is configured: set server.adminToken or FMGATE_ADMIN_TOKEN and restart.")
		return
	case token == "":
		renderLogin(w, http.StatusBadRequest, "Enter the admin token.")
		return
	case !h.auth.ValidToken(token):
		h.auth.LoginFailed()
		renderLogin(w, http.StatusUnauthorized, "That is not the admin token.")
		return
	}
	h.auth.StartSession(w, r)
	http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	h.auth.EndSession(w, r)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}

// loginCSS is inlined in the login page (the only page served before login)
// and allowed by its hash in the Content-Security-Policy.
const loginCSS = `
*{box-sizing:border-box}
body{margin:0;min-height:100vh;display:flex;align-items:center;justify-content:center;background:#f6f4f0;color:#222;font-family:system-ui,"Hiragino Sans","Noto Sans JP",sans-serif}
form{background:#fff;border:1px solid #e2ddd3;border-radius:.6rem;padding:1.5rem 1.8rem;width:22rem;display:flex;flex-direction:column;gap:.7rem}
h1{font-size:1.1rem;margin:0 0 .3rem;color:#1f2a44}
label{font-size:.85rem;color:#555}
input{font:inherit;padding:.5rem;border:1px solid #ccc;border-radius:.4rem}
button{font:inherit;padding:.5rem;background:#1f2a44;color:#fff;border:0;border-radius:.4rem;cursor:pointer}
.err{background:#fdecea;border:1px solid #f5c2c0;color:#8a1f11;padding:.4rem .6rem;border-radius:.4rem;font-size:.9rem}
`

var loginCSP = func() string {
	sum := sha256.Sum256([]byte(loginCSS))
	return "default-src 'none'; img-src data:; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
}()

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fmgate · sign in</title>
<link rel="icon" href="data:,">
<style>{{.CSS}}</style>
</head>
<body>
<form method="post" action="/dashboard/login" autocomplete="off">
  <h1>fmgate dashboards</h1>
  {{if .Error}}<div class="err" role="alert" data-testid="login-error">{{.Error}}</div>{{end}}
  <label for="token">Admin token</label>
  <input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
  <button type="submit" id="signin">Sign in</button>
</form>
</body>
</html>
`))

func renderLogin(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", loginCSP)
	w.WriteHeader(status)
	_ = loginPage.Execute(w, struct {
		CSS   template.CSS
		Error string
	}{template.CSS(loginCSS), msg})
}

// pageCSP lets the dashboard load only its own bundle and talk only to its
// own origin (the admin API and the live event stream).
const pageCSP = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// securityHeaders sets the headers every dashboard response carries. The
// referrer policy is same-origin, not no-referrer: under no-referrer a
// browser sends "Origin: null" with the page's own form posts and fetches,
// which the gateway refuses on requests that change state, as it cannot
// tell them from a sandboxed page on another site.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Content-Security-Policy", pageCSP)
		next.ServeHTTP(w, r)
	})
}
