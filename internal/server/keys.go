package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/keystore"
)

// keyRefresh is how often an instance re-reads the shared key store, so
// that a key revoked on another instance is refused here within it.
const keyRefresh = 500 * time.Millisecond

// defaultRotationGrace is how long a rotated key's old secret still works
// when the rotation names no grace.
const defaultRotationGrace = 24 * time.Hour

// KeyStore says where the API keys created at run time are kept under
// cfg, as the startup banner puts it, and whether keys may be created: a fleet
// (fleet.redis) creates them only when its instances share them, in the
// PostgreSQL database of eventStore.
func KeyStore(cfg config.Config) (where string, creates bool) {
	switch {
	case cfg.EventStore.Driver == eventstore.DriverPostgres:
		return "API keys in PostgreSQL (table fmgate_api_keys)", true
	case cfg.Fleet.Redis != "":
		return "no API keys created at run time (a fleet shares them in PostgreSQL: eventStore.driver postgres)", false
	case cfg.EventStore.Path != "" && cfg.EventStore.Path != ":memory:":
		return "API keys in " + keysFile(cfg), true
	}
	return "API keys in memory (lost at exit)", true
}

// keysFile is the SQLite file of run-time keys: keys.db beside the event
// store.
func keysFile(cfg config.Config) string {
	return filepath.Join(filepath.Dir(cfg.EventStore.Path), "keys.db")
}

// errKeysNotShared refuses to create a key no other instance of the fleet
// would know.
var errKeysNotShared = errors.New("keys not shared")

// openKeys opens the store of run-time keys beside the event store (the
// SQLite file keys.db in its directory, or its PostgreSQL database) and
// the registry over it.
func (s *Server) openKeys(ctx context.Context, cfg config.Config) (*keystore.Registry, error) {
	var store keystore.Store
	var err error
	poll := false
	switch {
	case cfg.EventStore.Driver == eventstore.DriverPostgres:
		store, err = keystore.OpenPostgres(ctx, cfg.EventStore.PostgresDSN(), "")
		poll = true
	case cfg.EventStore.Path != "" && cfg.EventStore.Path != ":memory:":
		// In a fleet without PostgreSQL the file holds keys made before
		// (they may still be changed and revoked here), and no new ones.
		store, err = keystore.OpenSQLite(ctx, keysFile(cfg))
	default:
		if cfg.Fleet.Redis == "" {
			s.log.Info("no event store on disk: API keys created at run time are kept in memory, and lost at exit")
		}
		store, err = keystore.OpenSQLite(ctx, ":memory:")
	}
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = store.Close() })
	var seal []byte
	if v := os.Getenv("FMGATE_KEY_SEAL_KEY"); v != "" {
		if seal, err = keystore.ParseSealKey(v); err != nil {
			return nil, fmt.Errorf("FMGATE_KEY_SEAL_KEY: %w", err)
		}
	}
	channel := cfg.Fleet.KeyPrefix + "keys:changed"
	changed := func() {}
	if poll && s.Redis != nil {
		// Tell the fleet at once; the poll is the backstop.
		changed = func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = s.Redis.Publish(ctx, channel, "1").Err()
		}
	}
	reg, err := keystore.NewRegistry(ctx, store, keystore.Options{
		HashKey: []byte(stateSecret(cfg)), SealKey: seal, Log: s.log, Changed: changed,
		Validate: func(r keystore.Record) error { return s.checkKeyPolicy(r) },
	})
	if err != nil {
		return nil, err
	}
	if poll {
		rctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { reg.Run(rctx, keyRefresh) })
		if s.Redis != nil {
			sub := s.Redis.Subscribe(rctx, channel)
			wg.Go(func() {
				for range sub.Channel() {
					c, cancel := context.WithTimeout(rctx, 2*time.Second)
					_ = reg.Refresh(c)
					cancel()
				}
			})
			s.closers = append(s.closers, func() { cancel(); _ = sub.Close(); wg.Wait() })
		} else {
			s.closers = append(s.closers, func() { cancel(); wg.Wait() })
		}
	}
	return reg, nil
}

