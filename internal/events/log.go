package events

import (
	"context"
	"log/slog"
)

// LogHandler wraps a slog.Handler (typically slog.JSONHandler) and adds
// trace_id and span_id from the record's context, so a log line joins the
// trace it was written in. Records logged without a span are unchanged.
// Under WithGroup the ids land inside the group, as slog places all
// record attributes.
type LogHandler struct {
	next slog.Handler
}

// NewLogHandler returns a LogHandler around next.
func NewLogHandler(next slog.Handler) *LogHandler { return &LogHandler{next: next} }

// Enabled reports whether next handles level.
func (h *LogHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle adds the trace ids and passes the record on.
func (h *LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if tc, ok := TraceContextFrom(ctx); ok {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", tc.TraceHex()), slog.String("span_id", tc.SpanHex()))
	}
	return h.next.Handle(ctx, r)
}

// WithAttrs returns a LogHandler around next.WithAttrs.
func (h *LogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &LogHandler{next: h.next.WithAttrs(as)}
}

// WithGroup returns a LogHandler around next.WithGroup.
func (h *LogHandler) WithGroup(name string) slog.Handler {
	return &LogHandler{next: h.next.WithGroup(name)}
}

// TracerOptions returns the Tracer options c describes.
func (c Config) TracerOptions() TracerOptions {
	var secret []byte
	if c.Privacy.HashSecret != "" {
		secret = []byte(c.Privacy.HashSecret)
	}
	return TracerOptions{
		GraphVersion: c.GraphVersion,
		Hasher:       NewHasher(secret),
		Excerpt:      c.Privacy.Excerpt,
		ExcerptChars: c.Privacy.ExcerptChars,
		HeadSampling: c.Sampling.Enabled,
		SampleRate:   c.Sampling.Rate,
		SlowTurn:     c.Sampling.SlowTurn,
	}
}
