package gateway

import (
	"context"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// The pipeline talks to each policy through the small interface below. A
// policy that is switched off is a pass-through, so the order of a turn never
// depends on what is enabled.

// Admitter applies rate limits (step 3). It returns an *Error to refuse.
type Admitter interface {
	Admit(ctx context.Context, t *Turn) error
}

// Budgeter estimates tokens and enforces token and cost budgets (step 4),
// truncating t.History when needed, and records actual usage afterwards.
type Budgeter interface {
	Check(ctx context.Context, t *Turn, model string) error
	Record(ctx context.Context, t *Turn, res *Result) error
	// Release ends what Check held for a turn that Record did not settle
	// (refused or failed before a model spent anything, or answered below
	// the models); it does nothing after Record.
	Release(ctx context.Context, t *Turn)
}

// Retriever finds reference context for a turn (between budget and plan):
// it sets t.Context, counting its tokens into t.EstimatedInput. It must
// return by ctx's deadline, its share of the first-byte budget; an error
// means the turn answers without context.
type Retriever interface {
	Retrieve(ctx context.Context, t *Turn) error
}

// Planner orders the model tiers for a turn (step 5). models is shared by
// every turn: Plan returns a new slice, or models itself, unmodified.
type Planner interface {
	Plan(ctx context.Context, t *Turn, models []string) []string
}

// Reserver reserves provider quota before a model is called (step 6). It may
// make the turn wait in the priority queue.
type Reserver interface {
	Reserve(ctx context.Context, t *Turn, model string) (Lease, error)
}

// JobStore keeps batch jobs' state where every instance can read it
// (package jobstore: in memory, or in Redis for a fleet). A state is the
// job as GET /v1/batch/{id} shows it; only its owner reads it back.
type JobStore interface {
	Put(ctx context.Context, id, owner string, state []byte, ttl time.Duration) error
	Get(ctx context.Context, id, owner string) ([]byte, bool, error)
}

// Lease is a quota reservation, settled with the actual usage or released.
// Both complete though ctx is cancelled (the client left): the tokens were
// spent, or the hold must go back, whatever the client does.
type Lease interface {
	Settle(ctx context.Context, used provider.Usage)
	Release(ctx context.Context)
}

// Invoker runs one model call with retries and breaker bookkeeping (step 7).
// call is one attempt; Invoker decides whether to try again.
type Invoker interface {
	Invoke(ctx context.Context, model string, call func(ctx context.Context) error) (InvokeReport, error)
}

// InvokeReport says how a model call went, for events and metrics.
type InvokeReport struct {
	Attempts int
	Retries  int
}

// Fallback answers when no model tier did (step 8).
type Fallback interface {
	Answer(ctx context.Context, t *Turn, cause error) (*Result, error)
	// Remember stores a model's answer for later fallbacks and reports
	// whether it wrote to the cache.
	Remember(ctx context.Context, t *Turn, res *Result) bool
	// Simplify rewrites a request for a brief answer from a cheaper model,
	// used after the primary timed out.
	Simplify(req *provider.Request, model string) *provider.Request
}

// Prompts gives the system prompt in force when a turn starts, with its
// version label (name@sha12). It may change between turns without a restart.
type Prompts interface {
	Active() (text, version string)
}

// SessionPrompts is an optional Prompts that gives each session its own
// prompt version, the same at every turn of the session: a canary of a
// candidate prompt.
type SessionPrompts interface {
	ForSession(owner, sessionID string) (text, version string)
}

// UserHasher turns a user id into the keyed hash that logs and events carry.
type UserHasher interface {
	Hash(userID string) string
}

// staticPrompt is the config's prompt, for a gateway built without a ledger.
type staticPrompt struct{ text, version string }

func (p staticPrompt) Active() (string, string) { return p.text, p.version }

type passAdmitter struct{}

func (passAdmitter) Admit(context.Context, *Turn) error { return nil }

type passBudgeter struct{}

func (passBudgeter) Check(context.Context, *Turn, string) error   { return nil }
func (passBudgeter) Record(context.Context, *Turn, *Result) error { return nil }
func (passBudgeter) Release(context.Context, *Turn)               {}

type passPlanner struct{}

func (passPlanner) Plan(_ context.Context, _ *Turn, models []string) []string { return models }

type passReserver struct{}

func (passReserver) Reserve(context.Context, *Turn, string) (Lease, error) { return noLease{}, nil }

type noLease struct{}

func (noLease) Settle(context.Context, provider.Usage) {}
func (noLease) Release(context.Context)                {}

type onceInvoker struct{}

func (onceInvoker) Invoke(ctx context.Context, _ string, call func(context.Context) error) (InvokeReport, error) {
	return InvokeReport{Attempts: 1}, call(ctx)
}

// Batcher groups the calls a turn makes to shared state (fleet mode: Redis)
// into as few round trips as their dependencies allow. Begin is called once
// a turn is valid: it may read ahead what the admission steps will consult
// and take ahead what step 6 will likely ask for (a reservation the
// Reserver then finds in the context). It returns the turn's context and
// the function that ends the turn's batch: it gives back what was taken
// ahead and not used, and sends what was queued. Together runs calls that
// do not depend on each other (the record step's writes) and returns when
// all are done.
type Batcher interface {
	Begin(ctx context.Context, t *Turn) (context.Context, func())
	Together(ctx context.Context, calls ...func(context.Context))
}

// oneByOne is the Batcher of a gateway whose state is in memory.
type oneByOne struct{}

func (oneByOne) Begin(ctx context.Context, _ *Turn) (context.Context, func()) { return ctx, func() {} }

func (oneByOne) Together(ctx context.Context, calls ...func(context.Context)) {
	for _, call := range calls {
		call(ctx)
	}
}

// Judge sees every completed turn and may have it graded by the sampled
// eval judge. Consider must not block the turn.
type Judge interface {
	Consider(ctx context.Context, t *Turn, res *Result)
}

type passJudge struct{}

func (passJudge) Consider(context.Context, *Turn, *Result) {}
