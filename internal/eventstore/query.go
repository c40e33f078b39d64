package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

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

// rollupGroupings are the groupings that the roll-ups answer (dimTuple.get).
var rollupGroupings = map[string]bool{
	ByTotal: true, ByFeature: true, ByModel: true, ByPrompt: true, ByGraph: true,
	ByTool: true, ByLocale: true, BySurface: true, ByTier: true,
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

// ErrUnstorable wraps a write's error when the batch holds a span the
// store cannot hold, whatever the retries: the writer may write the batch
// in parts to find it, and store the others.
var ErrUnstorable = errors.New("a span the store cannot hold")

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
		if !rollupGroupings[q.By] {
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
	for _, f := range [...]struct{ name, v string }{{"graph", q.GraphVersion}, {"prompt", q.PromptVersion},
		{"model", q.ModelID}, {"tool", q.ToolID}, {"feature", q.Feature}, {"user", q.User}, {"trace", q.Trace}} {
		if err := validFilter(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// maxFilterBytes bounds a filter's value: the names and ids it matches are
// far shorter.
const maxFilterBytes = 256

// validFilter checks a filter's value: text no stored value could fail to
// compare with (UTF-8 without NUL, which PostgreSQL refuses), of a bounded
// length.
func validFilter(name, v string) error {
	switch {
	case len(v) > maxFilterBytes:
		return invalidf("%s must be at most %d bytes", name, maxFilterBytes)
	case !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0:
		return invalidf("%s must be UTF-8 text without NUL bytes", name)
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
	Fallbacks int64   `json:"fallbacks"` // turns served by a fallback tier (status fallback or a fallback tier on the turn span)
	// AvgLatencyMS is the mean span duration.
	AvgLatencyMS float64 `json:"avgLatencyMs"`
	// CostPerTurn is CostUSD / Turns, 0 without turns.
	CostPerTurn float64 `json:"costPerTurn"`
	// CacheReadTokens and CacheWriteTokens are the part of TokensIn the
	// vendors read from and wrote to their prompt caches; CacheSavedUSD is
	// what the spans would have cost at the plain input price less what
	// they cost (negative when writes cost more than reads saved).
	// CacheReadRatio is CacheReadTokens / TokensIn, 0 without input. Every
	// grouping but ByUser and ByTurn carries them (the roll-ups and the
	// spans keep them); ByUser and ByTurn rows and totals, and so top
	// users and anomalous turns, leave them 0: turn rows do not keep them.
	CacheReadTokens  int64     `json:"cacheReadTokens"`
	CacheWriteTokens int64     `json:"cacheWriteTokens"`
	CacheSavedUSD    float64   `json:"cacheSavedUsd"`
	CacheReadRatio   float64   `json:"cacheReadRatio"`
	Turn             *TurnInfo `json:"turn,omitempty"` // set for ByTurn from the turn roll-up
	Span             *SpanInfo `json:"span,omitempty"` // set for ByNode
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
	if q.By == ByUser || q.By == ByTurn {
		// Whatever the path, so that a view never carries them for some
		// filters and not others.
		total.dropCache()
		for i := range rows {
			rows[i].dropCache()
		}
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
	r.CacheReadTokens += o.CacheReadTokens
	r.CacheWriteTokens += o.CacheWriteTokens
	r.CacheSavedUSD += o.CacheSavedUSD
}

func (r *CostRow) finish() {
	if r.Spans > 0 {
		r.AvgLatencyMS /= float64(r.Spans)
	}
	if r.Turns > 0 {
		r.CostPerTurn = r.CostUSD / float64(r.Turns)
	}
	r.CacheReadRatio = CacheReadRatio(r.CacheReadTokens, r.TokensIn)
}

// CacheReadRatio is the share of input tokens read from a prompt cache:
// read / in, 0 without input.
func CacheReadRatio(read, in int64) float64 {
	if in <= 0 {
		return 0
	}
	return float64(read) / float64(in)
}

// dropCache zeroes the prompt cache's figures: see CostRow.
func (r *CostRow) dropCache() {
	r.CacheReadTokens, r.CacheWriteTokens, r.CacheSavedUSD, r.CacheReadRatio = 0, 0, 0, 0
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
			err := s.scanSpans(ctx, p.from, p.to, true, func(e *events.Event, ts int64) {
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
		SUM(cost_usd), SUM(errors), SUM(fallbacks), SUM(latency_ms), MIN(first_ts), MAX(last_ts),
		SUM(cache_read), SUM(cache_write), SUM(cache_saved_usd)
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
			&a.latency, &a.first, &a.last, &a.cacheRead, &a.cacheWrite, &a.cacheSaved); err != nil {
			return err
		}
		fn(k, &a)
	}
	return rs.Err()
}

// scanSpans calls fn for every span that started in [from, to), in no
// particular order. fn must not keep e. With noIDs, the spans' ids are left
// empty.
func (s *Store) scanSpans(ctx context.Context, from, to int64, noIDs bool, fn func(e *events.Event, ts int64)) error {
	return s.spansDec(ctx, spanDecoder{skipIDs: noIDs}, fn, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start < ?`, from, to)
}

func (s *Store) spans(ctx context.Context, fn func(e *events.Event, ts int64), query string, args ...any) error {
	return s.spansDec(ctx, spanDecoder{}, fn, query, args...)
}

func (s *Store) spansDec(ctx context.Context, dec spanDecoder, fn func(e *events.Event, ts int64), query string, args ...any) error {
	rs, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rs.Close()
	var (
		e    events.Event
		id   int64
		ts   int64
		data sql.RawBytes
	)
	for rs.Next() {
		if err := rs.Scan(&id, &ts, &data); err != nil {
			return err
		}
		err := eachRecord(data, ts, func(rec []byte, ts int64) error {
			if dec.skipTallies && isTally(rec) {
				return nil
			}
			if err := dec.decode(rec, ts, &e); err != nil {
				return err
			}
			fn(&e, ts)
			return nil
		})
		if err != nil {
			return fmt.Errorf("span %d: %w", id, err)
		}
	}
	return rs.Err()
}

// traceSpans calls fn for every stored span of trace, in start order
// (ties in the order stored), tallies included unless wholeOnly. It
// returns ErrNotFound when the trace has no turn row.
func (s *Store) traceSpans(ctx context.Context, trace string, wholeOnly bool, fn func(e *events.Event, ts int64)) error {
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
	return s.spansDec(ctx, spanDecoder{skipTallies: wholeOnly}, func(e *events.Event, ts int64) {
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
	// MIN or MAX alone reads one end of the key; both in one SELECT scan.
	if err := s.r.QueryRowContext(ctx, `SELECT (SELECT MIN(minute) FROM turns), (SELECT MAX(minute) FROM turns)`).Scan(&lo, &hi); err != nil {
		return nil, err
	}
	if !lo.Valid {
		return nil, nil
	}
	rs, err := s.r.QueryContext(ctx, `WITH RECURSIVE m(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM m WHERE x < ?)
		SELECT `+turnCols+` FROM m JOIN turns t ON t.minute = m.x AND t.th = ?
		JOIN turn_info i ON i.minute = t.minute AND i.th = t.th`, lo.Int64, hi.Int64, hashID(trace))
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
	w.add("t.minute >= ? AND t.minute <= ? AND t.ts_start >= ? AND t.ts_start < ?",
		floorTo(from, minuteMS)/minuteMS, floorTo(to-1, minuteMS)/minuteMS, from, to)
}

// turnSums sums turns onto the columns that scanAgg reads.
const turnSums = `SUM(t.spans), SUM(t.has_root), SUM(t.tokens_in), SUM(t.tokens_out), SUM(t.cost_usd),
	SUM(t.errors), SUM(t.fallbacks), SUM(t.latency_ms)`

func (s *Store) fromTurns(ctx context.Context, q Query) ([]CostRow, CostRow, error) {
	if q.Trace != "" {
		turns, err := s.findTurns(ctx, q.Trace)
		if err != nil || len(turns) == 0 {
			return nil, CostRow{}, err
		}
		w := where{}
		var ors []string
		for _, t := range turns {
			ors = append(ors, "(t.minute = ? AND t.th = ?)")
			w.args = append(w.args, t.minute(), t.th)
		}
		w.conds = append(w.conds, "("+strings.Join(ors, " OR ")+")")
		turnFilters(&w, &q)
		return s.fewTurns(ctx, w, q.Limit)
	}
	if q.By == ByUser {
		if q.GraphVersion == "" && q.User == "" {
			return s.featureUsers(ctx, q)
		}
		return s.topUsers(ctx, q)
	}
	w := where{}
	turnRange(&w, q.From.UnixMilli(), q.To.UnixMilli())
	turnFilters(&w, &q)
	if q.User != "" {
		return s.fewTurns(ctx, w, q.Limit)
	}
	total, err := s.scanAgg(ctx, `SELECT '', `+turnSums+` FROM turns t WHERE `+w.String(), w.args...)
	if err != nil {
		return nil, CostRow{}, err
	}
	// The costliest turns by the narrow rows, then their details.
	rs, err := s.r.QueryContext(ctx, `SELECT t.minute, t.th FROM turns t WHERE `+w.String()+
		` ORDER BY t.cost_usd DESC, t.th LIMIT ?`, append(w.args, q.Limit)...)
	if err != nil {
		return nil, CostRow{}, err
	}
	keys, err := scanTurnKeys(rs)
	if err != nil {
		return nil, CostRow{}, err
	}
	turns, err := s.turnsByKey(ctx, keys)
	if err != nil {
		return nil, CostRow{}, err
	}
	rows := make([]CostRow, 0, len(turns))
	for _, t := range turns {
		rows = append(rows, t.costRow(&t.sums))
	}
	slices.SortFunc(rows, byCost)
	return rows, total[0], nil
}

// turnKey is a turn's primary key.
type turnKey struct{ minute, th int64 }

func scanTurnKeys(rs *sql.Rows) ([]turnKey, error) {
	defer rs.Close()
	var keys []turnKey
	for rs.Next() {
		var k turnKey
		if err := rs.Scan(&k.minute, &k.th); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rs.Err()
}

// turnsByKey reads whole turns.
func (s *Store) turnsByKey(ctx context.Context, keys []turnKey) ([]*turnState, error) {
	var out []*turnState
	for len(keys) > 0 {
		n := min(len(keys), 400)
		args := make([]any, 0, 2*n)
		for _, k := range keys[:n] {
			args = append(args, k.minute, k.th)
		}
		rs, err := s.r.QueryContext(ctx, `SELECT `+turnCols+` FROM `+turnFrom+` WHERE (t.minute, t.th) IN (VALUES `+
			strings.Repeat("(?,?),", n-1)+`(?,?))`, args...)
		if err != nil {
			return nil, err
		}
		for rs.Next() {
			t, err := scanTurnState(rs)
			if err != nil {
				rs.Close()
				return nil, err
			}
			out = append(out, t)
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return nil, err
		}
		keys = keys[n:]
	}
	return out, nil
}

// turnAggCols are the sums of a turn row, in scanTurnAgg's order.
const turnAggCols = `t.cost_usd, t.has_root, t.spans, t.tokens_in, t.tokens_out, t.errors, t.fallbacks, t.latency_ms`

// inParts splits [from, to) into up to scanParts ranges of whole minutes
// and runs fn on each at once, on the readers' connections: the views that
// must read every turn in range use both cores. start is called first with
// the number of parts; fn gets its part's index.
func (s *Store) inParts(ctx context.Context, from, to int64, start func(n int), fn func(i int, from, to int64) error) error {
	n := max(1, min(scanParts, int((to-from)/minuteMS)))
	if s.r == s.w {
		n = 1 // ":memory:": one connection
	}
	start(n)
	bounds := make([]int64, n+1)
	bounds[0], bounds[n] = from, to
	for i := 1; i < n; i++ {
		bounds[i] = floorTo(from+(to-from)*int64(i)/int64(n), minuteMS)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i, bounds[i], bounds[i+1]) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// collectInParts runs the query that build returns (given the part's time
// range in w) over each part of [lo, hi) at once, as inParts does, and
// returns every row scan read, the parts' rows in order.
func collectInParts[T any](ctx context.Context, s *Store, lo, hi int64, build func(w *where) string, scan func(*sql.Rows, *T) error) ([]T, error) {
	var parts [][]T
	err := s.inParts(ctx, lo, hi, func(n int) { parts = make([][]T, n) }, func(i int, from, to int64) error {
		w := where{}
		turnRange(&w, from, to)
		q := build(&w)
		rs, err := s.r.QueryContext(ctx, q, w.args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var v T
			if err := scan(rs, &v); err != nil {
				return err
			}
			parts[i] = append(parts[i], v)
		}
		return rs.Err()
	})
	return slices.Concat(parts...), err
}

// scanParts is how many parts inParts runs at once: the cores of the
// machines fmgate is sized for, and at most the readers' connections.
var scanParts = min(runtime.GOMAXPROCS(0), 4)

// turnFilters adds q's turn-level filters.
func turnFilters(w *where, q *Query) {
	w.eq("t.user_id_hash", q.User)
	w.eq("t.feature", q.Feature)
	w.eq("t.graph_version", q.GraphVersion)
}

// topUsers sums the turns selected by q per user and returns the limit
// costliest users and the total. The grouping happens here rather than in
// SQL, and over parts of the range at once: grouping hundreds of thousands
// of turns by user makes SQLite sort them all, several times slower.
func (s *Store) topUsers(ctx context.Context, q Query) ([]CostRow, CostRow, error) {
	type userSums struct {
		user string
		agg
	}
	type part struct {
		users map[string]*userSums
		total agg
	}
	var parts []part
	err := s.inParts(ctx, q.From.UnixMilli(), q.To.UnixMilli(), func(n int) { parts = make([]part, n) }, func(i int, from, to int64) error {
		w := where{}
		turnRange(&w, from, to)
		turnFilters(&w, &q)
		rs, err := s.r.QueryContext(ctx, `SELECT t.user_id_hash, `+turnAggCols+` FROM turns t WHERE `+w.String(), w.args...)
		if err != nil {
			return err
		}
		defer rs.Close()
		p := part{users: map[string]*userSums{}}
		var (
			user sql.RawBytes
			a    agg
		)
		for rs.Next() {
			if err := rs.Scan(&user, &a.cost, &a.turns, &a.spans, &a.tokensIn, &a.tokensOut, &a.errors, &a.fallbacks, &a.latency); err != nil {
				return err
			}
			g := p.users[string(user)] // no copy of user for the lookup
			if g == nil {
				g = &userSums{user: string(user)}
				p.users[g.user] = g
			}
			g.addSums(&a)
			p.total.addSums(&a)
		}
		parts[i] = p
		return rs.Err()
	})
	if err != nil {
		return nil, CostRow{}, err
	}
	// Merge the parts into the largest.
	base := 0
	for i := range parts {
		if len(parts[i].users) > len(parts[base].users) {
			base = i
		}
	}
	var total agg
	users := parts[base].users
	for i, p := range parts {
		total.addSums(&p.total)
		if i == base {
			continue
		}
		for h, u := range p.users {
			if g := users[h]; g != nil {
				g.addSums(&u.agg)
			} else {
				users[h] = u
			}
		}
	}
	rows := make([]CostRow, 0, len(users))
	for _, u := range users {
		rows = append(rows, u.row(u.user))
	}
	slices.SortFunc(rows, byCost)
	return rows[:min(len(rows), q.Limit)], total.row(""), nil
}

// fewTurns returns the limit costliest turns selected by w, and their
// total, in one pass: for a selection of few turns (one user's, one
// trace's), whose rows are cheap to bring over.
func (s *Store) fewTurns(ctx context.Context, w where, limit int) ([]CostRow, CostRow, error) {
	rs, err := s.r.QueryContext(ctx, `SELECT t.minute, t.th, `+turnAggCols+` FROM turns t WHERE `+w.String(), w.args...)
	if err != nil {
		return nil, CostRow{}, err
	}
	type hit struct {
		key turnKey
		a   agg
	}
	var (
		hits  []hit
		total agg
	)
	for rs.Next() {
		var h hit
		if err := rs.Scan(&h.key.minute, &h.key.th, &h.a.cost, &h.a.turns, &h.a.spans, &h.a.tokensIn, &h.a.tokensOut,
			&h.a.errors, &h.a.fallbacks, &h.a.latency); err != nil {
			rs.Close()
			return nil, CostRow{}, err
		}
		total.addSums(&h.a)
		hits = append(hits, h)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, CostRow{}, err
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(cmp.Compare(b.a.cost, a.a.cost), cmp.Compare(a.key.minute, b.key.minute), cmp.Compare(a.key.th, b.key.th))
	})
	keys := make([]turnKey, 0, min(len(hits), limit))
	for _, h := range hits[:min(len(hits), limit)] {
		keys = append(keys, h.key)
	}
	turns, err := s.turnsByKey(ctx, keys)
	if err != nil {
		return nil, CostRow{}, err
	}
	rows := make([]CostRow, 0, len(turns))
	for _, t := range turns {
		rows = append(rows, t.costRow(&t.sums))
	}
	slices.SortFunc(rows, byCost)
	return rows, total.row(""), nil
}

// costRow reports the turn with the sums a.
func (t *turnState) costRow(a *agg) CostRow {
	r := a.row(t.trace)
	r.Turn = &TurnInfo{TraceID: t.trace, RootSpanID: t.root, UserIDHash: t.user, SessionID: t.session,
		Feature: t.feature, Locale: t.locale, UserTier: t.tier, GraphVersion: t.graph,
		Start: time.UnixMilli(t.ts).UTC(), DurationMS: t.duration, EvalScore: t.eval}
	return r
}

// scanAgg reads rows of a key and the eight sums of turnSums.
func (s *Store) scanAgg(ctx context.Context, sqlText string, args ...any) ([]CostRow, error) {
	rs, err := s.r.QueryContext(ctx, sqlText, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []CostRow
	for rs.Next() {
		var (
			key string
			a   agg
			n   [7]sql.NullInt64
			c   sql.NullFloat64
		)
		// Sums over no rows are NULL: they read as 0.
		if err := rs.Scan(&key, &n[0], &n[1], &n[2], &n[3], &c, &n[4], &n[5], &n[6]); err != nil {
			return nil, err
		}
		a.spans, a.turns, a.tokensIn, a.tokensOut = n[0].Int64, n[1].Int64, n[2].Int64, n[3].Int64
		a.cost, a.errors, a.fallbacks, a.latency = c.Float64, n[4].Int64, n[5].Int64, n[6].Int64
		out = append(out, a.row(key))
	}
	return out, rs.Err()
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
		key  turnKey
		sums agg
	}
	type part struct {
		groups map[string]*agg
		hits   []hit
		total  agg
	}
	var parts []part
	err := s.inParts(ctx, q.From.UnixMilli(), q.To.UnixMilli(), func(n int) { parts = make([]part, n) }, func(i int, from, to int64) error {
		p := &parts[i]
		p.groups = map[string]*agg{}
		return s.turnVersions(ctx, vid, from, to, func(tv *turnVersion) {
			if (q.User != "" && string(tv.user) != q.User) || (q.Feature != "" && string(tv.feature) != q.Feature) ||
				(q.GraphVersion != "" && string(tv.graph) != q.GraphVersion) {
				return
			}
			p.total.merge(&tv.spans)
			if q.By == ByTurn {
				p.hits = append(p.hits, hit{turnKey{floorTo(tv.ts, minuteMS) / minuteMS, tv.th}, tv.spans})
				return
			}
			g := p.groups[string(tv.user)]
			if g == nil {
				g = &agg{}
				p.groups[string(tv.user)] = g
			}
			g.merge(&tv.spans)
		})
	})
	if err != nil {
		return nil, CostRow{}, err
	}
	groups := parts[0].groups
	var (
		hits  []hit
		total agg
	)
	for i, p := range parts {
		total.merge(&p.total)
		hits = append(hits, p.hits...)
		if i == 0 {
			continue
		}
		for k, a := range p.groups {
			if g := groups[k]; g != nil {
				g.merge(a)
			} else {
				groups[k] = a
			}
		}
	}
	if q.By == ByUser {
		rows, _ := sortGroups(groups)
		return rows, total.row(""), nil
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(cmp.Compare(b.sums.cost, a.sums.cost), cmp.Compare(a.key.minute, b.key.minute), cmp.Compare(a.key.th, b.key.th))
	})
	hits = hits[:min(len(hits), q.Limit)]
	keys := make([]turnKey, len(hits))
	sums := make(map[turnKey]*agg, len(hits))
	for i := range hits {
		keys[i] = hits[i].key
		sums[hits[i].key] = &hits[i].sums
	}
	turns, err := s.turnsByKey(ctx, keys)
	if err != nil {
		return nil, CostRow{}, err
	}
	rows := make([]CostRow, 0, len(turns))
	for _, t := range turns {
		rows = append(rows, t.costRow(sums[turnKey{t.minute(), t.th}]))
	}
	slices.SortFunc(rows, byCost)
	return rows, total.row(""), nil
}

// turnVersions calls fn for every turn that started in [from, to) and
// carried version vid.
func (s *Store) turnVersions(ctx context.Context, vid, from, to int64, fn func(*turnVersion)) error {
	var tv turnVersion
	return s.versionRecords(ctx, vid, from, to, func(ts, th int64, rec []byte) error {
		tv.ts, tv.th = ts, th
		if err := decodeTurnVersion(rec, &tv); err != nil {
			return err
		}
		fn(&tv)
		return nil
	})
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
		err = s.traceSpans(ctx, q.Trace, false, visit)
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
	case q.User != "":
		err = s.userSpans(ctx, q, visit)
	default:
		err = s.scanSpans(ctx, q.From.UnixMilli(), q.To.UnixMilli(), false, visit)
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
	w.eq("t.user_id_hash", q.User)
	rs, err := s.r.QueryContext(ctx, `SELECT t.ts_start, i.last_ts, t.th, i.trace_id FROM `+turnFrom+` WHERE `+w.String(), w.args...)
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
	err := s.traceSpans(ctx, q.Trace, false, func(e *events.Event, ts int64) {
		if !spanMatches(e, &q) || (q.User != "" && e.UserIDHash != q.User) {
			return
		}
		out = append(out, NodeRow(e, ts))
	})
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	return out, err
}

// NodeRow is the ByNode row of one span that started at ts (Unix ms).
func NodeRow(e *events.Event, ts int64) CostRow {
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
	return r
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
