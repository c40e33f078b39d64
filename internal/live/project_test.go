package live

import (
	"context"
	"testing"
	"time"
)

func TestSecondsToExhaustion(t *testing.T) {
	at := func(sec float64, tpm float64) TrendPoint {
		return TrendPoint{T: t0.Add(time.Duration(sec * float64(time.Second))), TokensPerMinute: tpm}
	}
	tests := []struct {
		name    string
		points  []TrendPoint
		ceiling float64
		want    *float64
	}{
		{"straight rise", []TrendPoint{at(0, 1000), at(60, 2000), at(120, 3000)}, 10000, ptr(420)},
		// mean t 15, mean y 250, slope 4000/500 = 8 tpm/s; fit at t=30 is
		// 370; (1000-370)/8 = 78.75.
		{"least squares", []TrendPoint{at(0, 100), at(10, 300), at(20, 200), at(30, 400)}, 1000, ptr(78.8)},
		{"order does not matter", []TrendPoint{at(30, 400), at(0, 100), at(20, 200), at(10, 300)}, 1000, ptr(78.8)},
		{"already at the ceiling", []TrendPoint{at(0, 900), at(60, 1200)}, 1000, ptr(0)},
		{"flat", []TrendPoint{at(0, 500), at(60, 500)}, 1000, nil},
		{"falling", []TrendPoint{at(0, 900), at(60, 500)}, 1000, nil},
		{"rise below one token per minute per minute", []TrendPoint{at(0, 500), at(60, 500.9)}, 1000, nil},
		{"rise of one token per minute per minute", []TrendPoint{at(0, 500), at(60, 501)}, 1000, ptr(29940)},
		{"no ceiling", []TrendPoint{at(0, 1000), at(60, 2000)}, 0, nil},
		{"one point", []TrendPoint{at(0, 1000)}, 10000, nil},
		{"one instant", []TrendPoint{at(5, 1000), at(5, 3000)}, 10000, nil},
		{"no points", nil, 10000, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SecondsToExhaustion(tt.points, tt.ceiling)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Fatalf("SecondsToExhaustion = %v, want %v", deref(got), deref(tt.want))
			}
		})
	}
}

// Feeding 10·k tokens in second k makes the 60 s window's sum
// 600·T − 17,700 tokens per minute once full: a rise of 600 tpm per
// second. At T = 120 s that is 54,300, so a 100,000 ceiling is
// (100,000 − 54,300) / 600 = 76.17 s away. The spans name sonnet by its
// provider id, the quota entry by the gateway's name.
func TestProjectionsFromHistory(t *testing.T) {
	clk := newClock()
	const sonnetID = "anthropic.claude-3-sonnet-20240229-v1:0"
	state := func(context.Context) (State, error) {
		return State{Quota: []Quota{
			{Model: "sonnet", ModelID: sonnetID, TPMCeiling: 100_000, RPMCeiling: 1000},
			{Model: "haiku", TPMCeiling: 500_000, RPMCeiling: 1000},
		}}, nil
	}
	a := New(DefaultConfig(), state, clk.Now)
	ctx := context.Background()
	for k := 1; k <= 120; k++ {
		clk.Advance(time.Second)
		write(t, a, attempt(sonnetID, clk.Now(), 10*k, 0, 0), attempt("titan", clk.Now(), 100, 0, 0))
		a.step(ctx)
	}
	s := a.History()[119]
	if s.TokensPerMinute[sonnetID] != 54_300 {
		t.Fatalf("sonnet tokensPerMinute = %v, want 54300", s.TokensPerMinute)
	}
	want := []Projection{{"haiku", nil}, {"sonnet", ptr(76.2)}, {"titan", nil}}
	if len(s.Projections) != len(want) {
		t.Fatalf("projections = %+v, want %d", s.Projections, len(want))
	}
	for i, p := range s.Projections {
		if p.Model != want[i].Model || (p.SecondsToExhaustion == nil) != (want[i].SecondsToExhaustion == nil) ||
			(p.SecondsToExhaustion != nil && *p.SecondsToExhaustion != *want[i].SecondsToExhaustion) {
			t.Errorf("projection %d = %s %v, want %s %v", i, p.Model, deref(p.SecondsToExhaustion), want[i].Model, deref(want[i].SecondsToExhaustion))
		}
	}
	// While the window was filling, the steady titan traffic rose by
	// itself; those points are left out, so it was never projected.
	for i, h := range a.History() {
		for _, p := range h.Projections {
			if p.Model == "titan" && p.SecondsToExhaustion != nil {
				t.Fatalf("snapshot %d projects titan at %v s", i, *p.SecondsToExhaustion)
			}
		}
	}
}

func TestProjectionsFalling(t *testing.T) {
	clk := newClock()
	state := func(context.Context) (State, error) {
		return State{Quota: []Quota{{Model: "sonnet", TPMCeiling: 100_000, RPMCeiling: 1000}}}, nil
	}
	a := New(DefaultConfig(), state, clk.Now)
	for k := 1; k <= 180; k++ {
		clk.Advance(time.Second)
		write(t, a, attempt("sonnet", clk.Now(), 10*(200-k), 0, 0))
		a.step(context.Background())
	}
	if p := a.History()[179].Projections; len(p) != 1 || p[0].SecondsToExhaustion != nil {
		t.Fatalf("projections = %+v, want sonnet null", p)
	}
}
