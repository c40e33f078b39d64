package events

import (
	"context"
	"sync"
	"time"
)

// SampleMode says what a TailSampler passes on of a turn that was not
// sampled.
type SampleMode int

const (
	// DropUnsampled passes nothing of it (the trace export).
	DropUnsampled SampleMode = iota
	// KeepRecords passes its turn span and must-persist (cost) records (the
	// raw span log), so counts and costs derived downstream stay exact.
	KeepRecords
	// HoldForDecision passes every span, but those of a turn not decided
	// yet (must-persist ones excepted) wait for its turn span and go on with
	// it, in one write (the embedded event store): the store learns the
	// decision with the spans it applies to and stores an unsampled turn's
	// spans reduced from the start, instead of storing them whole and
	// rewriting them.
	HoldForDecision
)

// TailSampler wraps a Sink so that it receives whole traces only of sampled
// turns. A turn is sampled when its trace was head-sampled (Event.Sampled:
// Tracer's SampleRate, or the flag of an incoming traceparent) or, decided
// when its "turn" span ends, when it failed, fell back, carries an error
// code or lasted at least SlowTurn. Spans wait for that decision in memory:
// at most MaxPendingTraces traces, each at most PendingTTL; a trace pushed
// out of the buffer or outliving the TTL is passed on whole, so a turn is
// never lost for want of a decision. Must-persist events are never held
// back longer than their turn and, in KeepRecords mode, never dropped.
type TailSampler struct {
	inner Sink
	mode  SampleMode
	cfg   SamplingConfig
	now   func() time.Time

	mu      sync.Mutex
	pending map[string]*pendingTrace
	order   []string // trace ids by first span, for eviction
	decided map[string]bool
	recent  []string // decided trace ids, oldest first, bounded like pending
	kept    uint64
	dropped uint64

	// Reused between writes so that passing a batch on does not allocate:
	// scratch is the last write's out slice (nil while a write holds it),
	// free the emptied pendingTraces.
	scratch []Event
	free    []*pendingTrace
}

type pendingTrace struct {
	first time.Time
	spans []Event
}

// Bounds on what a TailSampler keeps for reuse: a burst of large batches or
// long traces does not leave its buffers behind.
const (
	maxScratchEvents = 1024
	maxFreeTraces    = 256
	maxFreeSpans     = 16
)

// NewTailSampler wraps inner. now is the clock (time.Now when nil).
func NewTailSampler(inner Sink, mode SampleMode, cfg SamplingConfig, now func() time.Time) *TailSampler {
	if now == nil {
		now = time.Now
	}
	if cfg.MaxPendingTraces <= 0 {
		cfg.MaxPendingTraces = DefaultConfig().Sampling.MaxPendingTraces
	}
	if cfg.PendingTTL <= 0 {
		cfg.PendingTTL = DefaultConfig().Sampling.PendingTTL
	}
	return &TailSampler{inner: inner, mode: mode, cfg: cfg, now: now,
		pending: map[string]*pendingTrace{}, decided: map[string]bool{}}
}

// Name is the wrapped sink's.
func (s *TailSampler) Name() string { return s.inner.Name() }

// Durable is the wrapped sink's.
func (s *TailSampler) Durable() bool {
	d, ok := s.inner.(durabler)
	return ok && d.Durable()
}

