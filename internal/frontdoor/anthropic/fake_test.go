package anthropic_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/frontdoor/anthropic"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// fakePipeline answers every turn with "ok" from sonnet, or refuses it with
// err; the stream output is a real gateway's.
type fakePipeline struct {
	*gateway.Gateway
	err error
}

func newFakePipeline(tb testing.TB, err error) fakePipeline {
	tb.Helper()
	cfg := config.Default()
	s, serr := sim.New(cfg.SimConfig(), sim.Options{})
	if serr != nil {
		tb.Fatal(serr)
	}
	g, gerr := gateway.New(cfg, gateway.Deps{Providers: map[string]provider.Provider{"sonnet": s, "haiku": s}})
	if gerr != nil {
		tb.Fatal(gerr)
	}
	return fakePipeline{Gateway: g, err: err}
}

func (f fakePipeline) Authenticate(*http.Request, string, string, *gateway.Turn) error { return nil }

func (f fakePipeline) Run(_ context.Context, t *gateway.Turn, out gateway.Output) (*gateway.Result, error) {
	if f.err != nil {
		return nil, f.err
	}
	if err := out.Write("ok"); err != nil {
		return nil, err
	}
	res := &gateway.Result{Text: "ok", Tier: "sonnet", ModelID: "m", StopReason: "end_turn"}
	return res, out.Finish(res)
}

func newDoorWith(p anthropic.Pipeline) http.Handler {
	return anthropic.New(p, anthropic.Options{MaxBodyBytes: 64 << 10})
}
