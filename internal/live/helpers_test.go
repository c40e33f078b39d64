package live

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// clock is a fake clock for tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var traceSeq atomic.Uint64

func newClock() *clock { return &clock{t: t0} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// turnSpec describes a turn span.
type turnSpec struct {
	trace    string
	end      time.Time
	duration time.Duration
	status   events.Status
	code     string
	model    string
	fallback string
}

func turn(s turnSpec) events.Event {
	if s.status == "" {
		s.status = events.StatusOK
	}
	if s.trace == "" {
		s.trace = fmt.Sprintf("%032x", traceSeq.Add(1))
	}
	return events.Event{
		SchemaVersion: events.SchemaVersion,
		TraceID:       s.trace,
		SpanID:        s.trace[:16],
		Name:          "turn",
		TSStart:       s.end.Add(-s.duration),
		TSEnd:         s.end,
		DurationMS:    s.duration.Milliseconds(),
		Node:          events.Node{NodeID: "turn"},
		Artifact:      events.Artifact{ModelID: s.model},
		Outcome:       events.Outcome{Status: s.status, ErrorCode: s.code, FallbackUsed: s.fallback},
	}
}

// stream returns the stream span of turn tr whose first token left after
// ttft.
func stream(tr events.Event, ttft time.Duration) events.Event {
	return events.Event{
		SchemaVersion: events.SchemaVersion,
		TraceID:       tr.TraceID,
		SpanID:        "5" + tr.SpanID[1:],
		ParentSpanID:  tr.SpanID,
		Name:          "stream",
		TSStart:       tr.TSStart.Add(ttft),
		TSEnd:         tr.TSEnd,
		Outcome:       events.Outcome{Status: events.StatusOK},
	}
}

func attempt(model string, end time.Time, in, out int, cost float64) events.Event {
	return events.Event{
		SchemaVersion: events.SchemaVersion,
		TraceID:       fmt.Sprintf("%032x", end.UnixNano()),
		SpanID:        "a000000000000001",
		ParentSpanID:  "b000000000000001",
		Name:          "model_attempt",
		TSStart:       end.Add(-time.Second),
		TSEnd:         end,
		Artifact:      events.Artifact{ModelID: model},
		Resource:      events.Resource{TokensIn: in, TokensOut: out, CostUSD: cost},
		Outcome:       events.Outcome{Status: events.StatusOK},
	}
}

func ptr(v float64) *float64 { return &v }

// deref shows a percentile in failure messages.
func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
