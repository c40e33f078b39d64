package events

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"
)

// Recorder receives finished events. *Emitter implements it; tests may use a
// slice.
type Recorder interface {
	Emit(Event)
}

// TracerOptions configures a Tracer. The zero value is usable: real clock,
// random ids, no graph version, a per-process hashing key and excerpts off.
type TracerOptions struct {
	// GraphVersion is stamped into node.graph_version of every span (e.g.
	// "v17.4", a git tag of the pipeline).
	GraphVersion string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Rand draws trace and span ids; nil means the runtime's fast random
	// source. A supplied *rand.Rand is guarded by a mutex.
	Rand *rand.Rand
	// Hasher turns user ids into user_id_hash; nil means a Hasher with a
	// random per-process key (hashes then do not join across restarts).
	Hasher *Hasher
	// Excerpt enables prompt_excerpt; ExcerptChars caps it in characters
	// (default 200). The text is always passed through Redact first.
	Excerpt      bool
	ExcerptChars int
	// HeadSampling marks only SampleRate of new traces sampled (W3C flag
	// bit 0), instead of all; traces continued from a traceparent keep its
	// flag either way. Children inherit their trace's flag.
	HeadSampling bool
	SampleRate   float64
	// SlowTurn, with HeadSampling, is the tail rule for the turn span: a
	// turn span (named "turn") that ends neither head-sampled nor failed,
	// fallen back or at least SlowTurn long is marked SampledOut. Zero
	// means DefaultConfig's 3s.
	SlowTurn time.Duration
}

// Tracer starts spans. It is safe for concurrent use.
type Tracer struct {
	rec  Recorder
	opts TracerOptions
	mu   sync.Mutex // guards opts.Rand
}

// NewTracer returns a Tracer whose finished spans go to rec (nil discards
// them, so tracing can be disabled without changing the pipeline).
func NewTracer(rec Recorder, opts TracerOptions) *Tracer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Hasher == nil {
		opts.Hasher = NewHasher(nil)
	}
	if opts.ExcerptChars <= 0 {
		opts.ExcerptChars = 200
	}
	if opts.SlowTurn <= 0 {
		opts.SlowTurn = DefaultConfig().Sampling.SlowTurn
	}
	return &Tracer{rec: rec, opts: opts}
}

func (t *Tracer) u64() uint64 {
	if t.opts.Rand == nil {
		return rand.Uint64()
	}
	t.mu.Lock()
	v := t.opts.Rand.Uint64()
	t.mu.Unlock()
	return v
}

// headFlags is the trace flags of a new trace: sampled, or with head
// sampling on, sampled with probability SampleRate.
func (t *Tracer) headFlags() byte {
	if !t.opts.HeadSampling || float64(t.u64()>>11)/(1<<53) < t.opts.SampleRate {
		return 1
	}
	return 0
}

func (t *Tracer) newSpanID() [8]byte {
	var s [8]byte
	for s == [8]byte{} {
		binary.BigEndian.PutUint64(s[:], t.u64())
	}
	return s
}

func (t *Tracer) newTraceID() [16]byte {
	var id [16]byte
	for id == [16]byte{} {
		binary.BigEndian.PutUint64(id[:8], t.u64())
		binary.BigEndian.PutUint64(id[8:], t.u64())
	}
	return id
}

// StartOption adjusts a span at Start.
type StartOption func(*Span)

// WithKind sets artifact.artifact_kind (default internal; not inherited,
// since each span says what it did itself).
func WithKind(k ArtifactKind) StartOption { return func(s *Span) { s.ev.Artifact.ArtifactKind = k } }

// WithNodeID sets node.node_id (default: the span name).
func WithNodeID(id string) StartOption { return func(s *Span) { s.ev.Node.NodeID = id } }

// WithMustPersist marks the span's event must-persist (cost and quota
// records): it is written to the WAL before any sink sees it.
func WithMustPersist() StartOption { return func(s *Span) { s.ev.MustPersist = true } }

// WithStartTime backdates the span's start to at, for work whose beginning
// is only known once it is over (e.g. a stream that started at its first
// token).
func WithStartTime(at time.Time) StartOption { return func(s *Span) { s.start = at } }

// WithInvocationMode sets node.invocation_mode (default: the parent's, or
// sync_streaming at a root span).
func WithInvocationMode(m InvocationMode) StartOption {
	return func(s *Span) { s.ev.Node.InvocationMode = m }
}

