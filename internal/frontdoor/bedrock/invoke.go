package bedrock

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/fmgate/fmgate/internal/frontdoor/anthropic"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
)

// invoke serves InvokeModel and, with stream, InvokeModelWithResponseStream
// for Anthropic's Messages body (anthropic_version bedrock-2023-05-31), the
// calls Claude apps make on Bedrock: the whole answer is Anthropic's message
// JSON, a streamed one the AWS event stream whose chunk events carry
// Anthropic's stream events (base64 in "bytes", as Bedrock sends them),
// with amazon-bedrock-invocationMetrics on message_stop. The body is
// decoded and refused as the Messages door does; any other model family's
// body is refused by name.
func (d *door) invoke(w http.ResponseWriter, r *http.Request, t *gateway.Turn, modelID string, body []byte, stream bool, start time.Time) {
	req, werr := anthropic.DecodeInvokeBody(bytes.NewReader(body), d.maxBody, d.images)
	if werr != nil {
		WriteException(w, Validation(werr.Message))
		return
	}
	tier, _ := d.g.ResolveModel(modelID) // an unknown id starts at the first tier, as on every door
	last := len(req.Messages) - 1
	t.RequestID = "msg_bdrk_" + newRequestID()
	t.SessionID = "bedrock:" + t.RequestID
	t.Message, t.MessageCache, t.Images = req.Messages[last].Content, req.Messages[last].Cache, req.Messages[last].Images
	t.History = req.Messages[:last]
	t.ClientSystem, t.ClientSystemCache = req.System, req.SystemCache
	t.StartTier = tier.Name
	t.MaxOutput = req.MaxTokens
	t.Temperature, t.TopP, t.TopK, t.Prefill = req.Temperature, req.TopP, req.TopK, req.Prefill
	t.StopSequences = req.StopSequences
	t.Tools, t.ToolChoice, t.ToolResults = req.Tools, req.ToolChoice, req.Messages[last].ToolResults
	t.Thinking, t.Format = req.Thinking, req.Format
	if stream {
		f := &invokeFramer{start: start, now: d.now, enc: eventstream.NewEncoder()}
		ev := anthropic.NewFramedEvents(w, "application/vnd.amazon.eventstream", f.frame)
		if err := anthropic.Stream(r.Context(), d.g, ev, t); err != nil {
			WriteException(w, exceptionFor(err))
		}
		return
	}
	out := &collector{}
	res, err := d.g.Run(r.Context(), t, out)
	if err != nil {
		WriteException(w, exceptionFor(err))
		return
	}
	h := w.Header()
	setServedHeaders(h, res.Tier, res.Degraded, res.TraceID)
	setInvocationHeaders(h, res.Usage, d.now().Sub(start))
	model := res.ModelID
	if model == "" {
		model = res.Tier
	}
	msg := anthropic.NewMessage(t.RequestID, model)
	msg.Content = anthropic.Blocks(res.Thinking, out.text.String(), res.ToolCalls)
	msg.StopReason = anthropic.Ptr(anthropic.StopReason(res.StopReason))
	if res.StopSequence != "" {
		msg.StopSequence = anthropic.Ptr(res.StopSequence)
	}
	msg.Usage = anthropic.UsageOf(res.Usage)
	anthropic.WriteMessage(w, msg)
}

// setInvocationHeaders are InvokeModel's usage headers.
func setInvocationHeaders(h http.Header, u provider.Usage, latency time.Duration) {
	h.Set("X-Amzn-Bedrock-Input-Token-Count", strconv.Itoa(u.InputTokens))
	h.Set("X-Amzn-Bedrock-Output-Token-Count", strconv.Itoa(u.OutputTokens))
	h.Set("X-Amzn-Bedrock-Invocation-Latency", strconv.FormatInt(latency.Milliseconds(), 10))
	if u.CachedInputTokens > 0 {
		h.Set("X-Amzn-Bedrock-Cache-Read-Input-Token-Count", strconv.Itoa(u.CachedInputTokens))
	}
	if u.CacheWriteTokens > 0 {
		h.Set("X-Amzn-Bedrock-Cache-Write-Input-Token-Count", strconv.Itoa(u.CacheWriteTokens))
	}
}

// invokeFramer frames the Messages stream's events as
// InvokeModelWithResponseStream's: each a chunk event holding the event's
// JSON in base64; message_stop with the invocation's metrics; an error
// event as the event stream's exception.
type invokeFramer struct {
	start time.Time
	now   func() time.Time
	enc   *eventstream.Encoder
	first time.Duration // to the first event
	usage anthropic.Usage
}

// invocationMetrics is amazon-bedrock-invocationMetrics.
type invocationMetrics struct {
	InputTokenCount      int   `json:"inputTokenCount"`
	OutputTokenCount     int   `json:"outputTokenCount"`
	InvocationLatency    int64 `json:"invocationLatency"`
	FirstByteLatency     int64 `json:"firstByteLatency"`
	CacheReadInputCount  int   `json:"cacheReadInputTokenCount,omitempty"`
	CacheWriteInputCount int   `json:"cacheWriteInputTokenCount,omitempty"`
}

