package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
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

// dimColumns are the groupings that the roll-ups answer, with the column
// of dims each reads.
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

// Cost answers q. Groupings by attribution or version read the roll-ups
// (spans only for the partial buckets at the range's edges); ByUser and
// ByTurn read the turns, or with one prompt, model or tool filter the
// per-turn sums of the spans that carried that version; a User or Trace
// filter reads that user's or trace's spans. Only a grouping by user or
// turn with two or more of the prompt, model and tool filters reads every
// span in range.
func (s *Store) Cost(ctx context.Context, q Query) (CostReport, error) {
	if err := q.normalize(s.now()); err != nil {
		return CostReport{}, err
	}
	if err := s.sync(ctx); err != nil {
		return CostReport{}, err
	}
	rep := CostReport{By: q.By, From: q.From.UTC(), To: q.To.UTC()}
	s.clamp(&q)
	var (
		rows  []CostRow
		total CostRow
		err   error
	)
	spanFilters := nonEmpty(q.PromptVersion, q.ModelID, q.ToolID)
	switch {
	case q.By == ByNode:
		rows, err = s.nodes(ctx, q)
		for i := range rows {
			total.add(&rows[i])
		}
		total.finish()
	case (q.By == ByUser || q.By == ByTurn) && spanFilters == 0:
		rows, total, err = s.fromTurns(ctx, q)
	case (q.By == ByUser || q.By == ByTurn) && spanFilters == 1 && q.Trace == "":
		rows, total, err = s.fromTurnVersions(ctx, q)
	case q.By == ByUser || q.By == ByTurn || q.User != "" || q.Trace != "":
		rows, total, err = s.fromSpans(ctx, q)
	default:
		var groups map[string]*agg
		groups, err = s.rollupGroups(ctx, q, func(t *dimTuple) string { return t.get(q.By) })
		rows, total = sortGroups(groups)
	}
	if err != nil {
		return CostReport{}, fmt.Errorf("eventstore: cost: %w", err)
	}
	rep.Total = total
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
	}
	if rows == nil {
		rows = []CostRow{}
	}
	rep.Rows = rows
	return rep, nil
}

func nonEmpty(vs ...string) int {
	n := 0
	for _, v := range vs {
		if v != "" {
			n++
		}
	}
	return n
}