// Start opens a span named name. It continues the trace in ctx (a local
// parent span or a remote traceparent) or starts a new trace, and returns a
// ctx carrying the new span for its children. A child inherits the turn's
// identity (workflow, session, user hash, attribution, invocation mode,
// capability flags) from its parent as it is at the child's Start.
// Start on a nil Tracer returns ctx and a nil *Span, whose methods no-op.
func (t *Tracer) Start(ctx context.Context, name string, opts ...StartOption) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	s := &Span{t: t}
	s.ev.SchemaVersion = SchemaVersion
	s.ev.Name = name
	s.ev.Node.NodeID = name
	s.ev.Node.GraphVersion = t.opts.GraphVersion
	s.ev.Node.InvocationMode = ModeSyncStreaming
	s.ev.Artifact.ArtifactKind = KindInternal
	s.ev.Outcome.Status = StatusOK

	parent, remote := fromContext(ctx)
	switch {
	case parent != nil:
		p := parent
		s.tc.TraceID = p.tc.TraceID
		s.tc.Flags = p.tc.Flags
		s.ev.ParentSpanID = p.ev.SpanID
		p.mu.Lock()
		s.ev.WorkflowID = p.ev.WorkflowID
		s.ev.SessionID = p.ev.SessionID
		s.ev.UserIDHash = p.ev.UserIDHash
		s.ev.Attribution = p.ev.Attribution
		s.ev.Node.InvocationMode = p.ev.Node.InvocationMode
		s.ev.Resource.CapabilityFlagsActive = p.ev.Resource.CapabilityFlagsActive
		p.mu.Unlock()
	case remote.IsValid():
		s.tc.TraceID = remote.TraceID
		s.tc.Flags = remote.Flags
		s.ev.ParentSpanID = remote.SpanHex()
	default:
		s.tc.TraceID = t.newTraceID()
		s.tc.Flags = t.headFlags()
	}
	s.tc.SpanID = t.newSpanID()
	if parent != nil {
		s.ev.TraceID = parent.ev.TraceID // immutable once started: share the parent's string
	} else {
		s.ev.TraceID = s.tc.TraceHex()
	}
	s.ev.SpanID = s.spanHex()
	if s.ev.WorkflowID == "" {
		// One turn is one workflow unless the caller names a longer one.
		s.ev.WorkflowID = s.ev.TraceID
	}
	for _, o := range opts {
		o(s)
	}
	if s.start.IsZero() {
		s.start = t.opts.Now()
	}
	s.ctx = spanContext{Context: ctx, span: s}
	return &s.ctx, s
}

// spanHex writes the span id's hex into the span and returns it as a string
// over those bytes, which are never written again: the id costs no
// allocation of its own. While anything holds the string (the event, its
// children's parent ids, a sink's pending state), the whole span and its
// context's parents stay reachable: the sinks let go of them once written.
func (s *Span) spanHex() string {
	hex.Encode(s.idHex[:], s.tc.SpanID[:])
	return unsafe.String(&s.idHex[0], len(s.idHex))
}

// spanContext is the context Start returns: its parent, with the span as
// the value under ctxKey. It lives inside the Span, so a span costs one
// allocation where a context.WithValue would add another. The price is that
// an ended span's event, until the sinks have it, also keeps its parent
// contexts reachable: a bounded delay (the sinks' queues), not a leak.
type spanContext struct {
	context.Context
	span *Span
}

func (c *spanContext) Value(key any) any {
	if _, ok := key.(ctxKey); ok {
		return c.span
	}
	return c.Context.Value(key)
}

// StartChild opens a child of the span in ctx with that span's Tracer, for
// code that is handed a context but not the Tracer. Without a local span in
// ctx it returns ctx and a nil *Span, whose methods no-op.
func StartChild(ctx context.Context, name string, opts ...StartOption) (context.Context, *Span) {
	parent := SpanFromContext(ctx)
	if parent == nil {
		return ctx, nil
	}
	return parent.t.Start(ctx, name, opts...)
}

// Span is one unit of work of a turn. Its setters are safe for concurrent
// use and no-ops on a nil *Span or after End.
type Span struct {
	t     *Tracer
	tc    TraceContext
	start time.Time
	ctx   spanContext // what Start returned: the context carrying this span
	idHex [16]byte    // the bytes of ev.SpanID

	mu    sync.Mutex
	ev    Event
	ended bool
}

func (s *Span) set(f func(e *Event)) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if !s.ended {
		f(&s.ev)
	}
	s.mu.Unlock()
}

// Context returns the span's trace context (for FormatTraceparent on
// outgoing calls).
func (s *Span) Context() TraceContext {
	if s == nil {
		return TraceContext{}
	}
	return s.tc
}

