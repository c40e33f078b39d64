package gateway

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/config"
)

// Handler returns the gateway's HTTP routes. adminToken guards /admin/; ui
// serves the embedded pages (may be nil).
func (g *Gateway) Handler(adminToken string, ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !g.Ready() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "draining"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ready": true})
	})
	mux.HandleFunc("POST /v1/chat", g.serveChat)
	mux.HandleFunc("GET /ws", g.serveWS)
	mux.HandleFunc("POST /v1/batch", g.serveBatch)
	mux.HandleFunc("GET /v1/batch/{id}", g.serveBatchStatus)
	for path, allow := range map[string][]string{
		"/healthz": {"GET", "HEAD"}, "/readyz": {"GET", "HEAD"}, "/ws": {"GET", "HEAD"},
		"/v1/chat": {"POST"}, "/v1/batch": {"POST"}, "/v1/batch/{id}": {"GET", "HEAD"},
	} {
		mux.Handle(path, MethodNotAllowed(allow...))
	}
	if g.admin != nil {
		mux.Handle("/admin/", requireToken(adminToken, g.admin))
	}
	if ui != nil {
		mux.Handle("/", ui)
	}
	return mux
}

// MethodNotAllowed answers a JSON 405 whose Allow header lists allow. Mount
// it on a route's path without a method, beside the route's own patterns,
// so that any other method gets it instead of falling through to the pages.
func MethodNotAllowed(allow ...string) http.Handler {
	list := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", list)
		writeError(w, &Error{Status: http.StatusMethodNotAllowed, Code: CodeNotAllowed,
			Message: r.Method + " is not allowed here; use " + list + "."})
	})
}

// serveChat is POST /v1/chat: a JSON answer, or SSE frames with "stream":true.
func (g *Gateway) serveChat(w http.ResponseWriter, r *http.Request) {
	body, err := decodeChatBody(r.Body, int64(g.Config().Server.MaxMessageBytes)*2+4096)
	if err != nil {
		writeError(w, g.Refuse(r.Context(), &Turn{Route: "sendMessage", Surface: "http"}, err))
		return
	}
	t := &Turn{
		RequestID:   body.RequestID,
		SessionID:   body.SessionID,
		Message:     body.Message,
		Locale:      body.Locale,
		Route:       "sendMessage",
		Surface:     "http",
		TraceParent: r.Header.Get("traceparent"),
		// The answer's traceparent: the turn's span and sampled flag,
		// set before the JSON answer, an error or the first SSE frame.
		OnTraceparent: func(tp string) { w.Header().Set("traceparent", tp) },
	}
	if err := g.authenticate(r, body.UserID, t); err != nil {
		writeError(w, g.Refuse(r.Context(), t, err))
		return
	}
	if t.RequestID == "" {
		t.RequestID = newID()
	} else if !g.requests.add(t.UserID + "\x00" + t.RequestID) {
		writeError(w, g.Refuse(r.Context(), t, duplicate(t.RequestID)))
		return
	} else {
		defer g.requests.remove(t.UserID + "\x00" + t.RequestID)
	}

	if body.Stream {
		t.Surface = "sse"
		sse := newSSESender(w)
		out := g.NewStreamOutput(r.Context(), sse, t.RequestID)
		out.EnableStatus()
		defer out.Close()
		if _, err := g.Run(r.Context(), t, out); err != nil && !sse.started() {
			writeError(w, err)
		}
		return
	}
	out := &collector{}
	res, err := g.Run(r.Context(), t, out)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, chatAnswer{
		RequestID:  t.RequestID,
		Text:       out.text(),
		Tier:       res.Tier,
		Degraded:   res.Degraded,
		Confidence: res.Confidence,
		Usage: usageJSON{Input: res.Usage.Input(), Output: res.Usage.OutputTokens,
			CacheRead: res.Usage.CachedInputTokens, CacheWrite: res.Usage.CacheWriteTokens},
		CostUSD:       res.CostUSD,
		CacheSavedUSD: res.CacheSavedUSD,
		TraceID:       res.TraceID,
	})
}

type chatAnswer struct {
	RequestID  string    `json:"requestId"`
	Text       string    `json:"text"`
	Tier       string    `json:"tier"`
	Degraded   bool      `json:"degraded"`
	Confidence float64   `json:"confidence"`
	Usage      usageJSON `json:"usage"`
	CostUSD    float64   `json:"costUsd"`
	// CacheSavedUSD is what the vendor's prompt cache saved (omitted when
	// nothing was read from or written to it).
	CacheSavedUSD float64 `json:"cacheSavedUsd,omitempty"`
	TraceID       string  `json:"traceId"`
}

