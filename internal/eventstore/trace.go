package eventstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// TraceReport is every stored span of one trace, in start order.
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
	rep := TraceReport{TraceID: traceID, Spans: []events.Event{}}
	rs, err := s.r.QueryContext(ctx, `SELECT trace_id, span_id, parent_span_id, workflow_id, user_id_hash,
		session_id, ts_start, ts_end, duration_ms, name, must_persist, graph_version, node_id,
		invocation_mode, artifact_kind, model_id, prompt_version, tool_id, tool_version, sub_agent_id,
		sub_agent_version, tokens_in, tokens_out, cost_usd, cache_hit, capability_flags, status,
		error_code, fallback_used, eval_score, feature, surface, locale, user_tier, priority
		FROM events WHERE trace_id = ? ORDER BY ts_start, id`, traceID)
	if err != nil {
		return rep, fmt.Errorf("eventstore: trace: %w", err)
	}
	defer rs.Close()
	for rs.Next() {
		var (
			e                                events.Event
			ts, te                           int64
			mode, kind, cache, flags, status string
			eval                             sql.NullFloat64
		)
		if err := rs.Scan(&e.TraceID, &e.SpanID, &e.ParentSpanID, &e.WorkflowID, &e.UserIDHash,
			&e.SessionID, &ts, &te, &e.DurationMS, &e.Name, &e.MustPersist, &e.Node.GraphVersion,
			&e.Node.NodeID, &mode, &kind, &e.Artifact.ModelID, &e.Artifact.PromptVersion,
			&e.Artifact.ToolID, &e.Artifact.ToolVersion, &e.Artifact.SubAgentID, &e.Artifact.SubAgentVersion,
			&e.Resource.TokensIn, &e.Resource.TokensOut, &e.Resource.CostUSD, &cache, &flags, &status,
			&e.Outcome.ErrorCode, &e.Outcome.FallbackUsed, &eval, &e.Attribution.Feature,
			&e.Attribution.Surface, &e.Attribution.Locale, &e.Attribution.UserTier, &e.Attribution.Priority); err != nil {
			return rep, fmt.Errorf("eventstore: trace: %w", err)
		}
		e.SchemaVersion = events.SchemaVersion
		e.TSStart, e.TSEnd = fromMilli(ts), fromMilli(te)
		e.Node.InvocationMode = events.InvocationMode(mode)
		e.Artifact.ArtifactKind = events.ArtifactKind(kind)
		e.Resource.CacheHit = events.CacheHit(cache)
		if flags != "" {
			e.Resource.CapabilityFlagsActive = strings.Split(flags, ",")
		}
		e.Outcome.Status = events.Status(status)
		if eval.Valid {
			e.Outcome.EvalScore = &eval.Float64
		}
		rep.Spans = append(rep.Spans, e)
	}
	if err := rs.Err(); err != nil {
		return rep, fmt.Errorf("eventstore: trace: %w", err)
	}
	if len(rep.Spans) == 0 {
		return rep, fmt.Errorf("eventstore: trace %s: %w", traceID, ErrNotFound)
	}
	return rep, nil
}

// fromMilli is the inverse of unixMilli: 0 is the zero time.
func fromMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
