package gateway

import (
	"context"
	"slices"
	"strconv"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/payloadlog"
	"github.com/fmgate/fmgate/internal/provider"
)

// PayloadLog keeps the payloads of the turns payloadLog chooses
// (payloadlog.Writer). Keep must not wait: it queues the record or counts
// it as dropped.
type PayloadLog interface {
	Keep(r payloadlog.Record) bool
}

// choosePayload decides, once the caller and the feature are known,
// whether the turn's payload is logged: the key marks it, its feature is
// listed, or the turn falls in the sampled share. The draw is the trace
// id's low bits, so a turn is chosen or not whoever asks.
func (g *Gateway) choosePayload(ctx context.Context, t *Turn) {
	if g.payloads == nil {
		return
	}
	trace := events.TraceID(ctx)
	if trace == "" {
		return // nothing to find the payload by
	}
	t.logPayload = g.cfgOf(t).PayloadLog.Chooses(t.PayloadLog, t.Feature, traceDraw(trace))
}

// traceDraw is a uniform number in [0, 1) from a trace id's last 13 hex
// digits (52 random bits).
func traceDraw(trace string) float64 {
	if len(trace) < 13 {
		return 1
	}
	v, err := strconv.ParseUint(trace[len(trace)-13:], 16, 64)
	if err != nil {
		return 1
	}
	return float64(v) / (1 << 52)
}

// question is what the payload log and content capture keep of the
// user's message: as the model saw it, or for a blocked one its text
// with every finding masked.
func (t *Turn) question() string {
	if t.blockedQuestion != nil {
		return *t.blockedQuestion
	}
	return t.Message
}

// noteGuard records a guardrail verdict on the turn, for its payload.
func (t *Turn) noteGuard(code string) {
	if t.logPayload && !slices.Contains(t.guardNotes, code) {
		t.guardNotes = append(t.guardNotes, code)
	}
}

// keepPayload hands the payload of an answered turn to the payload log,
// without waiting: a record it cannot queue is counted there.
func (g *Gateway) keepPayload(t *Turn, res *Result) {
	if !t.logPayload || res.TraceID == "" {
		return
	}
	_, checks := g.guardsOf(t)
	mask := checks.Mask
	source := "model"
	if !g.isModel(res.Tier) {
		source = res.Tier
	}
	p := payloadlog.Payload{
		Locale: t.Locale, Surface: t.Surface, PromptVersion: t.PromptVersion,
		// Masked again with the turn's checks: a kind the answer check does
		// not read (guardrails.answers off) is masked here all the same.
		Question: mask(t.question()), History: len(t.History), Images: len(t.Images), ToolResults: len(t.ToolResults),
		Context: t.Context, Answer: mask(res.Text),
		Tier: res.Tier, Source: source, ModelID: res.ModelID, Degraded: res.Degraded, StopReason: res.StopReason,
		Guardrail: t.guardNotes,
	}
	for _, c := range res.ToolCalls {
		p.ToolCalls = append(p.ToolCalls, payloadlog.ToolCall{Name: c.Name, Input: c.Input})
	}
	g.payloads.Keep(payloadlog.Record{TraceID: res.TraceID, At: t.Received, UserHash: t.UserHash, KeyID: t.KeyID,
		Feature: t.Feature, Payload: p})
}

// captureContent puts an attempt's prompt and answer on its span, for the
// OTLP export, when the turn's payload is logged and
// payloadLog.captureContent is on: the same masked text the payload log
// keeps, and nothing for any other turn.
func (g *Gateway) captureContent(span *events.Span, t *Turn, r *provider.Response, err error) {
	if !t.logPayload || !g.cfgOf(t).PayloadLog.CaptureContent {
		return
	}
	_, checks := g.guardsOf(t)
	mask := checks.Mask
	c := &events.Content{Input: []events.ContentMessage{{Role: "user", Parts: []events.ContentPart{{Type: "text", Content: mask(t.question())}}}}}
	if r != nil {
		out := events.ContentMessage{Role: "assistant", FinishReason: finishReason(r.StopReason, err)}
		if r.Text != "" {
			out.Parts = append(out.Parts, events.ContentPart{Type: "text", Content: mask(r.Text)})
		}
		for _, tc := range r.ToolCalls {
			out.Parts = append(out.Parts, events.ContentPart{Type: "tool_call", ID: tc.ID, Name: tc.Name, Arguments: tc.Input})
		}
		if out.Parts == nil {
			out.Parts = []events.ContentPart{}
		}
		c.Output = []events.ContentMessage{out}
	}
	span.SetContent(c)
}

// finishReason is an output message's finish reason in the GenAI
// conventions' words.
func finishReason(stop string, err error) string {
	switch {
	case provider.KindOf(err) == provider.KindGuardrail:
		return "content_filter"
	case err != nil:
		return "error"
	}
	switch stop {
	case "max_tokens", "length", "model_context_window_exceeded":
		return "length"
	case "tool_use", "tool_calls":
		return "tool_call"
	case "content_filter", "content_filtered", "guardrail_intervened", "refusal":
		return "content_filter"
	}
	return "stop"
}
