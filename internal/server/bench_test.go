package server

import (
	"context"
	"strconv"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/ratelimit"
)

// discard is an Output that drops the answer.
type discard struct{}

func (discard) Write(string) error           { return nil }
func (discard) Started() bool                { return false }
func (discard) Discard()                     {}
func (discard) Finish(*gateway.Result) error { return nil }
func (discard) Fail(*gateway.Error) error    { return nil }

// BenchmarkTurn is one turn through the whole pipeline (every policy on, in
// memory) against the simulator at zero latency. The simulator's own
// tokenizer work is included; see BenchmarkStream in provider/sim for it
// alone.
func BenchmarkTurn(b *testing.B) {
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs, st.TokensPerSecond = 0, 0
		cfg.Sim.Models[name] = st
	}
	// Lift the limits: the benchmark measures the pipeline, not refusals.
	cfg.RateLimit.Global = ratelimit.Rule{Limit: ratelimit.PerSecond(1_000_000, 1_000_000)}
	cfg.RateLimit.Routes = nil
	cfg.RateLimit.User = ratelimit.UserRules{}
	cfg.Budget.SessionInput, cfg.Budget.SessionOutput, cfg.Budget.DailyCostUSD = 0, 0, 0
	for m, c := range cfg.Quota.Models {
		c.TPM, c.RPM = 1<<40, 1<<40
		cfg.Quota.Models[m] = c
	}
	s, err := New(context.Background(), isolate(b, cfg), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		t := &gateway.Turn{RequestID: strconv.Itoa(i), SessionID: "bench-" + strconv.Itoa(i%64), Message: "おすすめの少年漫画は？",
			Locale: "ja", Route: "sendMessage", Surface: "ws", UserID: "bench"}
		if _, err := s.Gateway.Run(ctx, t, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}
