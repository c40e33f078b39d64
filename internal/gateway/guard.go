package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider"
)

// guard is step 3¾: it checks t's message under its guardrails (its key's,
// feature's or route's profile, else the top level's), the built-in checks
// and then the remote one (bedrock), redacts what is to be redacted in
// place, and returns a guardrail error for a message to block — the
// cascade answers it with the redirect message. A message with findings
// gets a span naming the profile, the kinds found and the action taken,
// never the text; each remote check gets one, whatever its verdict.
func (g *Gateway) guard(ctx context.Context, t *Turn) error {
	profile, cfg := g.guardsOf(t)
	if err := g.guardBuiltin(ctx, t, profile, cfg); err != nil {
		return err
	}
	return g.guardRemote(ctx, t, profile, cfg)
}

// guardsOf is the guardrails profile t is held to and its checks.
func (g *Gateway) guardsOf(t *Turn) (string, guardrail.Config) {
	return g.cfgOf(t).Guardrails.For(t.KeyGuardrails, t.Feature, t.Route)
}

// guardSpan starts a guardrail check's span. Its artifact is the tool
// "guardrails" at the version of the profile that chose the checks (""
// for the top level's), so a trace says which set a verdict came from.
func (g *Gateway) guardSpan(ctx context.Context, name, profile string, opts ...events.StartOption) (context.Context, *events.Span) {
	ctx, span := g.tracer.Start(ctx, name, append(opts, events.WithKind(events.KindInternal), events.WithNodeID("guard"))...)
	span.SetTool(guardrailsModel, profile)
	return ctx, span
}

func (g *Gateway) guardBuiltin(ctx context.Context, t *Turn, profile string, cfg guardrail.Config) error {
	if !cfg.Enabled() {
		return nil
	}
	v := cfg.Check(t.Message)
	if len(v.Findings) == 0 {
		return nil // a clean message costs no span
	}
	// A finding is kept whatever the sampling (the span has no text).
	ctx, span := g.guardSpan(ctx, "guard", profile, events.WithMustPersist())
	defer span.End()
	return g.act(ctx, span, t, cfg, v)
}

// act applies a verdict with findings to t: a block empties the message
// and returns the guardrail error, a redaction replaces it.
func (g *Gateway) act(ctx context.Context, span *events.Span, t *Turn, cfg guardrail.Config, v guardrail.Verdict) error {
	kinds := strings.Join(v.Kinds(), ",")
	if v.Blocked {
		if t.logPayload {
			// Its payload keeps the text with every finding masked.
			masked := cfg.Mask(t.Message)
			t.blockedQuestion = &masked
		}
		t.noteGuard("guardrail_blocked:" + kinds)
		// None of it is kept: not in the events, not in the session (the
		// turn leaves its history as it was). Its language was decided.
		t.Message, t.Stateless = "", true
		span.SetErrorCode("guardrail_blocked:" + kinds)
		g.log.LogAttrs(ctx, slogInfo, "message blocked by the guardrails", append(turnAttrs(t, nil), attrString("found", kinds))...)
		return &provider.Error{Kind: provider.KindGuardrail, Model: guardrailsModel, Code: "blocked:" + kinds}
	}
	t.Message = v.Text
	t.noteGuard("guardrail_checked:" + kinds)
	span.SetErrorCode("guardrail_checked:" + kinds)
	return nil
}

// ErrGuardrailOpen is for a remote guardrail check (Deps.Guardrail) to
// wrap when its breaker is open.
var ErrGuardrailOpen = errors.New("guardrail breaker open")

// guardRemote checks t's message with the remote guardrail check of cfg
// (its profile's client, Deps.Guardrails), within its timeout. When the
// check fails (an error, the timeout, its breaker open, no client), its
// onError decides: open lets the message go on, the span saying
// the check was skipped and why; closed refuses the turn with
// guardrail_unavailable.
func (g *Gateway) guardRemote(ctx context.Context, t *Turn, profile string, cfg guardrail.Config) error {
	bc := cfg.Bedrock
	if !bc.Enabled() || strings.TrimSpace(t.Message) == "" {
		return nil
	}
	bc = bc.Filled()
	// A passed check's span is sampled as the turn is; a finding or a
	// failure is kept whatever the sampling.
	ctx, span := g.guardSpan(ctx, "guard_bedrock", profile)
	defer span.End()
	var v guardrail.Verdict
	err := errNoGuardrailClient
	if check := g.guardrails[profile]; check != nil {
		cctx, cancel := context.WithTimeout(ctx, bc.Timeout)
		v, err = check.Check(cctx, t.Message)
		cancel()
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err() // the caller left; the check says nothing
		}
		why := skipReason(err)
		span.SetMustPersist()
		if bc.OnError == guardrail.OnErrorClosed {
			span.SetStatus(events.StatusFailed)
			span.SetErrorCode("guardrail_unavailable:" + why)
			return guardrailUnavailable(t, err)
		}
		span.SetErrorCode("guardrail_skipped:" + why)
		g.log.LogAttrs(ctx, slog.LevelWarn, "guardrail check skipped: it failed (guardrails.bedrock.onError open)", append(turnAttrs(t, err), attrString("why", why))...)
		return nil
	}
	if r := v.Remote; r != nil {
		span.SetVendorCode(r.Action)
		span.SetCost(r.CostUSD)
	}
	if len(v.Findings) == 0 {
		span.SetErrorCode("guardrail_passed")
		return nil
	}
	span.SetMustPersist()
	return g.act(ctx, span, t, cfg, v)
}

// errNoGuardrailClient is the failure of a remote check configured with
// no client to make it: a profile given a Bedrock guardrail by a reload
// (its client is built at start).
var errNoGuardrailClient = errors.New("no client for this guardrail: its connection takes effect on a restart")

// skipReason names why a remote check failed, for its span.
func skipReason(err error) string {
	switch {
	case errors.Is(err, ErrGuardrailOpen):
		return "breaker_open"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, errNoGuardrailClient):
		return "no_client"
	}
	return "error"
}

// guardrailUnavailable is the refusal of a turn whose required guardrail
// check could not be made.
func guardrailUnavailable(t *Turn, err error) *Error {
	msg := "Your message could not be checked by the content safety service right now, so it was not answered. Please try again shortly."
	if t.Locale == "ja" {
		msg = "現在、メッセージの安全確認サービスを利用できないため、お答えできませんでした。しばらくしてから、もう一度お試しください。"
	}
	return &Error{Status: http.StatusServiceUnavailable, Code: CodeGuardrailUnavailable, RetryAfter: 5 * time.Second, Message: msg, Err: err}
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
	// profile names the checks' guardrails profile.
	profile string
}

// guardAnswer wraps out in a guardedOutput when t's config checks
// answers; nil otherwise, when t's answer is text only.
func (g *Gateway) guardAnswer(t *Turn, out Output) *guardedOutput {
	profile, cfg := g.guardsOf(t)
	if !cfg.ChecksAnswers() || t.Format.Kind != provider.FormatText {
		return nil
	}
	return &guardedOutput{Output: out, s: cfg.NewStream(), profile: profile}
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
	_, span := g.guardSpan(ctx, "guard_answer", o.profile, events.WithMustPersist())
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
	// The answer's text is what reached the client: a redacted one, or,
	// when the attempt failed, without the tail held back for the check,
	// which never went out (a continuation goes on from what was sent).
	if r != nil && (o.redacted || blocked || err != nil) {
		r.Text = o.sent.String()
	}
	g.answerSpan(ctx, o, blocked)
	return err
}
