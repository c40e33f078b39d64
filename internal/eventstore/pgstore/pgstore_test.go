package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
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

func TestRetention(t *testing.T) {
	ctx := context.Background()
	now := storetest.T0.Add(48 * time.Hour)
	s, err := Open(ctx, pgtest.DSN(), Options{Schema: pgtest.Schema(t), Retention: 36 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := storetest.Dataset(2, 5) // around T0: older than the retention
	if n, err := s.Write(ctx, old); err != nil || n != 0 {
		t.Fatalf("spans older than the retention: stored %d (%v), want 0", n, err)
	}
	s.retention = 0
	if _, err := s.Write(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := s.Prune(ctx, storetest.T0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Spans != 0 || st.Turns != 0 {
		t.Fatalf("after Prune: %+v (%v), want nothing left", st, err)
	}
	rep, err := s.Cost(ctx, eventstore.Query{From: storetest.T0.Add(-2 * time.Hour), To: storetest.T0.Add(2 * time.Hour)})
	if err != nil || rep.Total.Spans != 0 {
		t.Fatalf("roll-ups after Prune: %+v (%v), want none", rep.Total, err)
	}
	// The day's partition comes back when new spans of it arrive.
	if n, err := s.Write(ctx, old); err != nil || n != int64(len(old)) {
		t.Fatalf("writing after Prune: stored %d (%v), want %d", n, err, len(old))
	}
}