// usageJSON is an answer's tokens: Input counts every input token, of
// which CacheRead were read from the vendor's prompt cache and CacheWrite
// written to it.
type usageJSON struct {
	Input      int `json:"input"`
	Output     int `json:"output"`
	CacheRead  int `json:"cacheRead,omitempty"`
	CacheWrite int `json:"cacheWrite,omitempty"`
}

// authenticate fills the caller from an API key, or from the trusted user
// header (or WebSocket field) in the demo profile.
func (g *Gateway) authenticate(r *http.Request, bodyUser string, t *Turn) error {
	key, _ := bearer(r)
	return g.Authenticate(r, key, bodyUser, t)
}

// Authenticate fills t's caller for a front door: from key (the API key the
// door read from its vendor's header) when auth.keys are configured, or from
// the trusted user header (X-User-Id, else bodyUser) in the demo profile.
//
// A key with a secretKeyEnv is an access key id that signs its requests;
// its id alone is not a secret, so it is refused here and accepted only by
// AuthenticateSigned.
func (g *Gateway) Authenticate(r *http.Request, key, bodyUser string, t *Turn) error {
	return g.authenticateKey(r, key, bodyUser, t, false)
}

// AuthenticateSigned is Authenticate for a door that verified the request's
// signature with the key's secret (the Bedrock door's SigV4).
func (g *Gateway) AuthenticateSigned(r *http.Request, key string, t *Turn) error {
	return g.authenticateKey(r, key, "", t, true)
}

func (g *Gateway) authenticateKey(r *http.Request, key, bodyUser string, t *Turn, signed bool) error {
	cfg := g.Config()
	auth := cfg.Auth // one authentication, one set of keys
	if cfg.RateLimit.IP.Enabled() {
		t.ClientIP = g.stateHash.Hash(g.clientIP(r))
	}
	if key != "" && (len(auth.Keys) > 0 || g.keys != nil && !g.keys.Empty()) {
		c, found := auth.Keys[key]
		if !found && g.keys != nil {
			c, found = g.keys.Caller(key)
		}
		if !found {
			return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "The API key is not valid."}
		}
		if (c.SecretKeyEnv != "" || c.Signs) && !signed {
			return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
				Message: "This key is an access key id: sign the request with its secret (AWS SigV4); it is not accepted as a bearer key."}
		}
		t.UserID = c.UserID
		t.Tenant = c.Tenant
		t.KeyMonthly, t.KeyDailyUSD, t.KeyMonthlyUSD, t.KeyModels = c.MonthlyRequests, c.DailyCostUSD, c.MonthlyCostUSD, c.Models
		t.KeyPerMinute, t.KeyConcurrent = c.RequestsPerMinute, c.Concurrent
		switch {
		case c.KeyID != "":
			t.KeyHash = c.KeyID // a run-time key: its spend outlives a rotation
		case c.MonthlyRequests > 0 || c.RequestsPerMinute > 0 || c.Concurrent > 0 || c.DailyCostUSD > 0 || c.MonthlyCostUSD > 0:
			t.KeyHash = g.stateHash.Hash(key)
		}
		t.Premium = c.Tier == "premium"
		t.KeyGuardrails = c.Guardrails
		if cfg.PayloadLog.Enabled {
			t.PayloadLog, t.KeyID = c.PayloadLog, c.KeyID
			if t.KeyID == "" {
				t.KeyID = g.stateHash.Hash(key)
			}
		}
		if p, ok := config.ParsePriority(c.Priority); ok {
			t.Priority = Priority(p)
		}
		return nil
	}
	if !auth.TrustUserHeader {
		return &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized, Message: "Send Authorization: Bearer <API key>."}
	}
	user := r.Header.Get("X-User-Id")
	if user == "" {
		user = bodyUser
	}
	if user == "" {
		user = "anon:" + g.clientIP(r)
	}
	if len(user) > 128 {
		return invalid("user id must be at most 128 bytes")
	}
	t.UserID = user
	t.Premium = r.Header.Get("X-User-Tier") == "premium"
	return nil
}

// SigningSecret returns the secret access key requests signed with the
// access key id akid are checked with (SigV4): its auth.keys entry's
// secretKeyEnv, read with getenv now (so a rotated secret applies at
// once), or a run-time key's own. found is false when akid is no key; the
// secret is empty for a key that cannot sign.
func (g *Gateway) SigningSecret(akid string, getenv func(string) string) (secret string, found bool) {
	if c, ok := g.Config().Auth.Keys[akid]; ok {
		if c.SecretKeyEnv == "" {
			return "", true
		}
		return getenv(c.SecretKeyEnv), true
	}
	if g.keys != nil {
		if _, ok := g.keys.Caller(akid); ok {
			secret, _ := g.keys.SigningSecret(akid)
			return secret, true
		}
	}
	return "", false
}

