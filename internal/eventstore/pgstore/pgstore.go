// Package pgstore is the fleet-wide event store in PostgreSQL: every
// gateway publishes its spans to NATS JetStream, fmgate ingest writes them
// here (Write), and every gateway answers /admin/cost from here
// (eventstore.Views), so the dashboards see the whole fleet.
//
// Layout (schema.go): spans, one row per span, partitioned by day of start
// and keyed by (trace_id, span_id, ts_start), so that a span delivered twice
// is stored once; rollup, sums per minute and per hour × attribution ×
// versions; turns, one row per trace. Write stores a batch in one
// transaction: a batch of new spans is copied (COPY) straight into spans
// and its sums, made in Go, are added to the roll-ups and turns; a batch
// holding a span stored already is copied into a temporary staging table,
// and one statement inserts the spans not stored yet and adds exactly
// those. The sums are commutative (sums, least, greatest), so several
// ingesters may write at once in any order.
package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// Options tune a Store.
type Options struct {
	// Schema holds the tables, created if missing; default: the DSN's
	// search_path (e.g. "...?search_path=fmgate"), else "public".
	Schema string
	// ReadOnly opens without creating anything and without connecting:
	// the gateways only read what fmgate ingest writes, and start (and
	// answer turns) while PostgreSQL is down.
	ReadOnly bool
	// MaxConns of the pool; default 8.
	MaxConns int32
	// Retention: Write skips spans that started longer ago, and Prune
	// is meant to be called with now − Retention. Zero keeps everything.
	Retention time.Duration
	// AppName is the connections' application_name; default "fmgate".
	AppName string
	// Now is the clock of default query ranges; nil is time.Now.
	Now func() time.Time
	// Log receives what the store cannot report to a caller.
	Log *slog.Logger
}

// Store is the PostgreSQL event store. It is safe for concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	schema    string
	retention time.Duration
	now       func() time.Time
	log       *slog.Logger

	mu   sync.Mutex
	days map[int64]bool // day partitions known to exist
}

var _ eventstore.Views = (*Store)(nil)

