package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// where accumulates a WHERE clause with numbered arguments.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	for _, a := range args {
		w.args = append(w.args, a)
		cond = strings.Replace(cond, "?", "$"+strconv.Itoa(len(w.args)), 1)
	}
	w.conds = append(w.conds, cond)
}

func (w *where) eq(col, v string) {
	if v != "" {
		w.add(col+" = ?", v)
	}
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

// groupCol is the column of a roll-up grouping.
var groupCol = map[string]string{
	eventstore.ByTotal: "''", eventstore.ByFeature: "feature", eventstore.ByModel: "model_id",
	eventstore.ByPrompt: "prompt_version", eventstore.ByGraph: "graph_version", eventstore.ByTool: "tool_id",
	eventstore.ByLocale: "locale", eventstore.BySurface: "surface", eventstore.ByTier: "user_tier",
	eventstore.ByUser: "user_id_hash", eventstore.ByTurn: "trace_id",
}

// sums are the eight sums every cost row is built from, in scan order.
const sums = `count(*), sum(turns), sum(tokens_in), sum(tokens_out), sum(cost), sum(errors), sum(fallbacks), sum(latency_ms)`

// spanSums are sums over span rows.
const spanSums = `count(*), sum((s.name = 'turn')::int), sum(s.tokens_in), sum(s.tokens_out), sum(s.cost),
	sum((s.status = 'failed')::int), sum((s.status = 'fallback' OR s.fallback_used <> '')::int), sum(s.duration_ms)`

// rollupSums re-sums roll-up rows.
const rollupSums = `sum(spans), sum(turns), sum(tokens_in), sum(tokens_out), sum(cost), sum(errors), sum(fallbacks), sum(latency_ms)`

// The prompt cache's sums (tokens read, tokens written, money saved), over
// span rows and over roll-up rows, which only those keep: scanRows reads
// them when a query selects them after the eight sums.
const (
	spanCacheSums   = `sum(s.tokens_cache_read), sum(s.tokens_cache_write), sum(s.cache_saved)`
	rollupCacheSums = `sum(cache_read), sum(cache_write), sum(cache_saved)`
)

// Cost answers q as the SQLite store does: groupings by attribution or
// version from the roll-ups (whole hours, then whole minutes, then the
// spans of the partial minutes at the edges); ByUser and ByTurn from the
// turns that started in range; a User or Trace filter, or ByUser/ByTurn
// with a prompt, model or tool filter, from the spans of the turns
// selected; ByNode from the trace's spans.
func (s *Store) Cost(ctx context.Context, q eventstore.Query) (eventstore.CostReport, error) {
	if err := eventstore.Normalize(&q, s.now()); err != nil {
		return eventstore.CostReport{}, err
	}
	rep := eventstore.CostReport{By: q.By, From: q.From.UTC(), To: q.To.UTC()}
	var (
		rows  []eventstore.CostRow
		total eventstore.CostRow
		err   error
	)
	spanFilters := q.PromptVersion != "" || q.ModelID != "" || q.ToolID != ""
	switch {
	case q.By == eventstore.ByNode:
		rows, err = s.nodes(ctx, q)
		total = totalOf(rows)
	case (q.By == eventstore.ByUser || q.By == eventstore.ByTurn) && !spanFilters && q.Trace == "":
		rows, total, err = s.fromTurns(ctx, q)
	case q.By == eventstore.ByUser || q.By == eventstore.ByTurn || q.User != "" || q.Trace != "":
		rows, total, err = s.fromTurnSpans(ctx, q)
	default:
		rows, err = s.fromRollups(ctx, q)
		total = totalOf(rows)
		slices.SortFunc(rows, byCost)
	}
	if err != nil {
		return eventstore.CostReport{}, fmt.Errorf("pgstore: cost: %w", err)
	}
	if q.By == eventstore.ByUser || q.By == eventstore.ByTurn {
		// Turn rows do not keep the prompt cache's figures: a view by user
		// or turn leaves them out whichever path answered it, as the SQLite
		// store does.
		dropCache(&total)
		for i := range rows {
			dropCache(&rows[i])
		}
	}
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
	}
	if q.By == eventstore.ByTurn {
		if err := s.describeTurns(ctx, rows); err != nil {
			return eventstore.CostReport{}, fmt.Errorf("pgstore: cost: %w", err)
		}
	}
	if rows == nil {
		rows = []eventstore.CostRow{}
	}
	rep.Rows, rep.Total = rows, total
	return rep, nil
}