// RuntimeKeys are the API keys managed while the gateway runs (POST
// /admin/keys), looked up after auth.keys.
type RuntimeKeys interface {
	// Caller returns the caller of key when it is usable now.
	Caller(key string) (config.Caller, bool)
	// SigningSecret returns the secret access key of a key that signs
	// Bedrock requests.
	SigningSecret(akid string) (string, bool)
	// Empty reports whether there is no run-time key at all.
	Empty() bool
}

// Bearer returns the token of r's Authorization: Bearer header.
func Bearer(r *http.Request) (string, bool) { return bearer(r) }

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):]), true
	}
	return "", false
}

// clientIP is the address of r's client: its peer, or, when the peer is a
// trusted proxy (server.trustedProxies), the X-Forwarded-For entry nearest
// the gateway that is not a trusted proxy too.
func (g *Gateway) clientIP(r *http.Request) string {
	peer := peerAddr(r.RemoteAddr)
	switch {
	case !peer.IsValid():
		return hostOf(r.RemoteAddr)
	case !trusted(g.proxies, peer):
		return peer.String()
	}
	hops := r.Header.Values("X-Forwarded-For")
	for i := len(hops) - 1; i >= 0; i-- {
		entries := strings.Split(hops[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(entries[j]))
			if err != nil {
				return peer.String() // a forged or garbled hop: stop at the last one trusted
			}
			if a = a.Unmap(); !trusted(g.proxies, a) {
				return a.String()
			}
			peer = a
		}
	}
	return peer.String()
}

func peerAddr(remote string) netip.Addr {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		a, _ := netip.ParseAddr(remote)
		return a.Unmap()
	}
	return ap.Addr().Unmap()
}

func trusted(proxies []netip.Prefix, a netip.Addr) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func hostOf(remote string) string {
	host := remote
	if i := strings.LastIndexByte(host, ':'); i > 0 {
		host = host[:i]
	}
	return host
}

// requireToken guards h with the admin token as a bearer credential,
// compared in constant time. (The dashboard's session cookie is checked by
// internal/adminauth where the dashboards are mounted; the token itself is
// never accepted from a cookie.)
func requireToken(token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !AdminAuthorized(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fmgate admin"`)
			writeError(w, &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
				Message: "The admin API needs Authorization: Bearer <admin token>."})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// AdminAuthorized reports whether r carries the admin token as a Bearer
// header.
func AdminAuthorized(r *http.Request, token string) bool {
	got, ok := bearer(r)
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

func duplicate(id string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeDuplicate,
		Message: "requestId " + strconv.Quote(truncate(id, 40)) + " is already in flight; use a new requestId for a new message."}
}

type errorBody struct {
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Code              string `json:"code"`
	Message           string `json:"message"`
	RetryAfterSeconds int    `json:"retryAfterSeconds,omitempty"`
}

// WriteError sends err as the contract's JSON error shape with its status
// and headers; an error that is not an *Error becomes a 500 hiding its cause.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

// writeError sends err as the JSON error shape with its status and headers.
func writeError(w http.ResponseWriter, err error) {
	e := asEdgeError(err)
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if s := e.RetryAfterSeconds(); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	status := e.Status
	if status == 499 {
		status = http.StatusBadRequest
	}
	writeJSON(w, status, errorBody{Error: errorJSON{Code: e.Code, Message: e.Message, RetryAfterSeconds: e.RetryAfterSeconds()}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// collector is the Output of a JSON answer: it holds the text until the end.
type collector struct {
	buf     strings.Builder
	settled bool
}

func (c *collector) Write(text string) error {
	c.buf.WriteString(text)
	return nil
}
func (c *collector) Started() bool        { return false }
func (c *collector) Discard()             { c.buf.Reset() }
func (c *collector) Finish(*Result) error { c.settled = true; return nil }
func (c *collector) Fail(*Error) error    { c.settled = true; return nil }
func (c *collector) WholeAnswer() bool    { return true }
func (c *collector) text() string         { return c.buf.String() }

// sseSender writes frames as Server-Sent Events. Headers go out with the
// first frame, so a turn refused before any frame still gets a JSON error.
type sseSender struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	wrote   bool
	timeout time.Duration
}

func newSSESender(w http.ResponseWriter) *sseSender {
	return &sseSender{w: w, rc: http.NewResponseController(w)}
}

func (s *sseSender) started() bool { return s.wrote }

// Send implements stream.Sender.
func (s *sseSender) Send(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !s.wrote {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.wrote = true
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = s.rc.SetWriteDeadline(dl)
	}
	if _, err := s.w.Write(append(append([]byte("data: "), frame...), '\n', '\n')); err != nil {
		return err
	}
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
