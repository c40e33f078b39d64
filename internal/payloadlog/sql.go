package payloadlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" driver
)

// SQLite is a Store in an SQLite file (":memory:" for one in memory).
type SQLite struct{ db *sql.DB }

// OpenSQLite opens (creating if needed) the payload store at path. The
// file is the gateway's alone (mode 0600).
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	dsn := "file::memory:"
	if path != ":memory:" {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("payloadlog: %w", err)
		}
		// Created 0600 before SQLite opens it, so that its -wal and -shm
		// files, which SQLite creates with the database's mode, are too.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("payloadlog: %w", err)
		}
		f.Close()
		dsn = "file:" + (&url.URL{Path: path}).EscapedPath()
	}
	// secure_delete: a deleted payload's pages are overwritten, not left
	// in the file's free list.
	db, err := sql.Open("sqlite", dsn+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=secure_delete(on)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("payloadlog: open: %w", err)
	}
	db.SetMaxOpenConns(1) // one writer; and ":memory:" is one database per connection
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS payloads (trace_id TEXT PRIMARY KEY, at INTEGER NOT NULL, user_id_hash TEXT NOT NULL,
			key_id TEXT NOT NULL, feature TEXT NOT NULL, sealed BLOB NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS payloads_at ON payloads (at)`,
		`CREATE INDEX IF NOT EXISTS payloads_user ON payloads (user_id_hash)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("payloadlog: create table: %w", err)
		}
	}
	return &SQLite{db: db}, nil
}

// Put implements Store.
func (s *SQLite) Put(ctx context.Context, rows []Row) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("put", err)
	}
	defer tx.Rollback()
	st, err := tx.PrepareContext(ctx, `INSERT INTO payloads (trace_id, at, user_id_hash, key_id, feature, sealed) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT(trace_id) DO NOTHING`)
	if err != nil {
		return wrap("put", err)
	}
	defer st.Close()
	for _, r := range rows {
		if _, err := st.ExecContext(ctx, r.TraceID, r.At.UnixMicro(), r.UserHash, r.KeyID, r.Feature, r.Sealed); err != nil {
			return wrap("put", err)
		}
	}
	return wrap("put", tx.Commit())
}

// Get implements Store.
func (s *SQLite) Get(ctx context.Context, traceID string) (Row, bool, error) {
	r, err := scanRow(s.db.QueryRowContext(ctx, `SELECT trace_id, at, user_id_hash, key_id, feature, sealed FROM payloads WHERE trace_id = ?`, traceID))
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, false, nil
	}
	return r, err == nil, wrap("get", err)
}

// Scan implements Store.
func (s *SQLite) Scan(ctx context.Context, f Filter, fn func(Row) error) error {
	where, args := f.where(func(int) string { return "?" })
	rows, err := s.db.QueryContext(ctx, `SELECT trace_id, at, user_id_hash, key_id, feature, sealed FROM payloads`+where+
		` ORDER BY at, trace_id`+limit(f.Limit), args...)
	if err != nil {
		return wrap("scan", err)
	}
	defer rows.Close()
	return eachRow(rows, fn)
}

// DeleteUser implements Store.
func (s *SQLite) DeleteUser(ctx context.Context, userHash string) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM payloads WHERE user_id_hash = ?`, userHash)
	if err != nil {
		return 0, wrap("delete", err)
	}
	n, err := res.RowsAffected()
	return n, wrap("delete", err)
}

// DeleteBefore implements Store.
func (s *SQLite) DeleteBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM payloads WHERE trace_id IN
		(SELECT trace_id FROM payloads WHERE at < ? ORDER BY at LIMIT ?)`, before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap("prune", err)
	}
	n, err := res.RowsAffected()
	return n, wrap("prune", err)
}

// Close implements Store.
func (s *SQLite) Close() error { return s.db.Close() }

// Postgres is a Store in PostgreSQL, shared by a fleet.
type Postgres struct {
	pool *pgxpool.Pool

	mu    sync.Mutex
	ready bool // the table exists
}

