// Package eventstore is fmgate's embedded event store: a durable events.Sink
// that keeps every span in a local SQLite file and answers the cost and
// quality questions of the dashboards from it — total → per feature → per
// user → per turn → per node, top users, anomalous turns, features whose
// cost per use is rising, eval scores filtered on every artifact version in
// one query, cost over time, the versions seen, two versions side by side
// (is this canary safe to ramp?) and every span of one trace.
//
// Spans are stored as they arrive, one compact record each, and Write
// returns once they are committed. Roll-ups (per time bucket × attribution
// × versions, at widths from a minute to a day), one row per turn, and per
// turn the versions its spans carried are derived from them in batches, so
// that aggregate views read few rows and ingest writes each derived row
// once per batch rather than once per span; a view first brings them up to
// date, so it always sees every span written before it. See schema.go for
// the layout and materialize.go for the derivation.
package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/events"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Drivers of Config.Driver.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

// Config is the eventStore section of fmgate's YAML.
type Config struct {
	// Driver is "sqlite" (the embedded store in Path, the default) or
	// "postgres": the fleet-wide store in PostgreSQL, filled by fmgate
	// ingest from NATS JetStream; the gateway only reads it.
	Driver string `yaml:"driver"`
	// DSN of the PostgreSQL database (driver postgres), e.g.
	// "postgres://fmgate@db:5432/fmgate". FMGATE_PG_DSN overrides it. It
	// must not hold a password: use FMGATE_PG_DSN, PGPASSWORD or a
	// .pgpass file.
	DSN string `yaml:"dsn"`
	// Path of the SQLite file; ":memory:" keeps everything in memory (tests,
	// demos). Default "var/events.db"; its directory is created.
	Path string `yaml:"path"`
	// Retention is how long spans and roll-ups are kept: a background loop
	// prunes older data every RetentionInterval, and Write skips spans
	// already older than it. Zero keeps everything. Default 720h (30 days).
	Retention time.Duration `yaml:"retention"`
	// Batch is the most spans inserted in one transaction; a larger Write
	// (a write-ahead-log replay) is split so readers are not starved. Default
	// 5000; limit 100000.
	Batch int `yaml:"batch"`
	// RetentionInterval is how often the retention loop runs. Default 1h.
	RetentionInterval time.Duration `yaml:"retentionInterval"`
	// MaterializeSpans is how many spans' contributions to the roll-ups and
	// turns are summed in memory before they are written; a view writes
	// them first whatever their number, and Open recomputes them from the
	// spans after a crash. Larger is a faster ingest, a longer first view
	// after a burst and a longer recovery. Default 100000; limit 1000000.
	MaterializeSpans int `yaml:"materializeSpans"`
	// MaterializeInterval is the longest the sums of a written span wait
	// before they are written, so that the file alone is never far behind;
	// shorter is smaller writes, which hold a busy core for less time each
	// (a view writes the sums first whatever their age). Default 250ms.
	MaterializeInterval time.Duration `yaml:"materializeInterval"`
	// TurnWindow is the longest a turn is expected to last: a span starting
	// up to this long after its turn's first span is summed into the same
	// turn row without a search. Later spans of the turn are found by a
	// search of this window before them, so a turn lasting longer than it
	// may be stored as two rows (its cost is still counted once). Default
	// 15m; at least 1m.
	TurnWindow time.Duration `yaml:"turnWindow"`
}

// DefaultConfig returns the MangaAssist defaults: var/events.db, 30 days,
// 5000 spans per transaction, pruned hourly, materialized every 100000
// spans or 2 s, turns up to 15 minutes long.
func DefaultConfig() Config {
	return Config{
		Path:                "var/events.db",
		Retention:           30 * 24 * time.Hour,
		Batch:               5000,
		RetentionInterval:   time.Hour,
		MaterializeSpans:    100000,
		MaterializeInterval: 250 * time.Millisecond,
		TurnWindow:          15 * time.Minute,
	}
}

