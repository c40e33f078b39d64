package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
)

// testdata is the absolute path of the package's testdata directory.
var testdata string

// TestMain runs the package's tests in a scratch directory, so that the
// default relative paths (var/events.db, var/wal) never land in the source
// tree; isolate gives each server its own.
func TestMain(m *testing.M) {
	var err error
	if testdata, err = filepath.Abs("testdata"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "fmgate-server-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.Chdir(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// isolate moves the event store and the write-ahead log of cfg into t's own
// temporary directory, unless the test chose other paths.
func isolate(t testing.TB, cfg config.Config) config.Config {
	t.Helper()
	def := config.Default()
	dir := t.TempDir()
	if cfg.EventStore.Path == def.EventStore.Path {
		cfg.EventStore.Path = filepath.Join(dir, "events.db")
	}
	if cfg.Events.WAL.Dir == def.Events.WAL.Dir {
		cfg.Events.WAL.Dir = filepath.Join(dir, "wal")
	}
	return cfg
}
