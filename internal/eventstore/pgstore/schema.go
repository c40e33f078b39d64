package pgstore

import (
	"strconv"
	"strings"

	"github.com/fmgate/fmgate/internal/eventstore"
)

// Text columns compare by bytes (COLLATE "C"), as Go strings do: the
// greatest of a turn's values and the order of keys match the SQLite store.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS spans (
		ts_start bigint NOT NULL,
		trace_id text COLLATE "C" NOT NULL,
		span_id text COLLATE "C" NOT NULL,
		name text COLLATE "C" NOT NULL,
		user_id_hash text COLLATE "C" NOT NULL,
		session_id text COLLATE "C" NOT NULL,
		feature text COLLATE "C" NOT NULL,
		surface text COLLATE "C" NOT NULL,
		locale text COLLATE "C" NOT NULL,
		user_tier text COLLATE "C" NOT NULL,
		graph_version text COLLATE "C" NOT NULL,
		model_id text COLLATE "C" NOT NULL,
		prompt_version text COLLATE "C" NOT NULL,
		tool_id text COLLATE "C" NOT NULL,
		status text COLLATE "C" NOT NULL,
		fallback_used text COLLATE "C" NOT NULL,
		tokens_in bigint NOT NULL,
		tokens_out bigint NOT NULL,
		cost double precision NOT NULL,
		duration_ms bigint NOT NULL,
		eval_score double precision,
		rec bytea NOT NULL,
		-- Start first: spans arrive roughly in start order, so new keys go
		-- to the right edge of the index and a batch touches few pages; the
		-- key also serves time ranges and, with a turn's start and end, the
		-- spans of a trace.
		PRIMARY KEY (ts_start, trace_id, span_id)
	) PARTITION BY RANGE (ts_start)`,

	`CREATE TABLE IF NOT EXISTS rollup (
		lvl smallint NOT NULL,
		bucket bigint NOT NULL,
		feature text COLLATE "C" NOT NULL,
		surface text COLLATE "C" NOT NULL,
		locale text COLLATE "C" NOT NULL,
		user_tier text COLLATE "C" NOT NULL,
		graph_version text COLLATE "C" NOT NULL,
		model_id text COLLATE "C" NOT NULL,
		prompt_version text COLLATE "C" NOT NULL,
		tool_id text COLLATE "C" NOT NULL,
		spans bigint NOT NULL,
		turns bigint NOT NULL,
		tokens_in bigint NOT NULL,
		tokens_out bigint NOT NULL,
		cost double precision NOT NULL,
		errors bigint NOT NULL,
		fallbacks bigint NOT NULL,
		latency_ms bigint NOT NULL,
		first_ts bigint NOT NULL,
		last_ts bigint NOT NULL,
		PRIMARY KEY (lvl, bucket, feature, surface, locale, user_tier, graph_version, model_id, prompt_version, tool_id)
	)`,
	// A batch updates about as many rollup rows as it inserts (the hour
	// rows of its dimensions, the minute rows it shares with the batch
	// before): room left in each page lets most updates stay on the page
	// (HOT) instead of adding an entry to the wide key's index. It
	// applies to the pages written from now on.
	`ALTER TABLE rollup SET (fillfactor = 70)`,

	// One row per trace; not partitioned, since its start moves earlier
	// as earlier spans arrive.
	`CREATE TABLE IF NOT EXISTS turns (
		trace_id text COLLATE "C" PRIMARY KEY,
		ts_start bigint NOT NULL,
		last_ts bigint NOT NULL,
		user_id_hash text COLLATE "C" NOT NULL,
		session_id text COLLATE "C" NOT NULL,
		feature text COLLATE "C" NOT NULL,
		surface text COLLATE "C" NOT NULL,
		locale text COLLATE "C" NOT NULL,
		user_tier text COLLATE "C" NOT NULL,
		graph_version text COLLATE "C" NOT NULL,
		root_span_id text COLLATE "C" NOT NULL,
		duration_ms bigint NOT NULL,
		status text COLLATE "C" NOT NULL,
		eval_score double precision,
		spans bigint NOT NULL,
		turns bigint NOT NULL,
		tokens_in bigint NOT NULL,
		tokens_out bigint NOT NULL,
		cost double precision NOT NULL,
		errors bigint NOT NULL,
		fallbacks bigint NOT NULL,
		latency_ms bigint NOT NULL
	)`,
	`CREATE INDEX IF NOT EXISTS turns_start ON turns (ts_start)`,
	`CREATE INDEX IF NOT EXISTS turns_user ON turns (user_id_hash, ts_start)`,

	// Trace sampling. A span of a turn that was not sampled
	// (events.Event.SampledOut) keeps its row, whose columns are what the
	// views sum, group and filter on, but not its record (rec NULL): the
	// trace view shows it no more. The turn span and the must-persist
	// records keep theirs.
	`ALTER TABLE spans ADD COLUMN IF NOT EXISTS must_persist boolean NOT NULL DEFAULT false`,
	`ALTER TABLE spans ALTER COLUMN rec DROP NOT NULL`,
	`ALTER TABLE turns ADD COLUMN IF NOT EXISTS sampled_out boolean NOT NULL DEFAULT false`,

	// The key audit trail (eventstore.KeyAuditor): a few rows, so the
	// partial index costs a span of another name nothing.
	`CREATE INDEX IF NOT EXISTS spans_key_audit ON spans (session_id, ts_start) WHERE name = '` + eventstore.KeyAuditSpan + `'`,
}

// addPrevKey gives turns the key each turn had before its last update
// (NULL when the write created it), for the user roll-up's correction: see
// mergeSQL. Run only when the columns are missing, since ALTER TABLE waits
// for every query reading turns.
const addPrevKey = `ALTER TABLE turns ADD COLUMN IF NOT EXISTS prev_ts bigint,
	ADD COLUMN IF NOT EXISTS prev_feature text COLLATE "C", ADD COLUMN IF NOT EXISTS prev_user text COLLATE "C"`

// addCacheCols gives spans and rollup the prompt cache's figures: a span's
// input tokens read from and written to the vendor's cache and the money
// it saved, and their sums. Turns and the user roll-up do not keep them
// (see eventstore.CostRow). A row stored before has none: 0. Run only when
// the columns are missing, since ALTER TABLE waits for every query reading
// the table.
const addCacheCols = `ALTER TABLE spans ADD COLUMN IF NOT EXISTS tokens_cache_read bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS tokens_cache_write bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS cache_saved double precision NOT NULL DEFAULT 0;
ALTER TABLE rollup ADD COLUMN IF NOT EXISTS cache_read bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS cache_write bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS cache_saved double precision NOT NULL DEFAULT 0`

// userRollupTable sums turns per (feature, user) by the hour (lvl 1) and
// the day (lvl 2) of their start, feature first so that one feature's
// buckets are contiguous: a feature's costliest users read one row per user
// and bucket instead of every turn in range. Levels 3 (hour) and 4 (day)
// sum every feature together (feature ""), for the costliest users overall. It is created, and filled
// from the turns already stored, by the first Open that finds it missing
// (migrateUserRollup).
const userRollupTable = `CREATE TABLE user_rollup (
		lvl smallint NOT NULL,
		feature text COLLATE "C" NOT NULL,
		bucket bigint NOT NULL,
		user_id_hash text COLLATE "C" NOT NULL,
		spans bigint NOT NULL,
		turns bigint NOT NULL,
		tokens_in bigint NOT NULL,
		tokens_out bigint NOT NULL,
		cost double precision NOT NULL,
		errors bigint NOT NULL,
		fallbacks bigint NOT NULL,
		latency_ms bigint NOT NULL,
		PRIMARY KEY (lvl, feature, bucket, user_id_hash)
	)`

// userLevels are the user roll-up's levels, bucket widths and whether a
// level sums every feature together.
var userLevels = "(VALUES (1, " + strconv.Itoa(hourMS) + "::bigint, false), (2, " + strconv.Itoa(dayMS) + "::bigint, false), " +
	"(3, " + strconv.Itoa(hourMS) + "::bigint, true), (4, " + strconv.Itoa(dayMS) + "::bigint, true))"

// userSums are the columns the user roll-up sums, in scanRows' order.
const userSums = "spans, turns, tokens_in, tokens_out, cost, errors, fallbacks, latency_ms"

// spanCols are the columns of spans, in spanRow's order.
var spanCols = []string{"ts_start", "trace_id", "span_id", "name", "user_id_hash", "session_id",
	"feature", "surface", "locale", "user_tier", "graph_version", "model_id", "prompt_version", "tool_id",
	"status", "fallback_used", "tokens_in", "tokens_out", "cost", "duration_ms", "eval_score", "rec", "must_persist",
	"tokens_cache_read", "tokens_cache_write", "cache_saved"}

// createStage makes the connection's staging tables, whose rows go at
// commit: stage for spans that may be stored already, stage_rollup and
// stage_turns for the sums of a batch whose spans were all new (turnCols).
const createStage = `CREATE TEMP TABLE IF NOT EXISTS stage (LIKE spans) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_rollup (LIKE rollup) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS stage_turns (
	trace_id text COLLATE "C" NOT NULL, ts_start bigint NOT NULL, last_ts bigint NOT NULL,
	user_id_hash text COLLATE "C" NOT NULL, session_id text COLLATE "C" NOT NULL, feature text COLLATE "C" NOT NULL,
	surface text COLLATE "C" NOT NULL, locale text COLLATE "C" NOT NULL, user_tier text COLLATE "C" NOT NULL,
	graph_version text COLLATE "C" NOT NULL, root_span_id text COLLATE "C" NOT NULL, duration_ms bigint NOT NULL,
	status text COLLATE "C" NOT NULL, eval_score double precision,
	spans bigint NOT NULL, turns bigint NOT NULL, tokens_in bigint NOT NULL, tokens_out bigint NOT NULL,
	cost double precision NOT NULL, errors bigint NOT NULL, fallbacks bigint NOT NULL, latency_ms bigint NOT NULL,
	sampled_out boolean NOT NULL
) ON COMMIT DELETE ROWS`

// rollupCols are the columns of rollup, in batchDeltas' order and in the
// order upsertCTEs inserts them.
var rollupCols = []string{"lvl", "bucket", "feature", "surface", "locale", "user_tier", "graph_version", "model_id",
	"prompt_version", "tool_id", "spans", "turns", "tokens_in", "tokens_out", "cost", "errors", "fallbacks", "latency_ms",
	"first_ts", "last_ts", "cache_read", "cache_write", "cache_saved"}

// turnCols are the columns of stage_turns, in batchDeltas' order.
var turnCols = []string{"trace_id", "ts_start", "last_ts", "user_id_hash", "session_id", "feature", "surface", "locale",
	"user_tier", "graph_version", "root_span_id", "duration_ms", "status", "eval_score",
	"spans", "turns", "tokens_in", "tokens_out", "cost", "errors", "fallbacks", "latency_ms", "sampled_out"}

// Roll-up levels: bucket widths in milliseconds.
const (
	minuteMS = 60_000
	hourMS   = 3_600_000
)

const dayMS = 24 * hourMS

var dimCols = "feature, surface, locale, user_tier, graph_version, model_id, prompt_version, tool_id"

// mergeSQL moves the staged spans into spans, skipping those stored
// already, and adds exactly the new ones to the roll-ups and turns. It
// returns how many spans were new.
var mergeSQL = `WITH ins AS (
	INSERT INTO spans SELECT * FROM stage ORDER BY ts_start, trace_id, span_id ON CONFLICT DO NOTHING
	RETURNING ts_start, trace_id, span_id, name, user_id_hash, session_id, ` + dimCols + `,
		status, fallback_used, tokens_in, tokens_out, cost, duration_ms, eval_score,
		tokens_cache_read, tokens_cache_write, cache_saved
), x AS (
	SELECT *, (name = 'turn')::int AS is_turn, (status = 'failed')::int AS is_err,
		(status = 'fallback' OR fallback_used <> '')::int AS is_fb FROM ins
), ` + upsertCTEs(`SELECT l.lvl, x.ts_start - ((x.ts_start % l.w) + l.w) % l.w, `+prefixed("x.", dimCols)+`,
		count(*), sum(is_turn), sum(tokens_in), sum(tokens_out), sum(cost), sum(is_err), sum(is_fb), sum(duration_ms),
		min(ts_start), max(ts_start), sum(tokens_cache_read), sum(tokens_cache_write), sum(cache_saved)
	FROM x CROSS JOIN (VALUES (1, `+strconv.Itoa(minuteMS)+`::bigint), (2, `+strconv.Itoa(hourMS)+`::bigint)) AS l(lvl, w)
	GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10`, `SELECT trace_id, min(ts_start) AS ts_start, max(ts_start) AS last_ts, max(user_id_hash) AS user_id_hash,
		max(session_id) AS session_id, max(feature) AS feature, max(surface) AS surface,
		max(locale) AS locale, max(user_tier) AS user_tier, max(graph_version) AS graph_version,
		coalesce(max(span_id) FILTER (WHERE is_turn = 1), '') AS root_span_id,
		coalesce(max(duration_ms) FILTER (WHERE is_turn = 1), 0) AS duration_ms,
		coalesce(max(status) FILTER (WHERE is_turn = 1), '') AS status, max(eval_score) FILTER (WHERE is_turn = 1) AS eval_score,
		count(*) AS spans, sum(is_turn) AS turns, sum(tokens_in) AS tokens_in, sum(tokens_out) AS tokens_out, sum(cost) AS cost,
		sum(is_err) AS errors, sum(is_fb) AS fallbacks, sum(duration_ms) AS latency_ms, false AS sampled_out
	FROM x GROUP BY trace_id`) + `
