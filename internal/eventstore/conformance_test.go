package eventstore_test

import (
	"context"
	"testing"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
)

// openMemory opens an empty store in memory, closed with the test.
func openMemory(t *testing.T) *eventstore.Store {
	cfg := eventstore.DefaultConfig()
	cfg.Path = ":memory:"
	cfg.Retention = 0
	s, err := eventstore.Open(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend { return openMemory(t) })
}

// legacyBackend is a store whose turns' versions are turn_versions rows,
// as in a file written before version chunks, after every write: the
// turns a write continues move into chunks, the rest stay rows.
type legacyBackend struct{ *eventstore.Store }

func (b legacyBackend) Write(ctx context.Context, batch []events.Event) error {
	if err := b.Store.Write(ctx, batch); err != nil {
		return err
	}
	return b.Store.LegacyVersions(ctx)
}

func TestConformanceLegacyVersionRows(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend { return legacyBackend{openMemory(t)} })
}
