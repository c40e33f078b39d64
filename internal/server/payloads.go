package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/judge"
	"github.com/fmgate/fmgate/internal/keystore"
	"github.com/fmgate/fmgate/internal/metrics"
	"github.com/fmgate/fmgate/internal/payloadlog"
)

// payloadFeature is the feature of the payload log's audit spans: every
// read of a payload, every export and every user forgotten is one.
const payloadFeature = "payload_admin"

// Bounds of the payload admin routes.
const (
	// defaultExport and maxExport bound the records of one export.
	defaultExport = 10_000
	maxExport     = 100_000
	// maxJudged bounds the records of one POST /admin/payloads/judge, and
	// maxJudgeBody its body.
	maxJudged    = 1000
	maxJudgeBody = 16 << 20
	// adminTimeout bounds a payload store call of the admin API.
	adminTimeout = 10 * time.Second
)

// payloads is the payload log as the server runs it.
type payloads struct {
	log    *payloadlog.Log
	writer *payloadlog.Writer
}

// openPayloads opens the payload log when payloadLog.enabled is on: its
// store beside the event store (payloads.db in its directory, or its
// PostgreSQL database in fleet mode), its key from the environment, its
// writer and its retention loop. It refuses to start without the key.
func (s *Server) openPayloads(ctx context.Context, cfg config.Config) (*payloads, error) {
	pc := cfg.PayloadLog
	if !pc.Enabled {
		return nil, nil
	}
	raw := os.Getenv(pc.KeyEnv)
	if raw == "" {
		return nil, fmt.Errorf("payloadLog: payload logs are on (payloadLog.enabled) but %s is not set: export %s=<32 random bytes in hex, e.g. $(openssl rand -hex 32)>, the key that seals payloads at rest, or switch payload logs off",
			pc.KeyEnv, pc.KeyEnv)
	}
	key, err := keystore.ParseSealKey(raw)
	if err != nil {
		return nil, fmt.Errorf("payloadLog: %s: %w", pc.KeyEnv, err)
	}
	var store payloadlog.Store
	switch {
	case cfg.EventStore.Driver == eventstore.DriverPostgres:
		store, err = payloadlog.OpenPostgres(ctx, cfg.EventStore.PostgresDSN(), "")
	case cfg.EventStore.Path != "" && cfg.EventStore.Path != ":memory:":
		store, err = payloadlog.OpenSQLite(ctx, filepath.Join(filepath.Dir(cfg.EventStore.Path), "payloads.db"))
	default:
		s.log.Info("no event store on disk: payload logs are kept in memory, and lost at exit")
		store, err = payloadlog.OpenSQLite(ctx, ":memory:")
	}
	if err != nil {
		return nil, fmt.Errorf("payloadLog: %w", err)
	}
	l, err := payloadlog.New(store, key)
	if err != nil {
		store.Close()
		return nil, err
	}
	w := payloadlog.NewWriter(l, pc.Queue, pc.WriteTimeout, s.log)
	s.closers = append(s.closers, func() {
		// What is queued is written, within the bound of a shutdown.
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = w.Close(cctx)
		_ = store.Close()
	})
	if s.Metrics != nil {
		s.Metrics.RegisterPayloads(func() metrics.PayloadCounts {
			st := w.Stats()
			return metrics.PayloadCounts{Written: st.Written, Dropped: st.Dropped}
		})
	}
	return &payloads{log: l, writer: w}, nil
}

// startPruning runs the retention loop of the payload log, once the
// gateway (whose config in force it reads) is built; it stops on Close,
// before the store closes.
func (s *Server) startPruning(p *payloads, interval time.Duration) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.prunePayloads(ctx, p.log, interval) })
	s.closers = append(s.closers, func() { cancel(); wg.Wait() })
}

