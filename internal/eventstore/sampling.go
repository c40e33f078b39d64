package eventstore

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/fmgate/fmgate/internal/events"
)

// Sampling of the stored spans. A turn that was not sampled says so on its
// turn span (events.Event.SampledOut); its other spans, but for the
// must-persist records, are then stored as tallies (codecTally): their
// figures stay, their details go. Every view sums, groups and filters
// tallies as the spans they were, so no figure depends on sampling; the
// trace view shows only whole spans, and the per-span view shows a tally
// as a span without an id.
//
// A turn span ends after its steps, so most of them are stored before the
// decision is known: they are stored whole, remembered (undecided), and
// rewritten as tallies in the transaction that stores their turn span. A
// span arriving after its turn span (the record step, a late batch) finds
// the decision in decided. Both are bounded; a span forgotten for want of
// room stays whole, which costs room and never a figure.

// Bounds of the sampling state.
const (
	// maxDecided is how many sampled-out traces are remembered for their
	// late spans.
	maxDecided = 1 << 16
	// maxUndecided is how many whole-stored spans of undecided turns are
	// remembered, to be reduced when their turn span arrives.
	maxUndecided = 1 << 17
)

// storedKey is a stored span's unique key.
type storedKey struct{ ts, th, sh int64 }

// sampling is the store's memory of sampling decisions, guarded by
// Store.mu.
type sampling struct {
	decided      map[string]bool // trace id → sampled out
	decidedOrder []string
	// packed lists the sampled-out traces whose turn span is stored, with
	// the span hashes of the tallies stored in the turn's packed row
	// (codecPack): a packed tally has no key of its own, so a copy of it
	// (a redelivery) is known here. Bounded like decided; a copy arriving
	// after its trace is forgotten is stored again, which a redelivery,
	// coming within seconds, never is.
	packed      map[string][]int64
	packedOrder []string
	undecided   map[string][]storedKey // trace id → spans stored whole
	undecOrder  []string
	undecSpans  int
}

func newSampling() *sampling {
	return &sampling{decided: map[string]bool{}, undecided: map[string][]storedKey{}, packed: map[string][]int64{}}
}

// learn records the decisions carried by the turn spans of batch, and
// returns the traces sampled out by this batch.
func (sm *sampling) learn(batch []events.Event) []string {
	var out []string
	for i := range batch {
		e := &batch[i]
		if e.Name != "turn" {
			continue
		}
		if !e.SampledOut {
			// Sampled: its spans stay whole; nothing left to do for them.
			sm.forget(e.TraceID)
			continue
		}
		if sm.decided[e.TraceID] {
			continue
		}
		sm.decided[e.TraceID] = true
		sm.decidedOrder = append(sm.decidedOrder, e.TraceID)
		if len(sm.decidedOrder) > maxDecided {
			delete(sm.decided, sm.decidedOrder[0])
			sm.decidedOrder = sm.decidedOrder[1:]
		}
		out = append(out, e.TraceID)
	}
	return out
}

// stored reports whether the turn span of the sampled-out trace is stored.
func (sm *sampling) stored(trace string) bool {
	_, ok := sm.packed[trace]
	return ok
}

// packedAlready reports whether the tally with span hash sh is stored in
// its turn's packed row.
func (sm *sampling) packedAlready(trace string, sh int64) bool {
	return slices.Contains(sm.packed[trace], sh)
}

// notePacked records, once their transaction is committed, the
// sampled-out turn spans of a write and the tallies stored with them.
func (sm *sampling) notePacked(spans []newSpan, rows []storedRow) {
	for _, r := range rows {
		sp := &spans[r.first]
		if !packable(sp) {
			continue
		}
		trace := sp.e.TraceID
		shs, ok := sm.packed[trace]
		if !ok {
			sm.packedOrder = append(sm.packedOrder, trace)
		}
		if r.stored {
			for _, m := range spans[r.first+1 : r.first+r.n] {
				shs = append(shs, m.sh)
			}
		}
		sm.packed[trace] = shs
	}
	for len(sm.packedOrder) > maxDecided {
		delete(sm.packed, sm.packedOrder[0])
		sm.packedOrder = sm.packedOrder[1:]
	}
}

// tally reports whether e is to be stored as a tally.
func (sm *sampling) tally(e *events.Event) bool { return droppable(e) && sm.decided[e.TraceID] }

// remember notes a droppable span stored whole before its turn's
// decision.
func (sm *sampling) remember(e *events.Event, k storedKey) {
	if !droppable(e) || sm.decided[e.TraceID] {
		return
	}
	keys, ok := sm.undecided[e.TraceID]
	if !ok {
		sm.undecOrder = append(sm.undecOrder, e.TraceID)
	}
	sm.undecided[e.TraceID] = append(keys, k)
	sm.undecSpans++
	for sm.undecSpans > maxUndecided && len(sm.undecOrder) > 0 {
		oldest := sm.undecOrder[0]
		sm.undecOrder = sm.undecOrder[1:]
		sm.forget(oldest)
	}
}

// forget drops the undecided spans of trace (they stay whole).
func (sm *sampling) forget(trace string) {
	if keys, ok := sm.undecided[trace]; ok {
		sm.undecSpans -= len(keys)
		delete(sm.undecided, trace)
	}
	// undecOrder keeps the id; compact it when mostly stale.
	if len(sm.undecOrder) > 2*len(sm.undecided)+64 {
		live := sm.undecOrder[:0]
		for _, id := range sm.undecOrder {
			if _, ok := sm.undecided[id]; ok {
				live = append(live, id)
			}
		}
		sm.undecOrder = live
	}
}

// take returns and forgets the undecided spans of trace.
func (sm *sampling) take(trace string) []storedKey {
	keys := sm.undecided[trace]
	sm.forget(trace)
	return keys
}

// reduce rewrites as tallies the spans of the sampled-out traces that were
// stored whole before their decision, in tx.
func (s *Store) reduce(ctx context.Context, tx *sql.Tx, traces []string) error {
	var (
		dec spanDecoder
		e   events.Event
	)
	for _, trace := range traces {
		for _, k := range s.sampling.take(trace) {
			var data []byte
			err := tx.QueryRowContext(ctx, `SELECT data FROM events WHERE ts_start = ? AND th = ? AND sh = ?`, k.ts, k.th, k.sh).Scan(&data)
			if err == sql.ErrNoRows {
				continue // pruned meanwhile
			}
			if err != nil {
				return fmt.Errorf("eventstore: sample: %w", err)
			}
			if isTally(data) || isPack(data) {
				continue
			}
			if err := dec.decode(data, k.ts, &e); err != nil {
				return fmt.Errorf("eventstore: sample: %w", err)
			}
			if e.TraceID != trace || !droppable(&e) {
				continue
			}
			if _, err := tx.ExecContext(ctx, `UPDATE events SET data = ? WHERE ts_start = ? AND th = ? AND sh = ?`,
				encodeTally(nil, &e), k.ts, k.th, k.sh); err != nil {
				return fmt.Errorf("eventstore: sample: %w", err)
			}
		}
	}
	return nil
}