// Open connects to dsn, creates the schema and tables if needed and
// returns the store. Every wait is bounded by ctx.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	if opts.MaxConns == 0 {
		opts.MaxConns = 8
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("pgstore: dsn: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if opts.Schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema
	} else {
		opts.Schema = firstSchema(cfg.ConnConfig.RuntimeParams["search_path"])
	}
	if opts.AppName == "" {
		opts.AppName = "fmgate"
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = opts.AppName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s := &Store{pool: pool, schema: opts.Schema, retention: opts.Retention, now: opts.Now, log: opts.Log, days: map[int64]bool{}}
	if opts.ReadOnly {
		return s, nil
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// firstSchema is the schema tables are created in under search_path: its
// first entry, unless that is the user's own ("$user"), whose schema
// PostgreSQL skips when it does not exist. "" leaves it to PostgreSQL.
func firstSchema(searchPath string) string {
	first, _, _ := strings.Cut(searchPath, ",")
	first = strings.TrimSpace(first)
	if len(first) >= 2 && first[0] == '"' && first[len(first)-1] == '"' {
		first = strings.ReplaceAll(first[1:len(first)-1], `""`, `"`) // quoted: as written
	} else {
		first = strings.ToLower(first) // as PostgreSQL reads an unquoted name
	}
	if first == "$user" {
		return ""
	}
	return first
}

func (s *Store) migrate(ctx context.Context) error {
	if s.schema != "" {
		// Created only when missing: CREATE SCHEMA needs a privilege on the
		// database that a role owning only its schema may lack.
		var exists bool
		if err := s.pool.QueryRow(ctx, `SELECT to_regnamespace($1) IS NOT NULL`, pgx.Identifier{s.schema}.Sanitize()).Scan(&exists); err != nil {
			return fmt.Errorf("pgstore: schema %s: %w", s.schema, err)
		}
		if !exists {
			if _, err := s.pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{s.schema}.Sanitize()); err != nil && !isDuplicate(err) {
				return fmt.Errorf("pgstore: create schema %s: %w", s.schema, err)
			}
		}
	}
	for _, q := range schema {
		if _, err := s.pool.Exec(ctx, q); err != nil && !isDuplicate(err) {
			return fmt.Errorf("pgstore: schema: %w", err)
		}
	}
	var cacheCols int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()
		AND ((table_name = 'spans' AND column_name = 'cache_saved') OR (table_name = 'rollup' AND column_name = 'cache_saved'))`).Scan(&cacheCols); err != nil {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	if cacheCols < 2 {
		if _, err := s.pool.Exec(ctx, addCacheCols); err != nil && !isDuplicate(err) {
			return fmt.Errorf("pgstore: schema: %w", err)
		}
	}
	return s.migrateUserRollup(ctx)
}

// migrateUserRollup creates the user roll-up when it is missing and fills
// it from the turns stored, in one transaction that holds writers off the
// turns meanwhile; a concurrent Open finds it created, or fails to create
// it and leaves it to the first.
func (s *Store) migrateUserRollup(ctx context.Context) error {
	var exists, hasPrev bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regclass('user_rollup') IS NOT NULL, EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'turns' AND column_name = 'prev_user')`).Scan(&exists, &hasPrev); err != nil {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	if !hasPrev {
		if _, err := s.pool.Exec(ctx, addPrevKey); err != nil && !isDuplicate(err) {
			return fmt.Errorf("pgstore: schema: %w", err)
		}
	}
	if exists {
		return nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, userRollupTable); err != nil {
		if isDuplicate(err) {
			return nil
		}
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE turns IN SHARE MODE`); err != nil {
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO user_rollup (lvl, feature, bucket, user_id_hash, `+userSums+`)
		SELECT l.lvl, CASE WHEN l.every THEN '' ELSE t.feature END, t.ts_start - ((t.ts_start % l.w) + l.w) % l.w, t.user_id_hash,
			sum(t.spans), sum(t.turns), sum(t.tokens_in), sum(t.tokens_out), sum(t.cost), sum(t.errors), sum(t.fallbacks), sum(t.latency_ms)
		FROM turns t CROSS JOIN `+userLevels+` AS l(lvl, w, every) GROUP BY 1, 2, 3, 4`)
	if err != nil {
		return fmt.Errorf("pgstore: schema: fill user_rollup: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		if isDuplicate(err) {
			return nil
		}
		return fmt.Errorf("pgstore: schema: %w", err)
	}
	return nil
}

var _ eventstore.Unavailable = (*Store)(nil)

// Unavailable implements eventstore.Unavailable: PostgreSQL out of reach,
// its tables not created yet (no fmgate ingest has run against it), or
// created by an earlier version whose ingest has not added the columns
// this one reads.
func (s *Store) Unavailable(err error) string {
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	switch {
	case errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000"):
		return "the event store's tables are not in PostgreSQL yet: start `fmgate ingest` with this eventStore.dsn; it creates them"
	case errors.As(err, &pe) && pe.Code == "42703":
		return "the event store's tables in PostgreSQL are older than this gateway: start this version's `fmgate ingest` with this eventStore.dsn; it adds the columns"
	case errors.As(err, &ce), isNetError(err):
		return "PostgreSQL (eventStore.dsn) cannot be reached; the cost views answer again once it is back, and spans wait in NATS meanwhile"
	}
	return ""
}

// isNetError reports a failure of the connection itself.
func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// isDuplicate reports an object created meanwhile by another process.
func isDuplicate(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P07" || pe.Code == "42710" || pe.Code == "23505" || pe.Code == "42P06")
}

// retryable reports an error after which the whole transaction may simply
// be tried again: a deadlock or serialization failure between ingesters.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// ensureDays creates the day partitions the spans fall in. Writers wait
// for each other here only while a partition is being created: a writer
// must not go on before its day exists.
func (s *Store) ensureDays(ctx context.Context, batch []events.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range batch {
		d := floorDiv(unixMilli(batch[i].TSStart), dayMS)
		if s.days[d] {
			continue
		}
		name := "spans_" + time.UnixMilli(d*dayMS).UTC().Format("20060102")
		if d < 0 {
			name = "spans_m" + strconv.FormatInt(-d, 10)
		}
		_, err := s.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF spans FOR VALUES FROM (%d) TO (%d)`,
			pgx.Identifier{name}.Sanitize(), d*dayMS, (d+1)*dayMS))
		if err != nil && !isDuplicate(err) {
			return fmt.Errorf("pgstore: partition %s: %w", name, err)
		}
		s.days[d] = true
	}
	return nil
}

// unixMilli is t in Unix milliseconds, 0 for the zero time (as the SQLite
// store keeps it).
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Write stores the batch in one transaction and returns once it is
// committed. A span already stored (same trace_id, span_id and start) is
// skipped and adds nothing to the sums, so a batch delivered again after a
// crash is harmless. It returns the number of spans newly stored.
func (s *Store) Write(ctx context.Context, batch []events.Event) (int64, error) {
	if s.retention > 0 {
		cutoff := s.now().Add(-s.retention)
		kept := batch[:0:0]
		for i := range batch {
			if !batch[i].TSStart.Before(cutoff) {
				kept = append(kept, batch[i])
			}
		}
		if len(kept) < len(batch) {
			batch = kept
		}
	}
	if len(batch) == 0 {
		return 0, nil
	}
	if err := s.ensureDays(ctx, batch); err != nil {
		return 0, err
	}
	smp := sampleBatch(batch)
	rows := spanRows(batch, smp)
	d := batchDeltas(batch, smp.out)
	for attempt := 0; ; attempt++ {
		n, err := s.writeTx(ctx, rows, d, smp)
		if unstorable(err) {
			return 0, fmt.Errorf("%w: %w", eventstore.ErrUnstorable, err)
		}
		if err == nil || !retryable(err) || attempt >= 5 || ctx.Err() != nil {
			return n, err
		}
	}
}

// unstorable reports an error the same batch will always meet: a value
// PostgreSQL refuses (data exception, class 22) or one beyond its limits
// (class 54, e.g. a key too long for its index).
func unstorable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}

// batchSampling is what a batch says of trace sampling: the traces whose
// turn span it carries sampled out, and the traces of its other droppable
// spans, whose turn span may have been stored before.
type batchSampling struct {
	out        map[string]bool
	outIDs     []string
	others     []string
	seenOthers map[string]bool
}

func sampleBatch(batch []events.Event) batchSampling {
	b := batchSampling{out: map[string]bool{}, seenOthers: map[string]bool{}}
	for i := range batch {
		if e := &batch[i]; e.Name == "turn" && e.SampledOut && !b.out[e.TraceID] {
			b.out[e.TraceID] = true
			b.outIDs = append(b.outIDs, e.TraceID)
		}
	}
	for i := range batch {
		e := &batch[i]
		if droppable(e) && !b.out[e.TraceID] && !b.seenOthers[e.TraceID] {
			b.seenOthers[e.TraceID] = true
			b.others = append(b.others, e.TraceID)
		}
	}
	return b
}

// droppable reports whether a span of a sampled-out turn loses its record:
// all but the turn span and the must-persist records.
func droppable(e *events.Event) bool { return e.Name != "turn" && !e.MustPersist }

// writeTx stores a batch in one transaction. Most batches are all new:
// they are copied straight into spans, which costs far less than an insert
// that checks each row for a conflict, and their sums (d, made in Go) are
// added to the roll-ups and turns. A span stored already fails the copy,
// and the batch then goes through the staging table, whose insert skips it.
func (s *Store) writeTx(ctx context.Context, rows *copyData, d deltas, smp batchSampling) (int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgstore: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Sorting and grouping a batch fits in memory.
	if _, err := tx.Exec(ctx, `SET LOCAL work_mem = '64MB'; `+createStage+`; SAVEPOINT fresh`); err != nil {
		return 0, fmt.Errorf("pgstore: staging: %w", err)
	}
	n, err := copyInto(ctx, tx, "spans", spanCols, rows)
	switch {
	case err == nil:
		if _, err := copyInto(ctx, tx, "stage_rollup", rollupCols, d.rollup); err != nil {
			return 0, fmt.Errorf("pgstore: copy: %w", err)
		}
		if _, err := copyInto(ctx, tx, "stage_turns", turnCols, d.turns); err != nil {
			return 0, fmt.Errorf("pgstore: copy: %w", err)
		}
		if _, err := tx.Exec(ctx, deltaSQL); err != nil {
			return 0, fmt.Errorf("pgstore: merge: %w", err)
		}
		if len(smp.outIDs) > 0 || len(smp.others) > 0 {
			if _, err := tx.Exec(ctx, sampleNewSQL, smp.outIDs, smp.others); err != nil {
				return 0, fmt.Errorf("pgstore: sample: %w", err)
			}
		}
	case isUniqueViolation(err):
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT fresh`); err != nil {
			return 0, fmt.Errorf("pgstore: staging: %w", err)
		}
		if _, err := copyInto(ctx, tx, "stage", spanCols, rows); err != nil {
			return 0, fmt.Errorf("pgstore: copy: %w", err)
		}
		if err := tx.QueryRow(ctx, mergeSQL).Scan(&n); err != nil {
			return 0, fmt.Errorf("pgstore: merge: %w", err)
		}
		if len(smp.outIDs) > 0 || len(smp.others) > 0 {
			if _, err := tx.Exec(ctx, sampleSQL, smp.outIDs, smp.others); err != nil {
				return 0, fmt.Errorf("pgstore: sample: %w", err)
			}
		}
	default:
		return 0, fmt.Errorf("pgstore: copy: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("pgstore: commit: %w", err)
	}
	return n, nil
}

// isUniqueViolation reports a key stored already.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// spanRows are the batch's rows of spans, in key order: the copy fills
// the index pages one after the other, and concurrent writers of the same
// spans lock them in one order. A span of a sampled-out turn that loses
// its record (droppable) has none.
func spanRows(batch []events.Event, smp batchSampling) *copyData {
	order := make([]*events.Event, len(batch))
	for i := range batch {
		order[i] = &batch[i]
	}
	slices.SortFunc(order, func(a, b *events.Event) int {
		return cmp.Or(cmp.Compare(unixMilli(a.TSStart), unixMilli(b.TSStart)), strings.Compare(a.TraceID, b.TraceID),
			strings.Compare(a.SpanID, b.SpanID))
	})
	c := newCopyData(700 * len(batch))
	var rec []byte
	for _, e := range order {
		c.row(len(spanCols))
		c.int8(unixMilli(e.TSStart))
		for _, v := range [...]string{e.TraceID, e.SpanID, e.Name, e.UserIDHash, e.SessionID,
			e.Attribution.Feature, e.Attribution.Surface, e.Attribution.Locale, e.Attribution.UserTier,
			e.Node.GraphVersion, e.Artifact.ModelID, e.Artifact.PromptVersion, e.Artifact.ToolID,
			string(e.Outcome.Status), e.Outcome.FallbackUsed} {
			c.text(v)
		}
		c.int8(int64(e.Resource.TokensIn))
		c.int8(int64(e.Resource.TokensOut))
		c.float8(finiteCost(e.Resource.CostUSD))
		c.int8(e.DurationMS)
		c.nullFloat8(e.Outcome.EvalScore)
		if smp.out[e.TraceID] && droppable(e) {
			c.null()
		} else {
			rec = eventstore.AppendRecord(rec[:0], e)
			c.bytea(rec)
		}
		c.boolean(e.MustPersist)
		c.int8(int64(e.Resource.TokensCacheRead))
		c.int8(int64(e.Resource.TokensCacheWrite))
		c.float8(finiteCost(e.Resource.CacheSavedUSD))
	}
	return c
}

// Prune drops the day partitions of spans that all started before before,
// and the turns and roll-up buckets that started before it.
func (s *Store) Prune(ctx context.Context, before time.Time) error {
	b := before.UnixMilli()
	rs, err := s.pool.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = 'spans' AND p.relnamespace = to_regnamespace(current_schema())`)
	if err != nil {
		return fmt.Errorf("pgstore: prune: %w", err)
	}
	var drop []string
	for rs.Next() {
		var name, bound string
		if err := rs.Scan(&name, &bound); err != nil {
			rs.Close()
			return fmt.Errorf("pgstore: prune: %w", err)
		}
		// FOR VALUES FROM ('a') TO ('b')
		var lo, hi int64
		if _, err := fmt.Sscanf(bound, "FOR VALUES FROM ('%d') TO ('%d')", &lo, &hi); err == nil && hi <= b {
			drop = append(drop, name)
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("pgstore: prune: %w", err)
	}
	for _, name := range drop {
		if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("pgstore: prune %s: %w", name, err)
		}
	}
	s.mu.Lock()
	for d := range s.days {
		if (d+1)*dayMS <= b {
			delete(s.days, d)
		}
	}
	s.mu.Unlock()
	for _, q := range []string{
		`DELETE FROM turns WHERE ts_start < $1`,
		`DELETE FROM rollup WHERE lvl = 1 AND bucket + ` + strconv.Itoa(minuteMS) + ` <= $1`,
		`DELETE FROM rollup WHERE lvl = 2 AND bucket + ` + strconv.Itoa(hourMS) + ` <= $1`,
		`DELETE FROM user_rollup WHERE lvl IN (1, 3) AND bucket + ` + strconv.Itoa(hourMS) + ` <= $1`,
		`DELETE FROM user_rollup WHERE lvl IN (2, 4) AND bucket + ` + strconv.Itoa(dayMS) + ` <= $1`,
	} {
		if _, err := s.pool.Exec(ctx, q, b); err != nil {
			return fmt.Errorf("pgstore: prune: %w", err)
		}
	}
	return nil
}

// Stats are the store's sizes, for the ingest command and tests.
type Stats struct {
	Spans, Turns int64
}

// Stats counts the stored spans and turns.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM turns)`).Scan(&st.Spans, &st.Turns)
	if err != nil {
		return st, fmt.Errorf("pgstore: stats: %w", err)
	}
	return st, nil
}

