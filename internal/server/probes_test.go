package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
)

// switchable fails, throttles, hangs or answers as the test says.
type switchable struct {
	provider.Provider
	mode    atomic.Value // "fail", "throttle", "hang" or "ok"
	hanging chan struct{}
}

func (s *switchable) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	switch s.mode.Load() {
	case "fail":
		return nil, &provider.Error{Kind: provider.KindUnavailable, Model: req.Model}
	case "throttle":
		return nil, &provider.Error{Kind: provider.KindThrottled, Model: req.Model}
	case "hang":
		select {
		case s.hanging <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, &provider.Error{Kind: provider.KindCanceled, Model: req.Model, Err: ctx.Err()}
	}
	return s.Provider.Stream(ctx, req, emit)
}

// A half-open probe that was throttled, or whose client left, says nothing
// about the model: its place goes to the next turn, which finds the model
// recovered, instead of being held until halfOpenWait and then counted as
// a failure that reopens the breaker for a whole open period.
func TestPrimaryRecoversAlthoughProbesAreCancelledOrThrottled(t *testing.T) {
	for _, mode := range []string{"memory", "fleet"} {
		t.Run(mode, func(t *testing.T) {
			cfg := quickConfig()
			if mode == "fleet" {
				cfg.Fleet.Redis = redistest.Addr()
				cfg.Fleet.KeyPrefix = fleetConfig(t)
			}
			bc := cfg.Breakers["sonnet"]
			bc.OpenTimeout = 300 * time.Millisecond
			bc.HalfOpenWait = time.Minute
			cfg.Breakers["sonnet"] = bc
			cfg.Retry.SendRate.Enabled = false // pacing would skip the model on its own after a throttle
			sonnet := &switchable{hanging: make(chan struct{}, 1)}
			sonnet.mode.Store("fail")
			sc := &scenario{t: t}
			s, err := New(context.Background(), isolate(t, cfg), Options{WrapProvider: func(model string, p provider.Provider) provider.Provider {
				if model == "sonnet" {
					sonnet.Provider = p
					return sonnet
				}
				return p
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			sc.s, sc.srv = s, newTestServer(t, s)
			br := s.Breakers.Get("sonnet")

			for i := 0; state(t, br) != breaker.Open; i++ {
				if i == 20 {
					t.Fatalf("sonnet's breaker did not open after %d failed turns", i)
				}
				sc.chatSession("probe-user", "open", "recommend a manga", "en")
			}
			waitState(t, br, breaker.HalfOpen, 2*time.Second)

			// The probe is throttled on every attempt: the turn falls back.
			sonnet.mode.Store("throttle")
			if a := sc.chatSession("probe-user", "throttled", "recommend a manga", "en"); a.Status != 200 || a.Tier == "sonnet" {
				t.Fatalf("throttled probe turn: %+v", a)
			}
			waitInFlight(t, br, 0, "after a throttled probe")

			// The probe's client leaves while the model is still thinking.
			sonnet.mode.Store("hang")
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sc.srv.URL+"/v1/chat",
					strings.NewReader(`{"sessionId":"gone","message":"recommend a manga","locale":"en"}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-User-Id", "probe-user")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			select {
			case <-sonnet.hanging:
			case <-time.After(5 * time.Second):
				t.Fatal("the probe turn never reached sonnet")
			}
			cancel()
			<-done
			waitInFlight(t, br, 0, "after a probe whose client left")

			// The model is back: the next turn is the probe, and it passes.
			sonnet.mode.Store("ok")
			if a := sc.chatSession("probe-user", "back", "recommend a manga", "en"); a.Status != 200 || a.Tier != "sonnet" {
				t.Fatalf("first turn after recovery: %+v; want sonnet, its breaker's probe", a)
			}
			if s := snapshotOf(t, br); s.State != breaker.HalfOpen || s.Stage != 1 {
				t.Fatalf("after the passed probe: %+v; want the second recovery stage", s)
			}
		})
	}
}

func newTestServer(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(s.Handler(testAdminToken))
	t.Cleanup(srv.Close)
	return srv
}

func snapshotOf(t *testing.T, br breaker.Breaker) breaker.Snapshot {
	t.Helper()
	s, err := br.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func state(t *testing.T, br breaker.Breaker) breaker.State { return snapshotOf(t, br).State }

func waitState(t *testing.T, br breaker.Breaker, want breaker.State, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for state(t, br) != want {
		if time.Now().After(deadline) {
			t.Fatalf("breaker %+v; want %s within %s", snapshotOf(t, br), want, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitInFlight waits for the breaker's outstanding probes to come to want:
// a probe's release rides the end of its turn, after the client's answer.
func waitInFlight(t *testing.T, br breaker.Breaker, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		s := snapshotOf(t, br)
		if s.State == breaker.HalfOpen && s.InFlight == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: breaker %+v; want half open with %d probes in flight", when, s, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
