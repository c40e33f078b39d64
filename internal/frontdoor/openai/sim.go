package openai

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/vision"
)

// Sim serves POST /v1/chat/completions and POST /v1/embeddings from the
// simulator, as an OpenAI-compatible server would: answers, vectors, pacing
// and usage are s's (a request for vectors that names no dimensions gets
// sim.DefaultEmbedDimensions), and
// its faults come out the way OpenAI fails — 429 with retry-after and
// retry-after-ms, 5xx JSON errors, a content_filter finish, and a stream
// (or a JSON answer) cut mid-answer as a dropped connection. resolve maps
// the request's model to a simulated model's name; now stamps answers (nil:
// time.Now). Any API key is accepted.
func Sim(s *sim.Sim, resolve func(model string) (string, bool), now func() time.Time) http.Handler {
	if now == nil {
		now = time.Now
	}
	h := &simHandler{s: s, resolve: resolve, now: now}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", h.chat)
	mux.HandleFunc("POST /v1/embeddings", h.embed)
	return mux
}

type simHandler struct {
	s       *sim.Sim
	resolve func(string) (string, bool)
	now     func() time.Time
}

func (h *simHandler) chat(w http.ResponseWriter, r *http.Request) {
	c, e := ReadChat(r, 0, vision.Limits{})
	if e != nil {
		e.Write(w)
		return
	}
	// OpenAI refuses a tool call id longer than it makes.
	for i, m := range c.Messages() {
		for _, call := range m.ToolCalls {
			if len(call.ID) > provider.MaxToolIDOpenAI {
				invalidRequest("messages", "Invalid 'messages[%d].tool_calls[0].id': string too long. Expected a string with maximum length %d.", i, provider.MaxToolIDOpenAI).Write(w)
				return
			}
		}
	}
	name, ok := h.resolve(c.Model)
	if !ok {
		modelNotFound(c.Model).Write(w)
		return
	}
	req := &provider.Request{
		Model: name, System: c.System, Messages: c.Messages(), MaxTokens: c.MaxTokens,
		Temperature: c.Temperature, TopP: c.TopP, Seed: c.Seed, StopSequences: c.Stop, Tools: c.Tools, ToolChoice: c.ToolChoice, Format: c.Format,
	}
	meta := chunkMeta{id: "chatcmpl-" + newID(), created: h.now().Unix(), includeUsage: c.IncludeUsage}
	if st, ok := h.s.Settings(name); ok && st.ModelID != "" {
		meta.model = st.ModelID
	} else {
		meta.model = name
	}
	if !c.Stream {
		h.complete(w, r, req, meta)
		return
	}
	ev := newEvents(w, meta)
	resp, err := h.s.Stream(sim.WithAutomaticCaching(r.Context()), req, ev.delta)
	usage := UsageOf(resp.Usage, 0)
	switch {
	case err == nil:
		if len(resp.ToolCalls) > 0 && ev.toolCalls(resp.ToolCalls) != nil {
			return
		}
		ev.stopSequence = resp.StopSequence
		_ = ev.finish(FinishReason(resp.StopReason), usage)
	case provider.KindOf(err) == provider.KindGuardrail:
		_ = ev.finish(FinishContentFilter, usage)
	case r.Context().Err() != nil:
		// The client went away; nothing to tell it.
	case ev.wrote:
		panic(http.ErrAbortHandler) // the connection drops mid-answer
	default:
		simError(err, c.Model).Write(w)
	}
}

func (h *simHandler) complete(w http.ResponseWriter, r *http.Request, req *provider.Request, meta chunkMeta) {
	resp, err := h.s.Complete(sim.WithAutomaticCaching(r.Context()), req)
	finish := FinishReason(resp.StopReason)
	switch {
	case err == nil:
	case provider.KindOf(err) == provider.KindGuardrail:
		finish = FinishContentFilter
	case r.Context().Err() != nil:
		return
	case resp.Usage.OutputTokens > 0:
		panic(http.ErrAbortHandler) // cut mid-answer: the connection drops
	default:
		simError(err, meta.model).Write(w)
		return
	}
	body := Completion{
		ID: meta.id, Created: meta.created, Model: meta.model, Text: resp.Text, ToolCalls: resp.ToolCalls, FinishReason: finish, StopSequence: resp.StopSequence,
		Usage: UsageOf(resp.Usage, 0),
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(body.AppendJSON(make([]byte, 0, 512+len(resp.Text))), '\n'))
}

// embed answers an embeddings request with the simulated model's vectors,
// which are the same for the same text as in process.
func (h *simHandler) embed(w http.ResponseWriter, r *http.Request) {
	q, e := ReadEmbeddings(r, 0)
	if e != nil {
		e.Write(w)
		return
	}
	name, ok := h.resolve(q.Model)
	if !ok {
		modelNotFound(q.Model).Write(w)
		return
	}
	req := &provider.EmbedRequest{Model: name, Inputs: q.Inputs, Dimensions: q.Dimensions}
	if req.Dimensions == 0 {
		req.Dimensions = sim.DefaultEmbedDimensions
	}
	resp, err := h.s.Embed(r.Context(), req)
	if err != nil {
		simError(err, q.Model).Write(w)
		return
	}
	res := &gateway.EmbedResult{Vectors: resp.Vectors, ModelID: resp.ModelID, InputTokens: resp.InputTokens}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(AppendEmbeddings(nil, res, q.Encoding), '\n'))
}

// simError is the response OpenAI gives for a failure of this kind.
func simError(err error, model string) *Error {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return &Error{Status: http.StatusInternalServerError, Type: "server_error", Message: "The server had an error while processing your request."}
	}
	switch pe.Kind {
	case provider.KindThrottled:
		return &Error{Status: http.StatusTooManyRequests, Type: "requests", Code: "rate_limit_exceeded", RetryAfter: pe.RetryAfter,
			Message: fmt.Sprintf("Rate limit reached for %s. Please try again in %s.", model, max(pe.RetryAfter, time.Millisecond))}
	case provider.KindNotReady:
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "model_not_ready",
			Message: "The model is loading. Please try again shortly."}
	case provider.KindTimeout:
		return &Error{Status: http.StatusGatewayTimeout, Type: "timeout", Code: "timeout", Message: "Request timed out."}
	case provider.KindNotFound:
		return modelNotFound(model)
	case provider.KindValidation:
		return invalidRequest("", "%v", pe.Err)
	case provider.KindUnavailable:
		return &Error{Status: http.StatusServiceUnavailable, Type: "server_error", Message: "The server is overloaded or not ready yet."}
	}
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Message: "The server had an error while processing your request."}
}

func modelNotFound(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", truncate(model, 100))}
}
