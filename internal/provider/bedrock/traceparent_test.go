package bedrock_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// TestSendsTheAttemptsTraceparent: every call, streamed or not, carries
// the model attempt's traceparent (its span id, its trace's sampled flag)
// to the vendor's endpoint, through the vendor's own SDK; a call made
// outside a span carries none.
func TestSendsTheAttemptsTraceparent(t *testing.T) {
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"sonnet": {ModelID: sonnetID, TTFTMs: 1, TokensPerSecond: 1000}}}, sim.Options{
		Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() },
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := simserver.NewRecorder(0)
	srv := httptest.NewServer(rec.Wrap(simserver.Handler(s)))
	t.Cleanup(srv.Close)
	p := newProvider(t, srv.URL+"")
	tr := events.NewTracer(nil, events.TracerOptions{})
	call := func(ctx context.Context, streamed bool) string {
		t.Helper()
		if streamed {
			_, err = p.Stream(ctx, request("hi"), func(string) error { return nil })
		} else {
			_, err = p.Complete(ctx, request("hi"))
		}
		if err != nil {
			t.Fatal(err)
		}
		got := rec.Last()
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