// checkKeyPolicy checks a key's policy against the config in force, as
// config validation checks auth.keys.
func (s *Server) checkKeyPolicy(r keystore.Record) error {
	probe := *s.config()
	probe.Auth.Keys = map[string]config.Caller{"(this key)": callerOf(r)}
	var problems []string
	if err := probe.Validate(); err != nil {
		if p, ok := errors.AsType[*config.Problems](err); ok {
			for _, line := range p.List {
				if strings.Contains(line, "auth.keys.") {
					_, rest, _ := strings.Cut(line, ".") // auth.keys.<key>.field: problem → field: problem
					_, rest, _ = strings.Cut(rest, ".")
					_, rest, _ = strings.Cut(rest, ".")
					problems = append(problems, rest)
				}
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// callerOf is the caller a run-time key stands for.
func callerOf(r keystore.Record) config.Caller {
	return config.Caller{KeyID: r.ID, UserID: r.UserID, Tier: r.Tier, Priority: r.Priority, Tenant: r.Team, Models: r.Models,
		MonthlyRequests: r.MonthlyRequests, RequestsPerMinute: r.RequestsPerMinute, Concurrent: r.Concurrent, DailyCostUSD: r.DailyCostUSD, MonthlyCostUSD: r.MonthlyCostUSD, Signs: r.AccessKeyID != "", PayloadLog: r.PayloadLog,
		Guardrails: r.Guardrails}
}

// runtimeKeys is the registry as the gateway looks keys up.
type runtimeKeys struct{ reg *keystore.Registry }

func (k runtimeKeys) Caller(key string) (config.Caller, bool) {
	r, ok := k.reg.Lookup(key)
	if !ok {
		return config.Caller{}, false
	}
	return callerOf(r), true
}

func (k runtimeKeys) SigningSecret(akid string) (string, bool) { return k.reg.SigningSecret(akid) }
func (k runtimeKeys) Empty() bool                              { return k.reg.Empty() }

// keyView is a key as the admin API shows it.
type keyView struct {
	keystore.Record
	Status string `json:"status"`
	// Spend is what the key spent today and this month, in
	// budget.timezone; absent when the counters did not answer.
	Spend *budget.Spend `json:"spend,omitempty"`
}

func (s *Server) viewKey(r keystore.Record) keyView {
	return s.viewKeys(context.Background(), []keystore.Record{r})[0]
}

// viewKeys shows keys with their spend, read in one call.
func (s *Server) viewKeys(ctx context.Context, keys []keystore.Record) []keyView {
	out := make([]keyView, len(keys))
	accounts := make([]budget.Account, len(keys))
	now := time.Now()
	for i, k := range keys {
		out[i] = keyView{Record: k, Status: k.Status(now)}
		accounts[i] = budget.Account{Scope: budget.ScopeKey, ID: k.ID}
	}
	if s.enforcer == nil {
		return out
	}
	spend, err := s.enforcer.Spend(ctx, accounts)
	if err != nil {
		s.log.Warn("key spend not read", "err", err)
		return out
	}
	for i := range out {
		out[i].Spend = &spend[i]
	}
	return out
}

// mountKeys serves /admin/keys: create, list, read, change, rotate and
// revoke the API keys managed at run time, and read each one's audit
// trail.
func (s *Server) mountKeys(reg *keystore.Registry) {
	s.admin.HandleFunc("GET /admin/keys", func(w http.ResponseWriter, r *http.Request) {
		all, err := reg.List(r.Context())
		if err != nil {
			keyStoreDown(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"keys": s.viewKeys(r.Context(), all)})
	})
	s.admin.HandleFunc("GET /admin/keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, ok, err := reg.Get(r.Context(), r.PathValue("id"))
		switch {
		case err != nil:
			keyStoreDown(w, err)
		case !ok:
			keyError(w, keystore.ErrNotFound)
		default:
			writeJSON(w, http.StatusOK, s.viewKey(k))
		}
	})
	s.admin.HandleFunc("POST /admin/keys", func(w http.ResponseWriter, r *http.Request) {
		var spec keystore.Spec
		if !decodeAdmin(w, r, &spec) {
			return
		}
		if _, ok := KeyStore(*s.config()); !ok {
			keyError(w, errKeysNotShared)
			return
		}
		issued, err := reg.Create(r.Context(), spec, operator(r))
		if err != nil {
			keyError(w, err)
			return
		}
		s.auditKey(r, "created", issued.Record, nil)
		w.Header().Set("Cache-Control", "no-store") // the secret, shown once, is kept by no cache
		writeJSON(w, http.StatusCreated, map[string]any{"key": s.viewKey(issued.Record), "secret": issued.Secret,
			"note": "The secret is shown this once: fmgate keeps only a hash of it."})
	})
	s.admin.HandleFunc("PATCH /admin/keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		var p keystore.Patch
		if !decodeAdmin(w, r, &p) {
			return
		}
		k, err := reg.Update(r.Context(), r.PathValue("id"), p, operator(r))
		if err != nil {
			keyError(w, err)
			return
		}
		s.auditKey(r, "updated", k, p.Fields())
		writeJSON(w, http.StatusOK, s.viewKey(k))
	})
	s.admin.HandleFunc("POST /admin/keys/{id}/rotate", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			GraceSeconds *int `json:"graceSeconds"`
		}
		if r.ContentLength != 0 && !decodeAdmin(w, r, &body) {
			return
		}
		grace := defaultRotationGrace
		if body.GraceSeconds != nil {
			if *body.GraceSeconds < 0 || *body.GraceSeconds > 30*24*3600 {
				writeJSON(w, http.StatusBadRequest, adminError("invalid_request", "graceSeconds: must be between 0 and 2592000 (30 days)"))
				return
			}
			grace = time.Duration(*body.GraceSeconds) * time.Second
		}
		issued, err := reg.Rotate(r.Context(), r.PathValue("id"), grace, operator(r))
		if err != nil {
			keyError(w, err)
			return
		}
		s.auditKey(r, "rotated", issued.Record, nil)
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, map[string]any{"key": s.viewKey(issued.Record), "secret": issued.Secret,
			"note": fmt.Sprintf("The secret is shown this once. The previous one works until %s.", issued.Record.PrevUntil.Format(time.RFC3339))})
	})
	s.admin.HandleFunc("GET /admin/keys/{id}/audit", func(w http.ResponseWriter, r *http.Request) {
		s.serveKeyAudit(w, r, reg)
	})
	s.admin.HandleFunc("DELETE /admin/keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, err := reg.Revoke(r.Context(), r.PathValue("id"), operator(r))
		if err != nil {
			keyError(w, err)
			return
		}
		s.auditKey(r, "revoked", k, nil)
		writeJSON(w, http.StatusOK, s.viewKey(k))
	})
}

