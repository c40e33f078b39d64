package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider"
)

// guard is step 3¾: it checks t's message under the config's guardrails,
// redacts what is to be redacted in place, and returns a guardrail error
// for a message to block — the cascade answers it with the redirect
// message. A message with findings gets a span naming the kinds found and
// the action taken, never the text.
func (g *Gateway) guard(ctx context.Context, t *Turn) error {
	cfg := g.cfgOf(t).Guardrails
	if !cfg.Enabled() {
		return nil
	}
	v := cfg.Check(t.Message)
	if len(v.Findings) == 0 {
		return nil // a clean message costs no span
	}
	// A finding is kept whatever the sampling (the span has no text).
	ctx, span := g.tracer.Start(ctx, "guard", events.WithKind(events.KindInternal), events.WithNodeID("guard"), events.WithMustPersist())
	defer span.End()
	kinds := strings.Join(v.Kinds(), ",")
	if v.Blocked {
		// None of it is kept: not in the events, not in the session (the
		// turn leaves its history as it was). Its language was decided.
		t.Message, t.Stateless = "", true
		span.SetErrorCode("guardrail_blocked:" + kinds)
		g.log.LogAttrs(ctx, slogInfo, "message blocked by the guardrails", append(turnAttrs(t, nil), attrString("found", kinds))...)
		return &provider.Error{Kind: provider.KindGuardrail, Model: guardrailsModel, Code: "blocked:" + kinds}
	}
	t.Message = v.Text
	span.SetErrorCode("guardrail_checked:" + kinds)
	return nil
}

// guardrailsModel is the Model of the guardrails' own errors, and
// answerBlocked the Code prefix of an answer they blocked.
const (
	guardrailsModel = "guardrails"
	answerBlocked   = "answer_blocked:"
)

// isAnswerBlocked reports whether err is the guardrails blocking an answer.
func isAnswerBlocked(err error) bool {
	pe, ok := errors.AsType[*provider.Error](err)
	return ok && pe.Model == guardrailsModel && strings.HasPrefix(pe.Code, answerBlocked)
}

// guardedOutput checks a model's answer under the guardrails before the
// client sees it (guardrails.answers): each piece the model streams is
// let through once checked, the findings to redact replaced by their
// placeholders, and a finding to block ends the attempt with a guardrail
// error before any of it is sent. The text let through is what the turn
// keeps (its session, the cache, the events).
type guardedOutput struct {
	Output
	s     *guardrail.Stream
	sent  strings.Builder
	kinds []string
	// redacted is whether anything let through differs from the answer.
	redacted bool
}

// guardAnswer wraps out in a guardedOutput when t's config checks
// answers; nil otherwise, when t's answer is text only.
func (g *Gateway) guardAnswer(t *Turn, out Output) *guardedOutput {
	cfg := g.cfgOf(t).Guardrails
	if !cfg.Answers || !cfg.Enabled() || t.Format.Kind != provider.FormatText {
		return nil
	}
	return &guardedOutput{Output: out, s: cfg.NewStream()}
}

func (o *guardedOutput) Write(text string) error {
	return o.pass(o.s.Write(text))
}

// WholeAnswer is the wrapped output's own (takesWhole).
func (o *guardedOutput) WholeAnswer() bool { return takesWhole(o.Output) }

// Think passes the model's reasoning to an output that shows it; the
// answer checks read only the answer's text.
func (o *guardedOutput) Think(d provider.ThinkingDelta) error {
	if th, ok := o.Output.(Thinker); ok {
		return th.Think(d)
	}
	return nil
}

// flush checks and sends what the stream held back: the answer is whole.
func (o *guardedOutput) flush() error { return o.pass(o.s.Flush()) }

func (o *guardedOutput) pass(text string, v guardrail.Verdict) error {
	for _, k := range v.Kinds() {
		if !slices.Contains(o.kinds, k) {
			o.kinds = append(o.kinds, k)
		}
	}
	if v.Blocked {
		return &provider.Error{Kind: provider.KindGuardrail, Model: guardrailsModel, Code: answerBlocked + strings.Join(v.Kinds(), ",")}
	}
	if text == "" {
		return nil
	}
	o.redacted = o.redacted || hasRedaction(v)
	o.sent.WriteString(text)
	return o.Output.Write(text)
}

// hasRedaction reports whether v replaced a finding.
func hasRedaction(v guardrail.Verdict) bool {
	return slices.ContainsFunc(v.Findings, func(f guardrail.Finding) bool { return f.Action == guardrail.Redact })
}

// answerSpan records what the answer check found on the attempt's span's
// turn: a span only when it found something, naming the kinds and the
// action, never the text.
func (g *Gateway) answerSpan(ctx context.Context, o *guardedOutput, blocked bool) {
	if o == nil || len(o.kinds) == 0 {
		return
	}
	_, span := g.tracer.Start(ctx, "guard_answer", events.WithKind(events.KindInternal), events.WithNodeID("guard"), events.WithMustPersist())
	code := "guardrail_checked:"
	if blocked {
		code = "guardrail_blocked:"
		span.SetStatus(events.StatusFailed)
	}
	span.SetErrorCode(code + strings.Join(o.kinds, ","))
	span.End()
}

// settleGuard ends the answer check of an attempt that returned r and err:
// a whole answer's held-back end is checked and sent, and r's text becomes
// what was let through when the check redacted or blocked any of it.
func (g *Gateway) settleGuard(ctx context.Context, o *guardedOutput, r *provider.Response, err error) error {
	if err == nil {
		err = o.flush()
	}
	blocked := isAnswerBlocked(err)
	if r != nil && (o.redacted || blocked) {
		r.Text = o.sent.String()
	}
	g.answerSpan(ctx, o, blocked)
	return err
}
