package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Groupings of a cost Query. The drill-down path is ByTotal → ByFeature →
// ByUser → ByTurn → ByNode; the others slice the same cost by attribution
// or artifact version.
const (
	ByTotal   = "total"
	ByFeature = "feature"
	ByUser    = "user"    // user_id_hash
	ByTurn    = "turn"    // one row per trace, its cost summed over all spans
	ByNode    = "node"    // the spans of one trace; needs Query.Trace
	ByModel   = "model"   // model_id
	ByPrompt  = "prompt"  // prompt_version
	ByGraph   = "graph"   // graph_version
	ByTool    = "tool"    // tool_id
	ByLocale  = "locale"  // attribution.locale
	BySurface = "surface" // attribution.surface
	ByTier    = "tier"    // attribution.user_tier
)

// dimColumns maps the groupings that the per-minute roll-up can answer to
// its column.
var dimColumns = map[string]string{
	ByTotal:   "''",
	ByFeature: "feature",
	ByModel:   "model_id",
	ByPrompt:  "prompt_version",
	ByGraph:   "graph_version",
	ByTool:    "tool_id",
	ByLocale:  "locale",
	BySurface: "surface",
	ByTier:    "user_tier",
}

// Limits of a Query.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
	// DefaultRange is the time range of a Query without From.
	DefaultRange = 24 * time.Hour
)

// ErrInvalid wraps every error caused by a bad Query or argument; the HTTP
// handler answers it with 400.
var ErrInvalid = errors.New("invalid request")

// ErrNotFound is returned by SetEvalScore for an unknown trace or span.
var ErrNotFound = errors.New("not found")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Query selects and groups cost. Spans are placed in time by ts_start; a
// turn by the start of its earliest span.
type Query struct {
	// By is the grouping; default ByTotal.
	By string
	// From and To bound the range [From, To). Default: the DefaultRange
	// before the store's now. Ignored when Trace is set: a trace named
	// explicitly is shown whole.
	From, To time.Time
	// Version filters; each non-empty one must match.
	GraphVersion, PromptVersion, ModelID, ToolID string
	// Attribution filters. User is a user_id_hash; with User set, the
	// user's turns that started in range are selected whole.
	Feature, User, Trace string
	// Limit caps Rows (not Total). Default DefaultLimit; at most MaxLimit.
	Limit int
}

func (q *Query) normalize(now time.Time) error {
	if q.By == "" {
		q.By = ByTotal
	}
	switch q.By {
	case ByUser, ByTurn:
	case ByNode:
		if q.Trace == "" {
			return invalidf("by=node needs a trace")
		}
	default:
		if _, ok := dimColumns[q.By]; !ok {
			return invalidf("unknown grouping %q", q.By)
		}
	}
	if q.To.IsZero() {
		q.To = now
	}
	if q.From.IsZero() {
		q.From = q.To.Add(-DefaultRange)
	}
	if !q.From.Before(q.To) {
		return invalidf("from must be before to")
	}
	if q.Limit == 0 {
		q.Limit = DefaultLimit
	}
	if q.Limit < 0 || q.Limit > MaxLimit {
		return invalidf("limit must be in 1..%d", MaxLimit)
	}
	return nil
}

// CostRow is one group of a CostReport, or its total.
type CostRow struct {
	// Key is the group's value (feature name, user hash, trace id, span
	// id…); "" for the total.
	Key       string  `json:"key"`
	CostUSD   float64 `json:"costUsd"`
	Turns     int64   `json:"turns"` // root ("turn") spans counted
	Spans     int64   `json:"spans"`
	TokensIn  int64   `json:"tokensIn"`
	TokensOut int64   `json:"tokensOut"`
	Errors    int64   `json:"errors"`    // spans with status failed
	Fallbacks int64   `json:"fallbacks"` // spans with status fallback or a fallback tier
	// AvgLatencyMS is the mean span duration.
	AvgLatencyMS float64 `json:"avgLatencyMs"`
	// CostPerTurn is CostUSD / Turns, 0 without turns.
	CostPerTurn float64   `json:"costPerTurn"`
	Turn        *TurnInfo `json:"turn,omitempty"` // set for ByTurn from the turn roll-up
	Span        *SpanInfo `json:"span,omitempty"` // set for ByNode
}

// TurnInfo describes a turn (a trace) in a ByTurn row.
type TurnInfo struct {
	TraceID      string    `json:"traceId"`
	RootSpanID   string    `json:"rootSpanId"`
	UserIDHash   string    `json:"userIdHash"`
	SessionID    string    `json:"sessionId"`
	Feature      string    `json:"feature"`
	Locale       string    `json:"locale"`
	UserTier     string    `json:"userTier"`
	GraphVersion string    `json:"graphVersion"`
	Start        time.Time `json:"start"`
	DurationMS   int64     `json:"durationMs"`
	EvalScore    *float64  `json:"evalScore"`
}

