package pgstore

import (
	"context"
	"fmt"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

var _ eventstore.KeyAuditor = (*Store)(nil)

// KeyAudit implements eventstore.KeyAuditor, by the partial index of the
// audit spans.
func (s *Store) KeyAudit(ctx context.Context, session string, limit int) ([]events.Event, error) {
	if err := eventstore.CheckKeyAudit(session, limit); err != nil {
		return nil, err
	}
	rs, err := s.pool.Query(ctx, `SELECT ts_start, rec FROM spans
		WHERE name = '`+eventstore.KeyAuditSpan+`' AND session_id = $1 AND rec IS NOT NULL
		ORDER BY ts_start DESC, trace_id DESC LIMIT $2`, session, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: key audit: %w", err)
	}
	defer rs.Close()
	var out []events.Event
	for rs.Next() {
		var (
			ts  int64
			rec []byte
			e   events.Event
		)
		if err := rs.Scan(&ts, &rec); err != nil {
			return nil, fmt.Errorf("pgstore: key audit: %w", err)
		}
		if err := eventstore.DecodeRecord(rec, ts, &e); err != nil {
			return nil, fmt.Errorf("pgstore: key audit: %w", err)
		}
		out = append(out, e)
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: key audit: %w", err)
	}
	return out, nil
}
