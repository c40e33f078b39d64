package eventstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Version chunks. A turn seen through one version it carried (its figures,
// the sums of its spans that carried the version, its attribution: the
// record appendVersionRow writes) is an entry of a chunk: one row of
// version_turns per version, minute and materialization (vid, minute,
// seq), holding every turn of that minute the materialization wrote with
// that version. A materialization of 250 turns of three versions writes
// three rows where a row per turn and version was 750, and a version's
// turns in a time range are still one index range.
//
// A turn's entries are found from its turn_info row: vseq is the seq of
// the materialization that wrote them (the id of the last span it covered,
// which no other materialization has), vers lists its versions, and the
// minute is the turn's. When a turn is written again (a late span), its
// entries leave their old chunks and join the new ones. vseq 0 means the
// turn's versions are rows of turn_versions, keyed by turn, as files
// written before chunks have them: they are read beside the chunks, and
// moved into a chunk when their turn is written again.
//
// An entry is the turn's start as milliseconds into the minute (uvarint),
// th (8 bytes, little-endian) and the record's length (uvarint) and bytes.

// chunkKey is a version_turns row's key.
type chunkKey struct{ vid, minute, seq int64 }

func compareChunkKeys(a, b chunkKey) int {
	return cmp.Or(cmp.Compare(a.vid, b.vid), cmp.Compare(a.minute, b.minute), cmp.Compare(a.seq, b.seq))
}

// appendEntry appends the entry of the turn that started at ts with hash
// th to a chunk of minute.
func appendEntry(b []byte, minute, ts, th int64, rec []byte) []byte {
	b = binary.AppendUvarint(b, uint64(ts-minute*minuteMS))
	b = binary.LittleEndian.AppendUint64(b, uint64(th))
	b = binary.AppendUvarint(b, uint64(len(rec)))
	return append(b, rec...)
}

// eachEntry calls fn with each entry of a chunk of minute: its turn's start
// (ms), th and record.
func eachEntry(data []byte, minute int64, fn func(ts, th int64, rec []byte) error) error {
	for len(data) > 0 {
		off, n := binary.Uvarint(data)
		if n <= 0 || off >= uint64(minuteMS) || len(data) < n+8 {
			return errCorrupt
		}
		th := int64(binary.LittleEndian.Uint64(data[n:]))
		data = data[n+8:]
		l, n := binary.Uvarint(data)
		if n <= 0 || l > uint64(len(data)-n) {
			return errCorrupt
		}
		rec := data[n : n+int(l)]
		data = data[n+int(l):]
		if err := fn(minute*minuteMS+int64(off), th, rec); err != nil {
			return err
		}
	}
	return nil
}

// versionChunks gathers a materialization's entries by chunk.
type versionChunks struct {
	seq  int64
	data map[chunkKey][]byte
	rec  []byte
}

func (c *versionChunks) add(t *turnState) {
	if c.data == nil {
		c.data = map[chunkKey][]byte{}
	}
	m := t.minute()
	for i := range t.vers {
		k := chunkKey{t.vers[i].vid, m, c.seq}
		c.rec = t.appendVersionRow(c.rec[:0], &t.vers[i])
		c.data[k] = appendEntry(c.data[k], m, t.ts, t.th, c.rec)
	}
}

// write inserts the chunks in key order.
func (c *versionChunks) write(ctx context.Context, tx *sql.Tx, l *ladder) error {
	keys := make([]chunkKey, 0, len(c.data))
	for k := range c.data {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareChunkKeys)
	w := newMultiExec(tx, l, 4)
	for _, k := range keys {
		if err := w.add(ctx, k.vid, k.minute, k.seq, c.data[k]); err != nil {
			return err
		}
	}
	return w.flush(ctx)
}

func insertChunkSQL(rows int) string {
	return `INSERT INTO version_turns VALUES ` + strings.Repeat("(?,?,?,?),", rows-1) + "(?,?,?,?)"
}

// leave takes the stored turn old's entries out of its chunks, or its
// rows out of turn_versions, before it is written again. moved gathers
// the chunks' departures, applied by leaveChunks.
func (s *Store) leave(ctx context.Context, tx *sql.Tx, old *turnState, moved map[chunkKey][]int64) error {
	for _, v := range old.vers {
		if old.vseq == 0 {
			if err := s.txExec(ctx, tx, sqlDeleteTurnVersion, v.vid, old.ts, old.th); err != nil {
				return err
			}
			continue
		}
		k := chunkKey{v.vid, old.minute(), old.vseq}
		moved[k] = append(moved[k], old.th)
	}
	return nil
}

// leaveChunks drops the entries of the turns in moved from their chunks.
func leaveChunks(ctx context.Context, tx *sql.Tx, moved map[chunkKey][]int64) error {
	keys := make([]chunkKey, 0, len(moved))
	for k := range moved {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareChunkKeys)
	for _, k := range keys {
		ths := moved[k]
		err := rewriteChunks(ctx, tx, `vid = ? AND minute = ? AND seq = ?`, []any{k.vid, k.minute, k.seq},
			func(_, th int64, rec []byte) ([]byte, bool, error) {
				return rec, !slices.Contains(ths, th), nil
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// rewriteChunks rewrites the chunks matching where (a condition on vid,
// minute and seq) in tx: fn returns each entry's record as it is to be
// kept, or false to drop the entry. A chunk left empty is deleted; one
// that fn leaves as it was is not written.
func rewriteChunks(ctx context.Context, tx *sql.Tx, where string, args []any, fn func(ts, th int64, rec []byte) ([]byte, bool, error)) error {
	rs, err := tx.QueryContext(ctx, `SELECT vid, minute, seq, data FROM version_turns WHERE `+where, args...)
	if err != nil {
		return fmt.Errorf("eventstore: version chunks: %w", err)
	}
	type rewrite struct {
		k    chunkKey
		data []byte
	}
	var out []rewrite
	for rs.Next() {
		var (
			k    chunkKey
			data []byte
		)
		if err := rs.Scan(&k.vid, &k.minute, &k.seq, &data); err != nil {
			rs.Close()
			return fmt.Errorf("eventstore: version chunks: %w", err)
		}
		var (
			b       []byte
			changed bool
		)
		err := eachEntry(data, k.minute, func(ts, th int64, rec []byte) error {
			got, keep, err := fn(ts, th, rec)
			if err != nil {
				return err
			}
			if !keep {
				changed = true
				return nil
			}
			changed = changed || string(got) != string(rec)
			b = appendEntry(b, k.minute, ts, th, got)
			return nil
		})
		if err != nil {
			rs.Close()
			return fmt.Errorf("eventstore: version chunk %d/%d/%d: %w", k.vid, k.minute, k.seq, err)
		}
		if changed {
			out = append(out, rewrite{k, b})
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("eventstore: version chunks: %w", err)
	}
	for _, r := range out {
		q, args := `UPDATE version_turns SET data = ? WHERE vid = ? AND minute = ? AND seq = ?`, []any{r.data, r.k.vid, r.k.minute, r.k.seq}
		if len(r.data) == 0 {
			q, args = `DELETE FROM version_turns WHERE vid = ? AND minute = ? AND seq = ?`, args[1:]
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("eventstore: version chunks: %w", err)
		}
	}
	return nil
}

// rewriteVersions writes the version records of the stored turn t again
// from t (after its eval score changed), wherever they are: in its chunks
// or its turn_versions rows.
func rewriteVersions(ctx context.Context, tx *sql.Tx, t *turnState) error {
	for i := range t.vers {
		v := &t.vers[i]
		if t.vseq == 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE turn_versions SET data = ? WHERE vid = ? AND ts_start = ? AND th = ?`,
				t.appendVersionRow(nil, v), v.vid, t.ts, t.th); err != nil {
				return fmt.Errorf("eventstore: turn versions: %w", err)
			}
			continue
		}
		err := rewriteChunks(ctx, tx, `vid = ? AND minute = ? AND seq = ?`, []any{v.vid, t.minute(), t.vseq},
			func(ts, th int64, rec []byte) ([]byte, bool, error) {
				if th != t.th || ts != t.ts {
					return rec, true, nil
				}
				return t.appendVersionRow(nil, v), true, nil
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// versionRecords calls fn with every turn that started in [from, to) and
// carried version vid: its start, th and record. It reads the chunks and
// the rows of turn_versions in one read transaction, so that a turn moving
// from one to the other meanwhile is seen once.
func (s *Store) versionRecords(ctx context.Context, vid, from, to int64, fn func(ts, th int64, rec []byte) error) error {
	if from >= to {
		return nil
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rs, err := tx.QueryContext(ctx, `SELECT minute, data FROM version_turns WHERE vid = ? AND minute >= ? AND minute <= ?`,
		vid, floorTo(from, minuteMS)/minuteMS, floorTo(to-1, minuteMS)/minuteMS)
	if err != nil {
		return err
	}
	var (
		minute int64
		data   sql.RawBytes
	)
	for rs.Next() {
		if err := rs.Scan(&minute, &data); err != nil {
			rs.Close()
			return err
		}
		err := eachEntry(data, minute, func(ts, th int64, rec []byte) error {
			if ts < from || ts >= to {
				return nil
			}
			return fn(ts, th, rec)
		})
		if err != nil {
			rs.Close()
			return err
		}
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return err
	}
	rs, err = tx.QueryContext(ctx, `SELECT ts_start, th, data FROM turn_versions WHERE vid = ? AND ts_start >= ? AND ts_start < ?`, vid, from, to)
	if err != nil {
		return err
	}
	defer rs.Close()
	var ts, th int64
	for rs.Next() {
		if err := rs.Scan(&ts, &th, &data); err != nil {
			return err
		}
		if err := fn(ts, th, data); err != nil {
			return err
		}
	}
	return rs.Err()
}