func byCost(a, b eventstore.CostRow) int {
	return cmp.Or(cmp.Compare(b.CostUSD, a.CostUSD), cmp.Compare(a.Key, b.Key))
}

func totalOf(rows []eventstore.CostRow) eventstore.CostRow {
	var t eventstore.CostRow
	var latency float64
	for _, r := range rows {
		t.CostUSD += r.CostUSD
		t.Turns += r.Turns
		t.Spans += r.Spans
		t.TokensIn += r.TokensIn
		t.TokensOut += r.TokensOut
		t.Errors += r.Errors
		t.Fallbacks += r.Fallbacks
		t.CacheReadTokens += r.CacheReadTokens
		t.CacheWriteTokens += r.CacheWriteTokens
		t.CacheSavedUSD += r.CacheSavedUSD
		latency += r.AvgLatencyMS * float64(r.Spans)
	}
	finish(&t, latency)
	return t
}

func finish(r *eventstore.CostRow, latency float64) {
	if r.Spans > 0 {
		r.AvgLatencyMS = latency / float64(r.Spans)
	}
	if r.Turns > 0 {
		r.CostPerTurn = r.CostUSD / float64(r.Turns)
	}
	r.CacheReadRatio = eventstore.CacheReadRatio(r.CacheReadTokens, r.TokensIn)
}

func dropCache(r *eventstore.CostRow) {
	r.CacheReadTokens, r.CacheWriteTokens, r.CacheSavedUSD, r.CacheReadRatio = 0, 0, 0, 0
}

// cacheSums are the prompt cache's sums scanned (NULL over no rows: zero).
type cacheSums struct {
	read, write *int64
	saved       *float64
}

// set puts the sums in r; finish then derives the ratio.
func (c *cacheSums) set(r *eventstore.CostRow) {
	if c.read != nil {
		r.CacheReadTokens = *c.read
	}
	if c.write != nil {
		r.CacheWriteTokens = *c.write
	}
	if c.saved != nil {
		r.CacheSavedUSD = *c.saved
	}
}

// scanRows reads rows of a key and the eight sums, and the prompt cache's
// three sums when the query selects them after (spanCacheSums).
func (s *Store) scanRows(ctx context.Context, sql string, args ...any) ([]eventstore.CostRow, error) {
	rs, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	withCache := len(rs.FieldDescriptions()) == 12
	var out []eventstore.CostRow
	for rs.Next() {
		var (
			r       eventstore.CostRow
			n       [7]*int64
			cost    *float64
			latency *int64
			cache   cacheSums
		)
		dest := []any{&r.Key, &n[0], &n[1], &n[2], &n[3], &cost, &n[4], &n[5], &latency}
		if withCache {
			dest = append(dest, &cache.read, &cache.write, &cache.saved)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, err
		}
		cache.set(&r)
		fill(&r, n, cost, latency)
		if r.Spans > 0 {
			out = append(out, r)
		}
	}
	return out, rs.Err()
}

// fill sets r from the sums scanned (NULL over no rows: zero).
func fill(r *eventstore.CostRow, n [7]*int64, cost *float64, latency *int64) {
	for i, p := range []*int64{&r.Spans, &r.Turns, &r.TokensIn, &r.TokensOut, &r.Errors, &r.Fallbacks} {
		if n[i] != nil {
			*p = *n[i]
		}
	}
	if cost != nil {
		r.CostUSD = *cost
	}
	var l float64
	if latency != nil {
		l = float64(*latency)
	}
	finish(r, l)
}

