package bedrock

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/vision"
)

// guardrailText is what the simulator answers when its guardrail fault
// fires, as a Bedrock guardrail's blocked-input message.
const guardrailText = "Sorry, this request was blocked by a guardrail."

// Sim serves the simulator s on Bedrock's wire: POST /model/{modelId}/converse
// and /converse-stream, count-tokens of a Converse input, and invoke with
// an embedding model's body (Titan Text Embeddings v2's or Cohere Embed's,
// see simEmbed). resolve maps the path's model id (a simulated model's
// name or its modelId) to the simulator's model name. The simulator's faults
// come out as Bedrock sends them: refusals before the answer as HTTP errors
// with X-Amzn-ErrorType (throttling 429 ThrottlingException with
// Retry-After, outage 503 ServiceUnavailableException, not_ready 429
// ModelNotReadyException, timeout 408 ModelTimeoutException), a guardrail
// as a 200 whose stopReason is guardrail_intervened, a failure mid-stream as
// an event-stream exception, and cutAfterTokens as a dropped connection.
// Tools pass to the simulated model, whose calls come back as the door
// sends them.
// Request signatures are not checked: bind the simulator to loopback.
func Sim(s *sim.Sim, resolve func(modelID string) (string, bool)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Amzn-RequestId", newRequestID())
		modelID, op, err := ParsePath(r.URL.EscapedPath())
		if err != nil {
			WriteException(w, Exception{Status: http.StatusNotFound, Type: ResourceNotFoundException, Message: err.Error()})
			return
		}
		if op != OpConverse && op != OpConverseStream && op != OpCountTokens && op != OpInvoke {
			WriteException(w, Validation("The simulator serves converse, converse-stream, count-tokens (of a Converse input) and invoke (of an embedding model's body) on its Bedrock wire."))
			return
		}
		name, ok := resolve(modelID)
		if !ok {
			WriteException(w, Exception{Status: http.StatusNotFound, Type: ResourceNotFoundException,
				Message: fmt.Sprintf("The simulator has no model %q.", truncate(modelID, 80))})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, DefaultMaxBodyBytes))
		if err != nil {
			WriteException(w, Validation("the request body could not be read, or exceeds 1 MiB"))
			return
		}
		if op == OpInvoke {
			simEmbed(w, r, s, name, body)
			return
		}
		if op == OpCountTokens {
			var in struct {
				Input struct {
					Converse json.RawMessage `json:"converse"`
				} `json:"input"`
			}
			if err := json.Unmarshal(body, &in); err != nil || len(in.Input.Converse) == 0 {
				WriteException(w, Validation("The simulator counts the tokens of a Converse input: {\"input\":{\"converse\":{…}}}."))
				return
			}
			body = in.Input.Converse
		}
		req, err := Decode(modelID, body, vision.Limits{})
		if err != nil {
			WriteException(w, Validation(err.Error()))
			return
		}
		// Bedrock refuses a toolUseId it would not have made.
		if err := provider.CheckToolIDs(req.Messages, provider.MaxToolIDClaude); err != nil {
			WriteException(w, Validation(err.Error()))
			return
		}
		if req.Guardrail != nil {
			WriteException(w, Validation("guardrailConfig is not supported by the simulator: it applies no Bedrock guardrails; remove it from the request"))
			return
		}
		msgs := req.Messages
		if req.Prefill != "" {
			msgs = append(slices.Clip(msgs), provider.Message{Role: provider.RoleAssistant, Content: req.Prefill})
		}
		preq := &provider.Request{Model: name, System: req.System, SystemCache: req.SystemCache, Messages: msgs,
			MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, StopSequences: req.StopSequences,
			Tools: req.Tools, ToolChoice: req.ToolChoice, Thinking: req.Thinking, Format: req.Format}
		if op == OpCountTokens {
			n, err := s.CountTokens(r.Context(), preq)
			if err != nil {
				WriteException(w, simException(err))
				return
			}
			writeJSON(w, http.StatusOK, map[string]int{"inputTokens": n})
			return
		}
		st, _ := s.Settings(name)
		start := time.Now()
		if op == OpConverse {
			simConverse(w, r, s, preq, st, start)
			return
		}
		simStream(w, r, s, preq, st, start)
	})
}

func simConverse(w http.ResponseWriter, r *http.Request, s *sim.Sim, req *provider.Request, st sim.Settings, start time.Time) {
	resp, err := s.Complete(r.Context(), req)
	switch {
	case err == nil:
		WriteConverse(w, resp.Thinking, resp.Text, resp.ToolCalls, resp.StopReason, resp.Usage, time.Since(start), nil)
	case cut(st, resp, err):
		panic(http.ErrAbortHandler) // the connection drops, as a cut upstream would
	case provider.KindOf(err) == provider.KindGuardrail:
		WriteConverse(w, nil, guardrailText, nil, StopGuardrailIntervened, resp.Usage, time.Since(start), nil)
	default:
		WriteException(w, simException(err))
	}
}

func simStream(w http.ResponseWriter, r *http.Request, s *sim.Sim, req *provider.Request, st sim.Settings, start time.Time) {
	ew := NewEventWriter(w)
	resp, err := s.Stream(provider.WithThinking(r.Context(), ew.Reasoning), req, ew.Delta)
	switch {
	case err == nil:
		if len(resp.ToolCalls) > 0 && ew.ToolCalls(resp.ToolCalls) != nil {
			return
		}
		_ = ew.Stop(resp.StopReason, resp.Usage, time.Since(start), nil)
	case cut(st, resp, err):
		_ = ew.Start()
		panic(http.ErrAbortHandler)
	case provider.KindOf(err) == provider.KindGuardrail:
		_ = ew.Stop(StopGuardrailIntervened, resp.Usage, time.Since(start), nil)
	case !ew.Started():
		WriteException(w, simException(err))
	default:
		_ = ew.Exception(StreamExceptionType(provider.KindOf(err)), err.Error())
	}
}

// cut reports whether err is the simulator's dropped connection.
func cut(st sim.Settings, resp *provider.Response, err error) bool {
	return st.CutAfterTokens > 0 && resp != nil && resp.Usage.OutputTokens == st.CutAfterTokens &&
		provider.KindOf(err) == provider.KindUnavailable
}

func simException(err error) Exception {
	var pe *provider.Error
	if !errors.As(err, &pe) {
		return ExceptionForKind(provider.KindUnknown, "internal error", 0)
	}
	msg := "simulated failure"
	if pe.Err != nil {
		msg = pe.Err.Error()
	}
	return ExceptionForKind(pe.Kind, msg, pe.RetryAfter)
}
