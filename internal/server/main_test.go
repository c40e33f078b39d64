package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/catalog"
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
	// The sampled eval judge adds P2 turns at random; tests that count
	// turns, attempts or cost would count them too. The judge's own tests
	// set a rate of their own.
	if cfg.Judge.SampleRate == def.Judge.SampleRate {
		cfg.Judge.SampleRate = 0
	}
	return cfg
}

var (
	catalogOnce  sync.Once
	catalogIndex *catalog.Index
	catalogErr   error
)

// sharedCatalog is the embedded catalog's index, built once for the
// package's gateways (an index is read-only; faults live per gateway).
func sharedCatalog(t testing.TB) *catalog.Index {
	t.Helper()
	catalogOnce.Do(func() {
		var items []catalog.Item
		if items, catalogErr = catalog.Load(catalog.DefaultConfig()); catalogErr == nil {
			catalogIndex, catalogErr = catalog.New(context.Background(), items)
		}
	})
	if catalogErr != nil {
		t.Fatal(catalogErr)
	}
	return catalogIndex
}
