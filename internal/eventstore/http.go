package eventstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Handler serves the cost and eval views as JSON. Mount it under the
// gateway's authenticated admin prefix; it does no authentication itself.
//
//	GET  /admin/cost?by=&from=&to=&graph=&prompt=&model=&tool=&feature=&user=&trace=&limit=
//	GET  /admin/cost/top-users?from=&to=&limit=
//	GET  /admin/cost/anomalies?from=&to=
//	GET  /admin/cost/rising?from=&to=&periods=
//	GET  /admin/cost/series?from=&to=&step=&graph=&prompt=&model=&tool=&feature=
//	GET  /admin/cost/compare?dim=prompt|graph|model&a=&b=&from=&to=
//	GET  /admin/cost/versions?from=&to=
//	GET  /admin/cost/trace/{traceId}
//	GET  /admin/eval?by=&from=&to=&graph=&prompt=&model=&tool=&feature=&user=&trace=&limit=
//	POST /admin/eval  {"traceId": "…" | "spanId": "…", "score": 0.9}
//
// from and to are RFC 3339 times, "now", or durations relative to now such
// as "-1h" or "-30m"; the default range is the 24 hours before now. Bad
// parameters (including unknown ones) answer 400 with
// {"error":{"code":"invalid_request","message":"…"}}; an unknown trace
// answers 404 with code "not_found".
func (s *Store) Handler() http.Handler { return NewHandler(s, s.now, s.log) }

// NewHandler serves v's views as Store.Handler does; now is the clock of
// relative times and default ranges, log receives internal errors.
func NewHandler(v Views, now func() time.Time, log *slog.Logger) http.Handler {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &handler{v: v, now: now, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/cost", s.handleCost)
	mux.HandleFunc("GET /admin/cost/top-users", s.handleTopUsers)
	mux.HandleFunc("GET /admin/cost/anomalies", s.handleAnomalies)
	mux.HandleFunc("GET /admin/cost/rising", s.handleRising)
	mux.HandleFunc("GET /admin/cost/series", s.handleSeries)
	mux.HandleFunc("GET /admin/cost/compare", s.handleCompare)
	mux.HandleFunc("GET /admin/cost/versions", s.handleVersions)
	mux.HandleFunc("GET /admin/cost/trace/{traceId}", s.handleTrace)
	mux.HandleFunc("GET /admin/eval", s.handleEval)
	mux.HandleFunc("POST /admin/eval", s.handleSetEval)
	return mux
}

// handler serves the views of v.
type handler struct {
	v   Views
	now func() time.Time
	log *slog.Logger
}

var queryParams = []string{"by", "from", "to", "graph", "prompt", "model", "tool", "feature", "user", "trace", "limit"}

func (s *handler) handleCost(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseQuery(r.URL.Query(), queryParams...)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.Cost(r.Context(), q)
	s.reply(w, r, rep, err)
}

func (s *handler) handleTopUsers(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseQuery(r.URL.Query(), "from", "to", "limit")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.TopUsers(r.Context(), q.From, q.To, q.Limit)
	s.reply(w, r, rep, err)
}

func (s *handler) handleAnomalies(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseQuery(r.URL.Query(), "from", "to")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.AnomalousTurns(r.Context(), q.From, q.To)
	s.reply(w, r, rep, err)
}

func (s *handler) handleRising(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	periods := 0
	if p := v.Get("periods"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			s.fail(w, r, invalidf("periods: not an integer"))
			return
		}
		if n == 0 {
			n = -1 // explicit 0 is out of range, not "default"
		}
		periods = n
	}
	v.Del("periods")
	q, err := s.parseQuery(v, "from", "to")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.RisingFeatures(r.Context(), q.From, q.To, periods)
	s.reply(w, r, map[string]any{"from": q.From.UTC(), "to": q.To.UTC(), "features": rep}, err)
}

func (s *handler) handleSeries(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	var step time.Duration
	if st, ok := v["step"]; ok {
		if len(st) != 1 {
			s.fail(w, r, invalidf("step: given more than once"))
			return
		}
		d, err := time.ParseDuration(st[0])
		if err != nil || d <= 0 {
			s.fail(w, r, invalidf("step: not a positive duration like 5m or 1h"))
			return
		}
		step = d
	}
	v.Del("step")
	q, err := s.parseQuery(v, "from", "to", "graph", "prompt", "model", "tool", "feature")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.Series(r.Context(), q, step)
	s.reply(w, r, rep, err)
}

func (s *handler) handleCompare(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	var args [3]string
	for i, k := range []string{"dim", "a", "b"} {
		vals := v[k]
		switch {
		case len(vals) > 1:
			s.fail(w, r, invalidf("%s: given more than once", k))
			return
		case len(vals) == 0 || vals[0] == "":
			s.fail(w, r, invalidf("%s: required", k))
			return
		}
		if err := validFilter(k, vals[0]); err != nil {
			s.fail(w, r, err)
			return
		}
		args[i] = vals[0]
		v.Del(k)
	}
	q, err := s.parseQuery(v, "from", "to")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.Compare(r.Context(), args[0], args[1], args[2], q.From, q.To)
	s.reply(w, r, rep, err)
}

func (s *handler) handleVersions(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseQuery(r.URL.Query(), "from", "to")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.Versions(r.Context(), q.From, q.To)
	s.reply(w, r, rep, err)
}

func (s *handler) handleTrace(w http.ResponseWriter, r *http.Request) {
	if _, err := s.parseQuery(r.URL.Query()); err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.Trace(r.Context(), r.PathValue("traceId"))
	s.reply(w, r, rep, err)
}