// OpenPostgres prepares a pool for dsn, in schema (default: the DSN's
// search_path). It does not wait for PostgreSQL: the table is created, if
// needed, by the first call that reaches it, so that a gateway starts
// while the database is down (payloads written meanwhile are counted as
// lost).
func OpenPostgres(ctx context.Context, dsn, schema string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("payloadlog: dsn: %w", err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "fmgate-payloads"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("payloadlog: connect: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

func (p *Postgres) ensure(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready {
		return nil
	}
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS fmgate_payloads (trace_id text PRIMARY KEY, at bigint NOT NULL, user_id_hash text NOT NULL,
			key_id text NOT NULL, feature text NOT NULL, sealed bytea NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS fmgate_payloads_at ON fmgate_payloads (at)`,
		`CREATE INDEX IF NOT EXISTS fmgate_payloads_user ON fmgate_payloads (user_id_hash)`,
	} {
		if _, err := p.pool.Exec(ctx, q); err != nil {
			return wrap("create table", err)
		}
	}
	p.ready = true
	return nil
}

// Put implements Store.
func (p *Postgres) Put(ctx context.Context, rows []Row) error {
	if err := p.ensure(ctx); err != nil {
		return err
	}
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(`INSERT INTO fmgate_payloads (trace_id, at, user_id_hash, key_id, feature, sealed) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (trace_id) DO NOTHING`, r.TraceID, r.At.UnixMicro(), r.UserHash, r.KeyID, r.Feature, r.Sealed)
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return wrap("put", err)
	}
	defer tx.Rollback(ctx)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return wrap("put", err)
	}
	return wrap("put", tx.Commit(ctx))
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, traceID string) (Row, bool, error) {
	if err := p.ensure(ctx); err != nil {
		return Row{}, false, err
	}
	r, err := scanRow(p.pool.QueryRow(ctx, `SELECT trace_id, at, user_id_hash, key_id, feature, sealed FROM fmgate_payloads WHERE trace_id = $1`, traceID))
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, nil
	}
	return r, err == nil, wrap("get", err)
}

// Scan implements Store.
func (p *Postgres) Scan(ctx context.Context, f Filter, fn func(Row) error) error {
	if err := p.ensure(ctx); err != nil {
		return err
	}
	where, args := f.where(func(i int) string { return fmt.Sprintf("$%d", i) })
	rows, err := p.pool.Query(ctx, `SELECT trace_id, at, user_id_hash, key_id, feature, sealed FROM fmgate_payloads`+where+
		` ORDER BY at, trace_id`+limit(f.Limit), args...)
	if err != nil {
		return wrap("scan", err)
	}
	defer rows.Close()
	return eachRow(rows, fn)
}

// DeleteUser implements Store.
func (p *Postgres) DeleteUser(ctx context.Context, userHash string) (int64, error) {
	if err := p.ensure(ctx); err != nil {
		return 0, err
	}
	tag, err := p.pool.Exec(ctx, `DELETE FROM fmgate_payloads WHERE user_id_hash = $1`, userHash)
	return tag.RowsAffected(), wrap("delete", err)
}

// DeleteBefore implements Store.
func (p *Postgres) DeleteBefore(ctx context.Context, before time.Time, limit int) (int64, error) {
	if err := p.ensure(ctx); err != nil {
		return 0, err
	}
	tag, err := p.pool.Exec(ctx, `DELETE FROM fmgate_payloads WHERE trace_id IN
		(SELECT trace_id FROM fmgate_payloads WHERE at < $1 ORDER BY at LIMIT $2)`, before.UnixMicro(), limit)
	return tag.RowsAffected(), wrap("prune", err)
}

// Close implements Store.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// scanner is a row of database/sql or pgx.
type scanner interface{ Scan(dest ...any) error }

// rowCursor is what eachRow reads: database/sql's rows and pgx's alike.
type rowCursor interface {
	scanner
	Next() bool
	Err() error
}

// eachRow calls fn with every payload row of rows, in order.
func eachRow(rows rowCursor, fn func(Row) error) error {
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return wrap("scan", err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return wrap("scan", rows.Err())
}

func scanRow(sc scanner) (Row, error) {
	var r Row
	var at int64
	if err := sc.Scan(&r.TraceID, &at, &r.UserHash, &r.KeyID, &r.Feature, &r.Sealed); err != nil {
		return Row{}, err
	}
	r.At = time.UnixMicro(at).UTC()
	return r, nil
}

// where is f's WHERE clause with its arguments, each placeholder written
// by ph (1-based).
func (f Filter) where(ph func(i int) string) (string, []any) {
	var conds []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, cond+" "+ph(len(args)))
	}
	if !f.From.IsZero() {
		add("at >=", f.From.UnixMicro())
	}
	if !f.To.IsZero() {
		add("at <", f.To.UnixMicro())
	}
	if f.Feature != "" {
		add("feature =", f.Feature)
	}
	if f.UserHash != "" {
		add("user_id_hash =", f.UserHash)
	}
	if f.KeyID != "" {
		add("key_id =", f.KeyID)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

func limit(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", n)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("payloadlog: %s: %w: %w", op, ErrUnavailable, err)
}
