package eventstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"

	"github.com/fmgate/fmgate/internal/events"
)

// A user's right to be forgotten, in the event store: their spans stay
// (their cost and figures are the business's), but no longer say whose
// they are. Their user_id_hash becomes a pseudonym drawn for the request,
// unrelated to any id; their session ids become that pseudonym too, and
// their prompt excerpts go. Spans, turns and the user roll-up change
// together, so that every view still adds up.

// Forgetter pseudonymizes a user's spans; both event stores are one.
type Forgetter interface {
	// ForgetUser gives every span of user (a user_id_hash) the pseudonym
	// instead, and returns how many spans it changed.
	ForgetUser(ctx context.Context, user, pseudonym string) (int64, error)
}

var _ Forgetter = (*Store)(nil)

// NewPseudonym draws a pseudonym: 32 random hex digits, the shape of a
// user_id_hash.
func NewPseudonym() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// PseudonymizeRecord rewrites a stored record (a span's or a tally's, as
// AppendRecord and the store write them) of a span that started at
// tsStart: when it is user's, its user id hash and session id become
// pseudonym and its excerpt goes, and changed is true.
func PseudonymizeRecord(rec []byte, tsStart int64, user, pseudonym string) (out []byte, changed bool, err error) {
	var d spanDecoder
	return d.pseudonymize(rec, tsStart, user, pseudonym)
}

func (d *spanDecoder) pseudonymize(rec []byte, tsStart int64, user, pseudonym string) ([]byte, bool, error) {
	tally := isTally(rec)
	var e events.Event
	if err := d.decode(rec, tsStart, &e); err != nil {
		return nil, false, err
	}
	if e.UserIDHash != user {
		return rec, false, nil
	}
	e.UserIDHash, e.SessionID, e.PromptExcerpt = pseudonym, pseudonym, ""
	if tally {
		return encodeTally(nil, &e), true, nil
	}
	return encodeSpan(nil, &e), true, nil
}

