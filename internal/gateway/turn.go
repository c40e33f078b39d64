package gateway

import (
	"encoding/json"
	"time"

	"github.com/fmgate/fmgate/internal/config"

	"github.com/fmgate/fmgate/internal/provider"
)

// Priority classes of a turn: P0 sync chat, P1 async user-facing, P2
// eval/judge, P3 batch.
type Priority int

// Priority classes.
const (
	P0 Priority = iota
	P1
	P2
	P3
)

func (p Priority) String() string { return "P" + string(rune('0'+int(p))) }

// StopGuardrail is the stop reason of the redirect answer to a message a
// guardrail blocked (the built-in checks, a guardrail service, or the
// model's own content filter): Bedrock's word, which the other vendor doors
// map to theirs.
const StopGuardrail = "guardrail_intervened"

// Turn is one user message travelling through the pipeline. The front door
// fills the request fields; the pipeline steps fill the rest.
type Turn struct {
	// Request, from the front door.
	RequestID   string
	SessionID   string
	Message     string
	Locale      string
	Route       string // rate-limit route: "sendMessage", "chat", "batch"
	Surface     string // "ws", "http", "sse", "batch"
	TraceParent string // incoming W3C traceparent, if any
	// OnTraceparent, when set, is called with the W3C traceparent of the
	// turn's span (its trace and span id and its sampled flag) as soon as
	// the span starts, before anything is written: a front door sets it as
	// the response's traceparent header.
	OnTraceparent func(traceparent string)
	Feature       string // attribution: what product feature this turn serves

	// StartTier, when set, is the model tier the turn starts at (a vendor
	// front door's "model"); the route falls down the cascade below it.
	StartTier string
	// Stateless turns carry their whole conversation (History, set by the
	// front door, as the vendors' APIs do) and neither read nor write the
	// session store.
	Stateless bool
	// ClientSystem is the system prompt a vendor front door's client sent.
	// It is appended to fmgate's own prompt, which stays in force (store
	// policy, tone, safety), so the app can add instructions but not
	// remove fmgate's.
	ClientSystem string
	// ClientSystemCache and MessageCache are the client's prompt cache
	// marks in ClientSystem and in Message (History's messages carry
	// their own); they pass through to the model.
	ClientSystemCache, MessageCache []provider.CacheMark
	// PromptCacheKey is the client's OpenAI prompt_cache_key; it passes
	// through to the model (see provider.Request.CacheKey).
	PromptCacheKey string
	// Temperature, TopP, TopK and StopSequences pass through to the model.
	Temperature   *float64
	TopP          *float64
	TopK          *int
	Seed          *int64
	StopSequences []string
	// Prefill is the start of the answer the client wrote (Anthropic's
	// trailing assistant message): the model continues it, and the answer
	// is the continuation. Only tiers that can continue an answer serve it.
	Prefill string
	// Tools the client offers the model, and whether it must call one
	// (vendor front doors). Only tiers that can call tools serve the
	// turn; a turn that forces a call is never answered in prose by the
	// tiers below the models.
	Tools      []provider.Tool
	ToolChoice provider.ToolChoice
	// ToolResults answer the tool calls of History's last message; they
	// travel in the user message, before Message, which may then be empty.
	ToolResults []provider.ToolResult
	// Images are the pictures the user sent with Message (vendor front
	// doors, checked there); they travel in the user message, before its
	// text. Only tiers with the vision capability serve a turn whose
	// conversation carries any, and its answer is never cached.
	Images []provider.Image
	// Format is the answer's required shape (JSON, or JSON matching a
	// schema): checked on every tier's answer, and never answered in
	// prose by the tiers below the models.
	Format provider.Format
	// Thinking asks the model to reason before it answers (a vendor front
	// door's extended thinking). Only tiers with the thinking capability,
	// and whose maxOutputTokens exceed its budget, serve the turn; the
	// reasoning comes back in Result.Thinking and, as it streams, to an
	// Output that is a Thinker. The tiers below the models may still
	// answer in prose, without reasoning.
	Thinking *provider.Thinking
	// Guardrail is the client's own Bedrock guardrail (the Bedrock door's
	// guardrailConfig), passed to the model call. Only tiers with the
	// guardrails capability serve the turn; with none among those it may
	// use, the turn is refused. Its answer is never cached.
	Guardrail *provider.Guardrail
	// Metadata is the Bedrock door's requestMetadata, passed to the model
	// call (provider.Request.Metadata).
	Metadata map[string]string

	// ClientIP is the client's address through the state hash (see
	// Gateway.clientIP, Deps.StateHasher), for the per-address rate limit;
	// empty skips it.
	ClientIP string
	// KeyHash is the caller's API key through the state hash, and
	// KeyMonthly its quota of turns per 30 days (0: none).
	KeyHash       string
	KeyMonthly    int
	KeyPerMinute  int
	KeyConcurrent int
	// KeyDailyUSD and KeyMonthlyUSD are the key's spending budgets (0:
	// none), and KeyModels the model tiers it may use (empty: any).
	KeyDailyUSD, KeyMonthlyUSD float64
	KeyModels                  []string
	// PayloadLog is set when the caller's API key logs its turns'
	// payloads (auth.keys.*.payloadLog); KeyID names that key in the
	// payload log (a run-time key's id, a configured key's keyed hash),
	// filled while payload logs are on.
	PayloadLog bool
	KeyID      string
	// KeyGuardrails is the guardrails profile the caller's API key
	// chooses (auth.keys.*.guardrails); empty: its feature's, its route's
	// or the top level's.
	KeyGuardrails string
	// Caller, from the front door's authentication. Tenant is the API key's
	// tenant, for fair queueing; empty means the user id.
	Tenant   string
	UserID   string
	Premium  bool
	Priority Priority

	// Filled by the pipeline.
	Received time.Time
	// RetrievalCostUSD is what the retrieval step spent (the question's
	// embedding), charged to the turn's budgets with its answer.
	RetrievalCostUSD float64
	// embedSpent is what the embedding tiers billed for the turn's
	// embedding call, failed attempts included.
	embedSpent float64
	// firstTier is the first model tier the turn may reach (its start
	// tier, its key's first allowed one): an answer from a later one is
	// degraded.
	firstTier string
	// slot is the turn's slot of its key's concurrency (takeSlot).
	slot     string
	UserHash string
	// RequestHash is RequestID through the same keyed hash as UserHash:
	// a client's request id may carry anything, so logs get only this.
	RequestHash string
	// System and PromptVersion are the prompt in force when the turn
	// started; the whole turn uses them even if the prompt switches. A
	// vendor front door may set System to its client's system prompt; the
	// pipeline appends it to fmgate's own.
	System        string
	PromptVersion string
	History       []provider.Message
	MaxOutput     int
	// EstimatedInput is the token estimate of everything sent to the model.
	EstimatedInput int
	// Context is reference text retrieved for the question (catalog search
	// results); the model receives it after the system prompt.
	Context string
	// ContextUnavailable is set when the retrieval step could not search
	// (down, slow, breaker open): the answer is degraded.
	ContextUnavailable bool
	// Calibration is opaque to the pipeline: the budget policy keeps what it
	// needs here to calibrate its estimate once the provider reports usage.
	Calibration any
	// BudgetHold is opaque to the pipeline too: the budget policy's hold on
	// the turn's cost, which Record settles and Release ends.
	BudgetHold any

	// shapes are the compiled schemas of Format and the strict tools,
	// nil when the turn has neither.
	shapes *shapes

	// cfg is the config in force when the turn entered the pipeline: every
	// step of the turn reads this one, even if the config is reloaded.
	cfg *config.Config
	// in is the snapshot cfg came from, with the model tiers' providers.
	in *snapshot

	// logPayload is the payload log's decision on the turn
	// (choosePayload); blockedQuestion, for a message the guardrails
	// blocked, what it may keep of it; guardNotes the guardrails'
	// verdicts, for its payload.
	logPayload      bool
	blockedQuestion *string
	guardNotes      []string

	// stallGrace extends the first-byte budget once, for a client taking
	// its answer whole whose model stalled mid-answer (see invokeRoute).
	stallGrace time.Duration
}