// Limits of a Config.
const (
	maxBatch       = 100000
	maxMaterialize = 1000000
)

// Validate reports every problem in c, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	switch c.Driver {
	case "", DriverSQLite:
		if c.Path == "" {
			errs = append(errs, errors.New("path: must not be empty"))
		}
	case DriverPostgres:
		if dsnHasPassword(c.DSN) {
			errs = append(errs, errors.New("dsn: must not hold a password (set FMGATE_PG_DSN, PGPASSWORD or a .pgpass file)"))
		}
	default:
		errs = append(errs, fmt.Errorf("driver: %q is not sqlite or postgres", c.Driver))
	}
	if c.Retention < 0 {
		errs = append(errs, errors.New("retention: must be >= 0"))
	}
	if c.Batch <= 0 || c.Batch > maxBatch {
		errs = append(errs, fmt.Errorf("batch: must be in 1..%d", maxBatch))
	}
	if c.RetentionInterval <= 0 {
		errs = append(errs, errors.New("retentionInterval: must be > 0"))
	}
	if c.MaterializeSpans <= 0 || c.MaterializeSpans > maxMaterialize {
		errs = append(errs, fmt.Errorf("materializeSpans: must be in 1..%d", maxMaterialize))
	}
	if c.MaterializeInterval <= 0 {
		errs = append(errs, errors.New("materializeInterval: must be > 0"))
	}
	if c.TurnWindow < time.Minute {
		errs = append(errs, errors.New("turnWindow: must be at least 1m"))
	}
	return errors.Join(errs...)
}

// dsnHasPassword reports whether a PostgreSQL connection string (URL or
// key=value form) carries a password.
func dsnHasPassword(dsn string) bool {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		_, set := u.User.Password()
		return set || u.Query().Has("password")
	}
	return strings.Contains(dsn, "password=")
}

// PostgresDSN is the DSN to use: FMGATE_PG_DSN when set, else c.DSN.
func (c Config) PostgresDSN() string {
	if v := os.Getenv("FMGATE_PG_DSN"); v != "" {
		return v
	}
	return c.DSN
}

