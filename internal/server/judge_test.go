package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/ratelimit"
)

// Under a scripted mix the quality view fills by itself: every completed
// turn is judged (sample rate 1 here) by a P2 turn through the pipeline, the
// verdicts land as eval scores by prompt and model version, and judging is
// its own feature in the cost view.
func TestJudgeFillsTheQualityView(t *testing.T) {
	cfg := quickConfig()
	cfg.Judge.SampleRate = 1
	cfg.Judge.Workers = 2
	// The test asserts outcomes, not timing: deadlines a loaded machine
	// under the race detector does not miss, or a judge turn falls to a
	// tier that gives no verdict.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	sc := newScenario(t, cfg)

	questions := []struct{ q, locale string }{
		{"Which manga should I read next?", "en"},
		{"おすすめの少年漫画は？", "ja"},
		{"How long does shipping take?", "en"},
		{"新刊はいつ入荷しますか？", "ja"},
	}
	const turns = 16
	for i := range turns {
		q := questions[i%len(questions)]
		if a := sc.chat(fmt.Sprintf("judged-%d", i), q.q, q.locale); a.Status != http.StatusOK {
			t.Fatalf("turn %d: %d", i, a.Status)
		}
	}
	var stats struct {
		Stats JudgeStats `json:"stats"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		getJSON(t, sc.srv, "/admin/judge", &stats)
		if stats.Stats.Judged+stats.Stats.Failed+stats.Stats.Skipped >= turns {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("judge stats after 30 s: %+v", stats.Stats)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s := stats.Stats; s.Sampled != turns || s.Judged != turns {
		t.Fatalf("judge stats %+v: want every one of %d chat turns sampled and judged (and no judge turn judged)", s, turns)
	}

	var byPrompt eventstore.EvalReport
	getJSON(t, sc.srv, "/admin/eval?by=prompt", &byPrompt)
	if byPrompt.Total.Turns != turns || byPrompt.Total.AvgScore < 0.7 || byPrompt.Total.AvgScore > 1 {
		t.Fatalf("eval by prompt: %+v; want %d scored turns with sensible scores", byPrompt.Total, turns)
	}
	var byModel eventstore.EvalReport
	getJSON(t, sc.srv, "/admin/eval?by=model", &byModel)
	if len(byModel.Rows) == 0 {
		t.Fatalf("eval by model has no rows: %+v", byModel)
	}
	var cost eventstore.CostReport
	getJSON(t, sc.srv, "/admin/cost?by=feature", &cost)
	found := false
	for _, r := range cost.Rows {
		// A judge turn its user's rate limit refused is a turn of its own
		// (with no cost), before the one that judged.
		if r.Key == judgeFeature {
			found = r.Turns >= turns && r.Turns-turns <= r.Errors && r.CostUSD > 0
		}
	}
	if !found {
		t.Fatalf("cost by feature %+v: want %s with %d turns, or more refused ones, and a cost", cost.Rows, judgeFeature, turns)
	}
}

// TestJudgeWaitsOutItsRateLimit: the judge's own turns count against its
// user's rate limit; one refused waits as told and is judged, not lost.
func TestJudgeWaitsOutItsRateLimit(t *testing.T) {
	cfg := quickConfig()
	cfg.Judge.SampleRate = 1
	cfg.Judge.Workers = 2
	cfg.RateLimit.User.PerSecond = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 2, Per: time.Second, Burst: 2}}
	sc := newScenario(t, cfg)
	const turns = 5
	for i := range turns {
		if a := sc.chat(fmt.Sprintf("limited-judge-%d", i), "Which manga should I read next?", "en"); a.Status != http.StatusOK {
			t.Fatalf("turn %d: %d", i, a.Status)
		}
	}
	var stats struct {
		Stats JudgeStats `json:"stats"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		getJSON(t, sc.srv, "/admin/judge", &stats)
		if stats.Stats.Judged+stats.Stats.Failed+stats.Stats.Skipped >= turns || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s := stats.Stats; s.Judged != turns {
		t.Fatalf("judge stats %+v: want all %d judged though the judge's user may send 2 turns a second", s, turns)
	}
}
