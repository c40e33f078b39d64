// Package eventstore is fmgate's embedded event store: a durable events.Sink
// that keeps every span in a local SQLite file and answers the cost and
// quality questions of the dashboards from it — total → per feature → per
// user → per turn → per node, top users, anomalous turns, features whose
// cost per use is rising, eval scores filtered on every artifact version in
// one query, cost over time, the versions seen, two versions side by side
// (is this canary safe to ramp?) and every span of one trace.
//
// Raw spans live in one table; roll-ups (per minute × attribution ×
// versions, and per trace) are maintained inside the same transaction as
// the insert, so aggregate views never scan raw spans except for the
// partial minutes at the edges of a time range.
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
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/events"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Config is the eventStore section of fmgate's YAML.
type Config struct {
	// Path of the SQLite file; ":memory:" keeps everything in memory (tests,
	// demos). Default "var/events.db"; its directory is created.
	Path string `yaml:"path"`
	// Retention is how long spans and roll-ups are kept: a background loop
	// prunes older data every RetentionInterval, and Write skips spans
	// already older than it. Zero keeps everything. Default 720h (30 days).
	Retention time.Duration `yaml:"retention"`
	// Batch is the most spans inserted in one transaction; a larger Write
	// (a write-ahead-log replay) is split so readers are not starved. Default
	// 1000; limit 100000.
	Batch int `yaml:"batch"`
	// RetentionInterval is how often the retention loop runs. Default 1h.
	RetentionInterval time.Duration `yaml:"retentionInterval"`
}

// DefaultConfig returns the MangaAssist defaults: var/events.db, 30 days,
// 1000 spans per transaction, pruned hourly.
func DefaultConfig() Config {
	return Config{
		Path:              "var/events.db",
		Retention:         30 * 24 * time.Hour,
		Batch:             1000,
		RetentionInterval: time.Hour,
	}
}

// maxBatch bounds one insert transaction.
const maxBatch = 100000

// Validate reports every problem in c, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	if c.Path == "" {
		errs = append(errs, errors.New("path: must not be empty"))
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
	return errors.Join(errs...)
}