// Started returns when the span started (zero for a nil span).
func (s *Span) Started() time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.start
}

// TraceID returns the span's trace id as 32 hex ("" for a nil span).
func (s *Span) TraceID() string {
	if s == nil {
		return ""
	}
	return s.ev.TraceID
}

// SetWorkflow sets workflow_id (default: the trace id) to the keyed hash of
// id: workflow and request ids are chosen by clients, so they are treated
// like user ids and never reach a sink as given.
func (s *Span) SetWorkflow(id string) {
	if s == nil || id == "" {
		return
	}
	h := s.t.opts.Hasher.hash("workflow\x00", id)
	s.set(func(e *Event) { e.WorkflowID = h })
}

// SetWorkflowID sets workflow_id to id as it is: an id that is one
// already (another span's trace id, 32 hex), never one a client chose.
func (s *Span) SetWorkflowID(id string) {
	if id == "" {
		return
	}
	s.set(func(e *Event) { e.WorkflowID = id })
}

// SetNote records what an operator did, in prompt_excerpt, whether
// excerpts are on or not: for an audit span, whose note names ids and
// actions and never carries user text. It is cut at 200 characters.
func (s *Span) SetNote(text string) {
	x := Excerpt(text, 200)
	s.set(func(e *Event) { e.PromptExcerpt = x })
}

// SetSession sets session_id to the keyed hash of id (see SetWorkflow).
func (s *Span) SetSession(id string) {
	if s == nil || id == "" {
		return
	}
	h := s.t.opts.Hasher.hash("session\x00", id)
	s.set(func(e *Event) { e.SessionID = h })
}

// SetUser sets user_id_hash to the keyed hash of userID; the raw id is
// never stored.
func (s *Span) SetUser(userID string) {
	if s == nil {
		return
	}
	h := s.t.opts.Hasher.Hash(userID)
	s.set(func(e *Event) { e.UserIDHash = h })
}

// SetAttribution sets the attribution block.
func (s *Span) SetAttribution(a Attribution) { s.set(func(e *Event) { e.Attribution = a }) }

// SetInvocationMode sets node.invocation_mode.
func (s *Span) SetInvocationMode(m InvocationMode) {
	s.set(func(e *Event) { e.Node.InvocationMode = m })
}

// SetKind sets artifact.artifact_kind.
func (s *Span) SetKind(k ArtifactKind) { s.set(func(e *Event) { e.Artifact.ArtifactKind = k }) }

// SetModel sets artifact.model_id (the provider's model id that served).
func (s *Span) SetModel(modelID string) { s.set(func(e *Event) { e.Artifact.ModelID = modelID }) }

// SetPromptVersion sets artifact.prompt_version.
func (s *Span) SetPromptVersion(v string) {
	s.set(func(e *Event) { e.Artifact.PromptVersion = v })
}

// SetTool sets artifact.tool_id and tool_version.
func (s *Span) SetTool(id, version string) {
	s.set(func(e *Event) { e.Artifact.ToolID, e.Artifact.ToolVersion = id, version })
}

// SetSubAgent sets artifact.sub_agent_id and sub_agent_version.
func (s *Span) SetSubAgent(id, version string) {
	s.set(func(e *Event) { e.Artifact.SubAgentID, e.Artifact.SubAgentVersion = id, version })
}

// SetTokens sets resource.tokens_in and tokens_out.
func (s *Span) SetTokens(in, out int) {
	s.set(func(e *Event) { e.Resource.TokensIn, e.Resource.TokensOut = in, out })
}

// SetCost sets resource.cost_usd.
func (s *Span) SetCost(usd float64) { s.set(func(e *Event) { e.Resource.CostUSD = usd }) }

// SetPromptCache sets resource.tokens_cache_read, tokens_cache_write and
// cache_saved_usd.
func (s *Span) SetPromptCache(read, write int, savedUSD float64) {
	s.set(func(e *Event) {
		e.Resource.TokensCacheRead, e.Resource.TokensCacheWrite, e.Resource.CacheSavedUSD = read, write, savedUSD
	})
}

// SetToolCalls sets resource.tool_calls and tool_names from the names of
// the tools a model called.
func (s *Span) SetToolCalls(names []string) {
	s.set(func(e *Event) { e.Resource.ToolCalls, e.Resource.ToolNames = len(names), names })
}

// SetImages sets resource.images, the count of images a model attempt
// was sent.
func (s *Span) SetImages(n int) { s.set(func(e *Event) { e.Resource.Images = n }) }

