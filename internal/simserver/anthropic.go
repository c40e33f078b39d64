package simserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/fmgate/fmgate/internal/frontdoor/anthropic"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/vision"
)

// anthropicMessages serves the Anthropic Messages API (POST /v1/messages)
// from s, JSON or the SSE event sequence. Any API key is accepted. The
// simulator's faults come out as Anthropic sends them:
//
//   - throttled, or over the TPM ceiling: 429 rate_limit_error with
//     retry-after;
//   - unavailable: 529 overloaded_error, or in a stream the 200 event
//     sequence ending in an `error` event of that type (as Anthropic does
//     when it is overloaded after accepting a stream);
//   - outage: 500 api_error; not_ready: 503 api_error (Anthropic has no
//     "model not ready" of its own); timeout: 504 timeout_error;
//   - guardrail: a 200 answer with stop_reason "refusal" and no text;
//   - cutAfterTokens: the connection dropped mid-answer.
func anthropicMessages(s *sim.Sim) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, werr := anthropic.DecodeRequest(r.Body, 0, vision.Limits{})
		if werr != nil {
			anthropic.WriteError(w, werr)
			return
		}
		// Anthropic refuses a tool id it would not have made.
		if err := provider.CheckToolIDs(req.Messages, provider.MaxToolIDClaude); err != nil {
			anthropic.WriteError(w, &anthropic.Error{Status: http.StatusBadRequest, Type: anthropic.ErrInvalidRequest, Message: err.Error()})
			return
		}
		name, ok := resolveAnthropic(w, s, req.Model)
		if !ok {
			return
		}
		a := anthropicAnswer{s: s, name: name, req: req, preq: req.ProviderRequest(name), id: anthropicMessageID()}
		if req.Stream {
			a.stream(w, r)
			return
		}
		a.json(w, r)
	}
}

// resolveAnthropic is the simulated model model names, or, answered with
// Anthropic's 404, false.
func resolveAnthropic(w http.ResponseWriter, s *sim.Sim, model string) (string, bool) {
	name, ok := Resolve(s, model)
	if !ok {
		anthropic.WriteError(w, &anthropic.Error{Status: http.StatusNotFound, Type: anthropic.ErrNotFound, Message: "model: " + model})
	}
	return name, ok
}

// anthropicCountTokens serves count_tokens (POST /v1/messages/count_tokens)
// from s: the input tokens the simulator would bill the request. A model in
// an outage answers 500 api_error, as its Messages route does.
func anthropicCountTokens(s *sim.Sim) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, werr := anthropic.DecodeCountTokens(r.Body, 0, vision.Limits{})
		if werr != nil {
			anthropic.WriteError(w, werr)
			return
		}
		name, ok := resolveAnthropic(w, s, req.Model)
		if !ok {
			return
		}
		n, err := s.CountTokens(r.Context(), req.ProviderRequest(name))
		if err != nil {
			anthropic.WriteError(w, &anthropic.Error{Status: http.StatusInternalServerError, Type: anthropic.ErrAPI, Message: err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, "{\"input_tokens\":%d}\n", n)
	}
}

type anthropicAnswer struct {
	s    *sim.Sim
	name string
	req  *anthropic.Request
	preq *provider.Request
	id   string
}

func (a anthropicAnswer) modelID() string {
	if st, ok := a.s.Settings(a.name); ok && st.ModelID != "" {
		return st.ModelID
	}
	return a.name
}

func (a anthropicAnswer) json(w http.ResponseWriter, r *http.Request) {
	resp, err := a.s.Complete(r.Context(), a.preq)
	msg := anthropic.NewMessage(a.id, a.modelID())
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		f := a.fault(err)
		switch {
		case f.drop:
			panic(http.ErrAbortHandler)
		case f.refusal:
			msg.StopReason = anthropic.Ptr(anthropic.StopRefusal)
			msg.Usage = anthropic.UsageOf(resp.Usage)
			anthropic.WriteMessage(w, msg)
		default:
			anthropic.WriteError(w, f.err)
		}
		return
	}
	msg.Content = anthropic.Blocks(resp.Thinking, resp.Text, resp.ToolCalls)
	msg.StopReason = anthropic.Ptr(anthropic.StopReason(resp.StopReason))
	if resp.StopSequence != "" {
		msg.StopSequence = anthropic.Ptr(resp.StopSequence)
	}
	msg.Usage = anthropic.UsageOf(resp.Usage)
	anthropic.WriteMessage(w, msg)
}

