package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
)

// recording keeps every request a model received.
type recording struct {
	provider.Provider
	mu   sync.Mutex
	reqs []*provider.Request
}

func (r *recording) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Provider.Stream(ctx, req, emit)
}

// promptOf returns the conversation sent upstream with the latest message
// text, as one string.
func (r *recording) promptOf(message string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.reqs) - 1; i >= 0; i-- {
		msgs := r.reqs[i].Messages
		if len(msgs) > 0 && msgs[len(msgs)-1].Content == message {
			var b strings.Builder
			for _, m := range msgs {
				b.WriteString(m.Content + "\n")
			}
			return b.String()
		}
	}
	return ""
}

// TestSessionsBelongToTheirCaller: bob sending alice's sessionId neither sees
// her conversation nor spends her session budget, and an answer drawn from
// her conversation is never served to him from the shared response cache.
func TestSessionsBelongToTheirCaller(t *testing.T) {
	cfg := quickConfig()
	// Alice's third turn, with her history and the system prompt sent on
	// each turn, is over it.
	cfg.Budget.SessionInput = 3_000
	rec := map[string]*recording{}
	s, err := New(context.Background(), isolate(t, cfg), Options{WrapProvider: func(model string, p provider.Provider) provider.Provider {
		rec[model] = &recording{Provider: p}
		return rec[model]
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sc := &scenario{t: t, s: s, srv: httptestServer(t, s)}

	const secret = "my membership number is M-88421 and I live at 1-2-3 Shibuya"
	const question = "What did I order last time?"
	say := func(user, msg string) answer {
		return sc.chatIn(user, "shared-session", msg)
	}
	if a := say("alice", secret); a.Status != http.StatusOK {
		t.Fatalf("alice: %+v", a)
	}
	if a := say("alice", question); a.Status != http.StatusOK || a.Tier != "sonnet" {
		t.Fatalf("alice's second turn: %+v", a)
	}
	if p := rec["sonnet"].promptOf(question); !strings.Contains(p, secret) {
		t.Fatalf("alice's own history is missing from her prompt: %q", p)
	}
	if a := say("alice", "and one more question about my order"); a.Status != http.StatusPaymentRequired {
		t.Fatalf("alice past her session budget: %+v, want 402", a)
	}

	// Bob reuses the session id.
	const bobMsg = "Hello, which manga do you recommend?"
	if a := say("bob", bobMsg); a.Status != http.StatusOK {
		t.Fatalf("bob was charged alice's session budget: %+v", a)
	}
	if p := rec["sonnet"].promptOf(bobMsg); p == "" || strings.Contains(p, secret) {
		t.Fatalf("bob's prompt holds alice's conversation: %q", p)
	}

	// With the models down, bob asks alice's question: her personal answer
	// must not come back from the cache.
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	adminPut(t, sc.srv, "/admin/sim/haiku", `{"outage":true}`)
	if a := sc.chatIn("bob", "bob-session", question); a.Tier == "cache" {
		t.Fatalf("bob got alice's answer from the cache: %+v", a)
	}
}

func httptestServer(t *testing.T, s *Server) *httptest.Server {
	srv := httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(srv.Close)
	return srv
}

// chatIn sends message in an English session of user's.
func (sc *scenario) chatIn(user, session, message string) answer {
	sc.t.Helper()
	return sc.chatSession(user, session, message, "en")
}