// SpanInfo describes a span in a ByNode row.
type SpanInfo struct {
	SpanID        string    `json:"spanId"`
	ParentSpanID  string    `json:"parentSpanId"`
	Name          string    `json:"name"`
	NodeID        string    `json:"nodeId"`
	ArtifactKind  string    `json:"artifactKind"`
	ModelID       string    `json:"modelId"`
	PromptVersion string    `json:"promptVersion"`
	ToolID        string    `json:"toolId"`
	ToolVersion   string    `json:"toolVersion"`
	CacheHit      string    `json:"cacheHit"`
	Status        string    `json:"status"`
	ErrorCode     string    `json:"errorCode"`
	FallbackUsed  string    `json:"fallbackUsed"`
	Start         time.Time `json:"start"`
	DurationMS    int64     `json:"durationMs"`
	EvalScore     *float64  `json:"evalScore"`
}

// CostReport answers a Query: the total over everything selected and the
// groups, most expensive first (ByNode: in start order).
type CostReport struct {
	By    string    `json:"by"`
	From  time.Time `json:"from"`
	To    time.Time `json:"to"`
	Total CostRow   `json:"total"`
	Rows  []CostRow `json:"rows"`
}

// Cost answers q. Groupings by attribution or version read the per-minute
// roll-up (raw spans only for the partial minutes at the range's edges);
// ByUser and ByTurn read the per-turn roll-up unless a prompt, model or
// tool filter asks for the cost of matching spans only.
func (s *Store) Cost(ctx context.Context, q Query) (CostReport, error) {
	if err := q.normalize(s.now()); err != nil {
		return CostReport{}, err
	}
	spanFilters := q.PromptVersion != "" || q.ModelID != "" || q.ToolID != ""
	var (
		rows  []CostRow
		total *CostRow // nil: the sum of rows, which then hold every group
		err   error
	)
	switch {
	case q.By == ByNode:
		rows, err = s.nodes(ctx, q)
	case (q.By == ByUser || q.By == ByTurn) && !spanFilters:
		rows, total, err = s.fromTurns(ctx, q)
	case q.By == ByUser || q.By == ByTurn || q.User != "" || q.Trace != "":
		rows, total, err = s.fromSpans(ctx, q)
	default:
		rows, err = s.fromMinutes(ctx, q)
	}
	if err != nil {
		return CostReport{}, fmt.Errorf("eventstore: cost: %w", err)
	}
	rep := CostReport{By: q.By, From: q.From.UTC(), To: q.To.UTC(), Rows: rows}
	if total != nil {
		rep.Total = *total
	} else {
		for i := range rows {
			rep.Total.add(&rows[i])
		}
		rep.Total.finish()
	}
	if len(rep.Rows) > q.Limit {
		rep.Rows = rep.Rows[:q.Limit]
	}
	if rep.Rows == nil {
		rep.Rows = []CostRow{}
	}
	return rep, nil
}

func (r *CostRow) add(o *CostRow) {
	r.CostUSD += o.CostUSD
	r.Turns += o.Turns
	r.Spans += o.Spans
	r.TokensIn += o.TokensIn
	r.TokensOut += o.TokensOut
	r.Errors += o.Errors
	r.Fallbacks += o.Fallbacks
	r.AvgLatencyMS += o.AvgLatencyMS * float64(o.Spans)
}

func (r *CostRow) finish() {
	if r.Spans > 0 {
		r.AvgLatencyMS /= float64(r.Spans)
	}
	if r.Turns > 0 {
		r.CostPerTurn = r.CostUSD / float64(r.Turns)
	}
}

// where accumulates a WHERE clause and its arguments.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

func (w *where) eq(col, v string) {
	if v != "" {
		w.add(col+" = ?", v)
	}
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return "1"
	}
	return strings.Join(w.conds, " AND ")
}

// aggCols are the sums every aggregate source yields, in scan order.
const aggCols = `SUM(spans), SUM(turns), SUM(tokens_in), SUM(tokens_out), SUM(cost_usd),
	SUM(errors), SUM(fallbacks), SUM(latency_ms)`

// spanAgg projects raw spans onto the roll-up's columns.
const spanAgg = `1 AS spans, ` + isTurn + ` AS turns, tokens_in, tokens_out, cost_usd, ` +
	isError + ` AS errors, ` + isFallback + ` AS fallbacks, duration_ms AS latency_ms`

func versionFilters(w *where, q *Query, prefix string) {
	w.eq(prefix+"graph_version", q.GraphVersion)
	w.eq(prefix+"prompt_version", q.PromptVersion)
	w.eq(prefix+"model_id", q.ModelID)
	w.eq(prefix+"tool_id", q.ToolID)
	w.eq(prefix+"feature", q.Feature)
}