// Store is the embedded event store. It implements events.Sink, is Durable
// (it deduplicates on Event.ID, i.e. trace_id + span_id, so a replayed span
// is stored once) and io.Closer. Its methods are safe for concurrent use.
type Store struct {
	cfg Config
	now func() time.Time
	log *slog.Logger

	w *sql.DB // one connection: SQLite has one writer
	r *sql.DB // readers; the same pool as w for ":memory:"

	ins  *sql.Stmt // one span
	insN *sql.Stmt // insertRows spans

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the store at cfg.Path and starts the
// retention loop when cfg.Retention > 0. now is the clock (nil: time.Now).
func Open(ctx context.Context, cfg Config, now func() time.Time) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("eventstore: config: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	s := &Store{cfg: cfg, now: now, log: slog.Default(), done: make(chan struct{})}
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
		s.w, err = sql.Open("sqlite", u+"?"+pragmas(false)+"&_txlock=immediate")
		if err != nil {
			return nil, fmt.Errorf("eventstore: open: %w", err)
		}
		s.w.SetMaxOpenConns(1)
		s.r, err = sql.Open("sqlite", u+"?"+pragmas(true))
		if err != nil {
			s.w.Close()
			return nil, fmt.Errorf("eventstore: open: %w", err)
		}
		s.r.SetMaxOpenConns(4)
	}
	s.w.SetConnMaxLifetime(0)
	s.w.SetMaxIdleConns(1)
	if err := s.init(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	if cfg.Retention > 0 {
		go s.retentionLoop(loopCtx)
	} else {
		close(s.done)
	}
	return s, nil
}

// pragmas are applied by the driver to every new connection. NORMAL
// synchronous in WAL mode loses at most the last transactions on power
// loss, never consistency; the emitter's write-ahead log replays those.
func pragmas(readOnly bool) string {
	p := []string{
		"_pragma=busy_timeout(5000)",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(NORMAL)",
		"_pragma=cache_size(-65536)",
		"_pragma=temp_store(MEMORY)",
	}
	if readOnly {
		p = append(p, "_pragma=query_only(1)")
	}
	return strings.Join(p, "&")
}

// schemaVersion is stored in the file's user_version. A file written with
// another layout is emptied and recreated at Open (its tables are dropped):
// the store keeps derived, short-lived data, and converting every stored
// span would make Open slow in proportion to the file.
const schemaVersion = 2

// knownTables are every table any layout of the store created.
var knownTables = []string{"events", "cost_minute", "turns", "turn_versions"}

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
	for _, q := range schema {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("eventstore: schema: %w", err)
		}
	}
	if _, err := s.w.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, schemaVersion)); err != nil {
		return fmt.Errorf("eventstore: schema: %w", err)
	}
	var err error
	if s.ins, err = s.w.PrepareContext(ctx, insertSQL(1)); err != nil {
		return fmt.Errorf("eventstore: prepare: %w", err)
	}
	if s.insN, err = s.w.PrepareContext(ctx, insertSQL(insertRows)); err != nil {
		return fmt.Errorf("eventstore: prepare: %w", err)
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

// Name is "eventstore".
func (s *Store) Name() string { return "eventstore" }

// Durable is true: the emitter replays its write-ahead log to the store.
func (s *Store) Durable() bool { return true }

// Write stores a batch of spans, at most cfg.Batch per transaction. A span
// already stored (same trace_id and span_id) is skipped, so replays are
// harmless; a span older than the retention window is skipped too, since
// the next prune would drop it.
func (s *Store) Write(ctx context.Context, batch []events.Event) error {
	for len(batch) > 0 {
		n := min(len(batch), s.cfg.Batch)
		if err := s.writeTx(ctx, batch[:n]); err != nil {
			return err
		}
		batch = batch[n:]
	}
	return nil
}

func (s *Store) writeTx(ctx context.Context, batch []events.Event) (err error) {
	var cutoff int64
	if s.cfg.Retention > 0 {
		cutoff = s.now().Add(-s.cfg.Retention).UnixMilli()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("eventstore: begin: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	// Rowids only grow while this connection is the only writer, so the
	// spans this transaction adds are exactly those above the current max:
	// the roll-ups aggregate those and nothing a duplicate would re-add.
	var last int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM events`).Scan(&last); err != nil {
		return fmt.Errorf("eventstore: write: %w", err)
	}
	ins, insN := tx.StmtContext(ctx, s.ins), tx.StmtContext(ctx, s.insN)
	args := make([]any, 0, insertColumns*insertRows)
	flush := func(stmt *sql.Stmt) error {
		_, err := stmt.ExecContext(ctx, args...)
		args = args[:0]
		return err
	}
	kept := 0
	for i := range batch {
		e := &batch[i]
		ts := unixMilli(e.TSStart)
		if s.cfg.Retention > 0 && ts < cutoff {
			continue
		}
		kept++
		args = appendArgs(args, e, ts)
		if len(args) == cap(args) {
			if err := flush(insN); err != nil {
				return fmt.Errorf("eventstore: insert: %w", err)
			}
		}
	}
	for len(args) > 0 {
		rest := args[insertColumns:]
		args = args[:insertColumns]
		if err := flush(ins); err != nil {
			return fmt.Errorf("eventstore: insert: %w", err)
		}
		args = append(args, rest...)
	}
	if kept > 0 {
		for _, q := range rollups {
			if _, err := tx.ExecContext(ctx, q, last); err != nil {
				return fmt.Errorf("eventstore: roll-up: %w", err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("eventstore: commit: %w", err)
	}
	return nil
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func appendArgs(args []any, e *events.Event, ts int64) []any {
	var eval any
	if e.Outcome.EvalScore != nil {
		eval = *e.Outcome.EvalScore
	}
	args = args[:len(args)+insertColumns]
	a := args[len(args)-insertColumns:]
	a[0] = e.TraceID
	a[1] = e.SpanID
	a[2] = e.ParentSpanID
	a[3] = e.WorkflowID
	a[4] = e.UserIDHash
	a[5] = e.SessionID
	a[6] = ts
	a[7] = unixMilli(e.TSEnd)
	a[8] = e.DurationMS
	a[9] = e.Name
	a[10] = e.MustPersist
	a[11] = e.Node.GraphVersion
	a[12] = e.Node.NodeID
	a[13] = string(e.Node.InvocationMode)
	a[14] = string(e.Artifact.ArtifactKind)
	a[15] = e.Artifact.ModelID
	a[16] = e.Artifact.PromptVersion
	a[17] = e.Artifact.ToolID
	a[18] = e.Artifact.ToolVersion
	a[19] = e.Artifact.SubAgentID
	a[20] = e.Artifact.SubAgentVersion
	a[21] = e.Resource.TokensIn
	a[22] = e.Resource.TokensOut
	a[23] = finite(e.Resource.CostUSD)
	a[24] = string(e.Resource.CacheHit)
	a[25] = strings.Join(e.Resource.CapabilityFlagsActive, ",")
	a[26] = string(e.Outcome.Status)
	a[27] = e.Outcome.ErrorCode
	a[28] = e.Outcome.FallbackUsed
	a[29] = eval
	a[30] = e.Attribution.Feature
	a[31] = e.Attribution.Surface
	a[32] = e.Attribution.Locale
	a[33] = e.Attribution.UserTier
	a[34] = e.Attribution.Priority
	return args
}

// Prune deletes spans that started before before, with their per-minute
// roll-ups and the turns that started before it. It deletes in chunks so
// that writers are not blocked for long.
func (s *Store) Prune(ctx context.Context, before time.Time) error {
	b := before.UnixMilli()
	steps := []string{
		`DELETE FROM events WHERE id IN (SELECT id FROM events WHERE ts_start < ? LIMIT 20000)`,
		`DELETE FROM turn_versions WHERE trace_id IN (SELECT trace_id FROM turns WHERE ts_start < ?1)`,
		`DELETE FROM turns WHERE trace_id IN (SELECT trace_id FROM turns WHERE ts_start < ? LIMIT 20000)`,
	}
	for _, q := range steps {
		for ctx.Err() == nil {
			res, err := s.w.ExecContext(ctx, q, b)
			if err != nil {
				return fmt.Errorf("eventstore: prune: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 0 {
				break
			}
		}
	}
	// The minute roll-up's key starts with the minute: one range delete.
	if _, err := s.w.ExecContext(ctx, `DELETE FROM cost_minute WHERE minute < ?`, b); err != nil {
		return fmt.Errorf("eventstore: prune: %w", err)
	}
	return ctx.Err()
}

func (s *Store) retentionLoop(ctx context.Context) {
	defer close(s.done)
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

// Close stops the retention loop and closes the database. It is safe to
// call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
		s.closeErr = s.closeDBs()
	})
	return s.closeErr
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, st := range []*sql.Stmt{s.ins, s.insN} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.r != nil && s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("eventstore: close: %w", err)
	}
	return nil
}