// Store is the embedded event store. It implements events.Sink, is Durable
// (it deduplicates on Event.ID, i.e. trace_id + span_id, so a replayed span
// is stored once) and io.Closer. Its methods are safe for concurrent use.
type Store struct {
	cfg Config
	now func() time.Time
	log *slog.Logger

	w    *sql.DB // one connection: SQLite has one writer
	r    *sql.DB // readers; the same pool as w for ":memory:"
	ckpt *sql.DB // checkpoints; nil for ":memory:"

	// Statements prepared once on w.
	ins, upsertRollup, insTurn, insTurnInfo, insChunk, upsertUsers *ladder
	stmts                                                          map[string]*sql.Stmt // preparedSQL by text
	pace                                                           pacer                // the ladders' pauses

	dict     dicts
	sampling *sampling    // guarded by mu
	pruned   atomic.Int64 // spans that started before this are gone (ms)

	// mu serializes the writers (Write, materialization, SetEvalScore,
	// Prune) and guards what follows.
	mu        sync.Mutex
	closed    bool
	stale     bool     // the in-memory state must be rebuilt (recoverLocked)
	pend      *pending // sums not yet materialized
	pendSince time.Time
	wm        int64 // events materialized: ids up to wm
	lastID    int64 // highest events id stored
	maxTS     int64 // latest span start seen
	commits   int   // write transactions committed
	known     map[int64]int64
	knownLo   int64 // known holds every stored turn from this minute on
	wbuf      writeBuffers

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the store at cfg.Path, brings the
// derived tables up to date with the spans stored (after a crash, those
// above the last materialization) and starts the retention loop when
// cfg.Retention > 0. now is the clock (nil: time.Now).
func Open(ctx context.Context, cfg Config, now func() time.Time) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("eventstore: config: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	s := &Store{cfg: cfg, now: now, log: slog.Default(), done: make(chan struct{}), stale: true, sampling: newSampling()}
	var err error
	if cfg.Path == ":memory:" {
		// Each connection to ":memory:" is its own database: share one.
		s.w, err = sql.Open("sqlite", "file::memory:?"+pragmas(false))
		if err != nil {
			return nil, fmt.Errorf("eventstore: open: %w", err)
		}
		s.w.SetMaxOpenConns(1)
		s.r = s.w
	} else {
		if err := os.MkdirAll(filepath.Dir(cfg.Path), 0o750); err != nil {
			return nil, fmt.Errorf("eventstore: %w", err)
		}
		u := "file:" + (&url.URL{Path: cfg.Path}).EscapedPath()
		// The writer never checkpoints: copying the write-ahead log into
		// the database (and its fsync) would stall every thousandth
		// commit. checkpointLoop does it on a connection of its own.
		s.w, err = sql.Open("sqlite", u+"?"+pragmas(false)+"&_pragma=wal_autocheckpoint(0)&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("eventstore: open: %w", err)
		}
		s.w.SetMaxOpenConns(1)
		s.r, err = sql.Open("sqlite", u+"?"+pragmas(true))
		if err != nil {
			s.w.Close()
			return nil, fmt.Errorf("eventstore: open: %w", err)
		}
		// Enough readers that the light queries of a dashboard view are
		// not queued behind its scans of every turn, which take scanParts
		// connections each.
		s.r.SetMaxOpenConns(8)
		s.ckpt, err = sql.Open("sqlite", u+"?"+pragmas(false))
		if err != nil {
			s.w.Close()
			s.r.Close()
			return nil, fmt.Errorf("eventstore: open: %w", err)
		}
		s.ckpt.SetMaxOpenConns(1)
	}
	s.w.SetConnMaxLifetime(0)
	s.w.SetMaxIdleConns(1)
	if err := s.init(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	if err := s.sync(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	var loops sync.WaitGroup
	if cfg.Retention > 0 {
		loops.Go(func() { s.retentionLoop(loopCtx) })
	}
	if s.ckpt != nil {
		loops.Go(func() { s.checkpointLoop(loopCtx) })
	}
	loops.Go(func() { s.materializeLoop(loopCtx) })
	go func() {
		loops.Wait()
		close(s.done)
	}()
	return s, nil
}

// materializeLoop writes pending sums older than MaterializeInterval when
// no Write comes to do it.
func (s *Store) materializeLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.MaterializeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		var err error
		if !s.closed && s.flushDue() {
			err = s.syncLocked(ctx)
		}
		s.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("eventstore: materialize", "err", err)
		}
	}
}

// checkpointInterval is how often checkpointLoop copies the write-ahead
// log into the database.
const checkpointInterval = 250 * time.Millisecond

// checkpointLoop copies committed transactions from the write-ahead log
// into the database file, on its own connection so that the writer never
// waits for it. PASSIVE never blocks readers or the writer; the log is
// reused from its start once every frame in it has been copied.
func (s *Store) checkpointLoop(ctx context.Context) {
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.ckpt.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil && ctx.Err() == nil {
			s.log.Warn("eventstore: checkpoint", "err", err)
		}
	}
}

// pragmas are applied by the driver to every new connection. NORMAL
// synchronous in WAL mode loses at most the last transactions on power
// loss, never consistency; the emitter's write-ahead log replays those.
func pragmas(readOnly bool) string {
	p := []string{
		"_pragma=busy_timeout(5000)",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(NORMAL)",
		"_pragma=cache_size(-32768)",
		"_pragma=temp_store(MEMORY)",
	}
	if readOnly {
		p = append(p, "_pragma=query_only(1)")
	}
	return strings.Join(p, "&")
}

// schemaVersion is stored in the file's user_version. A file written with
// another layout is emptied and recreated at Open (its tables are dropped):
// the store keeps short-lived operational data, and converting every
// stored span would make Open slow in proportion to the file.
const schemaVersion = 4

