// Package adminauth decides who is an operator: a request carrying the
// admin token as a bearer credential, or a browser holding a dashboard
// session.
//
// A dashboard session is a random 256-bit id, kept on the server with its
// expiry (default 12h) and sent to the browser in an HttpOnly,
// SameSite=Strict cookie, Secure when the login came over TLS or the
// configured external URL is https. The admin token itself never goes into
// a cookie. A session ends at logout, at expiry, or when the gateway starts
// with another admin token (sessions live in the process and are bound to
// the token they were opened with). Login attempts are limited per client
// address (default 5 a minute), and failed ones across all addresses
// (default 30 a minute), so that guessing from many addresses is as slow:
// the next attempt gets 429 with Retry-After.
package adminauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// CookieName is the cookie that carries the dashboard session id.
const CookieName = "fmgate_admin"

// Defaults of Options.
const (
	DefaultSessionTTL      = 12 * time.Hour
	DefaultLoginsPerMinute = 5
	// DefaultFailedLoginsPerMinute bounds failed logins from all clients
	// together.
	DefaultFailedLoginsPerMinute = 30
	DefaultMaxSessions           = 1024
	// maxClients bounds the login throttle's memory; past it the oldest
	// windows are dropped first.
	maxClients = 10_000
)

// Options tune an Auth; zero fields take the defaults.
type Options struct {
	// SessionTTL is how long a dashboard session lasts after login.
	SessionTTL time.Duration
	// LoginsPerMinute is how many login attempts one client address may
	// make in a minute.
	LoginsPerMinute int
	// FailedLoginsPerMinute is how many logins with a wrong token all
	// clients together may make in a minute; past it every login attempt,
	// with the right token too, waits until the oldest failure is a minute
	// old. While it lasts the admin token still works as a bearer
	// credential.
	FailedLoginsPerMinute int
	// MaxSessions bounds the open sessions; a new login past it ends the
	// session closest to expiry.
	MaxSessions int
	// ExternalURL is the address operators reach the gateway at, e.g.
	// behind a TLS-terminating proxy; when it is https the cookie is Secure
	// even though the request reached fmgate over plain HTTP.
	ExternalURL string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Auth checks operators' credentials. It is safe for concurrent use.
type Auth struct {
	token   [sha256.Size]byte
	enabled bool
	opts    Options
	secure  bool

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]time.Time // digest of the id → expiry
	logins   map[string][]time.Time          // client → attempts in the last minute
	failures []time.Time                     // failed logins in the last minute, oldest first
}

// New returns the Auth for the admin token token; an empty token admits
// nobody.
func New(token string, o Options) *Auth {
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.LoginsPerMinute <= 0 {
		o.LoginsPerMinute = DefaultLoginsPerMinute
	}
	if o.FailedLoginsPerMinute <= 0 {
		o.FailedLoginsPerMinute = DefaultFailedLoginsPerMinute
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	u, err := url.Parse(o.ExternalURL)
	return &Auth{
		token: sha256.Sum256([]byte(token)), enabled: token != "", opts: o,
		secure:   err == nil && strings.EqualFold(u.Scheme, "https"),
		sessions: map[[sha256.Size]byte]time.Time{},
		logins:   map[string][]time.Time{},
	}
}

// Enabled reports whether an admin token is configured.
func (a *Auth) Enabled() bool { return a.enabled }

// ValidToken compares tok with the admin token in constant time.
func (a *Auth) ValidToken(tok string) bool {
	if !a.enabled || tok == "" {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], a.token[:]) == 1
}

// Authorized reports whether r is an operator's: the admin token as
// "Authorization: Bearer", or a live dashboard session cookie.
func (a *Auth) Authorized(r *http.Request) bool {
	if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return a.ValidToken(strings.TrimSpace(auth[7:]))
	}
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" || !a.enabled {
		return false
	}
	key := sha256.Sum256([]byte(c.Value))
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.sessions[key]
	if ok && !a.opts.Now().Before(exp) {
		delete(a.sessions, key)
		return false
	}
	return ok
}