func (s *handler) handleEval(w http.ResponseWriter, r *http.Request) {
	q, err := s.parseQuery(r.URL.Query(), queryParams...)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := s.v.Eval(r.Context(), q)
	s.reply(w, r, rep, err)
}

// maxEvalBody bounds POST /admin/eval.
const maxEvalBody = 4096

func (s *handler) handleSetEval(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxEvalBody+1))
	if err != nil {
		s.fail(w, r, invalidf("reading body: %v", err))
		return
	}
	id, score, err := parseEvalBody(body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.v.SetEvalScore(r.Context(), id, score); err != nil {
		s.fail(w, r, err)
		return
	}
	s.reply(w, r, map[string]any{"id": id, "score": score}, nil)
}

// parseEvalBody reads {"traceId"|"spanId", "score"}; both ids together name
// one span of the trace.
func parseEvalBody(body []byte) (string, float64, error) {
	if len(body) > maxEvalBody {
		return "", 0, invalidf("body larger than %d bytes", maxEvalBody)
	}
	var in struct {
		TraceID string   `json:"traceId"`
		SpanID  string   `json:"spanId"`
		Score   *float64 `json:"score"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return "", 0, invalidf("body: %v", err)
	}
	if dec.More() {
		return "", 0, invalidf("body: trailing data")
	}
	if in.Score == nil {
		return "", 0, invalidf("score: required")
	}
	if math.IsNaN(*in.Score) || math.IsInf(*in.Score, 0) {
		return "", 0, invalidf("score: must be finite")
	}
	switch {
	case in.TraceID != "" && len(in.TraceID) != 32, !isHex(in.TraceID):
		return "", 0, invalidf("traceId: must be 32 lowercase hex digits")
	case in.SpanID != "" && len(in.SpanID) != 16, !isHex(in.SpanID):
		return "", 0, invalidf("spanId: must be 16 lowercase hex digits")
	case in.TraceID == "" && in.SpanID == "":
		return "", 0, invalidf("traceId or spanId: required")
	}
	return in.TraceID + in.SpanID, *in.Score, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parseQuery reads the allowed parameters into a Query, rejecting unknown
// ones so that a typo ("modle=") does not silently widen the answer.
func (s *handler) parseQuery(v url.Values, allowed ...string) (Query, error) {
	var q Query
	for k, vals := range v {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			return q, invalidf("unknown parameter %q", k)
		}
		if len(vals) != 1 {
			return q, invalidf("%s: given more than once", k)
		}
	}
	now := s.now()
	var err error
	if q.From, err = parseTime(v.Get("from"), now); err != nil {
		return q, invalidf("from: %v", err)
	}
	if q.To, err = parseTime(v.Get("to"), now); err != nil {
		return q, invalidf("to: %v", err)
	}
	if l := v.Get("limit"); l != "" {
		if q.Limit, err = strconv.Atoi(l); err != nil || q.Limit < 1 || q.Limit > MaxLimit {
			return q, invalidf("limit: must be an integer in 1..%d", MaxLimit)
		}
	}
	q.By = v.Get("by")
	q.GraphVersion = v.Get("graph")
	q.PromptVersion = v.Get("prompt")
	q.ModelID = v.Get("model")
	q.ToolID = v.Get("tool")
	q.Feature = v.Get("feature")
	q.User = v.Get("user")
	q.Trace = v.Get("trace")
	if q.To.IsZero() {
		q.To = now
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-DefaultRange)
	}
	return q, nil
}

// maxLookback bounds relative times so that arithmetic cannot overflow.
const maxLookback = 100 * 365 * 24 * time.Hour

func parseTime(s string, now time.Time) (time.Time, error) {
	switch {
	case s == "":
		return time.Time{}, nil
	case s == "now":
		return now, nil
	case s[0] == '-' || s[0] == '+':
		d, err := time.ParseDuration(s)
		if err != nil {
			return time.Time{}, fmt.Errorf("not RFC 3339 or a duration like -1h")
		}
		if d < -maxLookback || d > maxLookback {
			return time.Time{}, fmt.Errorf("duration out of range")
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("not RFC 3339 or a duration like -1h")
	}
	return t, nil
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, body := http.StatusInternalServerError, apiError{Code: "internal", Message: "internal error"}
	switch {
	case errors.Is(err, ErrInvalid):
		status, body = http.StatusBadRequest, apiError{Code: "invalid_request", Message: strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")}
	case errors.Is(err, ErrUnsupported):
		status, body = http.StatusNotImplemented, apiError{Code: "not_implemented", Message: err.Error()}
	case errors.Is(err, ErrNotFound):
		status, body = http.StatusNotFound, apiError{Code: "not_found", Message: err.Error()}
	case unavailable(s.v, err) != "":
		s.log.Warn("eventstore: admin query: store unavailable", "err", err)
		status, body = http.StatusServiceUnavailable, apiError{Code: "store_unavailable", Message: unavailable(s.v, err)}
	case r.Context().Err() != nil:
		// The client went away (a dashboard view replaced by the next one);
		// nobody reads this answer and nothing is wrong with the store.
		s.log.Debug("eventstore: admin query cancelled by the client", "err", err)
		return
	default:
		s.log.Error("eventstore: admin query", "err", err)
	}
	writeJSON(w, status, map[string]apiError{"error": body})
}

// Unavailable is implemented by a Views whose store can be out of reach
// (a database): it tells an error meaning the store cannot answer at all
// from one of a query, with what the operator can do, or "".
type Unavailable interface {
	Unavailable(err error) string
}

func unavailable(v Views, err error) string {
	if u, ok := v.(Unavailable); ok {
		return u.Unavailable(err)
	}
	return ""
}

func (s *handler) reply(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