func (s *Store) init(ctx context.Context) error {
	var v int
	if err := s.w.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("eventstore: schema: %w", err)
	}
	if v != schemaVersion {
		if err := s.dropOld(ctx, v); err != nil {
			return err
		}
	}
	for _, q := range slices.Concat(schema, userRollupSchema) {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("eventstore: schema: %w", err)
		}
	}
	if err := s.addColumns(ctx); err != nil {
		return err
	}
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return fmt.Errorf("eventstore: schema: %w", err)
	}
	if err := s.backfillUserRollup(ctx); err != nil {
		return err
	}
	for _, p := range []struct {
		l      **ladder
		sqlFor func(int) string
		sizes  []int
	}{
		{&s.ins, insertSQL, []int{256, 32, 4, 1}},
		{&s.upsertRollup, rollupSQL, []int{64, 8, 1}},
		{&s.insTurn, insertTurnSQL, []int{64, 8, 1}},
		{&s.insTurnInfo, insertTurnInfoSQL, []int{64, 8, 1}},
		{&s.insChunk, insertChunkSQL, []int{8, 1}},
		{&s.upsertUsers, userRollupSQL, []int{64, 8, 1}},
	} {
		l, err := prepareLadder(ctx, s.w, &s.pace, p.sqlFor, p.sizes...)
		if err != nil {
			return err
		}
		*p.l = l
	}
	s.stmts = map[string]*sql.Stmt{}
	for _, q := range preparedSQL {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("eventstore: prepare: %w", err)
		}
		s.stmts[q] = st
	}
	return nil
}

// addColumns adds the addedColumns a file written before them lacks.
func (s *Store) addColumns(ctx context.Context) error {
	for _, c := range addedColumns {
		var n int
		if err := s.w.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info(?) WHERE name = ?`, c.table, c.name).Scan(&n); err != nil {
			return fmt.Errorf("eventstore: schema: %w", err)
		}
		if n > 0 {
			continue
		}
		if _, err := s.w.ExecContext(ctx, `ALTER TABLE `+c.table+` ADD COLUMN `+c.name+` `+c.def); err != nil {
			return fmt.Errorf("eventstore: schema: add %s.%s: %w", c.table, c.name, err)
		}
	}
	return nil
}

// dropOld drops the tables of a file written with layout version old.
func (s *Store) dropOld(ctx context.Context, old int) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: schema: %w", err)
	}
	defer tx.Rollback()
	dropped := 0
	for _, t := range knownTables {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, t).Scan(&n); err != nil {
			return fmt.Errorf("eventstore: schema: %w", err)
		}
		if n == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE `+t); err != nil {
			return fmt.Errorf("eventstore: schema: drop %s: %w", t, err)
		}
		dropped++
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("eventstore: schema: %w", err)
	}
	if dropped > 0 {
		s.log.Warn("eventstore: the file was written with another layout; its data was dropped",
			"path", s.cfg.Path, "layout", old, "want", schemaVersion)
	}
	return nil
}

func insertSQL(rows int) string {
	return `INSERT INTO events (ts_start, th, sh, data) VALUES ` + strings.Repeat("(?,?,?,?),", rows-1) +
		`(?,?,?,?) ON CONFLICT DO NOTHING`
}

// hashID is FNV-1a over s, as a signed 64-bit integer (SQLite's). It is
// part of the file format: it must never change.
func hashID(s string) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return int64(h)
}

// Name is "eventstore".
func (s *Store) Name() string { return "eventstore" }

// Durable is true: the emitter replays its write-ahead log to the store.
func (s *Store) Durable() bool { return true }