func (s *Store) fromMinutes(ctx context.Context, q Query) ([]CostRow, error) {
	col := dimColumns[q.By]
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	m0 := ceilMinute(from)
	m1 := floorMinute(to)
	var parts []string
	var args []any
	raw := func(a, b int64) {
		w := where{}
		w.add("ts_start >= ? AND ts_start < ?", a, b)
		versionFilters(&w, &q, "")
		parts = append(parts, `SELECT `+col+` AS k, `+spanAgg+` FROM events WHERE `+w.String())
		args = append(args, w.args...)
	}
	if m0 >= m1 {
		raw(from, to)
	} else {
		w := where{}
		w.add("minute >= ? AND minute < ?", m0, m1)
		versionFilters(&w, &q, "")
		parts = append(parts, `SELECT `+col+` AS k, spans, turns, tokens_in, tokens_out, cost_usd, errors, fallbacks, latency_ms FROM cost_minute WHERE `+w.String())
		args = append(args, w.args...)
		if from < m0 {
			raw(from, m0)
		}
		if m1 < to {
			raw(m1, to)
		}
	}
	sqlText := `SELECT k, ` + aggCols + ` FROM (` + strings.Join(parts, " UNION ALL ") +
		`) GROUP BY k ORDER BY SUM(cost_usd) DESC, k`
	return s.scanAgg(ctx, sqlText, args...)
}

func (s *Store) fromSpans(ctx context.Context, q Query) ([]CostRow, *CostRow, error) {
	col, ok := dimColumns[q.By]
	switch {
	case q.By == ByUser:
		col = "user_id_hash"
	case q.By == ByTurn:
		col = "trace_id"
	case !ok:
		return nil, nil, invalidf("unknown grouping %q", q.By)
	}
	w := where{}
	s.spanScope(&w, &q)
	versionFilters(&w, &q, "")
	src := `(SELECT ` + col + ` AS k, ` + spanAgg + ` FROM events WHERE ` + w.String() + `)`
	rows, err := s.scanAgg(ctx, `SELECT k, `+aggCols+` FROM `+src+
		` GROUP BY k ORDER BY SUM(cost_usd) DESC, k LIMIT ?`, append(w.args, q.Limit)...)
	if err != nil {
		return nil, nil, err
	}
	total, err := s.scanAgg(ctx, `SELECT '', `+aggCols+` FROM `+src, w.args...)
	if err != nil {
		return nil, nil, err
	}
	return rows, &total[0], nil
}

