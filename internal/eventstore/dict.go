package eventstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/fmgate/fmgate/internal/events"
)

// dicts numbers dimension tuples (for roll-up keys) and artifact versions
// (for per-turn version sets). Numbers are handed out in memory and
// written to the dims and vers tables by the next materialization, in the
// same transaction as the first rows that use them. Lookups by number are
// safe for concurrent use; allocation happens under the store's write lock.
type dicts struct {
	mu     sync.RWMutex
	dims   []dimTuple // by id-1
	dimIDs map[dimTuple]int64
	vers   []verKey // by id-1
	verIDs map[verKey]int64
	// Entries not yet written: ids above these.
	savedDims, savedVers int
	// coarseOf[i] is the id of the coarse tuple of fine tuple id i+1,
	// or 0 when not yet known; only the writer reads and writes it.
	coarseOf []int64
}

// verKey is one version of one artifact dimension.
type verKey struct {
	dim     string // "graph", "prompt", "model", "tool"
	version string
}

// Artifact dimensions of vers, as the Query filters name them.
const (
	dimGraph  = "graph"
	dimPrompt = "prompt"
	dimModel  = "model"
	dimTool   = "tool"
)

func (d *dicts) load(ctx context.Context, db *sql.DB) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dims, d.dimIDs = nil, map[dimTuple]int64{}
	d.vers, d.verIDs = nil, map[verKey]int64{}
	rs, err := db.QueryContext(ctx, `SELECT id, fine, feature, surface, locale, user_tier, graph_version,
		model_id, prompt_version, tool_id FROM dims ORDER BY id`)
	if err != nil {
		return fmt.Errorf("eventstore: dictionaries: %w", err)
	}
	for rs.Next() {
		var (
			id int64
			t  dimTuple
		)
		if err := rs.Scan(&id, &t.fine, &t.feature, &t.surface, &t.locale, &t.tier, &t.graph, &t.model, &t.prompt, &t.tool); err != nil {
			rs.Close()
			return fmt.Errorf("eventstore: dictionaries: %w", err)
		}
		if id != int64(len(d.dims))+1 {
			rs.Close()
			return fmt.Errorf("eventstore: dictionaries: dims ids are not dense at %d", id)
		}
		d.dims = append(d.dims, t)
		d.dimIDs[t] = id
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("eventstore: dictionaries: %w", err)
	}
	rs, err = db.QueryContext(ctx, `SELECT id, dim, version FROM vers ORDER BY id`)
	if err != nil {
		return fmt.Errorf("eventstore: dictionaries: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			id int64
			v  verKey
		)
		if err := rs.Scan(&id, &v.dim, &v.version); err != nil {
			return fmt.Errorf("eventstore: dictionaries: %w", err)
		}
		if id != int64(len(d.vers))+1 {
			return fmt.Errorf("eventstore: dictionaries: vers ids are not dense at %d", id)
		}
		d.vers = append(d.vers, v)
		d.verIDs[v] = id
	}
	if err := rs.Err(); err != nil {
		return fmt.Errorf("eventstore: dictionaries: %w", err)
	}
	d.savedDims, d.savedVers = len(d.dims), len(d.vers)
	d.coarseOf = nil
	return nil
}

// The writer's lookups. Only the writer (under the store's write lock)
// adds entries, so its own reads of the maps need no lock: readers only
// read them too.

// spanDims returns the ids of e's coarse and fine tuples, handing out new
// ones if needed. A span's coarse tuple follows from its fine one, so
// after the first time it costs one map lookup, not two.
func (d *dicts) spanDims(e *events.Event) (coarse, fine int64) {
	fine = d.writerDimID(tupleOf(e, true))
	if int(fine) <= len(d.coarseOf) && d.coarseOf[fine-1] != 0 {
		return d.coarseOf[fine-1], fine
	}
	coarse = d.writerDimID(tupleOf(e, false))
	for len(d.coarseOf) < int(fine) {
		d.coarseOf = append(d.coarseOf, 0)
	}
	d.coarseOf[fine-1] = coarse
	return coarse, fine
}

func (d *dicts) writerDimID(t dimTuple) int64 {
	if id, ok := d.dimIDs[t]; ok {
		return id
	}
	return d.dimID(t)
}

func (d *dicts) writerVerID(v verKey) int64 {
	if id, ok := d.verIDs[v]; ok {
		return id
	}
	return d.verID(v)
}

// dimID returns t's number, handing out a new one if needed.
func (d *dicts) dimID(t dimTuple) int64 {
	d.mu.RLock()
	id, ok := d.dimIDs[t]
	d.mu.RUnlock()
	if ok {
		return id
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := d.dimIDs[t]; ok {
		return id
	}
	d.dims = append(d.dims, t)
	id = int64(len(d.dims))
	d.dimIDs[t] = id
	return id
}

// verID returns v's number, handing out a new one if needed.
func (d *dicts) verID(v verKey) int64 {
	d.mu.RLock()
	id, ok := d.verIDs[v]
	d.mu.RUnlock()
	if ok {
		return id
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := d.verIDs[v]; ok {
		return id
	}
	d.vers = append(d.vers, v)
	id = int64(len(d.vers))
	d.verIDs[v] = id
	return id
}

// lookupVer returns v's number, if it has one.
func (d *dicts) lookupVer(v verKey) (int64, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	id, ok := d.verIDs[v]
	return id, ok
}

// ver returns the version numbered id.
func (d *dicts) ver(id int64) verKey {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if id < 1 || id > int64(len(d.vers)) {
		return verKey{}
	}
	return d.vers[id-1]
}

// tuples returns the dimension tuples numbered so far (index id-1). The
// slice must not be modified.
func (d *dicts) tuples() []dimTuple {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.dims[:len(d.dims):len(d.dims)]
}

// save writes the entries handed out since the last save.
func (d *dicts) save(ctx context.Context, tx *sql.Tx) error {
	d.mu.RLock()
	newDims := d.dims[d.savedDims:]
	newVers := d.vers[d.savedVers:]
	firstDim, firstVer := d.savedDims+1, d.savedVers+1
	d.mu.RUnlock()
	for i, t := range newDims {
		if _, err := tx.ExecContext(ctx, `INSERT INTO dims VALUES (?,?,?,?,?,?,?,?,?,?)`, firstDim+i, t.fine,
			t.feature, t.surface, t.locale, t.tier, t.graph, t.model, t.prompt, t.tool); err != nil {
			return fmt.Errorf("eventstore: dictionaries: %w", err)
		}
	}
	for i, v := range newVers {
		if _, err := tx.ExecContext(ctx, `INSERT INTO vers VALUES (?,?,?)`, firstVer+i, v.dim, v.version); err != nil {
			return fmt.Errorf("eventstore: dictionaries: %w", err)
		}
	}
	return nil
}

// saved records that save's transaction committed up to the given sizes.
func (d *dicts) saved(dims, vers int) {
	d.mu.Lock()
	d.savedDims, d.savedVers = dims, vers
	d.mu.Unlock()
}

func (d *dicts) sizes() (dims, vers int) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.dims), len(d.vers)
}