// ForgetUser implements Forgetter: in one transaction, after the pending
// sums are written, so that no turn of the user is left to be summed
// under their hash.
func (s *Store) ForgetUser(ctx context.Context, user, pseudonym string) (int64, error) {
	if user == "" || pseudonym == "" || user == pseudonym {
		return 0, invalidf("forget: a user id hash and another pseudonym are needed")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.syncLocked(ctx); err != nil {
		return 0, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("eventstore: forget: %w", err)
	}
	defer tx.Rollback()
	type turnKey struct{ minute, th, from, to, vseq int64 }
	var turns []turnKey
	chunks := map[chunkKey]bool{} // the version chunks holding the user's turns
	rs, err := tx.QueryContext(ctx, `SELECT t.minute, t.th, t.ts_start, i.last_ts, i.vseq, i.vers FROM turns t
		JOIN turn_info i ON i.minute = t.minute AND i.th = t.th WHERE t.user_id_hash = ?`, user)
	if err != nil {
		return 0, fmt.Errorf("eventstore: forget: %w", err)
	}
	for rs.Next() {
		var (
			k    turnKey
			vers []byte
		)
		if err := rs.Scan(&k.minute, &k.th, &k.from, &k.to, &k.vseq, &vers); err != nil {
			rs.Close()
			return 0, fmt.Errorf("eventstore: forget: %w", err)
		}
		vs, err := decodeVers(vers)
		if err != nil {
			rs.Close()
			return 0, fmt.Errorf("eventstore: forget: turn versions: %w", err)
		}
		if k.vseq != 0 {
			for _, v := range vs {
				chunks[chunkKey{v.vid, k.minute, k.vseq}] = true
			}
		}
		turns = append(turns, k)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("eventstore: forget: %w", err)
	}
	var d spanDecoder
	var changed int64
	type rewrite struct {
		id  int64
		rec []byte
	}
	for _, k := range turns {
		// A turn's spans start within its window: the key (ts_start, th, sh)
		// finds them without a scan.
		rows, err := tx.QueryContext(ctx, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start <= ? AND th = ?`, k.from, k.to, k.th)
		if err != nil {
			return 0, fmt.Errorf("eventstore: forget: %w", err)
		}
		var out []rewrite
		for rows.Next() {
			var id, ts int64
			var data []byte
			if err := rows.Scan(&id, &ts, &data); err != nil {
				rows.Close()
				return 0, fmt.Errorf("eventstore: forget: %w", err)
			}
			// A packed row holds several spans: each is counted.
			rec, ok, err := rewriteRecords(data, ts, func(rec []byte, ts int64) ([]byte, bool, error) {
				out, ok, err := d.pseudonymize(rec, ts, user, pseudonym)
				if ok {
					changed++
				}
				return out, ok, err
			})
			if err != nil {
				rows.Close()
				return 0, fmt.Errorf("eventstore: forget: span %d: %w", id, err)
			}
			if ok {
				out = append(out, rewrite{id, rec})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("eventstore: forget: %w", err)
		}
		for _, r := range out {
			if _, err := tx.ExecContext(ctx, `UPDATE events SET data = ? WHERE id = ?`, r.rec, r.id); err != nil {
				return 0, fmt.Errorf("eventstore: forget: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE turn_info SET session_id = ? WHERE minute = ? AND th = ?`, pseudonym, k.minute, k.th); err != nil {
			return 0, fmt.Errorf("eventstore: forget: %w", err)
		}
		if k.vseq == 0 {
			if err := forgetVersions(ctx, tx, k.from, k.th, user, pseudonym); err != nil {
				return 0, err
			}
		}
	}
	if err := forgetChunks(ctx, tx, chunks, user, pseudonym); err != nil {
		return 0, err
	}
	for _, q := range []string{
		`UPDATE turns SET user_id_hash = ? WHERE user_id_hash = ?`,
		`UPDATE user_rollup SET user_id_hash = ? WHERE user_id_hash = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, pseudonym, user); err != nil {
			return 0, fmt.Errorf("eventstore: forget: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("eventstore: forget: %w", err)
	}
	return changed, nil
}

// forgetVersions rewrites the turn_versions rows of the turn that started
// at ts with hash th, each of which names the turn's user.
func forgetVersions(ctx context.Context, tx *sql.Tx, ts, th int64, user, pseudonym string) error {
	rows, err := tx.QueryContext(ctx, `SELECT vid, data FROM turn_versions WHERE vid IN (SELECT id FROM vers) AND ts_start = ? AND th = ?`, ts, th)
	if err != nil {
		return fmt.Errorf("eventstore: forget: %w", err)
	}
	type rewrite struct {
		vid  int64
		data []byte
	}
	var out []rewrite
	for rows.Next() {
		var vid int64
		var data []byte
		if err := rows.Scan(&vid, &data); err != nil {
			rows.Close()
			return fmt.Errorf("eventstore: forget: %w", err)
		}
		b, ok, err := pseudonymizeVersion(data, user, pseudonym)
		if err != nil {
			rows.Close()
			return fmt.Errorf("eventstore: forget: turn version: %w", err)
		}
		if ok {
			out = append(out, rewrite{vid, b})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("eventstore: forget: %w", err)
	}
	for _, r := range out {
		if _, err := tx.ExecContext(ctx, `UPDATE turn_versions SET data = ? WHERE vid = ? AND ts_start = ? AND th = ?`, r.data, r.vid, ts, th); err != nil {
			return fmt.Errorf("eventstore: forget: %w", err)
		}
	}
	return nil
}

// forgetChunks rewrites the user's entries in the version chunks.
func forgetChunks(ctx context.Context, tx *sql.Tx, chunks map[chunkKey]bool, user, pseudonym string) error {
	keys := slices.SortedFunc(maps.Keys(chunks), compareChunkKeys)
	for _, k := range keys {
		err := rewriteChunks(ctx, tx, `vid = ? AND minute = ? AND seq = ?`, []any{k.vid, k.minute, k.seq},
			func(_, _ int64, rec []byte) ([]byte, bool, error) {
				out, _, err := pseudonymizeVersion(rec, user, pseudonym)
				return out, true, err
			})
		if err != nil {
			return fmt.Errorf("eventstore: forget: %w", err)
		}
	}
	return nil
}

// pseudonymizeVersion rewrites a turn_versions record of user's with
// pseudonym in their place. Its attribution closes it: user, feature,
// graph, each a length and its bytes.
func pseudonymizeVersion(b []byte, user, pseudonym string) ([]byte, bool, error) {
	var tv turnVersion
	if err := decodeTurnVersion(b, &tv); err != nil {
		return nil, false, err
	}
	if string(tv.user) != user {
		return b, false, nil
	}
	strs := [...][]byte{tv.user, tv.feature, tv.graph}
	tail := 0
	for _, s := range strs {
		tail += len(binary.AppendUvarint(nil, uint64(len(s)))) + len(s)
	}
	out := append([]byte(nil), b[:len(b)-tail]...)
	strs[0] = []byte(pseudonym)
	for _, s := range strs {
		out = binary.AppendUvarint(out, uint64(len(s)))
		out = append(out, s...)
	}
	return out, true, nil
}