// Close passes on every span still waiting, whole, then closes the wrapped
// sink if it can be closed.
func (s *TailSampler) Close() error {
	s.mu.Lock()
	var out []Event
	for _, id := range s.order {
		if p := s.pending[id]; p != nil {
			out = append(out, p.spans...)
		}
	}
	s.pending, s.order = map[string]*pendingTrace{}, nil
	s.mu.Unlock()
	var err error
	if len(out) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.inner.Write(ctx, out)
		cancel()
	}
	if c, ok := s.inner.(interface{ Close() error }); ok {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Stats are the spans passed on and dropped so far.
func (s *TailSampler) Stats() (kept, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept, s.dropped
}

// Write holds the batch's spans until their turn is decided and passes on
// what the decision keeps.
func (s *TailSampler) Write(ctx context.Context, batch []Event) error {
	now := s.now()
	s.mu.Lock()
	out := s.scratch[:0]
	s.scratch = nil
	for i := range batch {
		e := &batch[i]
		if keep, ok := s.decided[e.TraceID]; ok {
			out = s.pass(out, e, keep)
			continue
		}
		if e.Name != "turn" {
			if s.mode == HoldForDecision && e.MustPersist {
				// In the write-ahead log: a durable sink acknowledges
				// it once written, so it is never held.
				out = s.pass(out, e, true)
				continue
			}
			p := s.pending[e.TraceID]
			if p == nil {
				p = s.newPending(now)
				s.pending[e.TraceID] = p
				s.order = append(s.order, e.TraceID)
			}
			p.spans = append(p.spans, *e)
			continue
		}
		keep := s.sampled(e)
		s.remember(e.TraceID, keep)
		if p := s.pending[e.TraceID]; p != nil {
			delete(s.pending, e.TraceID)
			out = s.passAll(out, p, keep)
		}
		out = s.pass(out, e, keep)
	}
	out = s.expire(out, now)
	s.mu.Unlock()
	var err error
	if len(out) > 0 {
		err = s.inner.Write(ctx, out) // the sink does not keep out
	}
	if cap(out) <= maxScratchEvents {
		clear(out) // let go of the events' strings
		s.mu.Lock()
		if s.scratch == nil {
			s.scratch = out[:0]
		}
		s.mu.Unlock()
	}
	return err
}

// newPending is an empty pendingTrace, recycled when one is free.
func (s *TailSampler) newPending(now time.Time) *pendingTrace {
	if n := len(s.free); n > 0 {
		p := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		p.first = now
		return p
	}
	return &pendingTrace{first: now}
}

// passAll passes on p's spans under one decision and recycles p, which
// must no longer be in s.pending.
func (s *TailSampler) passAll(out []Event, p *pendingTrace, keep bool) []Event {
	for i := range p.spans {
		out = s.pass(out, &p.spans[i], keep)
	}
	if len(s.free) < maxFreeTraces && cap(p.spans) <= maxFreeSpans {
		clear(p.spans)
		p.spans = p.spans[:0]
		s.free = append(s.free, p)
	}
	return out
}

// sampled is the tail decision on a turn span.
func (s *TailSampler) sampled(turn *Event) bool { return TailSampled(turn, s.cfg.SlowTurn) }

// TailSampled is the decision on a finished turn span: its trace is kept
// whole when it was head-sampled (Event.Sampled), failed, fell back,
// carries an error code or lasted at least slow. The Tracer records a
// negative decision on the turn span (Event.SampledOut) for the event
// stores; TailSampler takes it again for the trace export and span log.
func TailSampled(turn *Event, slow time.Duration) bool {
	return turn.Sampled ||
		turn.Outcome.Status == StatusFailed || turn.Outcome.Status == StatusFallback ||
		turn.Outcome.ErrorCode != "" || turn.Outcome.FallbackUsed != "" ||
		time.Duration(turn.DurationMS)*time.Millisecond >= slow
}

func (s *TailSampler) pass(out []Event, e *Event, keep bool) []Event {
	if keep || s.mode == HoldForDecision || (s.mode == KeepRecords && (e.MustPersist || e.Name == "turn")) {
		s.kept++
		return append(out, *e)
	}
	s.dropped++
	return out
}

// remember keeps a decision for the trace's late spans (those ending after
// the turn span, e.g. the record step), bounded like the pending traces.
func (s *TailSampler) remember(traceID string, keep bool) {
	s.decided[traceID] = keep
	s.recent = append(s.recent, traceID)
	if len(s.recent) > s.cfg.MaxPendingTraces {
		delete(s.decided, s.recent[0])
		s.recent = s.recent[1:]
	}
}

// expire passes on whole the traces that waited longer than PendingTTL or
// no longer fit in the buffer.
func (s *TailSampler) expire(out []Event, now time.Time) []Event {
	n := 0
	for _, id := range s.order {
		p := s.pending[id]
		if p == nil {
			n++ // decided already
			continue
		}
		if len(s.pending) <= s.cfg.MaxPendingTraces && now.Sub(p.first) < s.cfg.PendingTTL {
			break
		}
		delete(s.pending, id)
		out = s.passAll(out, p, true)
		n++
	}
	s.order = s.order[n:]
	return out
}