// spanScope restricts raw spans to the query's trace, user or time range,
// choosing the condition an index serves.
func (s *Store) spanScope(w *where, q *Query) {
	switch {
	case q.Trace != "":
		w.add("trace_id = ?", q.Trace)
		w.eq("user_id_hash", q.User)
	case q.User != "":
		w.add(`trace_id IN (SELECT trace_id FROM turns WHERE user_id_hash = ? AND ts_start >= ? AND ts_start < ?)`,
			q.User, q.From.UnixMilli(), q.To.UnixMilli())
	default:
		w.add("ts_start >= ? AND ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
	}
}

func (s *Store) scanAgg(ctx context.Context, sqlText string, args ...any) ([]CostRow, error) {
	rs, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []CostRow
	for rs.Next() {
		var (
			r   CostRow
			lat int64
			n   [7]sql.NullInt64
			c   sql.NullFloat64
		)
		// Sums over no rows are NULL: they read as 0.
		if err := rs.Scan(&r.Key, &n[0], &n[1], &n[2], &n[3], &c, &n[4], &n[5], &n[6]); err != nil {
			return nil, err
		}
		r.Spans, r.Turns, r.TokensIn, r.TokensOut = n[0].Int64, n[1].Int64, n[2].Int64, n[3].Int64
		r.CostUSD, r.Errors, r.Fallbacks, lat = c.Float64, n[4].Int64, n[5].Int64, n[6].Int64
		r.finish()
		if r.Spans > 0 {
			r.AvgLatencyMS = float64(lat) / float64(r.Spans)
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

func turnScope(w *where, q *Query) {
	if q.Trace != "" {
		w.add("trace_id = ?", q.Trace)
	} else {
		w.add("ts_start >= ? AND ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
	}
	w.eq("user_id_hash", q.User)
	w.eq("feature", q.Feature)
	w.eq("graph_version", q.GraphVersion)
}

// turnAgg sums the per-turn roll-up onto the columns of aggCols.
const turnAgg = `SUM(spans), SUM(root_span_id <> ''), SUM(tokens_in), SUM(tokens_out),
	SUM(cost_usd), SUM(errors), SUM(fallbacks), SUM(latency_ms)`

func (s *Store) fromTurns(ctx context.Context, q Query) ([]CostRow, *CostRow, error) {
	w := where{}
	turnScope(&w, &q)
	total, err := s.scanAgg(ctx, `SELECT '', `+turnAgg+` FROM turns WHERE `+w.String(), w.args...)
	if err != nil {
		return nil, nil, err
	}
	args := append(w.args, q.Limit)
	if q.By == ByUser {
		rows, err := s.scanAgg(ctx, `SELECT user_id_hash, `+turnAgg+` FROM turns WHERE `+w.String()+
			` GROUP BY user_id_hash ORDER BY SUM(cost_usd) DESC, user_id_hash LIMIT ?`, args...)
		return rows, &total[0], err
	}
	rows, err := s.turnRows(ctx, `SELECT `+turnCols+` FROM turns WHERE `+w.String()+
		` ORDER BY cost_usd DESC, trace_id LIMIT ?`, args...)
	return rows, &total[0], err
}

func (s *Store) turnRows(ctx context.Context, sqlText string, args ...any) ([]CostRow, error) {
	rs, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []CostRow
	for rs.Next() {
		r, err := scanTurn(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

const turnCols = `trace_id, root_span_id, user_id_hash, session_id, feature, locale, user_tier,
	graph_version, ts_start, duration_ms, eval_score, spans, tokens_in, tokens_out, cost_usd,
	errors, fallbacks, latency_ms`

func scanTurn(rs *sql.Rows) (CostRow, error) {
	var (
		r    CostRow
		t    TurnInfo
		ts   int64
		eval sql.NullFloat64
		lat  int64
	)
	if err := rs.Scan(&t.TraceID, &t.RootSpanID, &t.UserIDHash, &t.SessionID, &t.Feature, &t.Locale,
		&t.UserTier, &t.GraphVersion, &ts, &t.DurationMS, &eval, &r.Spans, &r.TokensIn, &r.TokensOut,
		&r.CostUSD, &r.Errors, &r.Fallbacks, &lat); err != nil {
		return r, err
	}
	t.Start = time.UnixMilli(ts).UTC()
	if eval.Valid {
		t.EvalScore = &eval.Float64
	}
	r.Key = t.TraceID
	if t.RootSpanID != "" {
		r.Turns = 1
	}
	r.AvgLatencyMS = float64(lat)
	r.finish()
	if r.Spans > 0 {
		r.AvgLatencyMS = float64(lat) / float64(r.Spans)
	}
	r.Turn = &t
	return r, nil
}

func (s *Store) nodes(ctx context.Context, q Query) ([]CostRow, error) {
	w := where{}
	s.spanScope(&w, &q)
	versionFilters(&w, &q, "")
	rs, err := s.r.QueryContext(ctx, `SELECT span_id, parent_span_id, name, node_id, artifact_kind,
		model_id, prompt_version, tool_id, tool_version, cache_hit, status, error_code, fallback_used,
		ts_start, duration_ms, eval_score, tokens_in, tokens_out, cost_usd
		FROM events WHERE `+w.String()+` ORDER BY ts_start, id`, w.args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []CostRow
	for rs.Next() {
		var (
			sp   SpanInfo
			r    CostRow
			ts   int64
			eval sql.NullFloat64
		)
		if err := rs.Scan(&sp.SpanID, &sp.ParentSpanID, &sp.Name, &sp.NodeID, &sp.ArtifactKind,
			&sp.ModelID, &sp.PromptVersion, &sp.ToolID, &sp.ToolVersion, &sp.CacheHit, &sp.Status,
			&sp.ErrorCode, &sp.FallbackUsed, &ts, &sp.DurationMS, &eval, &r.TokensIn, &r.TokensOut,
			&r.CostUSD); err != nil {
			return nil, err
		}
		sp.Start = time.UnixMilli(ts).UTC()
		if eval.Valid {
			sp.EvalScore = &eval.Float64
		}
		r.Key = sp.SpanID
		r.Spans = 1
		if sp.Name == "turn" {
			r.Turns = 1
		}
		if sp.Status == "failed" {
			r.Errors = 1
		}
		if sp.Status == "fallback" || sp.FallbackUsed != "" {
			r.Fallbacks = 1
		}
		r.AvgLatencyMS = float64(sp.DurationMS)
		r.finish()
		r.Span = &sp
		out = append(out, r)
	}
	return out, rs.Err()
}

func floorMinute(ms int64) int64 {
	m := ms / 60000 * 60000
	if m > ms {
		m -= 60000
	}
	return m
}

func ceilMinute(ms int64) int64 {
	m := floorMinute(ms)
	if m < ms {
		m += 60000
	}
	return m
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
