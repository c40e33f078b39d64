package eventstore

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fmgate/fmgate/internal/events"
)

// TraceReport is every span of one trace stored whole, in start order: of
// a turn that was not sampled, its turn span and must-persist records.
type TraceReport struct {
	TraceID string `json:"traceId"`
	// Spans encode as schema-v3 events (events.Encode).
	Spans []events.Event `json:"spans"`
}

// MarshalJSON writes the spans through events.AppendJSON, the schema's
// only encoding.
func (r TraceReport) MarshalJSON() ([]byte, error) {
	id, err := json.Marshal(r.TraceID)
	if err != nil {
		return nil, err
	}
	b := append([]byte(`{"traceId":`), id...)
	b = append(b, `,"spans":[`...)
	for i := range r.Spans {
		if i > 0 {
			b = append(b, ',')
		}
		b = events.AppendJSON(b, &r.Spans[i])
	}
	return append(b, "]}"...), nil
}

// Trace returns every stored span of the trace (32 lowercase hex digits),
// sorted by start time. It returns ErrInvalid for a malformed id and
// ErrNotFound when no span of the trace is stored.
func (s *Store) Trace(ctx context.Context, traceID string) (TraceReport, error) {
	if len(traceID) != 32 || !isHex(traceID) {
		return TraceReport{}, invalidf("trace id must be 32 lowercase hex digits")
	}
	if err := s.sync(ctx); err != nil {
		return TraceReport{}, err
	}
	rep := TraceReport{TraceID: traceID, Spans: []events.Event{}}
	err := s.traceSpans(ctx, traceID, true, func(e *events.Event, _ int64) {
		rep.Spans = append(rep.Spans, *e) // the decoder shares no memory between spans
	})
	if err != nil {
		return rep, fmt.Errorf("eventstore: trace: %w", err)
	}
	if len(rep.Spans) == 0 {
		return rep, fmt.Errorf("eventstore: trace %s: %w", traceID, ErrNotFound)
	}
	return rep, nil
}