// dimFilters adds q's version and feature filters on columns of prefix p.
func dimFilters(w *where, p string, q *eventstore.Query) {
	w.eq(p+"graph_version", q.GraphVersion)
	w.eq(p+"prompt_version", q.PromptVersion)
	w.eq(p+"model_id", q.ModelID)
	w.eq(p+"tool_id", q.ToolID)
	w.eq(p+"feature", q.Feature)
}

// fromRollups sums the spans started in [From, To) by q's grouping.
func (s *Store) fromRollups(ctx context.Context, q eventstore.Query) ([]eventstore.CostRow, error) {
	col := groupCol[q.By]
	groups, err := s.rangeSums(ctx, q, func(string) string { return col }, true)
	if err != nil {
		return nil, err
	}
	rows := make([]eventstore.CostRow, len(groups))
	for i := range groups {
		rows[i] = groups[i].row
	}
	return rows, nil
}

// group is one group of rangeSums: its sums and the first and last start
// of its spans.
type group struct {
	row         eventstore.CostRow
	first, last int64
}

// rangeSums sums the spans started in [q.From, q.To) matching q's version
// and feature filters, grouped by key(ts), an SQL expression of the
// columns shared by spans and rollup where ts names the time column:
// whole hours (when hours, i.e. an hour never straddles two keys) and
// whole minutes from the roll-ups, the partial minutes at the edges from
// the spans.
func (s *Store) rangeSums(ctx context.Context, q eventstore.Query, key func(ts string) string, hours bool) ([]group, error) {
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	if from >= to {
		return nil, nil
	}
	var parts []string
	var args []any
	part := func(rollup bool, cond func(w *where)) {
		w := where{args: args}
		cond(&w)
		dimFilters(&w, "", &q)
		args = w.args
		if rollup {
			parts = append(parts, `SELECT `+key("bucket")+` AS k, `+rollupSums+`, min(first_ts), max(last_ts), `+rollupCacheSums+`
				FROM rollup WHERE `+w.String()+` GROUP BY 1`)
		} else {
			parts = append(parts, `SELECT `+key("ts_start")+` AS k, `+spanSums+`, min(ts_start), max(ts_start), `+spanCacheSums+`
				FROM spans s WHERE `+w.String()+` GROUP BY 1`)
		}
	}
	// [mLo, mHi) whole minutes; [hLo, hHi) whole hours inside them.
	mLo, mHi := ceilTo(from, minuteMS), floorTo(to, minuteMS)
	if mLo >= mHi {
		part(false, func(w *where) { w.add("ts_start >= ? AND ts_start < ?", from, to) })
	} else {
		hLo, hHi := ceilTo(mLo, hourMS), floorTo(mHi, hourMS)
		if hours && hLo < hHi {
			part(true, func(w *where) { w.add("lvl = 2 AND bucket >= ? AND bucket < ?", hLo, hHi) })
			part(true, func(w *where) {
				w.add("lvl = 1 AND ((bucket >= ? AND bucket < ?) OR (bucket >= ? AND bucket < ?))", mLo, hLo, hHi, mHi)
			})
		} else {
			part(true, func(w *where) { w.add("lvl = 1 AND bucket >= ? AND bucket < ?", mLo, mHi) })
		}
		part(false, func(w *where) {
			w.add("((ts_start >= ? AND ts_start < ?) OR (ts_start >= ? AND ts_start < ?))", from, mLo, mHi, to)
		})
	}
	sql := `SELECT k, sum(c0), sum(c1), sum(c2), sum(c3), sum(c4), sum(c5), sum(c6), sum(c7), min(f), max(l),
		sum(cr), sum(cw), sum(cs) FROM (` + strings.Join(parts, " UNION ALL ") + `) AS u(k, c0, c1, c2, c3, c4, c5, c6, c7, f, l, cr, cw, cs)
		GROUP BY k`
	rs, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []group
	for rs.Next() {
		var (
			g           group
			n           [7]*int64
			cost        *float64
			latency     *int64
			first, last *int64
			cache       cacheSums
		)
		if err := rs.Scan(&g.row.Key, &n[0], &n[1], &n[2], &n[3], &cost, &n[4], &n[5], &latency, &first, &last,
			&cache.read, &cache.write, &cache.saved); err != nil {
			return nil, err
		}
		cache.set(&g.row)
		fill(&g.row, n, cost, latency)
		if first != nil {
			g.first, g.last = *first, *last
		}
		if g.row.Spans > 0 {
			out = append(out, g)
		}
	}
	return out, rs.Err()
}

