package eventstore

import "strings"

// schema creates the tables. Text columns hold "" rather than NULL for an
// absent value so that roll-up keys compare equal; only eval_score is
// nullable, because "not scored" differs from a score of 0.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS events (
		id INTEGER PRIMARY KEY,
		trace_id TEXT NOT NULL,
		span_id TEXT NOT NULL,
		parent_span_id TEXT NOT NULL,
		workflow_id TEXT NOT NULL,
		user_id_hash TEXT NOT NULL,
		session_id TEXT NOT NULL,
		ts_start INTEGER NOT NULL,
		ts_end INTEGER NOT NULL,
		duration_ms INTEGER NOT NULL,
		name TEXT NOT NULL,
		must_persist INTEGER NOT NULL,
		graph_version TEXT NOT NULL,
		node_id TEXT NOT NULL,
		invocation_mode TEXT NOT NULL,
		artifact_kind TEXT NOT NULL,
		model_id TEXT NOT NULL,
		prompt_version TEXT NOT NULL,
		tool_id TEXT NOT NULL,
		tool_version TEXT NOT NULL,
		sub_agent_id TEXT NOT NULL,
		sub_agent_version TEXT NOT NULL,
		tokens_in INTEGER NOT NULL,
		tokens_out INTEGER NOT NULL,
		cost_usd REAL NOT NULL,
		cache_hit TEXT NOT NULL,
		capability_flags TEXT NOT NULL,
		status TEXT NOT NULL,
		error_code TEXT NOT NULL,
		fallback_used TEXT NOT NULL,
		eval_score REAL,
		feature TEXT NOT NULL,
		surface TEXT NOT NULL,
		locale TEXT NOT NULL,
		user_tier TEXT NOT NULL,
		priority TEXT NOT NULL
	)`,
	// Event.ID is trace_id + span_id: the dedup key, and the per-trace
	// (per-node) drill-down index.
	`CREATE UNIQUE INDEX IF NOT EXISTS events_trace_span ON events(trace_id, span_id)`,
	// Edges of time ranges, raw scans and retention.
	`CREATE INDEX IF NOT EXISTS events_ts ON events(ts_start)`,

	// One row per minute × attribution × artifact versions: every aggregate
	// view (total, per feature/model/prompt/graph/locale/surface/tier, rising
	// features) reads this, not the spans.
	`CREATE TABLE IF NOT EXISTS cost_minute (
		minute INTEGER NOT NULL,
		feature TEXT NOT NULL,
		surface TEXT NOT NULL,
		locale TEXT NOT NULL,
		user_tier TEXT NOT NULL,
		graph_version TEXT NOT NULL,
		model_id TEXT NOT NULL,
		prompt_version TEXT NOT NULL,
		tool_id TEXT NOT NULL,
		spans INTEGER NOT NULL,
		turns INTEGER NOT NULL,
		tokens_in INTEGER NOT NULL,
		tokens_out INTEGER NOT NULL,
		cost_usd REAL NOT NULL,
		errors INTEGER NOT NULL,
		fallbacks INTEGER NOT NULL,
		latency_ms INTEGER NOT NULL,
		first_ts INTEGER NOT NULL,
		last_ts INTEGER NOT NULL,
		PRIMARY KEY (minute, feature, surface, locale, user_tier, graph_version, model_id, prompt_version, tool_id)
	) WITHOUT ROWID`,

	// One row per trace: the turn with the sum over all its spans. Per-user
	// and per-turn views, top users, anomalies and eval read this.
	`CREATE TABLE IF NOT EXISTS turns (
		trace_id TEXT PRIMARY KEY,
		ts_start INTEGER NOT NULL,
		root_span_id TEXT NOT NULL,
		user_id_hash TEXT NOT NULL,
		session_id TEXT NOT NULL,
		feature TEXT NOT NULL,
		surface TEXT NOT NULL,
		locale TEXT NOT NULL,
		user_tier TEXT NOT NULL,
		graph_version TEXT NOT NULL,
		spans INTEGER NOT NULL,
		tokens_in INTEGER NOT NULL,
		tokens_out INTEGER NOT NULL,
		cost_usd REAL NOT NULL,
		errors INTEGER NOT NULL,
		fallbacks INTEGER NOT NULL,
		latency_ms INTEGER NOT NULL,
		duration_ms INTEGER NOT NULL,
		status TEXT NOT NULL,
		eval_score REAL
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS turns_ts ON turns(ts_start, cost_usd)`,
	`CREATE INDEX IF NOT EXISTS turns_user ON turns(user_id_hash, ts_start)`,
	// SetEvalScore by a root span id.
	`CREATE INDEX IF NOT EXISTS turns_root ON turns(root_span_id)`,
	`CREATE INDEX IF NOT EXISTS turns_eval ON turns(ts_start) WHERE eval_score IS NOT NULL`,

	// The graph, prompt and model versions each turn's spans carried: a
	// turn belongs to every version any of its spans used (Compare).
	`CREATE TABLE IF NOT EXISTS turn_versions (
		dim TEXT NOT NULL,
		version TEXT NOT NULL,
		trace_id TEXT NOT NULL,
		PRIMARY KEY (dim, version, trace_id)
	) WITHOUT ROWID`,
}

const insertColumns = 35

const insertEvent = `INSERT INTO events (
	trace_id, span_id, parent_span_id, workflow_id, user_id_hash, session_id,
	ts_start, ts_end, duration_ms, name, must_persist,
	graph_version, node_id, invocation_mode,
	artifact_kind, model_id, prompt_version, tool_id, tool_version, sub_agent_id, sub_agent_version,
	tokens_in, tokens_out, cost_usd, cache_hit, capability_flags,
	status, error_code, fallback_used, eval_score,
	feature, surface, locale, user_tier, priority
) VALUES `

// insertSQL inserts rows spans per statement: one call into the driver per
// rows spans instead of per span is most of the ingest rate.
func insertSQL(rows int) string {
	one := "(" + strings.Repeat("?,", insertColumns-1) + "?)"
	return insertEvent + strings.Repeat(one+",", rows-1) + one + ` ON CONFLICT (trace_id, span_id) DO NOTHING`
}

// insertRows is the number of spans per multi-row insert; 35 columns × 64
// stays far below SQLite's 32766 bound on parameters.
const insertRows = 64

// Expressions shared by roll-ups and raw-span queries, so that both sides
// of a time range's edges count the same way.
const (
	isTurn     = `(name = 'turn')`
	isError    = `(status = 'failed')`
	isFallback = `(status = 'fallback' OR fallback_used <> '')`
)

// rollups fold the spans inserted by the current transaction (id > ?) into
// the roll-up tables.
var rollups = []string{
	`INSERT INTO cost_minute
	SELECT (ts_start / 60000) * 60000, feature, surface, locale, user_tier,
		graph_version, model_id, prompt_version, tool_id,
		COUNT(*), SUM(` + isTurn + `), SUM(tokens_in), SUM(tokens_out), SUM(cost_usd),
		SUM(` + isError + `), SUM(` + isFallback + `), SUM(duration_ms),
		MIN(ts_start), MAX(ts_start)
	FROM events WHERE id > ?
	GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
	ON CONFLICT DO UPDATE SET
		first_ts = MIN(first_ts, excluded.first_ts),
		last_ts = MAX(last_ts, excluded.last_ts),
		spans = spans + excluded.spans,
		turns = turns + excluded.turns,
		tokens_in = tokens_in + excluded.tokens_in,
		tokens_out = tokens_out + excluded.tokens_out,
		cost_usd = cost_usd + excluded.cost_usd,
		errors = errors + excluded.errors,
		fallbacks = fallbacks + excluded.fallbacks,
		latency_ms = latency_ms + excluded.latency_ms`,

	// A trace's spans can arrive over several batches; the root span
	// ("turn", which ends last) supplies root_span_id, duration and any
	// eval score, every span adds its cost.
	`INSERT INTO turns
	SELECT trace_id, MIN(ts_start),
		MAX(CASE WHEN ` + isTurn + ` THEN span_id ELSE '' END),
		MAX(user_id_hash), MAX(session_id), MAX(feature), MAX(surface), MAX(locale),
		MAX(user_tier), MAX(graph_version),
		COUNT(*), SUM(tokens_in), SUM(tokens_out), SUM(cost_usd),
		SUM(` + isError + `), SUM(` + isFallback + `), SUM(duration_ms),
		MAX(CASE WHEN ` + isTurn + ` THEN duration_ms ELSE 0 END),
		MAX(CASE WHEN ` + isTurn + ` THEN status ELSE '' END),
		MAX(CASE WHEN ` + isTurn + ` THEN eval_score END)
	FROM events WHERE id > ?
	GROUP BY trace_id
	ON CONFLICT (trace_id) DO UPDATE SET
		ts_start = MIN(ts_start, excluded.ts_start),
		root_span_id = MAX(root_span_id, excluded.root_span_id),
		user_id_hash = MAX(user_id_hash, excluded.user_id_hash),
		session_id = MAX(session_id, excluded.session_id),
		feature = MAX(feature, excluded.feature),
		surface = MAX(surface, excluded.surface),
		locale = MAX(locale, excluded.locale),
		user_tier = MAX(user_tier, excluded.user_tier),
		graph_version = MAX(graph_version, excluded.graph_version),
		spans = spans + excluded.spans,
		tokens_in = tokens_in + excluded.tokens_in,
		tokens_out = tokens_out + excluded.tokens_out,
		cost_usd = cost_usd + excluded.cost_usd,
		errors = errors + excluded.errors,
		fallbacks = fallbacks + excluded.fallbacks,
		latency_ms = latency_ms + excluded.latency_ms,
		duration_ms = MAX(duration_ms, excluded.duration_ms),
		status = MAX(status, excluded.status),
		eval_score = COALESCE(excluded.eval_score, eval_score)`,

	`INSERT OR IGNORE INTO turn_versions
	SELECT 'graph', graph_version, trace_id FROM events WHERE id > ? AND graph_version <> ''
	UNION SELECT 'prompt', prompt_version, trace_id FROM events WHERE id > ?1 AND prompt_version <> ''
	UNION SELECT 'model', model_id, trace_id FROM events WHERE id > ?1 AND model_id <> ''`,
}
