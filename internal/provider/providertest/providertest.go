// Package providertest holds the checks every provider adapter's tests run
// against the simulator's wire server.
package providertest

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// RecordingSim serves a simulator with one model (tier, modelID) at zero
// latency on the vendors' wire protocols, recording what each request
// carried. It returns the server's URL and the recorder.
func RecordingSim(t *testing.T, tier, modelID string) (string, *simserver.Recorder) {
	t.Helper()
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{tier: {ModelID: modelID}}}, sim.Options{
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := simserver.NewRecorder(0)
	srv := httptest.NewServer(rec.Wrap(simserver.Handler(s)))
	t.Cleanup(srv.Close)
	return srv.URL, rec
}

// SendsTheAttemptsTraceparent checks that every call of p, streamed or not,
// carries the model attempt's traceparent (its span id, its trace's sampled
// flag) to the vendor's endpoint, as rec saw it, and that a call made
// outside a span carries none.
func SendsTheAttemptsTraceparent(t *testing.T, p provider.Provider, rec *simserver.Recorder, req *provider.Request) {
	t.Helper()
	tr := events.NewTracer(nil, events.TracerOptions{})
	call := func(ctx context.Context, streamed bool) string {
		t.Helper()
		var err error
		if streamed {
			_, err = p.Stream(ctx, req, func(string) error { return nil })
		} else {
			_, err = p.Complete(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		got := rec.Last()
		if len(got) == 0 {
			t.Fatal("the wire server recorded no request")
		}
		return got[len(got)-1].Traceparent
	}
	for _, flags := range []byte{1, 0} {
		for _, streamed := range []bool{true, false} {
			ctx := events.ContextWithRemote(context.Background(),
				events.TraceContext{TraceID: [16]byte{0xab, 1}, SpanID: [8]byte{0xcd, 2}, Flags: flags})
			ctx, _ = tr.Start(ctx, "turn")
			ctx, attempt := tr.Start(ctx, "model_attempt")
			want := events.FormatTraceparent(attempt.Context())
			if got := call(ctx, streamed); got != want {
				t.Errorf("flags %02x streamed %v: upstream got traceparent %q, want the attempt's %q", flags, streamed, got, want)
			}
		}
	}
	if got := call(context.Background(), true); got != "" {
		t.Errorf("a call outside any span sent traceparent %q", got)
	}
}

// CountWrites counts the writes on every connection c dials from now on;
// c's transport must be an *http.Transport.
func CountWrites(c *http.Client) *atomic.Int32 {
	var writes atomic.Int32
	tr := c.Transport.(*http.Transport)
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{conn, &writes}, nil
	}
	return &writes
}

type writeCounter struct {
	net.Conn
	writes *atomic.Int32
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// OneWritePerCall checks that a whole and a streamed call of p each leave
// in one write (headers and body together), writes counting p's client's
// writes (CountWrites).
func OneWritePerCall(t *testing.T, p provider.Provider, req *provider.Request, writes *atomic.Int32) {
	t.Helper()
	for _, streamed := range []bool{false, true} {
		writes.Store(0)
		var err error
		if streamed {
			_, err = p.Stream(context.Background(), req, func(string) error { return nil })
		} else {
			_, err = p.Complete(context.Background(), req)
		}
		if err != nil {
			t.Fatal(err)
		}
		if n := writes.Load(); n != 1 {
			t.Errorf("streamed=%v: the call took %d writes, want 1 (headers and body together)", streamed, n)
		}
	}
}
