package eventstore

import (
	"context"
	"fmt"
)

// EachRecord is eachRecord, for the external tests that read the file.
var EachRecord = eachRecord

// LegacyVersions materializes what is pending, then rewrites every version
// chunk as turn_versions rows, the layout of files written before chunks,
// and marks every stored turn so (vseq 0): what a file of that layout
// looks like once opened.
func (s *Store) LegacyVersions(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.syncLocked(ctx); err != nil {
		return err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	type row struct {
		vid, ts, th int64
		rec         []byte
	}
	var rows []row
	err = eachChunkEntry(ctx, tx, func(vid, ts, th int64, rec []byte) error {
		rows = append(rows, row{vid, ts, th, append([]byte(nil), rec...)})
		return nil
	})
	if err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := tx.ExecContext(ctx, `INSERT INTO turn_versions VALUES (?, ?, ?, ?)`, r.vid, r.ts, r.th, r.rec); err != nil {
			return fmt.Errorf("turn %d/%d version %d: %w", r.ts, r.th, r.vid, err)
		}
	}
	for _, q := range []string{`DELETE FROM version_turns`, `UPDATE turn_info SET vseq = 0`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// eachChunkEntry calls fn with every entry of every version chunk: its
// version, its turn's start and hash, and its record (valid during fn).
func eachChunkEntry(ctx context.Context, q querier, fn func(vid, ts, th int64, rec []byte) error) error {
	rs, err := q.QueryContext(ctx, `SELECT vid, minute, data FROM version_turns`)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
		var (
			vid, minute int64
			data        []byte
		)
		if err := rs.Scan(&vid, &minute, &data); err != nil {
			return err
		}
		err := eachEntry(data, minute, func(ts, th int64, rec []byte) error { return fn(vid, ts, th, rec) })
		if err != nil {
			return err
		}
	}
	return rs.Err()
}