// clamp moves q.From past the pruning horizon: nothing before it is
// stored any more, and a roll-up bucket straddling it still counts spans
// that are gone.
func (s *Store) clamp(q *Query) {
	if p := s.pruned.Load(); p > 0 && q.From.UnixMilli() < p {
		q.From = time.UnixMilli(p).UTC()
		if !q.From.Before(q.To) {
			q.To = q.From
		}
	}
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

// sortGroups turns groups into rows, most expensive first, and their total.
func sortGroups(groups map[string]*agg) ([]CostRow, CostRow) {
	var all agg
	rows := make([]CostRow, 0, len(groups))
	for k, a := range groups {
		rows = append(rows, a.row(k))
		all.merge(a)
	}
	slices.SortFunc(rows, byCost)
	return rows, all.row("")
}

func byCost(a, b CostRow) int {
	return cmp.Or(cmp.Compare(b.CostUSD, a.CostUSD), cmp.Compare(a.Key, b.Key))
}

// rollupGroups sums the spans that started in [q.From, q.To) and match q's
// version and feature filters, grouped by key of their dimension tuple:
// whole buckets from the roll-ups, the rest from the spans.
func (s *Store) rollupGroups(ctx context.Context, q Query, key func(*dimTuple) string) (map[string]*agg, error) {
	groups := map[string]*agg{}
	fine := fineBy(q.By)
	add := func(k string, a *agg) {
		g := groups[k]
		if g == nil {
			g = &agg{}
			groups[k] = g
		}
		g.merge(a)
	}
	for _, p := range plan(q.From.UnixMilli(), q.To.UnixMilli(), levelsFor(fine), nil) {
		if p.lvl == nil {
			err := s.scanSpans(ctx, p.from, p.to, func(e *events.Event, ts int64) {
				if spanMatches(e, &q) {
					t := tupleOf(e, fine)
					g := groups[key(&t)]
					if g == nil {
						g = &agg{}
						groups[key(&t)] = g
					}
					g.addSpan(e, ts)
				}
			})
			if err != nil {
				return nil, err
			}
			continue
		}
		err := s.bucketSums(ctx, q, fine, p, "dims", func(dims int64, a *agg) {
			tuples := s.dict.tuples()
			if dims >= 1 && dims <= int64(len(tuples)) {
				add(key(&tuples[dims-1]), a)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	return groups, nil
}

// bucketSums sums the roll-up buckets of plan part p that match q's
// filters, grouped by the SQL expression group (an integer), and calls fn
// per group.
func (s *Store) bucketSums(ctx context.Context, q Query, fine bool, p planPart, group string, fn func(int64, *agg)) error {
	cond := ""
	if nonEmpty(q.GraphVersion, q.PromptVersion, q.ModelID, q.ToolID, q.Feature) > 0 {
		var ids []string
		for i, t := range s.dict.tuples() {
			if t.fine == fine && t.matches(&q) {
				ids = append(ids, strconv.Itoa(i+1))
			}
		}
		if len(ids) == 0 {
			return nil
		}
		cond = ` AND dims IN (` + strings.Join(ids, ",") + `)`
	}
	rs, err := s.r.QueryContext(ctx, `SELECT `+group+`, SUM(spans), SUM(turns), SUM(tokens_in), SUM(tokens_out),
		SUM(cost_usd), SUM(errors), SUM(fallbacks), SUM(latency_ms), MIN(first_ts), MAX(last_ts)
		FROM rollup WHERE lvl = ? AND bucket >= ? AND bucket < ?`+cond+` GROUP BY 1`, p.lvl.id, p.from, p.to)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var (
			k int64
			a agg
		)
		if err := rs.Scan(&k, &a.spans, &a.turns, &a.tokensIn, &a.tokensOut, &a.cost, &a.errors, &a.fallbacks,
			&a.latency, &a.first, &a.last); err != nil {
			return err
		}
		fn(k, &a)
	}
	return rs.Err()
}

// scanSpans calls fn for every span that started in [from, to), in start
// order. fn must not keep e.
func (s *Store) scanSpans(ctx context.Context, from, to int64, fn func(e *events.Event, ts int64)) error {
	return s.spans(ctx, fn, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start < ? ORDER BY ts_start, id`, from, to)
}

func (s *Store) spans(ctx context.Context, fn func(e *events.Event, ts int64), query string, args ...any) error {
	rs, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	var (
		dec  spanDecoder
		e    events.Event
		id   int64
		ts   int64
		data []byte
	)
	for rs.Next() {
		if err := rs.Scan(&id, &ts, &data); err != nil {
			return err
		}
		if err := dec.decode(data, ts, &e); err != nil {
			return fmt.Errorf("span %d: %w", id, err)
		}
		fn(&e, ts)
	}
	return rs.Err()
}

// traceSpans calls fn for every stored span of trace, in start order
// (ties in the order stored). It returns ErrNotFound when the trace has
// no turn row.
func (s *Store) traceSpans(ctx context.Context, trace string, fn func(e *events.Event, ts int64)) error {
	turns, err := s.findTurns(ctx, trace)
	if err != nil {
		return err
	}
	if len(turns) == 0 {
		return fmt.Errorf("trace %s: %w", trace, ErrNotFound)
	}
	lo, hi := turns[0].ts, turns[0].last
	for _, t := range turns[1:] {
		lo, hi = min(lo, t.ts), max(hi, t.last)
	}
	return s.spans(ctx, func(e *events.Event, ts int64) {
		if e.TraceID == trace {
			fn(e, ts)
		}
	}, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start <= ? AND th = ? ORDER BY ts_start, id`,
		lo, hi, hashID(trace))
}

// findTurns returns the stored turn rows of trace (one, unless the trace
// outlasted TurnWindow), searching every stored minute.
func (s *Store) findTurns(ctx context.Context, trace string) ([]*turnState, error) {
	var lo, hi sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT MIN(minute), MAX(minute) FROM turns`).Scan(&lo, &hi); err != nil {
		return nil, err
	}
	if !lo.Valid {
		return nil, nil
	}
	rs, err := s.r.QueryContext(ctx, `WITH RECURSIVE m(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM m WHERE x < ?)
		SELECT `+turnCols+` FROM m JOIN turns ON turns.minute = m.x AND turns.th = ?`, lo.Int64, hi.Int64, hashID(trace))
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*turnState
	for rs.Next() {
		t, err := scanTurnState(rs)
		if err != nil {
			return nil, err
		}
		if t.trace == trace {
			out = append(out, t)
		}
	}
	return out, rs.Err()
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

// turnRange selects turns that started in [from, to) by their key minute
// and start.
func turnRange(w *where, from, to int64) {
	w.add("minute >= ? AND minute <= ? AND ts_start >= ? AND ts_start < ?",
		floorTo(from, minuteMS)/minuteMS, floorTo(to-1, minuteMS)/minuteMS, from, to)
}

// turnSums sums turns onto the columns that scanAgg reads.
const turnSums = `SUM(spans), SUM(has_root), SUM(tokens_in), SUM(tokens_out), SUM(cost_usd),
	SUM(errors), SUM(fallbacks), SUM(latency_ms)`

func (s *Store) fromTurns(ctx context.Context, q Query) ([]CostRow, CostRow, error) {
	w := where{}
	if q.Trace != "" {
		turns, err := s.findTurns(ctx, q.Trace)
		if err != nil || len(turns) == 0 {
			return nil, CostRow{}, err
		}
		var ors []string
		for _, t := range turns {
			ors = append(ors, "(minute = ? AND th = ?)")
			w.args = append(w.args, t.minute(), t.th)
		}
		w.conds = append(w.conds, "("+strings.Join(ors, " OR ")+")")
	} else {
		turnRange(&w, q.From.UnixMilli(), q.To.UnixMilli())
	}
	w.eq("user_id_hash", q.User)
	w.eq("feature", q.Feature)
	w.eq("graph_version", q.GraphVersion)
	if q.By == ByUser {
		// The window sums total every group before LIMIT cuts them.
		rows, total, err := s.scanAggTotal(ctx, `SELECT user_id_hash, `+turnSums+`,
			SUM(SUM(spans)) OVER (), SUM(SUM(has_root)) OVER (), SUM(SUM(tokens_in)) OVER (),
			SUM(SUM(tokens_out)) OVER (), SUM(SUM(cost_usd)) OVER (), SUM(SUM(errors)) OVER (),
			SUM(SUM(fallbacks)) OVER (), SUM(SUM(latency_ms)) OVER ()
			FROM turns WHERE `+w.String()+` GROUP BY user_id_hash ORDER BY SUM(cost_usd) DESC, user_id_hash LIMIT ?`,
			append(w.args, q.Limit)...)
		return rows, total, err
	}
	total, err := s.scanAgg(ctx, `SELECT '', `+turnSums+` FROM turns WHERE `+w.String(), w.args...)
	if err != nil {
		return nil, CostRow{}, err
	}
	rs, err := s.r.QueryContext(ctx, `SELECT `+turnCols+` FROM turns WHERE `+w.String()+
		` ORDER BY cost_usd DESC, trace_id LIMIT ?`, append(w.args, q.Limit)...)
	if err != nil {
		return nil, CostRow{}, err
	}
	defer rs.Close()
	var rows []CostRow
	for rs.Next() {
		t, err := scanTurnState(rs)
		if err != nil {
			return nil, CostRow{}, err
		}
		rows = append(rows, t.costRow(&t.sums))
	}
	return rows, total[0], rs.Err()
}

// costRow reports the turn with the sums a.
func (t *turnState) costRow(a *agg) CostRow {
	r := a.row(t.trace)
	r.Turn = &TurnInfo{TraceID: t.trace, RootSpanID: t.root, UserIDHash: t.user, SessionID: t.session,
		Feature: t.feature, Locale: t.locale, UserTier: t.tier, GraphVersion: t.graph,
		Start: time.UnixMilli(t.ts).UTC(), DurationMS: t.duration, EvalScore: t.eval}
	return r
}

func (s *Store) scanAgg(ctx context.Context, sqlText string, args ...any) ([]CostRow, error) {
	rows, _, err := s.scanRows(ctx, false, sqlText, args...)
	return rows, err
}

func (s *Store) scanAggTotal(ctx context.Context, sqlText string, args ...any) ([]CostRow, CostRow, error) {
	return s.scanRows(ctx, true, sqlText, args...)
}

// scanRows reads rows of a key and the eight sums of turnSums, followed,
// withTotal, by the same eight sums over every group.
func (s *Store) scanRows(ctx context.Context, withTotal bool, sqlText string, args ...any) ([]CostRow, CostRow, error) {
	rs, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, CostRow{}, err
	}
	defer rs.Close()
	var (
		out   []CostRow
		total CostRow
	)
	for rs.Next() {
		var (
			key   string
			a, t  agg
			n, tn [7]sql.NullInt64
			c, tc sql.NullFloat64
		)
		dst := []any{&key, &n[0], &n[1], &n[2], &n[3], &c, &n[4], &n[5], &n[6]}
		if withTotal {
			dst = append(dst, &tn[0], &tn[1], &tn[2], &tn[3], &tc, &tn[4], &tn[5], &tn[6])
		}
		// Sums over no rows are NULL: they read as 0.
		if err := rs.Scan(dst...); err != nil {
			return nil, CostRow{}, err
		}
		fill := func(a *agg, n *[7]sql.NullInt64, c sql.NullFloat64) {
			a.spans, a.turns, a.tokensIn, a.tokensOut = n[0].Int64, n[1].Int64, n[2].Int64, n[3].Int64
			a.cost, a.errors, a.fallbacks, a.latency = c.Float64, n[4].Int64, n[5].Int64, n[6].Int64
		}
		fill(&a, &n, c)
		out = append(out, a.row(key))
		if withTotal {
			fill(&t, &tn, tc)
			total = t.row("")
		}
	}
	if !withTotal && len(out) > 0 {
		total = out[0]
	}
	return out, total, rs.Err()
}

// fromTurnVersions answers ByUser and ByTurn with one prompt, model or
// tool filter from the sums of the spans that carried that version, per
// turn. Feature and graph filters apply to the turn.
func (s *Store) fromTurnVersions(ctx context.Context, q Query) ([]CostRow, CostRow, error) {
	v := verKey{dimPrompt, q.PromptVersion}
	switch {
	case q.ModelID != "":
		v = verKey{dimModel, q.ModelID}
	case q.ToolID != "":
		v = verKey{dimTool, q.ToolID}
	}
	vid, ok := s.dict.lookupVer(v)
	if !ok {
		return nil, CostRow{}, nil
	}
	type hit struct {
		key    string
		ts, th int64
		sums   agg
	}
	groups := map[string]*agg{}
	var (
		hits  []hit
		total agg
	)
	err := s.turnVersions(ctx, vid, q.From.UnixMilli(), q.To.UnixMilli(), func(tv *turnVersion) {
		if (q.User != "" && tv.user != q.User) || (q.Feature != "" && tv.feature != q.Feature) ||
			(q.GraphVersion != "" && tv.graph != q.GraphVersion) {
			return
		}
		total.merge(&tv.spans)
		if q.By == ByTurn {
			hits = append(hits, hit{ts: tv.ts, th: tv.th, sums: tv.spans})
			return
		}
		g := groups[tv.user]
		if g == nil {
			g = &agg{}
			groups[tv.user] = g
		}
		g.merge(&tv.spans)
	})
	if err != nil {
		return nil, CostRow{}, err
	}
	if q.By == ByUser {
		rows, _ := sortGroups(groups)
		return rows, total.row(""), nil
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(cmp.Compare(b.sums.cost, a.sums.cost), cmp.Compare(a.ts, b.ts), cmp.Compare(a.th, b.th))
	})
	var rows []CostRow
	for _, h := range hits[:min(len(hits), q.Limit)] {
		t, err := s.readTurn(ctx, s.r, h.th, "", floorTo(h.ts, minuteMS)/minuteMS, true, h.ts)
		if err != nil {
			return nil, CostRow{}, err
		}
		if t != nil {
			rows = append(rows, t.costRow(&h.sums))
		}
	}
	slices.SortStableFunc(rows, byCost)
	return rows, total.row(""), nil
}

// turnVersions calls fn for every turn that started in [from, to) and
// carried version vid.
func (s *Store) turnVersions(ctx context.Context, vid, from, to int64, fn func(*turnVersion)) error {
	rs, err := s.r.QueryContext(ctx, `SELECT ts_start, th, data FROM turn_versions
		WHERE vid = ? AND ts_start >= ? AND ts_start < ?`, vid, from, to)
	if err != nil {
		return err
	}
	defer rs.Close()
	var (
		tv   turnVersion
		data []byte
	)
	for rs.Next() {
		if err := rs.Scan(&tv.ts, &tv.th, &data); err != nil {
			return err
		}
		if err := decodeTurnVersion(data, &tv); err != nil {
			return err
		}
		fn(&tv)
	}
	return rs.Err()
}

// fromSpans groups the spans of one trace, of one user's turns, or (with
// two or more span filters) of the whole range.
func (s *Store) fromSpans(ctx context.Context, q Query) ([]CostRow, CostRow, error) {
	groups := map[string]*agg{}
	visit := func(e *events.Event, ts int64) {
		if !spanMatches(e, &q) || (q.User != "" && e.UserIDHash != q.User) {
			return
		}
		k := spanKey(e, q.By)
		g := groups[k]
		if g == nil {
			g = &agg{}
			groups[k] = g
		}
		g.addSpan(e, ts)
	}
	var err error
	switch {
	case q.Trace != "":
		err = s.traceSpans(ctx, q.Trace, visit)
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
	case q.User != "":
		err = s.userSpans(ctx, q, visit)
	default:
		err = s.scanSpans(ctx, q.From.UnixMilli(), q.To.UnixMilli(), visit)
	}
	if err != nil {
		return nil, CostRow{}, err
	}
	rows, total := sortGroups(groups)
	if q.By == ByTurn {
		// Describe the turns shown.
		for i := range rows[:min(len(rows), q.Limit)] {
			turns, err := s.findTurns(ctx, rows[i].Key)
			if err != nil {
				return nil, CostRow{}, err
			}
			if len(turns) > 0 {
				info := turns[0].costRow(&turns[0].sums).Turn
				rows[i].Turn = info
			}
		}
	}
	return rows, total, nil
}

// userSpans visits the spans of the user's turns that started in range.
func (s *Store) userSpans(ctx context.Context, q Query, fn func(e *events.Event, ts int64)) error {
	w := where{}
	turnRange(&w, q.From.UnixMilli(), q.To.UnixMilli())
	w.eq("user_id_hash", q.User)
	rs, err := s.r.QueryContext(ctx, `SELECT ts_start, last_ts, th, trace_id FROM turns WHERE `+w.String(), w.args...)
	if err != nil {
		return err
	}
	type turnRef struct {
		ts, last, th int64
		trace        string
	}
	var refs []turnRef
	for rs.Next() {
		var t turnRef
		if err := rs.Scan(&t.ts, &t.last, &t.th, &t.trace); err != nil {
			rs.Close()
			return err
		}
		refs = append(refs, t)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return err
	}
	for _, t := range refs {
		err := s.spans(ctx, func(e *events.Event, ts int64) {
			if e.TraceID == t.trace {
				fn(e, ts)
			}
		}, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start <= ? AND th = ? ORDER BY ts_start, id`,
			t.ts, t.last, t.th)
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) nodes(ctx context.Context, q Query) ([]CostRow, error) {
	var out []CostRow
	err := s.traceSpans(ctx, q.Trace, func(e *events.Event, ts int64) {
		if !spanMatches(e, &q) || (q.User != "" && e.UserIDHash != q.User) {
			return
		}
		var a agg
		a.addSpan(e, ts)
		r := a.row(e.SpanID)
		sp := SpanInfo{SpanID: e.SpanID, ParentSpanID: e.ParentSpanID, Name: e.Name, NodeID: e.Node.NodeID,
			ArtifactKind: string(e.Artifact.ArtifactKind), ModelID: e.Artifact.ModelID,
			PromptVersion: e.Artifact.PromptVersion, ToolID: e.Artifact.ToolID, ToolVersion: e.Artifact.ToolVersion,
			CacheHit: string(e.Resource.CacheHit), Status: string(e.Outcome.Status), ErrorCode: e.Outcome.ErrorCode,
			FallbackUsed: e.Outcome.FallbackUsed, Start: time.UnixMilli(ts).UTC(), DurationMS: e.DurationMS}
		if e.Outcome.EvalScore != nil {
			v := *e.Outcome.EvalScore
			sp.EvalScore = &v
		}
		r.Span = &sp
		out = append(out, r)
	})
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	return out, err
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
