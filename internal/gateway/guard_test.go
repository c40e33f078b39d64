package gateway

import (
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
)

type wholeOutput struct {
	Output
	thought []provider.ThinkingDelta
}

func (*wholeOutput) WholeAnswer() bool { return true }
func (w *wholeOutput) Think(d provider.ThinkingDelta) error {
	w.thought = append(w.thought, d)
	return nil
}

// The answer check's wrapper hides nothing the invoke step asks of the
// door's output: whether it takes its answer whole, and its reasoning.
func TestGuardedOutputKeepsTheDoorsOutput(t *testing.T) {
	inner := &wholeOutput{}
	o := &guardedOutput{Output: inner}
	if !takesWhole(o) {
		t.Error("a client taking its answer whole no longer does behind the answer check")
	}
	if err := o.Think(provider.ThinkingDelta{}); err != nil || len(inner.thought) != 1 {
		t.Errorf("reasoning did not reach the door's output: %v, %d", err, len(inner.thought))
	}
}