func floorTo(ms, step int64) int64 { return floorDiv(ms, step) * step }
func ceilTo(ms, step int64) int64  { return -floorTo(-ms, step) }

// turnSums sums turn rows.
const turnSums = `sum(t.spans), sum(t.turns), sum(t.tokens_in), sum(t.tokens_out), sum(t.cost), sum(t.errors), sum(t.fallbacks), sum(t.latency_ms)`

// fromTurns groups the turns that started in range by user or by turn.
func (s *Store) fromTurns(ctx context.Context, q eventstore.Query) ([]eventstore.CostRow, eventstore.CostRow, error) {
	if q.By == eventstore.ByUser && q.User == "" && q.GraphVersion == "" {
		return s.featureUsers(ctx, q)
	}
	w := where{}
	w.add("t.ts_start >= ? AND t.ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
	w.eq("t.user_id_hash", q.User)
	w.eq("t.feature", q.Feature)
	w.eq("t.graph_version", q.GraphVersion)
	totals, err := s.scanRows(ctx, `SELECT '', `+turnSums+` FROM turns t WHERE `+w.String(), w.args...)
	if err != nil {
		return nil, eventstore.CostRow{}, err
	}
	var total eventstore.CostRow
	if len(totals) > 0 {
		total = totals[0]
	}
	key := "t.trace_id"
	if q.By == eventstore.ByUser {
		key = "t.user_id_hash"
	}
	rows, err := s.scanRows(ctx, `SELECT `+key+`, `+turnSums+` FROM turns t WHERE `+w.String()+
		` GROUP BY 1 ORDER BY sum(t.cost) DESC, 1 LIMIT `+strconv.Itoa(q.Limit), w.args...)
	if err != nil {
		return nil, eventstore.CostRow{}, err
	}
	slices.SortStableFunc(rows, byCost)
	return rows, total, nil
}

// fromTurnSpans groups the spans, matching q's filters, of the turns
// selected: the trace named, the user's turns that started in range, or
// every turn that started in range.
func (s *Store) fromTurnSpans(ctx context.Context, q eventstore.Query) ([]eventstore.CostRow, eventstore.CostRow, error) {
	w := where{}
	if q.Trace != "" {
		w.add("t.trace_id = ?", q.Trace)
	} else {
		w.add("t.ts_start >= ? AND t.ts_start < ?", q.From.UnixMilli(), q.To.UnixMilli())
		w.eq("t.user_id_hash", q.User)
	}
	dimFilters(&w, "s.", &q)
	w.eq("s.user_id_hash", q.User)
	rows, err := s.scanRows(ctx, `SELECT s.`+groupCol[q.By]+`, `+spanSums+`, `+spanCacheSums+`
		FROM turns t JOIN spans s ON s.trace_id = t.trace_id AND s.ts_start >= t.ts_start AND s.ts_start <= t.last_ts
		WHERE `+w.String()+` GROUP BY 1`, w.args...)
	if err != nil {
		return nil, eventstore.CostRow{}, err
	}
	if q.By == eventstore.ByTotal {
		for i := range rows {
			rows[i].Key = ""
		}
	}
	total := totalOf(rows)
	slices.SortFunc(rows, byCost)
	return rows, total, nil
}

// describeTurns fills the Turn of ByTurn rows.
func (s *Store) describeTurns(ctx context.Context, rows []eventstore.CostRow) error {
	if len(rows) == 0 {
		return nil
	}
	ids := make([]string, len(rows))
	for i := range rows {
		ids[i] = rows[i].Key
	}
	rs, err := s.pool.Query(ctx, `SELECT trace_id, root_span_id, user_id_hash, session_id, feature, locale, user_tier,
		graph_version, ts_start, duration_ms, eval_score FROM turns WHERE trace_id = ANY($1)`, ids)
	if err != nil {
		return err
	}
	defer rs.Close()
	info := map[string]*eventstore.TurnInfo{}
	for rs.Next() {
		var t eventstore.TurnInfo
		var ts int64
		if err := rs.Scan(&t.TraceID, &t.RootSpanID, &t.UserIDHash, &t.SessionID, &t.Feature, &t.Locale, &t.UserTier,
			&t.GraphVersion, &ts, &t.DurationMS, &t.EvalScore); err != nil {
			return err
		}
		t.Start = time.UnixMilli(ts).UTC()
		info[t.TraceID] = &t
	}
	if err := rs.Err(); err != nil {
		return err
	}
	for i := range rows {
		rows[i].Turn = info[rows[i].Key]
	}
	return nil
}

// traceSpans calls fn for every stored span of trace in start order. A
// span of a sampled-out turn stored without its record is visited as its
// columns say (its figures, no ids), unless wholeOnly skips it.
func (s *Store) traceSpans(ctx context.Context, trace string, wholeOnly bool, fn func(e *events.Event, ts int64)) error {
	cond := ""
	if wholeOnly {
		cond = " AND s.rec IS NOT NULL"
	}
	rs, err := s.pool.Query(ctx, `SELECT s.ts_start, s.rec, s.name, s.user_id_hash, s.session_id, `+prefixed("s.", dimCols)+`,
		s.status, s.fallback_used, s.tokens_in, s.tokens_out, s.cost, s.duration_ms, s.eval_score,
		s.tokens_cache_read, s.tokens_cache_write, s.cache_saved
		FROM spans s JOIN turns t ON t.trace_id = s.trace_id
		WHERE t.trace_id = $1 AND s.trace_id = $1 AND s.ts_start >= t.ts_start AND s.ts_start <= t.last_ts`+cond+`
		ORDER BY s.ts_start, s.span_id`, trace)
	if err != nil {
		return err
	}
	defer rs.Close()
	var (
		ts  int64
		rec []byte
		c   spanColumns
	)
	for rs.Next() {
		if err := rs.Scan(&ts, &rec, &c.name, &c.user, &c.session, &c.feature, &c.surface, &c.locale, &c.tier,
			&c.graph, &c.model, &c.prompt, &c.tool, &c.status, &c.fallback, &c.tokensIn, &c.tokensOut, &c.cost,
			&c.duration, &c.eval, &c.cacheRead, &c.cacheWrite, &c.cacheSaved); err != nil {
			return err
		}
		var e events.Event
		if rec == nil {
			c.event(trace, ts, &e)
		} else if err := eventstore.DecodeRecord(rec, ts, &e); err != nil {
			return fmt.Errorf("span of trace %s: %w", trace, err)
		}
		fn(&e, ts)
	}
	return rs.Err()
}

// spanColumns are the columns of a span row the views read.
type spanColumns struct {
	name, user, session, feature, surface, locale, tier string
	graph, model, prompt, tool, status, fallback        string
	tokensIn, tokensOut, duration                       int64
	cost                                                float64
	eval                                                *float64
	cacheRead, cacheWrite                               int64
	cacheSaved                                          float64
}

// event fills e with what the columns say of a span stored without its
// record.
func (c *spanColumns) event(trace string, ts int64, e *events.Event) {
	*e = events.Event{SchemaVersion: events.SchemaVersion, TraceID: trace, WorkflowID: trace,
		UserIDHash: c.user, SessionID: c.session, Name: c.name, DurationMS: c.duration}
	e.TSStart = time.UnixMilli(ts).UTC()
	e.TSEnd = e.TSStart.Add(time.Duration(c.duration) * time.Millisecond)
	e.Node.GraphVersion = c.graph
	e.Artifact.ModelID, e.Artifact.PromptVersion, e.Artifact.ToolID = c.model, c.prompt, c.tool
	e.Resource.TokensIn, e.Resource.TokensOut, e.Resource.CostUSD = int(c.tokensIn), int(c.tokensOut), c.cost
	e.Resource.TokensCacheRead, e.Resource.TokensCacheWrite, e.Resource.CacheSavedUSD = int(c.cacheRead), int(c.cacheWrite), c.cacheSaved
	e.Outcome.Status, e.Outcome.FallbackUsed, e.Outcome.EvalScore = events.Status(c.status), c.fallback, c.eval
	e.Attribution = events.Attribution{Feature: c.feature, Surface: c.surface, Locale: c.locale, UserTier: c.tier}
}

func (s *Store) nodes(ctx context.Context, q eventstore.Query) ([]eventstore.CostRow, error) {
	var out []eventstore.CostRow
	err := s.traceSpans(ctx, q.Trace, false, func(e *events.Event, ts int64) {
		if (q.GraphVersion != "" && q.GraphVersion != e.Node.GraphVersion) ||
			(q.PromptVersion != "" && q.PromptVersion != e.Artifact.PromptVersion) ||
			(q.ModelID != "" && q.ModelID != e.Artifact.ModelID) ||
			(q.ToolID != "" && q.ToolID != e.Artifact.ToolID) ||
			(q.Feature != "" && q.Feature != e.Attribution.Feature) ||
			(q.User != "" && q.User != e.UserIDHash) {
			return
		}
		out = append(out, eventstore.NodeRow(e, ts))
	})
	return out, err
}

// TopUsers returns the n users who cost most over turns started in
// [from, to).
func (s *Store) TopUsers(ctx context.Context, from, to time.Time, n int) (eventstore.CostReport, error) {
	return s.Cost(ctx, eventstore.Query{By: eventstore.ByUser, From: from, To: to, Limit: n})
}

// Trace returns every span of the trace stored whole (of a sampled-out
// turn, its turn span and must-persist records), in start order.
func (s *Store) Trace(ctx context.Context, traceID string) (eventstore.TraceReport, error) {
	if !eventstore.ValidTraceID(traceID) {
		return eventstore.TraceReport{}, eventstore.Invalidf("trace id must be 32 lowercase hex digits")
	}
	rep := eventstore.TraceReport{TraceID: traceID, Spans: []events.Event{}}
	err := s.traceSpans(ctx, traceID, true, func(e *events.Event, _ int64) { rep.Spans = append(rep.Spans, *e) })
	if err != nil {
		return rep, fmt.Errorf("pgstore: trace: %w", err)
	}
	if len(rep.Spans) == 0 {
		return rep, fmt.Errorf("pgstore: trace %s: %w", traceID, eventstore.ErrNotFound)
	}
	return rep, nil
}

// featureUsers answers ByUser with no user or graph filter, for one
// feature or all: whole days and hours of the range from the user roll-up,
// the edges from the turns, grouped once and read twice (the total, the
// costliest users). A day the range covers more than half of is read as
// the day less the hours outside the range, which are fewer rows.
func (s *Store) featureUsers(ctx context.Context, q eventstore.Query) ([]eventstore.CostRow, eventstore.CostRow, error) {
	from, to := q.From.UnixMilli(), q.To.UnixMilli()
	args := []any{q.Feature}
	hourLvl, dayLvl, turnFeature := 1, 2, "feature = $1 AND "
	if q.Feature == "" {
		hourLvl, dayLvl, turnFeature = 3, 4, "$1::text = '' AND "
	}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var parts []string
	rolledAs := func(cols string, lvl int, lo, hi int64) {
		if lo < hi {
			parts = append(parts, `SELECT user_id_hash, `+cols+` FROM user_rollup
				WHERE lvl = `+strconv.Itoa(lvl)+` AND feature = $1 AND bucket >= `+arg(lo)+` AND bucket < `+arg(hi))
		}
	}
	rolled := func(lvl int, lo, hi int64) { rolledAs(userSums, lvl, lo, hi) }
	less := func(lvl int, lo, hi int64) {
		rolledAs(`-spans, -turns, -tokens_in, -tokens_out, -cost, -errors, -fallbacks, -latency_ms`, lvl, lo, hi)
	}
	// hours [a, b) of one day
	hours := func(a, b int64) {
		if a >= b {
			return
		}
		if d := floorTo(a, dayMS); b-a > dayMS/2 {
			rolled(dayLvl, d, d+dayMS)
			less(hourLvl, d, a)
			less(hourLvl, b, d+dayMS)
		} else {
			rolled(hourLvl, a, b)
		}
	}
	raw := func(lo, hi int64) {
		if lo < hi {
			parts = append(parts, `SELECT user_id_hash, `+userSums+` FROM turns
				WHERE `+turnFeature+`ts_start >= `+arg(lo)+` AND ts_start < `+arg(hi))
		}
	}
	hLo, hHi := ceilTo(from, hourMS), floorTo(to, hourMS)
	if hLo >= hHi {
		raw(from, to)
	} else {
		dLo, dHi := ceilTo(hLo, dayMS), floorTo(hHi, dayMS)
		if dLo <= dHi {
			rolled(dayLvl, dLo, dHi)
			hours(hLo, dLo)
			hours(dHi, hHi)
		} else { // within one day
			hours(hLo, hHi)
		}
		raw(from, hLo)
		raw(hHi, to)
	}
	// The grouping is most of the work: some 150,000 roll-up rows of
	// 50,000 users for a feature over three days. Its sums are float8,
	// whose addition is by value, several times cheaper than the numeric
	// that sum(bigint) makes, and exact for the integers summed here
	// (below 2^53). The hash table fits in memory; parallel workers would
	// each group almost every user again (a user has few rows), and
	// compiling the plan (JIT) costs more than running it.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, eventstore.CostRow{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'; SET LOCAL jit = off; SET LOCAL max_parallel_workers_per_gather = 0`); err != nil {
		return nil, eventstore.CostRow{}, err
	}
	rs, err := tx.Query(ctx, `WITH g AS MATERIALIZED (
		SELECT user_id_hash AS k, sum(spans::float8) AS spans, sum(turns::float8) AS turns, sum(tokens_in::float8) AS tokens_in,
			sum(tokens_out::float8) AS tokens_out, sum(cost) AS cost, sum(errors::float8) AS errors,
			sum(fallbacks::float8) AS fallbacks, sum(latency_ms::float8) AS latency_ms
		FROM (`+strings.Join(parts, " UNION ALL ")+`) p GROUP BY 1 HAVING sum(spans::float8) <> 0
	) (SELECT true, '', sum(spans)::bigint, sum(turns)::bigint, sum(tokens_in)::bigint, sum(tokens_out)::bigint, sum(cost),
		sum(errors)::bigint, sum(fallbacks)::bigint, sum(latency_ms)::bigint FROM g)
	UNION ALL (SELECT false, k, spans::bigint, turns::bigint, tokens_in::bigint, tokens_out::bigint, cost,
		errors::bigint, fallbacks::bigint, latency_ms::bigint FROM g ORDER BY cost DESC, k LIMIT `+strconv.Itoa(q.Limit)+`)`, args...)
	if err != nil {
		return nil, eventstore.CostRow{}, err
	}
	defer rs.Close()
	var (
		rows  []eventstore.CostRow
		total eventstore.CostRow
	)
	for rs.Next() {
		var (
			isTotal bool
			r       eventstore.CostRow
			n       [7]*int64
			cost    *float64
			latency *int64
		)
		if err := rs.Scan(&isTotal, &r.Key, &n[0], &n[1], &n[2], &n[3], &cost, &n[4], &n[5], &latency); err != nil {
			return nil, eventstore.CostRow{}, err
		}
		fill(&r, n, cost, latency)
		if isTotal {
			total = r
		} else {
			rows = append(rows, r)
		}
	}
	if err := rs.Err(); err != nil {
		return nil, eventstore.CostRow{}, err
	}
	slices.SortStableFunc(rows, byCost)
	return rows, total, nil
}
