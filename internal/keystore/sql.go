package keystore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" driver
)

// SQLite is a Store in an SQLite file (":memory:" for one in memory).
type SQLite struct{ db *sql.DB }

// OpenSQLite opens (creating if needed) the key store at path.
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	dsn := "file::memory:"
	if path != ":memory:" {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("keystore: %w", err)
		}
		// Created 0600 before SQLite opens it, so that its -wal and -shm
		// files, which SQLite creates with the database's mode, are too:
		// hashes and sealed secrets are the gateway's alone.
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("keystore: %w", err)
		}
		f.Close()
		dsn = "file:" + (&url.URL{Path: path}).EscapedPath()
	}
	db, err := sql.Open("sqlite", dsn+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("keystore: open: %w", err)
	}
	db.SetMaxOpenConns(1) // one writer; and ":memory:" is one database per connection
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS api_keys (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, data TEXT NOT NULL)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("keystore: create table: %w", err)
	}
	return &SQLite{db: db}, nil
}

// Put implements Store.
func (s *SQLite) Put(ctx context.Context, r Record) error {
	data, err := json.Marshal(toStored(r))
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO api_keys (id, seq, data) VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM api_keys), ?)
		ON CONFLICT(id) DO UPDATE SET seq = excluded.seq, data = excluded.data`, r.ID, string(data))
	return wrap("put", err)
}

// Get implements Store.
func (s *SQLite) Get(ctx context.Context, id string) (Record, bool, error) {
	var data string
	err := s.db.QueryRowContext(ctx, `SELECT data FROM api_keys WHERE id = ?`, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, wrap("get", err)
	}
	r, err := decode([]byte(data))
	return r, err == nil, err
}

// List implements Store.
func (s *SQLite) List(ctx context.Context) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT data FROM api_keys ORDER BY id`)
	if err != nil {
		return nil, wrap("list", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, wrap("list", err)
		}
		r, err := decode([]byte(data))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, wrap("list", rows.Err())
}

// Version implements Store.
func (s *SQLite) Version(ctx context.Context) (int64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(seq), 0) FROM api_keys`).Scan(&v) // as Postgres.Version
	return v, wrap("version", err)
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
// search_path). It does not wait for PostgreSQL: the table is created,
// if needed, by the first call that reaches it, so that a gateway starts
// (and serves its configured keys) while the database is down.
func OpenPostgres(ctx context.Context, dsn, schema string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("keystore: dsn: %w", err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "fmgate-keys"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("keystore: connect: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// ensure creates the table once.
func (p *Postgres) ensure(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready {
		return nil
	}
	for _, q := range []string{
		`CREATE SEQUENCE IF NOT EXISTS fmgate_api_keys_seq`,
		`CREATE TABLE IF NOT EXISTS fmgate_api_keys (id TEXT PRIMARY KEY, seq BIGINT NOT NULL, data JSONB NOT NULL)`,
	} {
		if _, err := p.pool.Exec(ctx, q); err != nil {
			return wrap("create table", err)
		}
	}
	p.ready = true
	return nil
}

// Put implements Store.
func (p *Postgres) Put(ctx context.Context, r Record) error {
	if err := p.ensure(ctx); err != nil {
		return err
	}
	data, err := json.Marshal(toStored(r))
	if err != nil {
		return fmt.Errorf("keystore: %w", err)
	}
	_, err = p.pool.Exec(ctx, `INSERT INTO fmgate_api_keys (id, seq, data) VALUES ($1, nextval('fmgate_api_keys_seq'), $2)
		ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, data = excluded.data`, r.ID, data)
	return wrap("put", err)
}

// Get implements Store.
func (p *Postgres) Get(ctx context.Context, id string) (Record, bool, error) {
	if err := p.ensure(ctx); err != nil {
		return Record{}, false, err
	}
	var data []byte
	err := p.pool.QueryRow(ctx, `SELECT data FROM fmgate_api_keys WHERE id = $1`, id).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, wrap("get", err)
	}
	r, err := decode(data)
	return r, err == nil, err
}

// List implements Store.
func (p *Postgres) List(ctx context.Context) ([]Record, error) {
	if err := p.ensure(ctx); err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, `SELECT data FROM fmgate_api_keys ORDER BY id`)
	if err != nil {
		return nil, wrap("list", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, wrap("list", err)
		}
		r, err := decode(data)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, wrap("list", rows.Err())
}

// Version implements Store. It is the sum of the rows' sequence numbers,
// not the largest: two instances' changes may commit in the other order
// than they drew their numbers, and a change that lands under a larger
// number already seen must still move the version. Every change gives its
// row a number larger than any drawn before, so the sum grows with each
// commit.
func (p *Postgres) Version(ctx context.Context) (int64, error) {
	if err := p.ensure(ctx); err != nil {
		return 0, err
	}
	var v int64
	err := p.pool.QueryRow(ctx, `SELECT COALESCE(SUM(seq), 0)::bigint FROM fmgate_api_keys`).Scan(&v)
	return v, wrap("version", err)
}

// Close implements Store.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

func decode(data []byte) (Record, error) {
	var s stored
	if err := json.Unmarshal(data, &s); err != nil {
		return Record{}, fmt.Errorf("keystore: a stored key does not decode: %w", err)
	}
	return s.record(), nil
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("keystore: %s: %w: %w", op, ErrUnavailable, err)
}