var _ eventstore.Forgetter = (*Store)(nil)

// ForgetUser implements eventstore.Forgetter: in one transaction, the
// user's turns, their spans' columns and records, and the user roll-up.
// A gateway's store (ReadOnly) does it too: it writes only these rows.
func (s *Store) ForgetUser(ctx context.Context, user, pseudonym string) (int64, error) {
	if user == "" || pseudonym == "" || user == pseudonym {
		return 0, eventstore.Invalidf("forget: a user id hash and another pseudonym are needed")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("pgstore: forget: %w", err)
	}
	defer tx.Rollback(ctx)
	type turnKey struct {
		trace    string
		from, to int64
	}
	var turns []turnKey
	rs, err := tx.Query(ctx, `SELECT trace_id, ts_start, last_ts FROM turns WHERE user_id_hash = $1 FOR UPDATE`, user)
	if err != nil {
		return 0, fmt.Errorf("pgstore: forget: %w", err)
	}
	for rs.Next() {
		var k turnKey
		if err := rs.Scan(&k.trace, &k.from, &k.to); err != nil {
			rs.Close()
			return 0, fmt.Errorf("pgstore: forget: %w", err)
		}
		turns = append(turns, k)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("pgstore: forget: %w", err)
	}
	var changed int64
	for _, k := range turns {
		type rewrite struct {
			ts   int64
			span string
			rec  []byte
		}
		var out []rewrite
		rows, err := tx.Query(ctx, `SELECT ts_start, span_id, rec FROM spans WHERE trace_id = $1 AND ts_start >= $2 AND ts_start <= $3
			AND user_id_hash = $4`, k.trace, k.from, k.to, user)
		if err != nil {
			return 0, fmt.Errorf("pgstore: forget: %w", err)
		}
		for rows.Next() {
			var r rewrite
			if err := rows.Scan(&r.ts, &r.span, &r.rec); err != nil {
				rows.Close()
				return 0, fmt.Errorf("pgstore: forget: %w", err)
			}
			if r.rec != nil {
				rec, _, err := eventstore.PseudonymizeRecord(r.rec, r.ts, user, pseudonym)
				if err != nil {
					rows.Close()
					return 0, fmt.Errorf("pgstore: forget: span %s: %w", r.span, err)
				}
				r.rec = rec
			}
			out = append(out, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("pgstore: forget: %w", err)
		}
		for _, r := range out {
			if _, err := tx.Exec(ctx, `UPDATE spans SET user_id_hash = $1, session_id = $1, rec = $2 WHERE ts_start = $3 AND trace_id = $4 AND span_id = $5`,
				pseudonym, r.rec, r.ts, k.trace, r.span); err != nil {
				return 0, fmt.Errorf("pgstore: forget: %w", err)
			}
		}
		changed += int64(len(out))
	}
	for _, q := range []string{
		`UPDATE turns SET user_id_hash = $1, session_id = $1, prev_user = CASE WHEN prev_user = $2 THEN $1 ELSE prev_user END WHERE user_id_hash = $2`,
		`UPDATE user_rollup SET user_id_hash = $1 WHERE user_id_hash = $2`,
	} {
		if _, err := tx.Exec(ctx, q, pseudonym, user); err != nil {
			return 0, fmt.Errorf("pgstore: forget: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("pgstore: forget: %w", err)
	}
	return changed, nil
}