func (f *invokeFramer) frame(dst []byte, name string, data []byte) ([]byte, error) {
	if f.first == 0 {
		f.first = max(f.now().Sub(f.start), time.Millisecond)
	}
	switch name {
	case "message_start":
		var ev struct {
			Message struct {
				Usage anthropic.Usage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &ev) == nil {
			f.usage = ev.Message.Usage
		}
	case "message_delta":
		var ev struct {
			Usage anthropic.Usage `json:"usage"`
		}
		if json.Unmarshal(data, &ev) == nil {
			f.usage = ev.Usage
		}
	case "message_stop":
		var err error
		data, err = json.Marshal(struct {
			Type    string            `json:"type"`
			Metrics invocationMetrics `json:"amazon-bedrock-invocationMetrics"`
		}{"message_stop", invocationMetrics{
			InputTokenCount: f.usage.InputTokens, OutputTokenCount: f.usage.OutputTokens,
			InvocationLatency: f.now().Sub(f.start).Milliseconds(), FirstByteLatency: f.first.Milliseconds(),
			CacheReadInputCount: f.usage.CacheReadInputTokens, CacheWriteInputCount: f.usage.CacheCreationInputTokens,
		}})
		if err != nil {
			return dst, err
		}
	case "error":
		return f.exception(dst, data)
	}
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Headers.Set(":event-type", eventstream.StringValue("chunk"))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	payload, err := json.Marshal(struct {
		Bytes string `json:"bytes"`
	}{base64.StdEncoding.EncodeToString(data)})
	if err != nil {
		return dst, err
	}
	m.Payload = payload
	return f.encode(dst, m)
}

// exception is the event stream's exception for the Messages stream's
// error event data: throttling for an overloaded model, else a model
// stream error.
func (f *invokeFramer) exception(dst []byte, data []byte) ([]byte, error) {
	var ev struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &ev)
	exType := "modelStreamErrorException"
	if ev.Error.Type == anthropic.ErrOverloaded || ev.Error.Type == anthropic.ErrRateLimit {
		exType = "throttlingException"
	}
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("exception"))
	m.Headers.Set(":exception-type", eventstream.StringValue(exType))
	m.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	m.Payload, _ = json.Marshal(errorBody{Message: ev.Error.Message})
	return f.encode(dst, m)
}

func (f *invokeFramer) encode(dst []byte, m eventstream.Message) ([]byte, error) {
	b := bytes.NewBuffer(dst)
	if err := f.enc.Encode(b, m); err != nil {
		return dst, err
	}
	return b.Bytes(), nil
}

// HeaderTokenCount says who counted a CountTokens answer: "vendor" (the
// tier's own count) or "estimate" (fmgate's).
const HeaderTokenCount = "X-Fmgate-Token-Count"

// countTokens serves CountTokens: the input tokens of a Converse input, or
// of an InvokeModel input's Messages body, as the tier the path's model
// names would be sent it, fmgate's system prompt included.
func (d *door) countTokens(w http.ResponseWriter, r *http.Request, t *gateway.Turn, modelID string, body []byte) {
	var in struct {
		Input struct {
			Converse    json.RawMessage `json:"converse"`
			InvokeModel *struct {
				Body []byte `json:"body"`
			} `json:"invokeModel"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		WriteException(w, Validation("the body must be {\"input\":{\"converse\":{…}}} or {\"input\":{\"invokeModel\":{\"body\":…}}}: "+jsonProblem(err)))
		return
	}
	var msgs []provider.Message
	switch {
	case len(in.Input.Converse) > 0 && in.Input.InvokeModel == nil:
		req, err := Decode(modelID, in.Input.Converse, d.images)
		if err != nil {
			WriteException(w, Validation(err.Error()))
			return
		}
		msgs, t.ClientSystem, t.ClientSystemCache = req.Messages, req.System, req.SystemCache
		t.Tools, t.ToolChoice, t.ToolResults = req.Tools, req.ToolChoice, req.Messages[len(req.Messages)-1].ToolResults
	case in.Input.InvokeModel != nil && len(in.Input.Converse) == 0:
		req, werr := anthropic.DecodeInvokeBody(bytes.NewReader(in.Input.InvokeModel.Body), d.maxBody, d.images)
		if werr != nil {
			WriteException(w, Validation(werr.Message))
			return
		}
		msgs, t.ClientSystem, t.ClientSystemCache = req.Messages, req.System, req.SystemCache
	default:
		WriteException(w, Validation("input must hold exactly one of converse and invokeModel"))
		return
	}
	tier, _ := d.g.ResolveModel(modelID)
	last := len(msgs) - 1
	t.Message, t.MessageCache, t.History, t.Images = msgs[last].Content, msgs[last].Cache, msgs[:last], msgs[last].Images
	t.StartTier = tier.Name
	if t.RemoteImages() > 0 {
		WriteException(w, Validation(anthropic.RemoteImageCount))
		return
	}
	n, estimated, err := d.g.CountTokens(r.Context(), t)
	if err != nil {
		// A key that may not use the tier is refused as on Converse.
		WriteException(w, exceptionFor(err))
		return
	}
	w.Header().Set(HeaderTokenCount, map[bool]string{true: "estimate", false: "vendor"}[estimated])
	writeJSON(w, http.StatusOK, struct {
		InputTokens int `json:"inputTokens"`
	}{n})
}