// SetImageTokens sets resource.image_tokens and image_cost_usd: the part
// of a model attempt's input its images are, and their price.
func (s *Span) SetImageTokens(n int, costUSD float64) {
	s.set(func(e *Event) { e.Resource.ImageTokens, e.Resource.ImageCostUSD = n, costUSD })
}

// SetImageBytes sets resource.image_bytes, the bytes of the remote images
// a fetch span fetched.
func (s *Span) SetImageBytes(n int) { s.set(func(e *Event) { e.Resource.ImageBytes = n }) }

// SetCacheHit sets resource.cache_hit.
func (s *Span) SetCacheHit(c CacheHit) { s.set(func(e *Event) { e.Resource.CacheHit = c }) }

// SetCapabilityFlags sets resource.capability_flags_active; children started
// afterwards inherit them.
func (s *Span) SetCapabilityFlags(flags ...string) {
	f := append([]string(nil), flags...)
	s.set(func(e *Event) { e.Resource.CapabilityFlagsActive = f })
}

// AddCapabilityFlags adds flags to resource.capability_flags_active,
// keeping those already set and skipping repeats; children started
// afterwards inherit them.
func (s *Span) AddCapabilityFlags(flags ...string) {
	s.set(func(e *Event) {
		f := append([]string(nil), e.Resource.CapabilityFlagsActive...)
	next:
		for _, fl := range flags {
			for _, have := range f {
				if have == fl {
					continue next
				}
			}
			f = append(f, fl)
		}
		e.Resource.CapabilityFlagsActive = f
	})
}

// AddCapabilityFlag adds flag to resource.capability_flags_active unless it
// is there already; children started afterwards inherit it.
func (s *Span) AddCapabilityFlag(flag string) { s.AddCapabilityFlags(flag) }

// SetStatus sets outcome.status (default ok).
func (s *Span) SetStatus(st Status) { s.set(func(e *Event) { e.Outcome.Status = st }) }

// SetErrorCode sets outcome.error_code (a stable code such as "throttled");
// it does not change the status, since a fallback can still succeed.
func (s *Span) SetErrorCode(code string) { s.set(func(e *Event) { e.Outcome.ErrorCode = code }) }

// SetStopReason sets outcome.stop_reason: why a model's answer ended.
func (s *Span) SetStopReason(reason string) { s.set(func(e *Event) { e.Outcome.StopReason = reason }) }

// SetVendorCode sets outcome.vendor_code: the model vendor's own error code
// of a failed attempt.
func (s *Span) SetVendorCode(code string) { s.set(func(e *Event) { e.Outcome.VendorCode = code }) }

// SetFallbackUsed sets outcome.fallback_used to the tier that served.
func (s *Span) SetFallbackUsed(tier string) {
	s.set(func(e *Event) { e.Outcome.FallbackUsed = tier })
}

// SetEvalScore sets outcome.eval_score.
func (s *Span) SetEvalScore(v float64) { s.set(func(e *Event) { e.Outcome.EvalScore = &v }) }

// SetMustPersist marks the event must-persist (see WithMustPersist).
func (s *Span) SetMustPersist() { s.set(func(e *Event) { e.MustPersist = true }) }

// SetExcerpt records a redacted excerpt of text when excerpts are enabled,
// and does nothing otherwise: message text never enters an event by default.
func (s *Span) SetExcerpt(text string) {
	if s == nil || !s.t.opts.Excerpt {
		return
	}
	x := Excerpt(text, s.t.opts.ExcerptChars)
	s.set(func(e *Event) { e.PromptExcerpt = x })
}

// SetContent attaches a model attempt's prompt and answer for an exporter
// that captures content (see Event.Content); nil removes it.
func (s *Span) SetContent(c *Content) { s.set(func(e *Event) { e.Content = c }) }

// End finishes the span and emits its event. Only the first End counts.
func (s *Span) End() {
	if s == nil {
		return
	}
	end := s.t.opts.Now()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.ev.Sampled = s.tc.Flags&1 == 1
	s.ev.TSStart = s.start.UTC()
	s.ev.TSEnd = end.UTC()
	s.ev.DurationMS = end.Sub(s.start).Milliseconds()
	if s.ev.Name == "turn" && s.t.opts.HeadSampling {
		s.ev.SampledOut = !TailSampled(&s.ev, s.t.opts.SlowTurn)
	}
	s.mu.Unlock()
	switch r := s.t.rec.(type) {
	case nil:
	case *Emitter:
		// Nothing writes the event of an ended span: the emitter may keep
		// it as it is instead of a copy.
		r.emit(&s.ev)
	default:
		r.Emit(s.ev)
	}
}
