package bedrock_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider/providertest"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// TestSendsTheAttemptsTraceparent: every call, streamed or not, carries
// the model attempt's traceparent upstream through the vendor's own SDK.
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
	providertest.SendsTheAttemptsTraceparent(t, newProvider(t, srv.URL), rec, request("hi"))
}