// Write stores a batch of spans, at most cfg.Batch per transaction, and
// returns once they are committed. A span already stored (same start,
// trace_id and span_id) is skipped, so replays are harmless; a span older
// than the retention window or the last Prune is skipped too.
//
// Deduplication compares 64-bit hashes of the trace and span ids within
// the same millisecond of start: two different spans of one trace would
// have to start in the same millisecond and have span ids whose hashes
// collide to be taken for one another.
func (s *Store) Write(ctx context.Context, batch []events.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.recoverLocked(ctx); err != nil {
		return err
	}
	for len(batch) > 0 {
		n := min(len(batch), s.cfg.Batch)
		if err := s.writeTx(ctx, batch[:n]); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

// writeBuffers are the scratch slices of writeTx, kept between writes so
// that a write allocates little (its garbage is collected on the turns'
// cores). Guarded by Store.mu.
type writeBuffers struct {
	spans, stored, ordered []newSpan
	rows                   []storedRow
	link                   []int
	turnOf                 map[string]int
	args                   []any
	data, rec              []byte
}

// maxKeptSpans bounds the spans writeBuffers keep room for: a replay's
// large batches do not leave their buffers behind.
const maxKeptSpans = 5000

func (b *writeBuffers) trim() {
	if cap(b.spans) > maxKeptSpans || cap(b.args) > 4*maxKeptSpans || cap(b.data) > 256*maxKeptSpans {
		*b = writeBuffers{}
	}
}

// newSpan is one span being written.
type newSpan struct {
	e      *events.Event
	ts     int64
	th, sh int64
	tally  bool // stored as a tally: its turn was sampled out
}

func (s *Store) writeTx(ctx context.Context, batch []events.Event) (err error) {
	if s.closed {
		return errClosed
	}
	cutoff := s.pruned.Load()
	if s.cfg.Retention > 0 {
		cutoff = max(cutoff, s.now().Add(-s.cfg.Retention).UnixMilli())
	}
	sampledOut := s.sampling.learn(batch)
	spans := s.wbuf.spans[:0]
	defer func() {
		s.wbuf.spans = clear0(spans)
		s.wbuf.stored = clear0(s.wbuf.stored[:cap(s.wbuf.stored)])
		s.wbuf.ordered = clear0(s.wbuf.ordered[:cap(s.wbuf.ordered)])
		s.wbuf.trim()
	}()
	for i := range batch {
		e := &batch[i]
		ts := unixMilli(e.TSStart)
		if ts < cutoff {
			continue
		}
		sp := newSpan{e: e, ts: ts, th: hashID(e.TraceID), sh: hashID(e.SpanID), tally: s.sampling.tally(e)}
		if !sp.tally {
			s.sampling.remember(e, storedKey{sp.ts, sp.th, sp.sh})
		}
		spans = append(spans, sp)
	}
	if len(spans) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: begin: %w", err)
	}
	s.pace.start()
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	ordered, rows := s.rowsOf(spans)
	stored, last, err := s.insertSpans(ctx, tx, ordered, rows)
	if err != nil {
		return err
	}
	if err := s.reduce(ctx, tx, sampledOut); err != nil {
		return err
	}
	// Sum the new spans into the pending state; materialize in this
	// transaction when due. A failure from here on leaves the pending
	// state ahead of the database: it is rebuilt (stale).
	if len(stored) > 0 && s.pend.spans == 0 {
		s.pendSince = s.now()
	}
	for _, sp := range stored {
		s.addPending(s.pend, sp.e, sp.ts, sp.th)
		s.maxTS = max(s.maxTS, sp.ts)
	}
	s.pend.lastID = max(s.pend.lastID, last)
	flush := s.flushDue()
	if flush {
		if err = s.flushTx(ctx, tx); err != nil {
			s.stale = true
			return err
		}
	}
	if err = tx.Commit(); err != nil {
		s.stale = true
		return fmt.Errorf("eventstore: commit: %w", err)
	}
	s.lastID = max(s.lastID, last)
	s.sampling.notePacked(ordered, rows)
	if flush {
		s.flushed()
	}
	s.restartLog(ctx)
	return nil
}

// restartLog lets the write-ahead log start over. checkpointLoop copies
// it into the database as it grows, but SQLite only reuses the log from
// its start when a write begins with every frame copied, which the writer,
// always ahead of the checkpoints, would never see: so every
// checkpointEvery commits the writer copies the few frames left itself.
func (s *Store) restartLog(ctx context.Context) {
	if s.ckpt == nil {
		return
	}
	s.commits++
	if s.commits%checkpointEvery != 0 {
		return
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
		s.log.Warn("eventstore: checkpoint", "err", err)
	}
}

// checkpointEvery is how many commits restartLog waits. Each of its
// checkpoints syncs the log and the database: at a commit per few spans,
// every 16 commits made them a fifth of the store's CPU.
const checkpointEvery = 64

// storedRow is one row of a write: a span, or a packed row of a turn that
// was not sampled (codecPack): spans[first:first+n] of the write, the turn
// span first.
type storedRow struct {
	ts, th, sh int64
	first, n   int
	stored     bool // inserted, not a copy of a row already there
}

// rowsOf orders the spans of a write into rows: the tallies of a
// sampled-out turn whose turn span is in the same write go into one row
// with it; every other span is a row of its own. It returns the spans in
// row order.
func (s *Store) rowsOf(spans []newSpan) ([]newSpan, []storedRow) {
	rows := s.wbuf.rows[:0]
	packing := false
	for i := range spans {
		packing = packing || packable(&spans[i]) || spans[i].tally
	}
	if !packing {
		for i, sp := range spans {
			rows = append(rows, storedRow{ts: sp.ts, th: sp.th, sh: sp.sh, first: i, n: 1})
		}
		s.wbuf.rows = rows
		return spans, rows
	}
	// head[turn] and next link each turn's tallies in the write's order;
	// tail[turn] is the last linked so far. A tally is never a turn, so
	// its own entries say what became of it: tail[tally] is its turn,
	// head[tally] is copied when it is a copy.
	link := slices.Grow(s.wbuf.link[:0], 3*len(spans))[:3*len(spans)]
	head, tail, next := link[:len(spans)], link[len(spans):2*len(spans)], link[2*len(spans):]
	for i := range link {
		link[i] = -1
	}
	turnOf := s.wbuf.turnOf
	if turnOf == nil {
		turnOf = map[string]int{}
	}
	for i := range spans {
		// Only a turn span's first arrival gets a packed row: a copy of it
		// is known by its key, and its tallies by packed.
		if e := spans[i].e; packable(&spans[i]) && !s.sampling.stored(e.TraceID) {
			if _, twice := turnOf[e.TraceID]; !twice {
				turnOf[e.TraceID] = i
			}
		}
	}
	const copied = -2 // a tally already stored, or twice in this write
	for i := range spans {
		sp := &spans[i]
		if !sp.tally {
			continue
		}
		if s.sampling.packedAlready(sp.e.TraceID, sp.sh) {
			head[i] = copied
			continue
		}
		t, ok := turnOf[sp.e.TraceID]
		if !ok {
			continue
		}
		dup := false
		for j := head[t]; j >= 0 && !dup; j = next[j] {
			dup = spans[j].sh == sp.sh && spans[j].ts == sp.ts
		}
		if dup {
			head[i] = copied
			continue
		}
		if tail[t] >= 0 {
			next[tail[t]] = i
		} else {
			head[t] = i
		}
		tail[t] = i
		tail[i] = t // i is in t's row
	}
	ordered := s.wbuf.ordered[:0]
	for i, sp := range spans {
		if head[i] == copied || (sp.tally && tail[i] >= 0) {
			continue // a copy, or stored in its turn's row
		}
		row := storedRow{ts: sp.ts, th: sp.th, sh: sp.sh, first: len(ordered), n: 1}
		ordered = append(ordered, sp)
		if t, ok := turnOf[sp.e.TraceID]; ok && t == i {
			for j := head[i]; j >= 0; j = next[j] {
				ordered = append(ordered, spans[j])
				row.n++
			}
		}
		rows = append(rows, row)
	}
	clear(turnOf)
	s.wbuf.rows, s.wbuf.link, s.wbuf.turnOf, s.wbuf.ordered = rows, link[:0], turnOf, ordered
	return ordered, rows
}

// insertSpans inserts the spans and returns those actually stored (not
// already there) and the highest id given.
func (s *Store) insertSpans(ctx context.Context, tx *sql.Tx, spans []newSpan, rows []storedRow) ([]newSpan, int64, error) {
	last := s.lastID
	stored := s.wbuf.stored[:0]
	args := s.wbuf.args[:0]
	buf := s.wbuf.data[:0]
	rec := s.wbuf.rec[:0]
	defer func() {
		// stored is the caller's until writeTx returns: it clears it.
		s.wbuf.stored, s.wbuf.args, s.wbuf.data, s.wbuf.rec = stored[:0], clear0(args), buf[:0], rec[:0]
	}()
	for _, r := range rows {
		start := len(buf)
		if r.n == 1 {
			buf = encodeRecord(buf, &spans[r.first])
		} else {
			var p packer
			p.begin(buf, r.ts, r.n)
			for _, sp := range spans[r.first : r.first+r.n] {
				rec = encodeRecord(rec[:0], &sp)
				p.add(rec, sp.ts)
			}
			buf = p.b
		}
		args = append(args, r.ts, r.th, r.sh, buf[start:len(buf):len(buf)])
	}
	err := s.ins.exec(ctx, tx, 4, args, func(res sql.Result, from, n int) error {
		got, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if got == 0 {
			return nil
		}
		chunk := rows[from : from+n]
		if got == int64(n) {
			for i := range chunk {
				chunk[i].stored = true
				stored = append(stored, spans[chunk[i].first:chunk[i].first+chunk[i].n]...)
			}
		} else {
			// Some were already stored (a replay): the new ones are the
			// rows above the previous highest id.
			kept, err := newRows(ctx, tx, last, chunk)
			if err != nil {
				return err
			}
			for _, i := range kept {
				chunk[i].stored = true
				stored = append(stored, spans[chunk[i].first:chunk[i].first+chunk[i].n]...)
			}
		}
		last, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("eventstore: insert: %w", err)
	}
	return stored, last, nil
}

// packable reports whether sp is the turn span of a turn that was not
// sampled, which its tallies may be stored with.
func packable(sp *newSpan) bool {
	return sp.e.Name == "turn" && sp.e.SampledOut && !sp.tally
}

// encodeRecord appends the record sp is stored as: its tally or the whole
// span.
func encodeRecord(b []byte, sp *newSpan) []byte {
	if sp.tally {
		return encodeTally(b, sp.e)
	}
	return encodeSpan(b, sp.e)
}

// clear0 empties s, dropping what its elements point to so that a kept
// buffer does not hold the last batch's events.
func clear0[S ~[]E, E any](s S) S {
	clear(s)
	return s[:0]
}

// newRows returns the indexes in chunk of the rows stored with ids above
// last.
func newRows(ctx context.Context, tx *sql.Tx, last int64, chunk []storedRow) ([]int, error) {
	type key struct{ ts, th, sh int64 }
	rs, err := tx.QueryContext(ctx, `SELECT ts_start, th, sh FROM events WHERE id > ?`, last)
	if err != nil {
		return nil, fmt.Errorf("eventstore: insert: %w", err)
	}
	defer rs.Close()
	added := map[key]bool{}
	for rs.Next() {
		var k key
		if err := rs.Scan(&k.ts, &k.th, &k.sh); err != nil {
			return nil, fmt.Errorf("eventstore: insert: %w", err)
		}
		added[k] = true
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: insert: %w", err)
	}
	var kept []int
	for i, r := range chunk {
		k := key{r.ts, r.th, r.sh}
		if added[k] {
			kept = append(kept, i)
			delete(added, k) // a span twice in one batch is stored once
		}
	}
	return kept, nil
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Prune deletes spans that started before before, the turns that started
// before it and the roll-up buckets that ended by then; views no longer
// look before it.
func (s *Store) Prune(ctx context.Context, before time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.syncLocked(ctx); err != nil {
		return err
	}
	b := max(before.UnixMilli(), s.pruned.Load())
	if _, err := s.w.ExecContext(ctx, `UPDATE meta SET value = ? WHERE key = 'pruned_before'`, b); err != nil {
		return fmt.Errorf("eventstore: prune: %w", err)
	}
	s.pruned.Store(b)
	minute := floorTo(b, minuteMS) / minuteMS
	type step struct {
		sql    string
		args   []any
		repeat bool // deletes in chunks until none is left
	}
	steps := []step{
		{`DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts_start < ? LIMIT 20000)`, []any{b}, true},
		{`DELETE FROM turn_info WHERE (minute, th) IN (SELECT minute, th FROM turn_info WHERE minute < ? LIMIT 20000)`, []any{minute}, true},
		{`DELETE FROM turn_info WHERE (minute, th) IN (SELECT minute, th FROM turns WHERE minute = ? AND ts_start < ?)`, []any{minute, b}, false},
		{`DELETE FROM turns WHERE (minute, th) IN (SELECT minute, th FROM turns WHERE minute < ? LIMIT 20000)`, []any{minute}, true},
		{`DELETE FROM turns WHERE minute = ? AND ts_start < ?`, []any{minute, b}, false},
	}
	_, vers := s.dict.sizes()
	for vid := 1; vid <= vers; vid++ {
		steps = append(steps, step{`DELETE FROM turn_versions WHERE (vid, ts_start, th) IN
			(SELECT vid, ts_start, th FROM turn_versions WHERE vid = ? AND ts_start < ? LIMIT 20000)`, []any{vid, b}, true},
			step{`DELETE FROM version_turns WHERE (vid, minute, seq) IN
			(SELECT vid, minute, seq FROM version_turns WHERE vid = ? AND minute < ? LIMIT 1000)`, []any{vid, minute}, true})
	}
	for _, ls := range [][]level{coarseLevels, fineLevels} {
		for _, l := range ls {
			steps = append(steps, step{`DELETE FROM rollup WHERE lvl = ? AND bucket <= ?`, []any{l.id, b - l.width}, false})
		}
	}
	for _, l := range slices.Concat(userLevels, allUserLevels) {
		steps = append(steps, step{`DELETE FROM user_rollup WHERE lvl = ? AND bucket <= ?`, []any{l.id, b - l.width}, false})
	}
	for _, st := range steps {
		for ctx.Err() == nil {
			res, err := s.w.ExecContext(ctx, st.sql, st.args...)
			if err != nil {
				return fmt.Errorf("eventstore: prune: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 0 || !st.repeat {
				break
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.pruneChunks(ctx, vers, minute, b)
}

// pruneChunks drops the entries of turns that started before b from the
// version chunks of b's minute (the earlier minutes' are deleted whole).
func (s *Store) pruneChunks(ctx context.Context, vers int, minute, b int64) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: prune: %w", err)
	}
	defer tx.Rollback()
	for vid := 1; vid <= vers; vid++ {
		err := rewriteChunks(ctx, tx, `vid = ? AND minute = ?`, []any{vid, minute}, func(ts, _ int64, rec []byte) ([]byte, bool, error) {
			return rec, ts >= b, nil
		})
		if err != nil {
			return fmt.Errorf("eventstore: prune: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("eventstore: prune: %w", err)
	}
	return nil
}

func (s *Store) retentionLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.RetentionInterval)
	defer t.Stop()
	for {
		if err := s.Prune(ctx, s.now().Add(-s.cfg.Retention)); err != nil && ctx.Err() == nil {
			s.log.Warn("eventstore: retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops the retention loop, writes the pending sums and closes the
// database. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
		s.mu.Lock()
		err := s.syncLocked(context.Background())
		s.closed = true
		s.mu.Unlock()
		s.closeErr = errors.Join(err, s.closeDBs())
	})
	return s.closeErr
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, l := range []*ladder{s.ins, s.upsertRollup, s.insTurn, s.insTurnInfo, s.insChunk, s.upsertUsers} {
		errs = append(errs, l.close())
	}
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	if s.r != nil && s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("eventstore: close: %w", err)
	}
	return nil
}
