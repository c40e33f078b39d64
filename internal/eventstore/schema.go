package eventstore

// Layout. Every table is written in time order (its key starts with a
// time) so that one transaction touches few pages however large the file
// grows; a table keyed by a random id (trace, user) would touch a page per
// row and cost several times the insert itself.
//
//   - events: one row per span, the span as a record (codec.go). The unique
//     key (ts_start, th, sh) — th and sh are 64-bit hashes of trace_id and
//     span_id — deduplicates replays (a replayed span carries the same
//     start, trace and span) and serves time ranges and trace lookups.
//   - rollup: sums per time bucket × dimension tuple (dims), at several
//     bucket widths (levels), so that a range is mostly read from a few
//     coarse buckets.
//   - turns and turn_info: one row each per trace, keyed by the minute it
//     started and th.
//   - version_turns: per version, minute and materialization, the turns
//     that carried the version, each with its figures and the sums of its
//     spans carrying that version (versionturns.go); the version
//     comparison and span-filtered per-user views read it.
//   - turn_versions: the same per turn and version, as files written
//     before version_turns have it; read beside it, never written again.
//   - user_rollup: turns' sums per (feature, user) by hour and by day of
//     their start (userrollup.go), for a feature's costliest users.
//   - dims, vers: dictionaries of dimension tuples and of versions.
//   - meta: the materialization watermark and the pruning horizon.
//
// Roll-ups, turns and turn_versions are derived from events: they are
// brought up to date in batches (materialize.go) and rebuilt from the spans
// above the watermark after a crash.
var schema = []string{
	// AUTOINCREMENT: ids never go back, even after pruning every span, so
	// the materialization watermark stays valid.
	`CREATE TABLE IF NOT EXISTS events (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		ts_start INTEGER NOT NULL,
		th INTEGER NOT NULL,
		sh INTEGER NOT NULL,
		data BLOB NOT NULL
	)`,
	`CREATE UNIQUE INDEX IF NOT EXISTS events_key ON events(ts_start, th, sh)`,

	`CREATE TABLE IF NOT EXISTS dims (
		id INTEGER PRIMARY KEY,
		fine INTEGER NOT NULL,
		feature TEXT NOT NULL,
		surface TEXT NOT NULL,
		locale TEXT NOT NULL,
		user_tier TEXT NOT NULL,
		graph_version TEXT NOT NULL,
		model_id TEXT NOT NULL,
		prompt_version TEXT NOT NULL,
		tool_id TEXT NOT NULL
	)`,
	`CREATE TABLE IF NOT EXISTS vers (
		id INTEGER PRIMARY KEY,
		dim TEXT NOT NULL,
		version TEXT NOT NULL
	)`,

	`CREATE TABLE IF NOT EXISTS rollup (
		lvl INTEGER NOT NULL,
		bucket INTEGER NOT NULL,
		dims INTEGER NOT NULL,
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
		cache_read INTEGER NOT NULL DEFAULT 0,
		cache_write INTEGER NOT NULL DEFAULT 0,
		cache_saved_usd REAL NOT NULL DEFAULT 0,
		PRIMARY KEY (lvl, bucket, dims)
	) WITHOUT ROWID`,

	// A turn is split in two rows with the same key: the columns that
	// per-user, per-turn and anomaly views filter, group and sum on
	// (turns), kept narrow because those views scan every turn in range,
	// and the rest (turn_info), read for the turns shown.
	`CREATE TABLE IF NOT EXISTS turns (
		minute INTEGER NOT NULL,
		th INTEGER NOT NULL,
		ts_start INTEGER NOT NULL,
		user_id_hash TEXT NOT NULL,
		feature TEXT NOT NULL,
		graph_version TEXT NOT NULL,
		cost_usd REAL NOT NULL,
		has_root INTEGER NOT NULL,
		spans INTEGER NOT NULL,
		tokens_in INTEGER NOT NULL,
		tokens_out INTEGER NOT NULL,
		errors INTEGER NOT NULL,
		fallbacks INTEGER NOT NULL,
		latency_ms INTEGER NOT NULL,
		PRIMARY KEY (minute, th)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS turn_info (
		minute INTEGER NOT NULL,
		th INTEGER NOT NULL,
		trace_id TEXT NOT NULL,
		root_span_id TEXT NOT NULL,
		session_id TEXT NOT NULL,
		surface TEXT NOT NULL,
		locale TEXT NOT NULL,
		user_tier TEXT NOT NULL,
		duration_ms INTEGER NOT NULL,
		status TEXT NOT NULL,
		eval_score REAL,
		last_ts INTEGER NOT NULL,
		vers BLOB NOT NULL,
		vseq INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (minute, th)
	) WITHOUT ROWID`,
	`CREATE INDEX IF NOT EXISTS turn_info_eval ON turn_info(minute) WHERE eval_score IS NOT NULL`,
	// The key audit trail (audit.go): a few rows, so the partial index
	// costs a turn of another feature nothing.
	`CREATE INDEX IF NOT EXISTS turns_key_audit ON turns(ts_start) WHERE feature = '` + KeyAdminFeature + `'`,

	`CREATE TABLE IF NOT EXISTS turn_versions (
		vid INTEGER NOT NULL,
		ts_start INTEGER NOT NULL,
		th INTEGER NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (vid, ts_start, th)
	) WITHOUT ROWID`,
	`CREATE TABLE IF NOT EXISTS version_turns (
		vid INTEGER NOT NULL,
		minute INTEGER NOT NULL,
		seq INTEGER NOT NULL,
		data BLOB NOT NULL,
		PRIMARY KEY (vid, minute, seq)
	) WITHOUT ROWID`,

	`CREATE TABLE IF NOT EXISTS meta (
		key TEXT PRIMARY KEY,
		value INTEGER NOT NULL
	) WITHOUT ROWID`,
	`INSERT OR IGNORE INTO meta VALUES ('materialized', 0), ('pruned_before', 0)`,
}

// addedColumns are the columns added to a table after its layout version
// was set, in the order CREATE TABLE above has them: Open adds those a file
// lacks (ALTER TABLE), which keeps its data, where a new layout version
// would drop it. A file without them was written before spans carried
// those figures, so 0 is the right sum for its rows.
var addedColumns = []struct{ table, name, def string }{
	{"rollup", "cache_read", "INTEGER NOT NULL DEFAULT 0"},
	{"rollup", "cache_write", "INTEGER NOT NULL DEFAULT 0"},
	{"rollup", "cache_saved_usd", "REAL NOT NULL DEFAULT 0"},
	// 0: the turn's versions are turn_versions rows (versionturns.go).
	{"turn_info", "vseq", "INTEGER NOT NULL DEFAULT 0"},
}

// knownTables are every table any layout of the store created.
var knownTables = []string{"events", "cost_minute", "turns", "turn_info", "turn_versions", "version_turns", "rollup", "dims", "vers", "meta", "user_rollup"}

const (
	rollupCols   = 16
	turnHotCols  = 14
	turnInfoCols = 14
)