// Config is the config the turn runs under, taken when it entered the
// pipeline (Gateway.Run); nil before that.
func (t *Turn) Config() *config.Config { return t.cfg }

// HasImages reports whether the turn's conversation carries images: in
// the user's message or in History.
func (t *Turn) HasImages() bool {
	return len(t.Images) > 0 || provider.CountImages(t.History) > 0
}

// ImageCount counts the images of the turn's conversation.
func (t *Turn) ImageCount() int { return len(t.Images) + provider.CountImages(t.History) }

// Result is the answer the pipeline delivered.
type Result struct {
	Text       string
	Tier       string // the tier that answered: a model name, "cache", "faq", "graceful"
	ModelID    string // the provider's model id, for model tiers
	Degraded   bool
	Confidence float64
	Usage      provider.Usage
	CostUSD    float64
	// CacheSavedUSD is what the vendors' prompt caches saved on the
	// answer (negative when cache writes cost more than reads saved).
	CacheSavedUSD float64
	CacheHit      bool
	TraceID       string
	TTFT          time.Duration
	// Simplified is set when the answer came from the cheaper model's brief
	// mode after the primary timed out.
	Simplified bool
	// StopReason is the model's (end_turn, max_tokens, stop_sequence); empty
	// for the tiers below the models, but StopGuardrail for the redirect
	// answer to a message a guardrail blocked. StopSequence is the sequence
	// that ended the answer, when the vendor said which.
	StopReason   string
	StopSequence string
	// ToolCalls are the tools the model called, after Text (StopReason
	// provider.StopToolUse).
	ToolCalls []provider.ToolCall
	// Thinking is the model's reasoning before Text, when the turn asked
	// for it and the model gave any.
	Thinking []provider.ThinkingBlock
	// GuardrailTrace is the vendor's trace of the turn's Guardrail, as it
	// sent it, when the turn asked for one with a trace.
	GuardrailTrace json.RawMessage
	// Continued is set when the next tier finished an answer whose model
	// failed mid-stream (stream.continuation); Parts are the tiers that wrote
	// the text, in order. Usage and CostUSD then add up both parts.
	Continued bool
	Parts     []Part
	// TraceParent is the W3C traceparent of the turn's span, carrying its
	// sampled flag, for responses that propagate it; empty with tracing off.
	TraceParent string
}

