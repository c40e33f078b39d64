package sinks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fmgate/fmgate/internal/events"
)

// OTLP exports finished events as spans over OTLP/HTTP. Each event becomes a
// read-only span snapshot with the event's own trace id, span id, parent
// and timestamps, handed straight to the SDK's exporter: the spans are
// already finished, so there is nothing for a live SDK tracer to do.
type OTLP struct {
	exp       sdktrace.SpanExporter
	res       *resource.Resource
	scope     instrumentation.Scope
	providers func(tier string) string // gen_ai.provider.name; nil: none
	buf       []sdktrace.ReadOnlySpan
}

// NewOTLP builds the exporter for cfg.Endpoint (host:port or a full URL).
func NewOTLP(ctx context.Context, cfg events.OTLPConfig) (*OTLP, error) {
	var opts []otlptracehttp.Option
	if strings.Contains(cfg.Endpoint, "://") {
		opts = append(opts, otlptracehttp.WithEndpointURL(cfg.Endpoint))
	} else {
		opts = append(opts, otlptracehttp.WithEndpoint(cfg.Endpoint))
		if cfg.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
	}
	// The emitter retries and bounds each Write; the exporter's own
	// minutes-long retry loop would only hold the sink's queue.
	opts = append(opts, otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sinks: otlp: %w", err)
	}
	return &OTLP{
		exp:       exp,
		providers: cfg.Providers,
		res:       resource.NewSchemaless(attribute.String("service.name", "fmgate")),
		scope: instrumentation.Scope{
			Name:    "github.com/fmgate/fmgate/internal/events",
			Version: fmt.Sprintf("schema-v%d", events.SchemaVersion),
		},
	}, nil
}

// Name is "otlp".
func (o *OTLP) Name() string { return "otlp" }

// Write exports the batch as one OTLP request.
func (o *OTLP) Write(ctx context.Context, batch []events.Event) error {
	spans := o.buf[:0]
	for i := range batch {
		s, ok := o.snapshot(&batch[i])
		if ok {
			spans = append(spans, s)
		}
	}
	o.buf = spans
	if len(spans) == 0 {
		return nil
	}
	if err := o.exp.ExportSpans(ctx, spans); err != nil {
		return fmt.Errorf("sinks: otlp: %w", err)
	}
	return nil
}

// snapshot maps one event to a span; events with unparseable ids (which
// the Tracer never produces) are skipped.
func (o *OTLP) snapshot(e *events.Event) (sdktrace.ReadOnlySpan, bool) {
	tid, err1 := trace.TraceIDFromHex(e.TraceID)
	sid, err2 := trace.SpanIDFromHex(e.SpanID)
	if errors.Join(err1, err2) != nil {
		return nil, false
	}
	stub := tracetest.SpanStub{
		Name: e.Name,
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
		}),
		SpanKind:             trace.SpanKindInternal,
		StartTime:            e.TSStart,
		EndTime:              e.TSEnd,
		Attributes:           Attributes(e),
		Resource:             o.res,
		InstrumentationScope: o.scope,
	}
	if e.ParentSpanID != "" {
		if pid, err := trace.SpanIDFromHex(e.ParentSpanID); err == nil {
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled,
			})
		}
	}
	if e.Outcome.Status == events.StatusFailed {
		stub.Status = sdktrace.Status{Code: codes.Error, Description: e.Outcome.ErrorCode}
	} else {
		stub.Status = sdktrace.Status{Code: codes.Ok}
	}
	if e.Artifact.ArtifactKind == events.KindLLMCall && e.Artifact.ModelID != "" {
		// A model call, as OpenTelemetry's GenAI conventions name one, so
		// that LLM observability tools show it as such.
		stub.Name = GenAIOperation + " " + e.Artifact.ModelID
		stub.SpanKind = trace.SpanKindClient
		vendor := ""
		if o.providers != nil {
			vendor = o.providers(e.Node.NodeID)
		}
		stub.Attributes = append(stub.Attributes, GenAIAttributes(e, vendor)...)
		if e.Content != nil {
			stub.Events = []sdktrace.Event{ContentEvent(e)}
		}
	}
	if e.Artifact.ArtifactKind == events.KindToolCall && e.Artifact.ToolID != "" {
		// A tool the gateway ran itself (the catalog search, an image
		// fetch), as the conventions name a tool execution.
		stub.Name = GenAIExecuteTool + " " + e.Artifact.ToolID
		stub.Attributes = append(stub.Attributes, ToolAttributes(e)...)
	}
	return stub.Snapshot(), true
}

