package eventstore

import (
	"context"
	"fmt"

	"github.com/fmgate/fmgate/internal/events"
)

// The audit trail of the API keys managed at run time: every change to a
// key (created, updated, rotated, revoked) is a span named KeyAuditSpan,
// the root of a trace of its own, attributed to the feature
// KeyAdminFeature, whose session id is the keyed hash of the key's id
// (events.Hasher.Session). Both stores index these spans apart (a partial
// index over the few rows of that feature), so that one key's trail is
// read without scanning every turn; they are pruned with the rest after
// eventStore.retention.
const (
	KeyAuditSpan    = "key_audit"
	KeyAdminFeature = "key_admin"
)

// KeyAuditor reads the audit trail of a key; both event stores are one.
type KeyAuditor interface {
	// KeyAudit returns up to limit (1..MaxLimit) of the KeyAuditSpan
	// spans of session, the hash of one key's id, newest first.
	KeyAudit(ctx context.Context, session string, limit int) ([]events.Event, error)
}

var _ KeyAuditor = (*Store)(nil)

// keyAuditSQL finds a session's audit turns; the feature is a literal, so
// that SQLite may read the partial index turns_key_audit.
const keyAuditSQL = `SELECT t.ts_start, i.last_ts, t.th, i.trace_id FROM turns t
	JOIN turn_info i ON i.minute = t.minute AND i.th = t.th
	WHERE t.feature = '` + KeyAdminFeature + `' AND i.session_id = ?
	ORDER BY t.ts_start DESC, t.th DESC LIMIT ?`

// CheckKeyAudit checks KeyAudit's arguments, as every implementation
// must before answering.
func CheckKeyAudit(session string, limit int) error {
	if session == "" {
		return invalidf("key audit: a session is needed")
	}
	if limit < 1 || limit > MaxLimit {
		return invalidf("limit must be in 1..%d", MaxLimit)
	}
	return validFilter("session", session)
}

// KeyAudit implements KeyAuditor: the turns of the feature, by the
// partial index, then each one's span.
func (s *Store) KeyAudit(ctx context.Context, session string, limit int) ([]events.Event, error) {
	if err := CheckKeyAudit(session, limit); err != nil {
		return nil, err
	}
	if err := s.sync(ctx); err != nil {
		return nil, err
	}
	rs, err := s.r.QueryContext(ctx, keyAuditSQL, session, limit)
	if err != nil {
		return nil, fmt.Errorf("eventstore: key audit: %w", err)
	}
	type found struct {
		from, to, th int64
		trace        string
	}
	var turns []found
	for rs.Next() {
		var f found
		if err := rs.Scan(&f.from, &f.to, &f.th, &f.trace); err != nil {
			rs.Close()
			return nil, fmt.Errorf("eventstore: key audit: %w", err)
		}
		turns = append(turns, f)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("eventstore: key audit: %w", err)
	}
	out := make([]events.Event, 0, len(turns))
	for _, f := range turns {
		err := s.spans(ctx, func(e *events.Event, _ int64) {
			if e.Name == KeyAuditSpan && e.TraceID == f.trace && e.SessionID == session {
				out = append(out, *e)
			}
		}, `SELECT id, ts_start, data FROM events WHERE ts_start >= ? AND ts_start <= ? AND th = ?`, f.from, f.to, f.th)
		if err != nil {
			return nil, fmt.Errorf("eventstore: key audit: %w", err)
		}
	}
	return out, nil
}