SELECT count(*) FROM ins` // data-modifying WITH clauses always run to completion

// deltaSQL adds the sums of a batch whose spans were all new, made by
// batchDeltas and copied into stage_rollup and stage_turns, to the
// roll-ups and turns.
var deltaSQL = `WITH ` + upsertCTEs(`SELECT `+strings.Join(rollupCols, ", ")+` FROM stage_rollup ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10`, `SELECT * FROM stage_turns`) + `
SELECT 0`

// upsertCTEs are the WITH clauses r, bt, t and u adding rollupRows (rows
// of rollup, in key order) and btRows (a batch's sums per trace, columns as
// stage_turns) to rollup, turns and user_rollup.
//
// The user roll-up follows the turns: each turn written adds its new row
// under its new key (start bucket, feature, user) and, when it existed,
// takes its previous row out under its previous key. The update keeps the
// previous key in prev_*, read under the row's lock, and the previous sums
// are the new ones less the batch's (bt), so concurrent writers of one turn
// each correct exactly what they changed.
func upsertCTEs(rollupRows, btRows string) string {
	return `r AS (
	INSERT INTO rollup AS o (` + strings.Join(rollupCols, ", ") + `)
	` + rollupRows + `
	ON CONFLICT (lvl, bucket, ` + dimCols + `) DO UPDATE SET
		spans = o.spans + excluded.spans, turns = o.turns + excluded.turns,
		tokens_in = o.tokens_in + excluded.tokens_in, tokens_out = o.tokens_out + excluded.tokens_out,
		cost = o.cost + excluded.cost, errors = o.errors + excluded.errors,
		fallbacks = o.fallbacks + excluded.fallbacks, latency_ms = o.latency_ms + excluded.latency_ms,
		first_ts = least(o.first_ts, excluded.first_ts), last_ts = greatest(o.last_ts, excluded.last_ts),
		cache_read = o.cache_read + excluded.cache_read, cache_write = o.cache_write + excluded.cache_write,
		cache_saved = o.cache_saved + excluded.cache_saved
), bt AS (
	` + btRows + `
), t AS (
	INSERT INTO turns AS o (trace_id, ts_start, last_ts, user_id_hash, session_id, feature, surface, locale, user_tier,
		graph_version, root_span_id, duration_ms, status, eval_score,
		spans, turns, tokens_in, tokens_out, cost, errors, fallbacks, latency_ms, sampled_out)
	SELECT trace_id, ts_start, last_ts, user_id_hash, session_id, feature, surface, locale, user_tier, graph_version,
		root_span_id, duration_ms, status, eval_score, ` + userSums + `, sampled_out
	FROM bt ORDER BY trace_id
	ON CONFLICT (trace_id) DO UPDATE SET
		prev_ts = o.ts_start, prev_feature = o.feature, prev_user = o.user_id_hash,
		ts_start = least(o.ts_start, excluded.ts_start), last_ts = greatest(o.last_ts, excluded.last_ts),
		user_id_hash = greatest(o.user_id_hash, excluded.user_id_hash),
		session_id = greatest(o.session_id, excluded.session_id),
		feature = greatest(o.feature, excluded.feature), surface = greatest(o.surface, excluded.surface),
		locale = greatest(o.locale, excluded.locale), user_tier = greatest(o.user_tier, excluded.user_tier),
		graph_version = greatest(o.graph_version, excluded.graph_version),
		root_span_id = greatest(o.root_span_id, excluded.root_span_id),
		duration_ms = greatest(o.duration_ms, excluded.duration_ms),
		status = greatest(o.status, excluded.status),
		eval_score = coalesce(excluded.eval_score, o.eval_score),
		spans = o.spans + excluded.spans, turns = o.turns + excluded.turns,
		tokens_in = o.tokens_in + excluded.tokens_in, tokens_out = o.tokens_out + excluded.tokens_out,
		cost = o.cost + excluded.cost, errors = o.errors + excluded.errors,
		fallbacks = o.fallbacks + excluded.fallbacks, latency_ms = o.latency_ms + excluded.latency_ms,
		sampled_out = o.sampled_out OR excluded.sampled_out
	RETURNING trace_id, ts_start, feature, user_id_hash, prev_ts, prev_feature, prev_user, ` + userSums + `
), u AS (
	INSERT INTO user_rollup AS o (lvl, feature, bucket, user_id_hash, ` + userSums + `)
	SELECT l.lvl, CASE WHEN l.every THEN '' ELSE d.feature END, d.ts - ((d.ts % l.w) + l.w) % l.w, d.user_id_hash,
		sum(d.spans), sum(d.turns), sum(d.tokens_in), sum(d.tokens_out), sum(d.cost), sum(d.errors), sum(d.fallbacks), sum(d.latency_ms)
	FROM (
		SELECT ts_start AS ts, feature, user_id_hash, ` + userSums + ` FROM t
		UNION ALL
		SELECT t.prev_ts, t.prev_feature, t.prev_user, b.spans - t.spans, b.turns - t.turns, b.tokens_in - t.tokens_in,
			b.tokens_out - t.tokens_out, b.cost - t.cost, b.errors - t.errors, b.fallbacks - t.fallbacks, b.latency_ms - t.latency_ms
		FROM t JOIN bt b USING (trace_id) WHERE t.prev_ts IS NOT NULL
	) d CROSS JOIN ` + userLevels + ` AS l(lvl, w, every)
	GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
	ON CONFLICT (lvl, feature, bucket, user_id_hash) DO UPDATE SET
		spans = o.spans + excluded.spans, turns = o.turns + excluded.turns,
		tokens_in = o.tokens_in + excluded.tokens_in, tokens_out = o.tokens_out + excluded.tokens_out,
		cost = o.cost + excluded.cost, errors = o.errors + excluded.errors,
		fallbacks = o.fallbacks + excluded.fallbacks, latency_ms = o.latency_ms + excluded.latency_ms
)
`
}

// sampleNewSQL drops the records of spans of sampled-out turns stored by
// earlier batches, after a batch of new spans (deltaSQL, which marked its
// turns sampled out from stage_turns, and whose own spans of such turns
// came without a record): the spans stored before the turn span of $1 (the
// batch's turns sampled out) when the turn holds more spans than the batch
// brought, and this batch's spans of the traces of $2 (its other traces)
// whose turn was stored sampled out before. Only those traces' spans are
// visited, each trace found through the turns key.
const sampleNewSQL = `UPDATE spans s SET rec = NULL FROM (
	SELECT t.trace_id, t.ts_start, t.last_ts FROM turns t JOIN stage_turns b USING (trace_id)
	WHERE t.trace_id = ANY($1) AND t.spans > b.spans
	UNION ALL
	SELECT trace_id, ts_start, last_ts FROM turns WHERE trace_id = ANY($2) AND sampled_out
) d
WHERE s.trace_id = d.trace_id AND s.ts_start >= d.ts_start AND s.ts_start <= d.last_ts
	AND s.name <> 'turn' AND NOT s.must_persist AND s.rec IS NOT NULL`

// sampleSQL records the turns of $1 sampled out and drops the records of
// their spans stored so far but for the turn span and the must-persist
// records; $2 are the other traces of the batch, whose spans may have
// arrived after their turn span.
const sampleSQL = `WITH o AS (
	UPDATE turns SET sampled_out = true WHERE trace_id = ANY($1) AND NOT sampled_out RETURNING trace_id
), d AS (
	SELECT trace_id, ts_start, last_ts FROM turns WHERE (trace_id = ANY($1) OR trace_id = ANY($2)) AND (sampled_out OR trace_id = ANY($1))
)
UPDATE spans s SET rec = NULL FROM d
WHERE s.trace_id = d.trace_id AND s.ts_start >= d.ts_start AND s.ts_start <= d.last_ts
	AND s.name <> 'turn' AND NOT s.must_persist AND s.rec IS NOT NULL`

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}