// GenAIExecuteTool is gen_ai.operation.name of a tool the gateway runs.
const GenAIExecuteTool = "execute_tool"

// ContentEventName is the GenAI conventions' event of an inference's
// content, which the model attempts of a turn whose content is captured
// carry.
const ContentEventName = "gen_ai.client.inference.operation.details"

// ToolAttributes are the GenAI conventions' attributes of a tool
// execution's span: gen_ai.tool.type is "datastore" for the catalog
// search, which reads the shop's data, and "extension" for the others,
// which run in the gateway.
func ToolAttributes(e *events.Event) []attribute.KeyValue {
	kind := "extension"
	if strings.HasPrefix(e.Artifact.ToolID, "catalog") {
		kind = "datastore"
	}
	kv := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", GenAIExecuteTool),
		attribute.String("gen_ai.tool.name", e.Artifact.ToolID),
		attribute.String("gen_ai.tool.type", kind),
	}
	if e.Outcome.Status == events.StatusFailed && e.Outcome.ErrorCode != "" {
		kv = append(kv, attribute.String("error.type", e.Outcome.ErrorCode))
	}
	return kv
}

// ContentEvent is the span event carrying a model attempt's captured
// content: gen_ai.input.messages and gen_ai.output.messages as the JSON
// the conventions define, at the attempt's end.
func ContentEvent(e *events.Event) sdktrace.Event {
	kv := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", GenAIOperation),
		attribute.String("gen_ai.request.model", e.Artifact.ModelID),
	}
	if b, err := json.Marshal(nonNil(e.Content.Input)); err == nil {
		kv = append(kv, attribute.String("gen_ai.input.messages", string(b)))
	}
	if b, err := json.Marshal(nonNil(e.Content.Output)); err == nil {
		kv = append(kv, attribute.String("gen_ai.output.messages", string(b)))
	}
	return sdktrace.Event{Name: ContentEventName, Time: e.TSEnd, Attributes: kv}
}

func nonNil(m []events.ContentMessage) []events.ContentMessage {
	if m == nil {
		return []events.ContentMessage{}
	}
	return m
}

// FinishReason is a model's stop reason as the GenAI conventions name
// finish reasons: stop, length, tool_call, content_filter; others as they
// are, and "" for none.
func FinishReason(stop string) string {
	switch stop {
	case "end_turn", "stop_sequence", "stop":
		return "stop"
	case "max_tokens", "length", "model_context_window_exceeded":
		return "length"
	case "tool_use", "tool_calls":
		return "tool_call"
	case "content_filter", "content_filtered", "guardrail_intervened", "refusal":
		return "content_filter"
	}
	return stop
}

// GenAIOperation is gen_ai.operation.name of a model attempt.
const GenAIOperation = "chat"

// GenAIAttributes are the OpenTelemetry GenAI semantic conventions'
// attributes of a model attempt's event; provider is gen_ai.provider.name
// (left out when unknown). The input tokens count every input token,
// those read from and written to the prompt cache included, which the
// cache attributes give apart.
func GenAIAttributes(e *events.Event, provider string) []attribute.KeyValue {
	kv := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", GenAIOperation),
		attribute.String("gen_ai.request.model", e.Artifact.ModelID),
		attribute.String("gen_ai.response.model", e.Artifact.ModelID),
		attribute.Int("gen_ai.usage.input_tokens", e.Resource.TokensIn),
		attribute.Int("gen_ai.usage.output_tokens", e.Resource.TokensOut),
	}
	if provider != "" {
		kv = append(kv, attribute.String("gen_ai.provider.name", provider))
	}
	if r := e.Resource; r.TokensCacheRead != 0 || r.TokensCacheWrite != 0 {
		kv = append(kv, attribute.Int("gen_ai.usage.cache_read.input_tokens", r.TokensCacheRead),
			attribute.Int("gen_ai.usage.cache_creation.input_tokens", r.TokensCacheWrite))
	}
	if r := FinishReason(e.Outcome.StopReason); r != "" {
		kv = append(kv, attribute.StringSlice("gen_ai.response.finish_reasons", []string{r}))
	}
	if e.Outcome.Status == events.StatusFailed && e.Outcome.ErrorCode != "" {
		kv = append(kv, attribute.String("error.type", e.Outcome.ErrorCode))
	}
	return kv
}

