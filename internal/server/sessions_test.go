package server

import (
	"bufio"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
)

// seeing records the messages of the last request a model was sent.
type seeing struct {
	provider.Provider
	mu   *sync.Mutex
	last *[]provider.Message
}

func (s seeing) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	s.mu.Lock()
	*s.last = append([]provider.Message(nil), req.Messages...)
	s.mu.Unlock()
	return s.Provider.Stream(ctx, req, emit)
}

func (s seeing) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	s.mu.Lock()
	*s.last = append([]provider.Message(nil), req.Messages...)
	s.mu.Unlock()
	return s.Provider.Complete(ctx, req)
}

// instance starts one gateway of a fleet and reports what its models see.
func instance(t *testing.T, cfg config.Config) (*scenario, func() []provider.Message) {
	t.Helper()
	var mu sync.Mutex
	var last []provider.Message
	s, err := New(context.Background(), isolate(t, cfg), Options{WrapProvider: func(_ string, p provider.Provider) provider.Provider {
		return seeing{Provider: p, mu: &mu, last: &last}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(srv.Close)
	return &scenario{t: t, s: s, srv: srv}, func() []provider.Message {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

func TestConversationContinuesOnAnotherInstance(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	a, _ := instance(t, cfg)
	b, seenByB := instance(t, cfg)

	if ans := a.chat("hana", "ワンピースの最新刊は？", "ja"); ans.Status != 200 {
		t.Fatalf("first turn on instance a: %+v", ans)
	}
	if ans := b.chat("hana", "その次の巻はいつ？", "ja"); ans.Status != 200 {
		t.Fatalf("second turn on instance b: %+v", ans)
	}
	msgs := seenByB()
	if len(msgs) != 3 || msgs[0].Content != "ワンピースの最新刊は？" || msgs[2].Content != "その次の巻はいつ？" {
		t.Fatalf("instance b sent the model %d messages %v; want the first exchange (from instance a) and the new message", len(msgs), msgs)
	}
	// Another user with the same session id sees none of it.
	b.chat("kenji", "hello", "en")
	if msgs := seenByB(); len(msgs) != 1 {
		t.Fatalf("another user's turn carried %d messages of history", len(msgs)-1)
	}
}

func TestSessionStoreDownAnswersWithoutHistory(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = "127.0.0.1:1" // nothing listens here
	cfg.Fleet.KeyPrefix = "fmgate-down:"
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false // every span of the turns reaches the log
	sc, _ := instance(t, cfg)
	for range 3 {
		if ans := sc.chat("hana", "How long does shipping take?", "en"); ans.Status != 200 || ans.Text == "" {
			t.Fatalf("turn with the session store down: %+v", ans)
		}
	}
	sc.s.Close() // flush the emitter

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	turns, flagged, sessionSpans := 0, 0, 0
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		e, err := events.Decode(lines.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		switch e.Name {
		case "turn":
			turns++
			if slices.Contains(e.Resource.CapabilityFlagsActive, gateway.FlagNoHistory) {
				flagged++
			}
		case "session":
			if e.Outcome.ErrorCode == "session_unavailable" {
				sessionSpans++
			}
		}
	}
	if turns != 3 || flagged != 3 || sessionSpans != 3 {
		t.Fatalf("turns %d, flagged %s %d, session spans with session_unavailable %d; want 3 each",
			turns, gateway.FlagNoHistory, flagged, sessionSpans)
	}
}
