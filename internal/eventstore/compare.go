package eventstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Dimensions a Compare can split turns by.
var compareDims = map[string]string{ByPrompt: "prompt", ByGraph: "graph", ByModel: "model"}

// CompareSide sums the turns that carried one version. Every rate and mean
// comes with the count it was taken over, so a reader can tell a real
// difference from a handful of turns.
type CompareSide struct {
	Version string `json:"version"`
	// Turns counts the turns (root spans stored) that carried the version
	// and started in range; the rates, cost per turn and latencies are over
	// these.
	Turns int64 `json:"turns"`
	// Errors counts turns whose root span failed (the user got no answer).
	Errors    int64   `json:"errors"`
	ErrorRate float64 `json:"errorRate"` // Errors / Turns
	// Fallbacks counts turns answered by a fallback tier (root span status
	// fallback).
	Fallbacks    int64   `json:"fallbacks"`
	FallbackRate float64 `json:"fallbackRate"` // Fallbacks / Turns
	CostUSD      float64 `json:"costUsd"`      // summed over all spans of the turns
	CostPerTurn  float64 `json:"costPerTurn"`
	// Latencies are turn durations (the root span's), nearest-rank
	// percentiles over Turns.
	LatencyP50MS int64 `json:"latencyP50Ms"`
	LatencyP95MS int64 `json:"latencyP95Ms"`
	LatencyP99MS int64 `json:"latencyP99Ms"`
	// EvalMean is the mean eval score over the EvalCount scored turns.
	EvalMean  float64 `json:"evalMean"`
	EvalCount int64   `json:"evalCount"`
}

// CompareReport answers Compare.
type CompareReport struct {
	Dim  string      `json:"dim"`
	From time.Time   `json:"from"`
	To   time.Time   `json:"to"`
	A    CompareSide `json:"a"`
	B    CompareSide `json:"b"`
	// Verdict is B judged against A by the gateway's canary rules
	// (canary.Judgement), set by the gateway that serves the report; a
	// store leaves it nil and it is then left out.
	Verdict any `json:"verdict,omitempty"`
}

// Compare puts two versions of one artifact dimension (ByPrompt, ByGraph or
// ByModel) side by side over the turns that started in [from, to) (zero
// values: the DefaultRange before now): error and fallback rates, cost per
// turn, turn latency percentiles and mean eval score. A turn belongs to a
// version when any of its spans carries it, so a turn that tried two
// models counts for both.
func (s *Store) Compare(ctx context.Context, dim, a, b string, from, to time.Time) (CompareReport, error) {
	d, ok := compareDims[dim]
	if !ok {
		return CompareReport{}, invalidf("dim must be prompt, graph or model")
	}
	if a == "" || b == "" {
		return CompareReport{}, invalidf("a and b: both versions are required")
	}
	q := Query{From: from, To: to}
	if err := q.normalize(s.now()); err != nil {
		return CompareReport{}, err
	}
	if err := s.sync(ctx); err != nil {
		return CompareReport{}, err
	}
	rep := CompareReport{Dim: dim, From: q.From.UTC(), To: q.To.UTC()}
	s.clamp(&q)
	// The sides read different rows: read them at once.
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() { rep.A, errA = s.compareSide(ctx, d, a, q) })
	rep.B, errB = s.compareSide(ctx, d, b, q)
	wg.Wait()
	if err := errors.Join(errA, errB); err != nil {
		return rep, err
	}
	return rep, nil
}

func (s *Store) compareSide(ctx context.Context, dim, version string, q Query) (CompareSide, error) {
	side := CompareSide{Version: version}
	vid, ok := s.dict.lookupVer(verKey{dim, version})
	if !ok {
		return side, nil
	}
	var (
		durations []int64
		evalSum   float64
		f         turnFigures
	)
	err := s.versionRecords(ctx, vid, q.From.UnixMilli(), q.To.UnixMilli(), func(_, _ int64, rec []byte) error {
		if _, err := decodeFigures(rec, &f); err != nil {
			return err
		}
		if !f.hasRoot {
			return nil
		}
		side.Turns++
		side.CostUSD += f.cost
		durations = append(durations, f.duration)
		switch f.outcome {
		case outcomeFailed:
			side.Errors++
		case outcomeFallback:
			side.Fallbacks++
		}
		if f.hasEval {
			side.EvalCount++
			evalSum += f.eval
		}
		return nil
	})
	if err != nil {
		return side, fmt.Errorf("eventstore: compare: %w", err)
	}
	side.finish(durations, evalSum)
	return side, nil
}

// Finish sets the rates, means and percentiles of a side whose counts
// and cost are summed, from its turns' durations and the sum of its eval
// scores.
func (c *CompareSide) Finish(durations []int64, evalSum float64) { c.finish(durations, evalSum) }

func (c *CompareSide) finish(durations []int64, evalSum float64) {
	if c.Turns > 0 {
		n := float64(c.Turns)
		c.ErrorRate = float64(c.Errors) / n
		c.FallbackRate = float64(c.Fallbacks) / n
		c.CostPerTurn = c.CostUSD / n
	}
	if c.EvalCount > 0 {
		c.EvalMean = evalSum / float64(c.EvalCount)
	}
	slices.Sort(durations)
	c.LatencyP50MS = percentile(durations, 50)
	c.LatencyP95MS = percentile(durations, 95)
	c.LatencyP99MS = percentile(durations, 99)
}

// percentile is the nearest-rank p-th percentile of sorted: the smallest
// value with at least p% of the values at or below it; 0 when empty.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
