package canary

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/eventstore"
)

func side(v string, turns int64, p95 int64, errRate, cost, eval float64, evals int64) eventstore.CompareSide {
	return eventstore.CompareSide{Version: v, Turns: turns, LatencyP95MS: p95, ErrorRate: errRate,
		CostPerTurn: cost, EvalMean: eval, EvalCount: evals}
}

func TestDecide(t *testing.T) {
	th := DefaultConfig().Thresholds
	good := side("p@aaa", 200, 1000, 0.01, 0.004, 0.9, 40)
	tests := []struct {
		name   string
		a, b   eventstore.CompareSide
		want   string
		reason string
	}{
		{"same version", good, side("p@aaa", 200, 1000, 0.01, 0.004, 0.9, 40), StatusNotComparable, "same version"},
		{"too few turns on B", good, side("p@bbb", 12, 900, 0, 0.004, 0.9, 4), StatusNotComparable, "too few turns"},
		{"B as good", good, side("p@bbb", 180, 1100, 0.015, 0.0045, 0.88, 30), StatusPass, ""},
		{"B slower", good, side("p@bbb", 180, 1500, 0.01, 0.004, 0.9, 30), StatusFail, "latency p95"},
		{"B fails more", good, side("p@bbb", 180, 1000, 0.08, 0.004, 0.9, 30), StatusFail, "error rate"},
		{"B costs more", good, side("p@bbb", 180, 1000, 0.01, 0.006, 0.9, 30), StatusFail, "cost per turn"},
		{"B answers worse", good, side("p@bbb", 180, 1000, 0.01, 0.004, 0.7, 30), StatusFail, "eval mean"},
		{"eval ignored without enough scores", good, side("p@bbb", 180, 1000, 0.01, 0.004, 0.1, 3), StatusPass, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(eventstore.CompareReport{A: tt.a, B: tt.b}, 50, th)
			if v.Status != tt.want {
				t.Fatalf("status %s, want %s (reasons %v)", v.Status, tt.want, v.Reasons)
			}
			if tt.reason != "" && !strings.Contains(strings.Join(v.Reasons, ";"), tt.reason) {
				t.Fatalf("reasons %v, want one about %q", v.Reasons, tt.reason)
			}
		})
	}
}

type fixedPrompt struct{ text, ver string }

func (f fixedPrompt) Active() (string, string) { return f.text, f.ver }

type hexHash struct{}

// Hash spreads ids like the keyed hash does (FNV-1a, for the test).
func (hexHash) Hash(id string) string {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return fmt.Sprintf("%08x", h)
}

func TestSessionsStickToTheirSideInTheRightShare(t *testing.T) {
	c := New(Config{Percent: 20}, fixedPrompt{"A", "p@aaa"}, "B", "p@bbb", hexHash{}, nil, nil, nil)
	inB := 0
	const n = 20000
	for i := range n {
		_, v1 := c.ForSession("user", fmt.Sprintf("s%d", i))
		_, v2 := c.ForSession("user", fmt.Sprintf("s%d", i))
		if v1 != v2 {
			t.Fatalf("session s%d switched sides: %s then %s", i, v1, v2)
		}
		if v1 == "p@bbb" {
			inB++
		}
	}
	if share := float64(inB) / n; share < 0.18 || share > 0.22 {
		t.Fatalf("%.3f of sessions on B, want 0.20 ± 0.02", share)
	}
}

func TestAutoRampsOnPassAndRollsBackOnFail(t *testing.T) {
	rep := eventstore.CompareReport{A: side("p@aaa", 200, 1000, 0.01, 0.004, 0.9, 40), B: side("p@bbb", 200, 1000, 0.01, 0.004, 0.9, 40)}
	compare := func(_ context.Context, a, b string, from, to time.Time) (eventstore.CompareReport, error) {
		if a != "p@aaa" || b != "p@bbb" || !from.Before(to) {
			return eventstore.CompareReport{}, fmt.Errorf("compare(%s, %s, %v, %v)", a, b, from, to)
		}
		return rep, nil
	}
	cfg := DefaultConfig()
	cfg.Percent = 5
	cfg.Auto.Enabled = true
	var steps []Step
	c := New(cfg, fixedPrompt{"A", "p@aaa"}, "B", "p@bbb", hexHash{}, compare, nil, nil)
	c.OnStep = func(_ context.Context, s Step) { steps = append(steps, s) }
	ctx := context.Background()
	for _, want := range []float64{25, 50, 100, 100} {
		if _, err := c.Evaluate(ctx); err != nil {
			t.Fatal(err)
		}
		if c.Percent() != want {
			t.Fatalf("after a pass: %.0f%%, want %.0f%%", c.Percent(), want)
		}
	}
	c.SetPercent(ctx, 25, "back to a quarter", "")
	rep.B = side("p@bbb", 200, 1000, 0.2, 0.004, 0.9, 40)
	v, err := c.Evaluate(ctx)
	if err != nil || v.Status != StatusFail || c.Percent() != 0 {
		t.Fatalf("after a fail: %s, %.0f%%, %v; want rolled back to 0", v.Status, c.Percent(), err)
	}
	last := steps[len(steps)-1]
	if last.To != 0 || last.Verdict != StatusFail || !strings.Contains(last.Reason, "rolled back") {
		t.Fatalf("last step %+v", last)
	}
	if len(steps) != 5 {
		t.Fatalf("%d steps recorded, want 5 (three ramps, one by hand, one rollback)", len(steps))
	}
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	c.Percent = 10
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "prompt") {
		t.Fatalf("a canary without prompt B: %v", err)
	}
	c.Prompt.System = "Be brief."
	c.Auto.Steps = []float64{50, 25}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "steps") {
		t.Fatalf("falling steps: %v", err)
	}
}
