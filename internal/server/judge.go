package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fmgate/fmgate/internal/artifacts"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/judge"
)

// judgeFeature is the feature judge turns are charged to, so the cost of
// judging is its own line in the cost view.
const judgeFeature = "eval_judge"

// judgeUser is the caller judge turns run as (rate limits and budgets
// apply to it like to anyone).
const judgeUser = "fmgate-eval-judge"

// judger grades a sample of completed turns: each sampled turn waits in a
// bounded queue for one of a few workers, which runs a P2 turn through the
// same pipeline with the judge's prompt and stores the verdict as the
// judged turn's eval_score.
type judger struct {
	cfg     judge.Config
	prompt  string
	version string
	s       *Server
	queue   chan judgeJob

	rndMu sync.Mutex
	rnd   *rand.Rand

	sampled, skipped, judged, failed atomic.Int64
	lastErr                          atomic.Value // string: why the last judgement failed
}

type judgeJob struct {
	trace, requestID, locale string
	c                        judge.Case
}

// judge builds the judger; its workers start with the server and stop on
// Close.
func (s *Server) judge(cfg config.Config) (*judger, error) {
	c := cfg.Judge
	text := judge.Rubric
	switch {
	case c.Prompt.File != "":
		b, err := os.ReadFile(c.Prompt.File)
		if err != nil {
			return nil, fmt.Errorf("judge.prompt.file: %w", err)
		}
		text = string(b)
	case c.Prompt.System != "":
		text = c.Prompt.System
	}
	j := &judger{cfg: c, prompt: text, version: artifacts.Version(c.Prompt.Name, text), s: s,
		queue: make(chan judgeJob, c.Queue), rnd: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range c.Workers {
		wg.Go(func() { j.work(ctx) })
	}
	s.closers = append(s.closers, func() { cancel(); wg.Wait() })
	return j, nil
}

// tier is the model tier that grades: judge.tier, else the last tier in
// force.
func (j *judger) tier() string {
	if j.cfg.Tier != "" {
		return j.cfg.Tier
	}
	models := j.s.config().Models
	return models[len(models)-1].Name
}

// Consider implements gateway.Judge.
func (j *judger) Consider(ctx context.Context, t *gateway.Turn, res *gateway.Result) {
	if t.Feature == judgeFeature || res == nil || res.TraceID == "" || j.cfg.SampleRate == 0 {
		return
	}
	saturation := 0.0
	if q, err := j.s.Quota.Saturation(ctx, j.tier()); err == nil {
		saturation = q.Saturation
	}
	j.rndMu.Lock()
	take := j.cfg.Sample(j.rnd, saturation)
	j.rndMu.Unlock()
	if !take {
		return
	}
	j.sampled.Add(1)
	source := "model"
	if res.Degraded && !isModel(j.s.config(), res.Tier) {
		source = res.Tier
	}
	job := judgeJob{trace: res.TraceID, requestID: t.RequestID, locale: t.Locale,
		c: judge.Case{Question: t.Message, Answer: res.Text, Source: source}}
	select {
	case j.queue <- job:
	default:
		j.skipped.Add(1) // judging never holds a turn back
	}
}

func isModel(cfg *config.Config, tier string) bool {
	_, ok := cfg.Model(tier)
	return ok
}

func (j *judger) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case job := <-j.queue:
			if err := j.grade(ctx, job); err != nil {
				j.failed.Add(1)
				j.lastErr.Store(err.Error())
				j.s.log.Info("eval judge gave no verdict", "err", err)
			} else {
				j.judged.Add(1)
			}
		}
	}
}

// grade runs one judge turn and stores its verdict on the judged turn.
func (j *judger) grade(ctx context.Context, job judgeJob) error {
	ctx, cancel := context.WithTimeout(ctx, j.cfg.Timeout)
	defer cancel()
	scores, err := j.score(ctx, job)
	if err != nil {
		return err
	}
	if j.s.store == nil {
		return nil
	}
	// The judged turn's events may still be on their way to the store.
	for wait := 200 * time.Millisecond; ; wait *= 2 {
		err := j.s.store.SetEvalScore(ctx, job.trace, scores.Overall())
		if !errors.Is(err, eventstore.ErrNotFound) || wait > 5*time.Second {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// score runs one judge turn through the pipeline and reads its verdict.
func (j *judger) score(ctx context.Context, job judgeJob) (judge.Scores, error) {
	turn := func() *gateway.Turn {
		return &gateway.Turn{
			// The judged turn's request id: its workflow_id links the judge's
			// spans to the turn they grade.
			RequestID:     job.requestID,
			SessionID:     "eval-judge",
			Message:       judge.Message(job.c),
			Locale:        job.locale,
			Route:         "chat",
			Surface:       "judge",
			Feature:       judgeFeature,
			UserID:        judgeUser,
			Priority:      gateway.P2,
			Stateless:     true,
			StartTier:     j.tier(),
			System:        j.prompt,
			PromptVersion: j.version,
		}
	}
	out := &textOutput{}
	res, err := j.s.Gateway.Run(ctx, turn(), out)
	for err != nil {
		// The judge's turns count against its user's rate limits like any
		// other: past one, wait as told and try again, within the timeout.
		e, ok := errors.AsType[*gateway.Error](err)
		if !ok || e.Code != gateway.CodeRateLimited || e.RetryAfter <= 0 {
			return judge.Scores{}, fmt.Errorf("judge turn: %w", err)
		}
		select {
		case <-ctx.Done():
			return judge.Scores{}, fmt.Errorf("judge turn: %w (rate limited until the judge's timeout)", err)
		case <-time.After(e.RetryAfter):
		}
		out = &textOutput{}
		res, err = j.s.Gateway.Run(ctx, turn(), out)
	}
	if !isModel(j.s.config(), res.Tier) {
		return judge.Scores{}, fmt.Errorf("judge turn answered by %s, not a model", res.Tier)
	}
	return judge.Parse(out.b.String())
}

// JudgeStats counts the judge's work since start.
type JudgeStats struct {
	Sampled int64 `json:"sampled"`
	Skipped int64 `json:"skipped"` // sampled while the queue was full
	Judged  int64 `json:"judged"`
	Failed  int64 `json:"failed"`
	// LastFailure says why the latest failed judgement gave no verdict.
	LastFailure string `json:"lastFailure,omitempty"`
}

func (j *judger) stats() JudgeStats {
	last, _ := j.lastErr.Load().(string)
	return JudgeStats{Sampled: j.sampled.Load(), Skipped: j.skipped.Load(), Judged: j.judged.Load(), Failed: j.failed.Load(), LastFailure: last}
}

// textOutput collects a turn's answer for a caller inside the gateway.
type textOutput struct{ b strings.Builder }

func (o *textOutput) Write(text string) error      { o.b.WriteString(text); return nil }
func (o *textOutput) Started() bool                { return false }
func (o *textOutput) Discard()                     { o.b.Reset() }
func (o *textOutput) Finish(*gateway.Result) error { return nil }
func (o *textOutput) Fail(*gateway.Error) error    { return nil }
func (o *textOutput) WholeAnswer() bool            { return true }