func (a anthropicAnswer) stream(w http.ResponseWriter, r *http.Request) {
	ev := anthropic.NewEvents(w)
	// message_start carries the input in its classes, as Anthropic sends
	// it, so a client cut off mid-answer knows what the input cost. Its
	// usage is set once the call is admitted: a call refused before then
	// billed nothing.
	start := anthropic.NewMessage(a.id, a.modelID())
	// next is the index of the next content block; the thinking blocks
	// come first, then the text block at textAt.
	next, thinkingAt, textAt := 0, -1, -1
	begin := func() error {
		if ev.Began() {
			return nil
		}
		if err := ev.MessageStart(start); err != nil {
			return err
		}
		return ev.Ping()
	}
	endThinking := func() error {
		if thinkingAt < 0 {
			return nil
		}
		at := thinkingAt
		thinkingAt = -1
		return ev.BlockStop(at)
	}
	open := func() error {
		if textAt >= 0 {
			return nil
		}
		if err := begin(); err != nil {
			return err
		}
		if err := endThinking(); err != nil {
			return err
		}
		textAt = next
		next++
		return ev.BlockStart(textAt)
	}
	block := -1 // the model's number of the thinking block being sent
	think := func(d provider.ThinkingDelta) error {
		if err := begin(); err != nil {
			return err
		}
		if d.Redacted != "" {
			if err := endThinking(); err != nil {
				return err
			}
			next++
			return ev.RedactedThinking(next-1, d.Redacted)
		}
		if thinkingAt < 0 || d.Block != block {
			if err := endThinking(); err != nil {
				return err
			}
			block, thinkingAt = d.Block, next
			next++
			if err := ev.ThinkingStart(thinkingAt); err != nil {
				return err
			}
		}
		if d.Text != "" {
			return ev.ThinkingDelta(thinkingAt, d.Text)
		}
		return ev.SignatureDelta(thinkingAt, d.Signature)
	}
	admitted := func(u provider.Usage) { start.Usage = anthropic.UsageOf(u) }
	resp, err := a.s.StreamAdmitted(provider.WithThinking(r.Context(), think), a.preq, admitted, func(text string) error {
		if err := open(); err != nil {
			return err
		}
		return ev.TextDelta(textAt, text)
	})
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		f := a.fault(err)
		switch {
		case f.drop:
			panic(http.ErrAbortHandler)
		case f.refusal:
			_ = ev.MessageStart(start)
			_ = ev.MessageDelta(anthropic.StopRefusal, nil, anthropic.UsageOf(resp.Usage))
			_ = ev.MessageStop()
		case !ev.Began() && f.err.Type != anthropic.ErrOverloaded:
			anthropic.WriteError(w, f.err)
		default:
			if !ev.Began() {
				_ = ev.MessageStart(start)
			}
			_ = ev.Error(f.err.Type, f.err.Message)
		}
		return
	}
	if resp.Text != "" || len(resp.ToolCalls) == 0 {
		if err := open(); err != nil {
			return
		}
		_ = ev.BlockStop(textAt)
	} else if err := begin(); err != nil || endThinking() != nil {
		return
	}
	for i, c := range resp.ToolCalls {
		if ev.ToolUse(next+i, c) != nil {
			return
		}
	}
	var seq *string
	if resp.StopSequence != "" {
		seq = anthropic.Ptr(resp.StopSequence)
	}
	_ = ev.MessageDelta(anthropic.StopReason(resp.StopReason), seq, anthropic.UsageOf(resp.Usage))
	_ = ev.MessageStop()
}

// anthropicFault is how one simulator failure goes on Anthropic's wire.
type anthropicFault struct {
	err     *anthropic.Error
	drop    bool // drop the connection
	refusal bool // a 200 answer stopped for refusal
}

func (a anthropicAnswer) fault(err error) anthropicFault {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return anthropicFault{err: &anthropic.Error{Status: http.StatusInternalServerError, Type: anthropic.ErrAPI, Message: err.Error()}}
	}
	msg := pe.Err.Error()
	switch pe.Kind {
	case provider.KindThrottled:
		return anthropicFault{err: &anthropic.Error{Status: http.StatusTooManyRequests, Type: anthropic.ErrRateLimit,
			Message: msg, RetryAfter: pe.RetryAfter}}
	case provider.KindUnavailable:
		if pe.Status == 0 {
			return anthropicFault{drop: true} // cutAfterTokens
		}
		if st, _ := a.s.Settings(a.name); st.Outage {
			return anthropicFault{err: &anthropic.Error{Status: http.StatusInternalServerError, Type: anthropic.ErrAPI, Message: msg}}
		}
		return anthropicFault{err: &anthropic.Error{Status: anthropic.StatusOverloaded, Type: anthropic.ErrOverloaded, Message: msg}}
	case provider.KindNotReady:
		return anthropicFault{err: &anthropic.Error{Status: http.StatusServiceUnavailable, Type: anthropic.ErrAPI, Message: msg}}
	case provider.KindTimeout:
		return anthropicFault{err: &anthropic.Error{Status: http.StatusGatewayTimeout, Type: anthropic.ErrTimeout, Message: msg}}
	case provider.KindGuardrail:
		return anthropicFault{refusal: true}
	case provider.KindNotFound:
		return anthropicFault{err: &anthropic.Error{Status: http.StatusNotFound, Type: anthropic.ErrNotFound, Message: msg}}
	case provider.KindValidation:
		return anthropicFault{err: &anthropic.Error{Status: http.StatusBadRequest, Type: anthropic.ErrInvalidRequest, Message: msg}}
	case provider.KindCanceled:
		return anthropicFault{drop: true}
	}
	return anthropicFault{err: &anthropic.Error{Status: http.StatusInternalServerError, Type: anthropic.ErrAPI, Message: msg}}
}

func anthropicMessageID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "msg_sim_" + hex.EncodeToString(b[:])
}