// prunePayloads deletes the payloads past payloadLog.retention (the one in
// force) at start and every interval, each run bounded (Log.Prune).
func (s *Server) prunePayloads(ctx context.Context, l *payloadlog.Log, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		n, err := l.Prune(rctx, time.Now().Add(-s.config().PayloadLog.Retention))
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("payload log: expired payloads not deleted; the next run tries again", "err", err)
		case n > 0:
			s.log.Info("payload log: expired payloads deleted", "payloads", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// payloadMeta is a payload as GET /admin/payloads lists it: its columns,
// never its text.
type payloadMeta struct {
	TraceID  string    `json:"traceId"`
	At       time.Time `json:"at"`
	UserHash string    `json:"userIdHash"`
	KeyID    string    `json:"keyId,omitempty"`
	Feature  string    `json:"feature"`
}

// mountPayloads serves the payload log's admin routes (behind the admin
// token or a dashboard session, as all of /admin/):
//
//	GET  /admin/payloads?from=&to=&feature=&user=&key=&trace=&limit=   the payloads kept, without their text
//	GET  /admin/payloads/{traceId}                                     one turn's payload (audited)
//	GET  /admin/payloads/export?from=&to=&feature=&user=&key=&limit=   JSON lines (audited)
//	POST /admin/payloads/judge                                         the judge's rubric over a JSON-lines dataset
//	POST /admin/forget {"userId"|"userIdHash"}                          a user's payloads deleted, their spans pseudonymized (audited)
//
// With payload logs off the payload routes answer 404 payload_log_off;
// /admin/forget still pseudonymizes the user's spans.
func (s *Server) mountPayloads(p *payloads) {
	off := func(w http.ResponseWriter) bool {
		if p != nil {
			return false
		}
		writeJSON(w, http.StatusNotFound, adminError("payload_log_off", "Payload logs are off on this gateway (payloadLog.enabled)."))
		return true
	}
	s.admin.HandleFunc("GET /admin/payloads", func(w http.ResponseWriter, r *http.Request) {
		if off(w) {
			return
		}
		f, trace, err := payloadFilter(r, 100, 1000)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminError("invalid_request", err.Error()))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
		defer cancel()
		list := []payloadMeta{}
		keep := func(row payloadlog.Row) error {
			list = append(list, payloadMeta{TraceID: row.TraceID, At: row.At, UserHash: row.UserHash, KeyID: row.KeyID, Feature: row.Feature})
			return nil
		}
		if trace != "" {
			var row payloadlog.Row
			var ok bool
			if row, ok, err = p.log.Store().Get(ctx, trace); ok {
				err = keep(row)
			}
		} else {
			err = p.log.Store().Scan(ctx, f, keep)
		}
		if err != nil {
			payloadStoreDown(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"payloads": list})
	})
	s.admin.HandleFunc("GET /admin/payloads/{traceId}", func(w http.ResponseWriter, r *http.Request) {
		if off(w) {
			return
		}
		trace := r.PathValue("traceId")
		if !eventstore.ValidTraceID(trace) {
			writeJSON(w, http.StatusBadRequest, adminError("invalid_request", "traceId: must be 32 lowercase hex digits"))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
		defer cancel()
		rec, ok, err := p.log.Get(ctx, trace)
		switch {
		case errors.Is(err, payloadlog.ErrSealed):
			writeJSON(w, http.StatusInternalServerError, adminError("payload_sealed",
				"This turn's payload does not open: it was sealed under another key than the one in "+s.config().PayloadLog.KeyEnv+"."))
			return
		case err != nil:
			payloadStoreDown(w, err)
			return
		case !ok:
			writeJSON(w, http.StatusNotFound, adminError("not_found", "No payload was logged for this turn (it was not chosen, or it expired or was deleted)."))
			return
		}
		s.auditPayload(r, "viewed", trace, "")
		writeJSON(w, http.StatusOK, rec)
	})
	s.admin.HandleFunc("GET /admin/payloads/export", func(w http.ResponseWriter, r *http.Request) {
		if off(w) {
			return
		}
		f, trace, err := payloadFilter(r, defaultExport, maxExport)
		if err == nil && trace != "" {
			err = errors.New("trace: not a filter of the export; read one turn with GET /admin/payloads/{traceId}")
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminError("invalid_request", err.Error()))
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="fmgate-payloads.jsonl"`)
		ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
		defer cancel()
		n, err := p.log.Export(ctx, f, w)
		s.auditPayload(r, "exported", "", fmt.Sprintf("%d payloads (%s)", n, r.URL.RawQuery))
		if err != nil {
			// The status is sent: the stream ends short, and the log says why.
			s.log.Warn("payload export ended early", "payloads", n, "err", err)
		}
	})
	s.admin.HandleFunc("POST /admin/payloads/judge", func(w http.ResponseWriter, r *http.Request) {
		if s.judger == nil {
			writeJSON(w, http.StatusServiceUnavailable, adminError("no_judge", "This gateway runs no judge."))
			return
		}
		body := http.MaxBytesReader(w, r.Body, maxJudgeBody)
		var recs []payloadlog.Record
		err := payloadlog.ReadRecords(body, func(rec payloadlog.Record) error {
			if len(recs) == maxJudged {
				return fmt.Errorf("more than %d records: judge the dataset in parts", maxJudged)
			}
			recs = append(recs, rec)
			return nil
		})
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminError("invalid_request", "the body must be a payload export (JSON lines): "+err.Error()))
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson; charset=utf-8")
		_ = s.JudgeRecords(r.Context(), recs, w)
	})
	s.admin.HandleFunc("POST /admin/forget", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			UserID     string `json:"userId"`
			UserIDHash string `json:"userIdHash"`
		}
		if !decodeAdmin(w, r, &body) {
			return
		}
		user := body.UserIDHash
		switch {
		case (body.UserID == "") == (body.UserIDHash == ""):
			writeJSON(w, http.StatusBadRequest, adminError("invalid_request", "give exactly one of userId (the user's id, hashed here as the events hash it) and userIdHash"))
			return
		case body.UserID != "":
			user = s.hasher.Hash(body.UserID)
		}
		ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
		defer cancel()
		out := map[string]any{"userIdHash": user}
		if p != nil {
			n, err := p.log.Forget(ctx, user)
			if err != nil {
				payloadStoreDown(w, err)
				return
			}
			out["payloadsDeleted"] = n
		}
		if f, ok := s.store.(eventstore.Forgetter); ok {
			n, err := f.ForgetUser(ctx, user, eventstore.NewPseudonym())
			if err != nil {
				w.Header().Set("Retry-After", "5")
				writeJSON(w, http.StatusServiceUnavailable, adminError("event_store_unavailable",
					"The user's payloads are deleted, but the event store did not answer: their spans are not pseudonymized yet. Try again. ("+err.Error()+")"))
				return
			}
			out["spansPseudonymized"] = n
		}
		if !s.stableHashes() {
			out["note"] = "No events.privacy.hashSecret (or FMGATE_HASH_SECRET) is set: user id hashes differ between runs, so data from earlier runs is found only by its own hash (userIdHash)."
		}
		s.auditPayload(r, "forgotten", "", "a user forgotten")
		writeJSON(w, http.StatusOK, out)
	})
}

// stableHashes reports whether user id hashes are keyed by a secret that
// outlives this process.
func (s *Server) stableHashes() bool {
	return s.config().Events.Privacy.HashSecret != "" || os.Getenv("FMGATE_HASH_SECRET") != ""
}

// payloadFilter reads the payload routes' query.
func payloadFilter(r *http.Request, def, most int) (payloadlog.Filter, string, error) {
	q := r.URL.Query()
	f := payloadlog.Filter{Feature: q.Get("feature"), UserHash: q.Get("user"), KeyID: q.Get("key"), Limit: def}
	for k := range q {
		switch k {
		case "from", "to", "feature", "user", "key", "trace", "limit":
		default:
			return f, "", fmt.Errorf("%s: unknown parameter (from, to, feature, user, key, trace, limit)", k)
		}
	}
	now := time.Now()
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		if d, err := time.ParseDuration(v); err == nil {
			*p.dst = now.Add(d)
			continue
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, "", fmt.Errorf("%s: not an RFC 3339 time or a duration like -24h", p.name)
		}
		*p.dst = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > most {
			return f, "", fmt.Errorf("limit: must be in 1..%d", most)
		}
		f.Limit = n
	}
	trace := q.Get("trace")
	if trace != "" && !eventstore.ValidTraceID(trace) {
		return f, "", errors.New("trace: must be 32 lowercase hex digits")
	}
	return f, trace, nil
}

func payloadStoreDown(w http.ResponseWriter, err error) {
	w.Header().Set("Retry-After", "5")
	writeJSON(w, http.StatusServiceUnavailable, adminError("payload_store_unavailable", "The payload store did not answer; nothing was changed. Try again shortly. ("+err.Error()+")"))
}

// auditPayload records an operator's use of the payload log as a
// payload_audit span in the event store: what was done (its node and
// error code, payload_viewed, payload_exported, payload_forgotten), to
// which turn (its workflow_id is the turn's trace id), by whom and when
// (its note, with the operator as operator names them). It never carries
// the payload, nor the user forgotten.
func (s *Server) auditPayload(r *http.Request, action, trace, detail string) {
	by := operator(r)
	s.log.Info("payload log: "+action, "trace", trace, "detail", detail, "by", by)
	if s.tracer == nil {
		return
	}
	_, span := s.tracer.Start(context.WithoutCancel(r.Context()), "payload_audit", events.WithKind(events.KindInternal),
		events.WithNodeID("payload_"+action), events.WithMustPersist())
	span.SetAttribution(events.Attribution{Feature: payloadFeature, Surface: "admin"})
	span.SetWorkflowID(trace)
	span.SetErrorCode("payload_" + action)
	note := action
	if trace != "" {
		note += " turn " + trace
	}
	if detail != "" {
		note += ": " + detail
	}
	span.SetNote(note + " by " + by)
	span.End()
}

// JudgedRecord is the judge's verdict on one record of a dataset.
type JudgedRecord struct {
	TraceID string        `json:"traceId"`
	Scores  *judge.Scores `json:"scores,omitempty"`
	Overall *float64      `json:"overall,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// JudgeSummary closes a judged dataset.
type JudgeSummary struct {
	Judged      int      `json:"judged"`
	Failed      int      `json:"failed"`
	MeanOverall *float64 `json:"meanOverall,omitempty"`
}

// JudgeRecords grades each record of a payload export with the judge's
// rubric, through the pipeline as the sampled judge does (its tier, its
// prompt, at P2, within judge.timeout each), one at a time, and writes one
// JudgedRecord per line to w, then a JudgeSummary line. Verdicts are not
// stored on the turns: the dataset may come from another gateway.
func (s *Server) JudgeRecords(ctx context.Context, recs []payloadlog.Record, w io.Writer) error {
	return s.JudgeDataset(ctx, func(fn func(payloadlog.Record) error) error {
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	}, w)
}

// JudgeDataset is JudgeRecords over the records each yields (a reader of
// an export: payloadlog.ReadRecords), judged as they are read.
func (s *Server) JudgeDataset(ctx context.Context, each func(func(payloadlog.Record) error) error, w io.Writer) error {
	if s.judger == nil {
		return errors.New("this gateway runs no judge")
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	var sum JudgeSummary
	var total float64
	err := each(func(rec payloadlog.Record) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		out := JudgedRecord{TraceID: rec.TraceID}
		jctx, cancel := context.WithTimeout(ctx, s.judger.cfg.Timeout)
		scores, err := s.judger.score(jctx, judgeJob{trace: rec.TraceID, locale: rec.Payload.Locale, c: judge.Case{
			Question: rec.Payload.Question, Answer: rec.Payload.Answer, Source: cmp.Or(rec.Payload.Source, "model"), Context: rec.Payload.Context}})
		cancel()
		if err != nil {
			out.Error = err.Error()
			sum.Failed++
		} else {
			o := scores.Overall()
			out.Scores, out.Overall = &scores, &o
			sum.Judged++
			total += o
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
		flush()
		return nil
	})
	if sum.Judged > 0 {
		m := math.Round(total/float64(sum.Judged)*1000) / 1000
		sum.MeanOverall = &m
	}
	if eerr := enc.Encode(sum); err == nil {
		err = eerr
	}
	return err
}
