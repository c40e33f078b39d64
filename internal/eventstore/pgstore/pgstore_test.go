package pgstore

import (
	"context"
	"testing"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore/storetest"
	"github.com/fmgate/fmgate/internal/pgtest"
)

// writer adapts Store to storetest.Backend.
type writer struct{ *Store }

func (w writer) Write(ctx context.Context, batch []events.Event) error {
	_, err := w.Store.Write(ctx, batch)
	return err
}

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), pgtest.DSN(), Options{Schema: pgtest.Schema(t), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Backend { return writer{openTest(t)} })
}

func TestWriteCountsOnlyNewSpans(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	data := storetest.Dataset(1, 20)
	n, err := s.Write(ctx, data)
	if err != nil || n != int64(len(data)) {
		t.Fatalf("first write stored %d (%v), want %d", n, err, len(data))
	}
	n, err = s.Write(ctx, append(data[:10:10], data[:10]...))
	if err != nil || n != 0 {
		t.Fatalf("a redelivered batch stored %d (%v), want 0", n, err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Spans != int64(len(data)) || st.Turns != 20 {
		t.Fatalf("stats %+v (%v), want %d spans and 20 turns", st, err, len(data))
	}
}