// AllowLogin counts a login attempt from r's client address and reports
// whether it may proceed; when not, retryAfter is when the next one may.
// The address is the connection's peer: behind a proxy all clients share
// the proxy's budget, which errs on the side of refusing. Past
// Options.FailedLoginsPerMinute failures (LoginFailed) no client may try.
func (a *Auth) AllowLogin(r *http.Request) (ok bool, retryAfter time.Duration) {
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	now := a.opts.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recentFailuresLocked(now)
	if len(a.failures) >= a.opts.FailedLoginsPerMinute {
		return false, a.failures[0].Add(time.Minute).Sub(now)
	}
	recent := a.logins[client][:0]
	for _, t := range a.logins[client] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	if len(recent) >= a.opts.LoginsPerMinute {
		a.logins[client] = recent
		return false, recent[0].Add(time.Minute).Sub(now)
	}
	if _, known := a.logins[client]; !known && len(a.logins) >= maxClients {
		a.pruneLogins(now)
	}
	a.logins[client] = append(recent, now)
	return true, 0
}

// LoginFailed records a login attempt that gave a wrong token, for the
// bound on failures across all clients.
func (a *Auth) LoginFailed() {
	now := a.opts.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recentFailuresLocked(now)
	// Attempts allowed together may fail together; the oldest are dropped
	// past the bound, so memory stays bounded and the wait is no longer.
	if n := len(a.failures) - a.opts.FailedLoginsPerMinute + 1; n > 0 {
		a.failures = a.failures[n:]
	}
	a.failures = append(a.failures, now)
}

// recentFailuresLocked drops failures more than a minute old.
func (a *Auth) recentFailuresLocked(now time.Time) {
	i := 0
	for i < len(a.failures) && now.Sub(a.failures[i]) >= time.Minute {
		i++
	}
	a.failures = a.failures[i:]
}

// pruneLogins drops clients with no attempt in the last minute, and if
// that is not enough, all of them: the throttle forgets rather than grows.
func (a *Auth) pruneLogins(now time.Time) {
	for c, ts := range a.logins {
		if len(ts) == 0 || now.Sub(ts[len(ts)-1]) >= time.Minute {
			delete(a.logins, c)
		}
	}
	if len(a.logins) >= maxClients {
		clear(a.logins)
	}
}

// StartSession opens a dashboard session and sets its cookie on w.
func (a *Auth) StartSession(w http.ResponseWriter, r *http.Request) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	id := hex.EncodeToString(b[:])
	exp := a.opts.Now().Add(a.opts.SessionTTL)
	a.mu.Lock()
	if len(a.sessions) >= a.opts.MaxSessions {
		a.evictLocked()
	}
	a.sessions[sha256.Sum256([]byte(id))] = exp
	a.mu.Unlock()
	http.SetCookie(w, a.cookie(r, id, int(a.opts.SessionTTL/time.Second)))
}

// evictLocked ends expired sessions, or else the one closest to expiry.
func (a *Auth) evictLocked() {
	now := a.opts.Now()
	var oldest [sha256.Size]byte
	var oldestExp time.Time
	for k, exp := range a.sessions {
		if !now.Before(exp) {
			delete(a.sessions, k)
			continue
		}
		if oldestExp.IsZero() || exp.Before(oldestExp) {
			oldest, oldestExp = k, exp
		}
	}
	if len(a.sessions) >= a.opts.MaxSessions {
		delete(a.sessions, oldest)
	}
}

// EndSession revokes r's session, if any, and clears its cookie.
func (a *Auth) EndSession(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil {
		a.mu.Lock()
		delete(a.sessions, sha256.Sum256([]byte(c.Value)))
		a.mu.Unlock()
	}
	http.SetCookie(w, a.cookie(r, "", -1))
}

func (a *Auth) cookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: CookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || a.secure,
	}
}