// Part is a stretch of an answer written by one tier; Chars counts its
// Unicode code points.
type Part struct {
	Tier  string
	Chars int
}

// Output receives a turn's answer. The streaming front doors back it with a
// chunk aggregator; the JSON front door collects the text.
type Output interface {
	// Write delivers a text delta. An error means the client can no longer
	// receive; the model call stops.
	Write(text string) error
	// Started reports whether any text has reached the client. After that,
	// the turn may not retry or fall back.
	Started() bool
	// Discard drops text written but not yet delivered, before a retry or a
	// fallback tier writes its own answer.
	Discard()
	// Finish delivers the rest and the completion record.
	Finish(res *Result) error
	// Fail ends the answer with an error instead of a completion.
	Fail(err *Error) error
}

// TierAware is an optional Output that learns which tier is about to write,
// before its first Write: a vendor front door names the answering model in
// its response headers and first event. It may be called again for another
// tier after Discard.
type TierAware interface {
	BeginTier(tier, modelID string, degraded bool)
}

// Thinker is an optional Output that takes the model's reasoning as it
// streams, before the answer's text: a vendor front door that shows
// thinking blocks. What it took goes with the text on Discard; it must
// not reach the client before the text may (Started).
type Thinker interface {
	Think(d provider.ThinkingDelta) error
}

// TraceAware is an optional Output that learns the turn's trace id when the
// turn starts, before any tier writes: a streaming vendor front door sends
// it in its response headers.
type TraceAware interface {
	BeginTrace(traceID string)
}

// WholeAnswer is an optional Output that hands the client nothing before
// Finish: a JSON response. A model tier with upstream "client" is asked for
// such a turn's answer whole, in one call, instead of as a stream.
type WholeAnswer interface {
	WholeAnswer() bool
}

// takesWhole reports whether out delivers the answer only when it is whole.
func takesWhole(out Output) bool {
	w, ok := out.(WholeAnswer)
	return ok && w.WholeAnswer()
}

func beginTrace(out Output, traceID string) {
	if ta, ok := out.(TraceAware); ok {
		ta.BeginTrace(traceID)
	}
}

func beginTier(out Output, tier, modelID string, degraded bool) {
	if ta, ok := out.(TierAware); ok {
		ta.BeginTier(tier, modelID, degraded)
	}
}

// SetCaller gives t the caller of c, as authentication filled it: its
// user, tenant, tier, and its API key's identity, quotas, budgets and
// models — everything admission and the budgets decide on, so that work a
// caller starts (a batch job's items) is held to the caller's limits.
// The priority stays t's own.
func (t *Turn) SetCaller(c *Turn) {
	t.UserID, t.Tenant, t.Premium, t.ClientIP = c.UserID, c.Tenant, c.Premium, c.ClientIP
	t.KeyPerMinute, t.KeyConcurrent = c.KeyPerMinute, c.KeyConcurrent
	t.KeyHash, t.KeyMonthly, t.KeyDailyUSD, t.KeyMonthlyUSD, t.KeyModels = c.KeyHash, c.KeyMonthly, c.KeyDailyUSD, c.KeyMonthlyUSD, c.KeyModels
	t.PayloadLog, t.KeyID = c.PayloadLog, c.KeyID
	t.KeyGuardrails = c.KeyGuardrails
}