// decodeAdmin reads an admin request's JSON body (at most 64 KiB) into v,
// refusing unknown fields by name.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, adminError("invalid_request", "the body must be one JSON object of the documented fields: "+err.Error()))
		return false
	}
	return true
}

func adminError(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func keyError(w http.ResponseWriter, err error) {
	var inv *keystore.InvalidError
	switch {
	case errors.Is(err, keystore.ErrNotFound):
		writeJSON(w, http.StatusNotFound, adminError("not_found", "No key has this id."))
	case errors.Is(err, errKeysNotShared):
		writeJSON(w, http.StatusConflict, adminError("keys_not_shared", "This gateway runs as a fleet (fleet.redis) without PostgreSQL: a key created here would work on this instance alone, and its revocation would not reach the others. "+
			"Set eventStore.driver: postgres (with eventStore.dsn), where every instance reads the same keys, or give the keys in auth.keys."))
	case errors.As(err, &inv):
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": map[string]any{"code": "invalid_key", "message": inv.Error(), "problems": inv.Problems}})
	default:
		keyStoreDown(w, err)
	}
}

func keyStoreDown(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", "5")
	writeJSON(w, http.StatusServiceUnavailable, adminError("key_store_unavailable", "The key store did not answer; nothing was changed. Try again shortly. ("+err.Error()+")"))
}

// operator names who made an admin change: the dashboard session or the
// admin token, with the X-Fmgate-Operator name the caller gives, if any.
func operator(r *http.Request) string {
	by := "admin token"
	if _, ok := gateway.Bearer(r); !ok {
		by = "dashboard session"
	}
	if name := strings.TrimSpace(r.Header.Get("X-Fmgate-Operator")); name != "" {
		if len(name) > 64 {
			name = name[:64]
		}
		by += " (" + name + ")"
	}
	return by
}

// auditKey records a change to a key as a key_audit span in the event
// store: what happened (its error code, key_<action>), to which key (its
// session is the key's id, hashed as every session id is), by whom and
// what an update sent (its note, keyNote), when. It never carries the
// secret.
func (s *Server) auditKey(r *http.Request, action string, k keystore.Record, changed []string) {
	by := operator(r)
	s.log.Info("API key "+action, "key", k.ID, "name", k.Name, "team", k.Team, "by", by, "changed", changed)
	if s.tracer == nil {
		return
	}
	_, span := s.tracer.Start(context.WithoutCancel(r.Context()), eventstore.KeyAuditSpan, events.WithKind(events.KindInternal),
		events.WithNodeID("key_"+action), events.WithMustPersist())
	span.SetAttribution(events.Attribution{Feature: eventstore.KeyAdminFeature, Surface: "admin"})
	span.SetSession(k.ID)
	span.SetErrorCode("key_" + action)
	span.SetNote(keyNote(action, by, changed, k))
	span.End()
}

// keyNote is an audit span's note: the action and who made it first (the
// note is cut at 200 characters), then the fields an update sent, then the
// key's name and team as they became:
//
//	updated by "admin token (ops-kenji)"; changed models, monthlyCostUsd; key "gift finder", team "acme"
//
// readKeyNote reads it back.
func keyNote(action, by string, changed []string, k keystore.Record) string {
	note := action + " by " + strconv.Quote(by)
	if len(changed) > 0 {
		note += "; changed " + strings.Join(changed, ", ")
	}
	return note + fmt.Sprintf("; key %q, team %q", k.Name, k.Team)
}

// readKeyNote reads who made a change and the fields it sent from its
// note (keyNote). A note written before keyNote ("updated key key_… (…)
// by admin token") gives who alone; one without a note (excerpts off, as
// those were kept) gives neither.
func readKeyNote(action, note string) (by string, changed []string) {
	rest, ok := strings.CutPrefix(note, action+" by ")
	if !ok {
		if i := strings.LastIndex(note, ") by "); i >= 0 {
			return note[i+len(") by "):], nil
		}
		return "", nil
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", nil
	}
	by, _ = strconv.Unquote(q)
	if fields, ok := strings.CutPrefix(rest[len(q):], "; changed "); ok {
		fields, _, _ = strings.Cut(fields, ";")
		changed = strings.Split(fields, ", ")
	}
	return by, changed
}

// Bounds of GET /admin/keys/{id}/audit.
const (
	defaultKeyAudit = 50
	maxKeyAudit     = 500
)

// keyAuditEntry is one change to a key as GET /admin/keys/{id}/audit
// shows it.
type keyAuditEntry struct {
	At time.Time `json:"at"`
	// Action is created, updated, rotated or revoked.
	Action string `json:"action"`
	// By is who made it: the admin token or a dashboard session, with
	// the X-Fmgate-Operator name it sent.
	By string `json:"by,omitempty"`
	// Changed are the fields an update sent.
	Changed []string `json:"changed,omitempty"`
	// Note is the audit span's note as stored.
	Note    string `json:"note,omitempty"`
	TraceID string `json:"traceId"`
}

// serveKeyAudit answers GET /admin/keys/{id}/audit?limit=N: the key's
// audit spans from the event store, newest first, at most limit (default
// 50, at most 500).
func (s *Server) serveKeyAudit(w http.ResponseWriter, r *http.Request, reg *keystore.Registry) {
	limit := defaultKeyAudit
	if v, ok := r.URL.Query()["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if len(v) != 1 || err != nil || n < 1 || n > maxKeyAudit {
			writeJSON(w, http.StatusBadRequest, adminError("invalid_request", fmt.Sprintf("limit: must be one whole number from 1 to %d (default %d), not %q", maxKeyAudit, defaultKeyAudit, strings.Join(v, ","))))
			return
		}
		limit = n
	}
	id := r.PathValue("id")
	if _, ok, err := reg.Get(r.Context(), id); err != nil {
		keyStoreDown(w, err)
		return
	} else if !ok {
		keyError(w, keystore.ErrNotFound)
		return
	}
	auditor, ok := s.store.(eventstore.KeyAuditor)
	if !ok {
		writeJSON(w, http.StatusNotImplemented, adminError("no_event_store", "The audit trail is kept in the event store, and this gateway has none: set eventStore.path (or eventStore.driver: postgres)."))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	spans, err := auditor.KeyAudit(ctx, s.hasher.Session(id), limit)
	if err != nil {
		s.log.Warn("key audit not read", "key", id, "err", err)
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, adminError("event_store_unavailable", "The event store did not answer; try again shortly."))
		return
	}
	out := make([]keyAuditEntry, len(spans))
	for i, e := range spans {
		action := strings.TrimPrefix(e.Outcome.ErrorCode, "key_")
		by, changed := readKeyNote(action, e.PromptExcerpt)
		out[i] = keyAuditEntry{At: e.TSStart.UTC(), Action: action, By: by, Changed: changed, Note: e.PromptExcerpt, TraceID: e.TraceID}
	}
	writeJSON(w, http.StatusOK, map[string]any{"keyId": id, "limit": limit, "events": out})
}
