package eventstore

import (
	"context"
	"errors"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// Views are the cost and eval questions the dashboards ask. The embedded
// SQLite Store answers them all; a fleet-wide store (PostgreSQL, package
// pgstore) implements the same methods, so that NewHandler serves the
// same /admin/cost API from either.
type Views interface {
	Cost(ctx context.Context, q Query) (CostReport, error)
	TopUsers(ctx context.Context, from, to time.Time, n int) (CostReport, error)
	AnomalousTurns(ctx context.Context, from, to time.Time) (AnomalyReport, error)
	RisingFeatures(ctx context.Context, from, to time.Time, periods int) ([]RisingFeature, error)
	Series(ctx context.Context, q Query, step time.Duration) (SeriesReport, error)
	Compare(ctx context.Context, dim, a, b string, from, to time.Time) (CompareReport, error)
	Versions(ctx context.Context, from, to time.Time) (VersionsReport, error)
	Trace(ctx context.Context, traceID string) (TraceReport, error)
	Eval(ctx context.Context, q Query) (EvalReport, error)
	SetEvalScore(ctx context.Context, id string, score float64) error
}

var _ Views = (*Store)(nil)

// ErrUnsupported is returned by a Views implementation for a view it does
// not answer; the HTTP handler answers it with 501.
var ErrUnsupported = errors.New("not supported by this event store")

// Normalize fills q's defaults (grouping, range ending at now, limit) and
// checks it, as every Views implementation must before answering.
func Normalize(q *Query, now time.Time) error { return q.normalize(now) }

// ValidTraceID reports whether id is 32 lowercase hex digits.
func ValidTraceID(id string) bool { return len(id) == 32 && isHex(id) }

// Invalidf returns an error matching ErrInvalid (answered with 400).
func Invalidf(format string, args ...any) error { return invalidf(format, args...) }

// AppendRecord appends the compact binary record of e, without its start
// time (kept beside it), as the SQLite store keeps spans.
func AppendRecord(b []byte, e *events.Event) []byte { return encodeSpan(b, e) }

// DecodeRecord parses a record written by AppendRecord for a span that
// started at tsStart (Unix milliseconds).
func DecodeRecord(rec []byte, tsStart int64, e *events.Event) error {
	var d spanDecoder
	return d.decode(rec, tsStart, e)
}
