// Package pgtest gives tests a real PostgreSQL database and a schema of
// their own, so that tests run against the same server in parallel without
// seeing each other's tables.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DSN is the database tests use: $FMGATE_TEST_PG_DSN, or the local server
// with trust authentication (user postgres, database test).
func DSN() string {
	if d := os.Getenv("FMGATE_TEST_PG_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Schema creates a fresh schema and returns its name; it is dropped when
// the test ends. The test fails (it does not skip) when PostgreSQL is not
// reachable.
func Schema(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, DSN())
	if err != nil {
		tb.Fatalf("postgresql at %s is not reachable (start it, or set FMGATE_TEST_PG_DSN): %v", DSN(), err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "fmgate_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, `CREATE SCHEMA `+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, DSN())
		if err != nil {
			tb.Errorf("dropping schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `DROP SCHEMA `+name+` CASCADE`); err != nil {
			tb.Errorf("dropping schema %s: %v", name, err)
		}
	})
	return name
}
