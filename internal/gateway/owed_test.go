package gateway

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/session"
)

// ledger notes every write a turn owes and refuses, as Redis does, the
// ones made on a context that has ended.
type ledger struct {
	mu      sync.Mutex
	writes  []string
	refused []string
}

func (l *ledger) note(ctx context.Context, what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		l.refused = append(l.refused, what)
		return err
	}
	l.writes = append(l.writes, what)
	return nil
}

func (l *ledger) has(what string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range l.writes {
		if w == what {
			return true
		}
	}
	return false
}

type ledgerBudget struct{ l *ledger }

func (ledgerBudget) Check(context.Context, *Turn, string) error { return nil }
func (ledgerBudget) Release(context.Context, *Turn)             {}
func (b ledgerBudget) Record(ctx context.Context, _ *Turn, res *Result) error {
	if res.Usage.OutputTokens == 0 {
		return b.l.note(ctx, "budget: no output")
	}
	return b.l.note(ctx, "budget")
}

type ledgerSessions struct {
	session.Store
	l *ledger
}

func (s ledgerSessions) Append(ctx context.Context, owner, id, user, assistant string) error {
	if err := s.l.note(ctx, "history"); err != nil {
		return err
	}
	return s.Store.Append(ctx, owner, id, user, assistant)
}

type ledgerFallback struct {
	gracefulOnly
	l *ledger
}

func (f ledgerFallback) Remember(ctx context.Context, _ *Turn, _ *Result) bool {
	return f.l.note(ctx, "cache") == nil
}

type ledgerReserver struct{ l *ledger }

func (r ledgerReserver) Reserve(context.Context, *Turn, string) (Lease, error) {
	return ledgerLease(r), nil
}

type ledgerLease struct{ l *ledger }

func (l ledgerLease) Settle(ctx context.Context, _ provider.Usage) {
	_ = l.l.note(context.WithoutCancel(ctx), "quota") // the contract: Settle completes whatever ctx says
}
func (l ledgerLease) Release(ctx context.Context) {
	_ = l.l.note(context.WithoutCancel(ctx), "quota released")
}

// hangUpOutput is a client that closes its connection as soon as it reads
// the last event, as the vendors' SDKs do: Finish cancels the turn.
type hangUpOutput struct {
	hangUp  context.CancelFunc
	started bool
	cutAt   int // Write fails, as to a client gone, after this many writes (0: never)
	writes  int
}

func (o *hangUpOutput) Write(string) error {
	o.writes++
	if o.cutAt > 0 && o.writes > o.cutAt {
		o.hangUp()
		return errors.New("client gone")
	}
	o.started = true
	return nil
}
func (o *hangUpOutput) Started() bool { return o.started }
func (o *hangUpOutput) Discard()      {}
func (o *hangUpOutput) Finish(*Result) error {
	o.hangUp()
	return nil
}
func (o *hangUpOutput) Fail(*Error) error { return nil }

func owedGateway(t *testing.T, p provider.Provider) (*Gateway, *ledger) {
	t.Helper()
	l := &ledger{}
	cfg := config.Default()
	g, err := New(cfg, Deps{
		Providers: both(p),
		Budgeter:  ledgerBudget{l},
		Sessions:  ledgerSessions{session.NewMemory(10, 100, cfg.Session.TTL, nil), l},
		Fallback:  ledgerFallback{l: l},
		Reserver:  ledgerReserver{l},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, l
}

// A client that hangs up the moment it reads "done" must not cancel what
// the turn owes: the budget charge, the history, the cache and the quota
// settlement all happen.
func TestWhatATurnOwesSurvivesAHangUpAtDone(t *testing.T) {
	g, l := owedGateway(t, &scriptProvider{answer: "One Piece is a long pirate adventure. "})
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	turn := &Turn{RequestID: "r1", SessionID: "s1", UserID: "u1", Message: "recommend a manga", Locale: "en", Route: "chat", Surface: "sse"}
	if _, err := g.Run(ctx, turn, &hangUpOutput{hangUp: hangUp}); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() == nil {
		t.Fatal("the client never hung up: the test proves nothing")
	}
	for _, want := range []string{"quota", "budget", "history", "cache"} {
		if !l.has(want) {
			t.Errorf("%s was not settled after the client hung up at done (writes %v, refused %v)", want, l.writes, l.refused)
		}
	}
	if len(l.refused) > 0 {
		t.Errorf("writes made on the hung-up context: %v", l.refused)
	}
	h, err := g.sessions.History(context.Background(), "u1", "s1")
	if err != nil || len(h) != 2 {
		t.Fatalf("session history after the turn = %v, %v; want the exchange", h, err)
	}
}

// An answer cut mid-stream by a client that left was paid for upstream: its
// tokens are charged to the budgets, though no history or cache is kept.
func TestAnAnswerCutMidStreamIsCharged(t *testing.T) {
	g, l := owedGateway(t, &scriptProvider{answer: "One Piece is a long pirate adventure with a big crew. "})
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	turn := &Turn{RequestID: "r2", SessionID: "s2", UserID: "u2", Message: "recommend a manga", Locale: "en", Route: "chat", Surface: "sse"}
	if _, err := g.Run(ctx, turn, &hangUpOutput{hangUp: hangUp, cutAt: 3}); err == nil {
		t.Fatal("a turn whose client left mid-answer reported success")
	}
	if !l.has("budget") {
		t.Errorf("the cut answer's tokens were not charged (writes %v, refused %v)", l.writes, l.refused)
	}
	if l.has("history") || l.has("cache") {
		t.Errorf("a cut answer was kept as history or cached: %v", l.writes)
	}
}

// failNotingOutput is a client that notes in the ledger when it is told
// the answer failed.
type failNotingOutput struct {
	hangUpOutput
	l *ledger
}

func (o *failNotingOutput) Fail(*Error) error { return o.l.note(context.Background(), "error frame") }

// An answer the model cuts mid-stream is charged before the client hears
// the error, as a whole answer is before "done": a client that retries at
// once is held to the budget the cut answer spent.
func TestACutAnswerIsChargedBeforeTheErrorFrame(t *testing.T) {
	g, l := owedGateway(t, &scriptProvider{answer: "One Piece is a long pirate adventure with a big crew. ", failAt: 3})
	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	turn := &Turn{RequestID: "r3", SessionID: "s3", UserID: "u3", Message: "recommend a manga", Locale: "en", Route: "chat", Surface: "sse"}
	if _, err := g.Run(ctx, turn, &failNotingOutput{hangUpOutput: hangUpOutput{hangUp: hangUp}, l: l}); err == nil {
		t.Fatal("a turn cut mid-answer reported success")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	budget, frame := -1, -1
	for i, w := range l.writes {
		switch w {
		case "budget", "budget: no output":
			budget = i
		case "error frame":
			frame = i
		}
	}
	if budget < 0 || frame < 0 || budget > frame {
		t.Fatalf("writes %v: want the cut answer charged, then the error frame", l.writes)
	}
}