// Attributes maps the event's schema fields to span attributes named
// "fmgate.<block>.<field>"; empty optional fields are left out.
func Attributes(e *events.Event) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, 0, 24)
	str := func(k, v string) {
		if v != "" {
			kv = append(kv, attribute.String(k, v))
		}
	}
	kv = append(kv, attribute.Int("fmgate.schema_version", e.SchemaVersion))
	str("fmgate.workflow_id", e.WorkflowID)
	str("fmgate.user_id_hash", e.UserIDHash)
	str("fmgate.session_id", e.SessionID)
	kv = append(kv, attribute.Bool("fmgate.must_persist", e.MustPersist))
	str("fmgate.prompt_excerpt", e.PromptExcerpt)
	str("fmgate.node.graph_version", e.Node.GraphVersion)
	str("fmgate.node.node_id", e.Node.NodeID)
	str("fmgate.node.invocation_mode", string(e.Node.InvocationMode))
	str("fmgate.artifact.artifact_kind", string(e.Artifact.ArtifactKind))
	str("fmgate.artifact.model_id", e.Artifact.ModelID)
	str("fmgate.artifact.prompt_version", e.Artifact.PromptVersion)
	str("fmgate.artifact.tool_id", e.Artifact.ToolID)
	str("fmgate.artifact.tool_version", e.Artifact.ToolVersion)
	str("fmgate.artifact.sub_agent_id", e.Artifact.SubAgentID)
	str("fmgate.artifact.sub_agent_version", e.Artifact.SubAgentVersion)
	kv = append(kv,
		attribute.Int("fmgate.resource.tokens_in", e.Resource.TokensIn),
		attribute.Int("fmgate.resource.tokens_out", e.Resource.TokensOut),
		attribute.Float64("fmgate.resource.cost_usd", e.Resource.CostUSD),
	)
	if r := e.Resource; r.TokensCacheRead != 0 || r.TokensCacheWrite != 0 {
		kv = append(kv,
			attribute.Int("fmgate.resource.tokens_cache_read", r.TokensCacheRead),
			attribute.Int("fmgate.resource.tokens_cache_write", r.TokensCacheWrite),
			attribute.Float64("fmgate.resource.cache_saved_usd", r.CacheSavedUSD),
		)
	}
	if r := e.Resource; r.ToolCalls != 0 {
		kv = append(kv,
			attribute.Int("fmgate.resource.tool_calls", r.ToolCalls),
			attribute.StringSlice("fmgate.resource.tool_names", r.ToolNames),
		)
	}
	if r := e.Resource; r.Images != 0 {
		kv = append(kv, attribute.Int("fmgate.resource.images", r.Images))
	}
	if r := e.Resource; r.ImageBytes != 0 {
		kv = append(kv, attribute.Int("fmgate.resource.image_bytes", r.ImageBytes))
	}
	if r := e.Resource; r.ImageTokens != 0 {
		kv = append(kv, attribute.Int("fmgate.resource.image_tokens", r.ImageTokens),
			attribute.Float64("fmgate.resource.image_cost_usd", r.ImageCostUSD))
	}
	str("fmgate.resource.cache_hit", string(e.Resource.CacheHit))
	if len(e.Resource.CapabilityFlagsActive) > 0 {
		kv = append(kv, attribute.StringSlice("fmgate.resource.capability_flags_active", e.Resource.CapabilityFlagsActive))
	}
	str("fmgate.outcome.status", string(e.Outcome.Status))
	str("fmgate.outcome.error_code", e.Outcome.ErrorCode)
	str("fmgate.outcome.fallback_used", e.Outcome.FallbackUsed)
	if e.Outcome.EvalScore != nil {
		kv = append(kv, attribute.Float64("fmgate.outcome.eval_score", *e.Outcome.EvalScore))
	}
	str("fmgate.attribution.feature", e.Attribution.Feature)
	str("fmgate.attribution.surface", e.Attribution.Surface)
	str("fmgate.attribution.locale", e.Attribution.Locale)
	str("fmgate.attribution.user_tier", e.Attribution.UserTier)
	str("fmgate.attribution.priority", e.Attribution.Priority)
	return kv
}

// Close shuts the exporter down.
func (o *OTLP) Close() error {
	if err := o.exp.Shutdown(context.Background()); err != nil {
		return fmt.Errorf("sinks: otlp: %w", err)
	}
	return nil
}
