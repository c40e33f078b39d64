package server

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/artifacts"
	"github.com/fmgate/fmgate/internal/canary"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
	"github.com/fmgate/fmgate/internal/gateway"
)

// canary returns the prompts the pipeline uses: the ledger's live prompt,
// or, when canary.prompt names a candidate, a controller that gives the
// candidate to its share of sessions, judges it from the event store, and
// (with canary.auto) ramps or rolls it back — each change a "canary" span
// event and, on a failed verdict, an alert.
func (s *Server) canary(cfg config.Config, base *artifacts.Ledger, tracer *events.Tracer, now func() time.Time) (gateway.Prompts, error) {
	c := cfg.Canary
	if c.Prompt.System == "" && c.Prompt.File == "" {
		return base, nil
	}
	text := c.Prompt.System
	if c.Prompt.File != "" {
		b, err := os.ReadFile(c.Prompt.File)
		if err != nil {
			return nil, fmt.Errorf("canary.prompt.file: %w", err)
		}
		text = string(b)
	}
	name := c.Prompt.Name
	if name == "" {
		name = cfg.Prompt.Name
	}
	var compare canary.Compare
	if st := s.store; st != nil {
		compare = func(ctx context.Context, a, b string, from, to time.Time) (eventstore.CompareReport, error) {
			return st.Compare(ctx, eventstore.ByPrompt, a, b, from, to)
		}
	}
	ctl := canary.New(c, base, text, artifacts.Version(name, text), s.hasher, compare, now, s.log)
	ctl.OnStep = func(ctx context.Context, step canary.Step) {
		_, span := tracer.Start(context.WithoutCancel(ctx), "canary", events.WithKind(events.KindInternal))
		_, b := ctl.Versions()
		span.SetPromptVersion(b)
		span.SetAttribution(events.Attribution{Feature: "canary"})
		switch {
		case step.To == 0 && step.Verdict == canary.StatusFail:
			span.SetErrorCode("rolled_back")
		case step.Verdict == canary.StatusPass:
			span.SetErrorCode("ramped")
		default:
			span.SetErrorCode("set")
		}
		span.End()
		if s.Alerts != nil {
			s.Alerts.Announce("FmgateCanaryStep", map[string]string{"canary": b},
				map[string]string{"summary": fmt.Sprintf("Canary %s: %.0f%% → %.0f%% of sessions", b, step.From, step.To),
					"description": step.Reason})
		}
	}
	s.Canary = ctl
	s.canaryVerdict = func() *alerts.Canary {
		v := ctl.Last()
		if v == nil {
			return nil
		}
		a, b := ctl.Versions()
		return &alerts.Canary{Kind: "prompt", A: a, B: b, Failed: v.Status == canary.StatusFail, Reasons: v.Reasons}
	}
	s.admin.Handle("/admin/canary", ctl.Handler())
	if c.Auto.Enabled {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); ctl.Run(ctx) }()
		s.closers = append(s.closers, func() { cancel(); <-done })
	}
	return ctl, nil
}

// judgedViews answers GET /admin/cost/compare with the verdict on B
// against A that a canary of these two versions would get: the same rules,
// minimum of turns and thresholds (canary.Config.Judge) as the running
// canary's, so that the dashboard shows the gateway's verdict rather than
// reaching one of its own.
type judgedViews struct {
	eventstore.Views
	canary canary.Config
}

func (v judgedViews) Compare(ctx context.Context, dim, a, b string, from, to time.Time) (eventstore.CompareReport, error) {
	rep, err := v.Views.Compare(ctx, dim, a, b, from, to)
	if err != nil {
		return rep, err
	}
	rep.Verdict = v.canary.Judge(rep)
	return rep, nil
}
