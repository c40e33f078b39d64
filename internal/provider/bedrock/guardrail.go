package bedrock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/schemas"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go/transport/http/protocol/restjson1"

	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider"
)

// Guardrail checks a user's message with Amazon Bedrock Guardrails'
// ApplyGuardrail: one guardrail, by identifier and version. It implements
// guardrail.Checker. It is safe for concurrent use.
type Guardrail struct {
	client  *bedrockruntime.Client
	id, ver string
	price   float64 // per 1,000 text units
}

var _ guardrail.Checker = (*Guardrail)(nil)

// NewGuardrail builds the check of c (guardrails.bedrock) and resolves its
// credentials from the SDK's default chain, as New does for a model tier,
// failing with ErrNoCredentials when there are none.
func NewGuardrail(ctx context.Context, c guardrail.BedrockConfig, opts Options) (*Guardrail, error) {
	if c.Region == "" {
		return nil, errors.New("bedrock: guardrail: region is required")
	}
	cfg, err := loadConfig(ctx, c.Region, "", opts)
	if err != nil {
		return nil, err
	}
	client := bedrockruntime.NewFromConfig(cfg, func(o *bedrockruntime.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		// The check's breaker and its onError policy own failures.
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 1
		o.HTTPClient = ownBody{o.HTTPClient}
	})
	return &Guardrail{client: client, id: c.GuardrailID, ver: c.GuardrailVersion, price: c.PricePer1kTextUnits}, nil
}

// Check applies the guardrail to text as the user's input (source INPUT).
// An intervention with any policy that blocked is a blocked verdict; one
// that only masked sensitive information (ANONYMIZED) is a verdict whose
// Text is the masked text Bedrock returned, as is an answer without an
// intervention whose output differs from text. Bedrock reports both a
// block and a masking as GUARDRAIL_INTERVENED: the assessments tell which.
func (g *Guardrail) Check(ctx context.Context, text string) (guardrail.Verdict, error) {
	out, err := g.client.ApplyGuardrail(ctx, &bedrockruntime.ApplyGuardrailInput{
		GuardrailIdentifier: aws.String(g.id),
		GuardrailVersion:    aws.String(g.ver),
		Source:              types.GuardrailContentSourceInput,
		Content:             []types.GuardrailContentBlock{&types.GuardrailContentBlockMemberText{Value: types.GuardrailTextBlock{Text: aws.String(text)}}},
	}, traced(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return guardrail.Verdict{}, fmt.Errorf("bedrock: apply guardrail: %w", context.Cause(ctx))
		}
		return guardrail.Verdict{}, fmt.Errorf("bedrock: apply guardrail: %w", err)
	}
	return verdictOf(out, text, g.price), nil
}

// verdictOf reads ApplyGuardrail's answer on text.
func verdictOf(out *bedrockruntime.ApplyGuardrailOutput, text string, price float64) guardrail.Verdict {
	units := billedUnits(out.Usage)
	v := guardrail.Verdict{Text: text, Remote: &guardrail.Remote{Check: "bedrock", Action: string(out.Action),
		TextUnits: units, CostUSD: float64(units) * price / 1000}}
	blocked, masked := assessed(out.Assessments)
	// One block of text went in, so one output comes back when Bedrock
	// rewrote it.
	maskedText, hasOutput := "", len(out.Outputs) == 1 && out.Outputs[0].Text != nil
	if hasOutput {
		maskedText = *out.Outputs[0].Text
	}
	if out.Action == types.GuardrailActionGuardrailIntervened && (len(blocked) > 0 || !masked || !hasOutput) {
		// A block, or an intervention this check cannot read as a masking
		// alone: nothing of the message may go on.
		v.Blocked = true
		if len(blocked) == 0 {
			blocked = []string{"intervened"}
		}
		for _, p := range blocked {
			v.Findings = append(v.Findings, guardrail.Finding{Kind: guardrail.RemoteKind(p), Action: guardrail.Block})
		}
		return v
	}
	if hasOutput && maskedText != text {
		v.Text = maskedText
		v.Findings = append(v.Findings, guardrail.Finding{Kind: guardrail.KindMasked, Action: guardrail.Redact})
	}
	return v
}

// assessed lists the policies that blocked, once each in the order met,
// and reports whether any sensitive-information filter masked.
func assessed(as []types.GuardrailAssessment) (blocked []string, masked bool) {
	add := func(policy string) {
		for _, p := range blocked {
			if p == policy {
				return
			}
		}
		blocked = append(blocked, policy)
	}
	for _, a := range as {
		if p := a.TopicPolicy; p != nil {
			for _, t := range p.Topics {
				if t.Action == types.GuardrailTopicPolicyActionBlocked {
					add("topic")
				}
			}
		}
		if p := a.ContentPolicy; p != nil {
			for _, f := range p.Filters {
				if f.Action == types.GuardrailContentPolicyActionBlocked {
					add("content")
				}
			}
		}
		if p := a.WordPolicy; p != nil {
			for _, w := range p.CustomWords {
				if w.Action == types.GuardrailWordPolicyActionBlocked {
					add("word")
				}
			}
			for _, w := range p.ManagedWordLists {
				if w.Action == types.GuardrailWordPolicyActionBlocked {
					add("word")
				}
			}
		}
		if p := a.SensitiveInformationPolicy; p != nil {
			for _, e := range p.PiiEntities {
				switch e.Action {
				case types.GuardrailSensitiveInformationPolicyActionBlocked:
					add("sensitive_information")
				case types.GuardrailSensitiveInformationPolicyActionAnonymized:
					masked = true
				}
			}
			for _, r := range p.Regexes {
				switch r.Action {
				case types.GuardrailSensitiveInformationPolicyActionBlocked:
					add("sensitive_information")
				case types.GuardrailSensitiveInformationPolicyActionAnonymized:
					masked = true
				}
			}
		}
		if p := a.ContextualGroundingPolicy; p != nil {
			for _, f := range p.Filters {
				if f.Action == types.GuardrailContextualGroundingPolicyActionBlocked {
					add("contextual_grounding")
				}
			}
		}
	}
	return blocked, masked
}

// billedUnits are the text units Bedrock bills of u: the content,
// denied-topic, sensitive-information (less its free units) and
// contextual-grounding policies'; word filters are not billed.
func billedUnits(u *types.GuardrailUsage) int {
	if u == nil {
		return 0
	}
	return int(aws.ToInt32(u.ContentPolicyUnits) + aws.ToInt32(u.TopicPolicyUnits) +
		aws.ToInt32(u.SensitiveInformationPolicyUnits) + aws.ToInt32(u.ContextualGroundingPolicyUnits))
}

// guardrailConfig is req's guardrail as Converse takes it; nil for none.
func guardrailConfig(g *provider.Guardrail) *types.GuardrailConfiguration {
	if g == nil {
		return nil
	}
	return &types.GuardrailConfiguration{GuardrailIdentifier: aws.String(g.ID), GuardrailVersion: aws.String(g.Version),
		Trace: types.GuardrailTrace(g.Trace)}
}

// guardrailStreamConfig is req's guardrail as ConverseStream takes it.
func guardrailStreamConfig(g *provider.Guardrail) *types.GuardrailStreamConfiguration {
	if g == nil {
		return nil
	}
	return &types.GuardrailStreamConfiguration{GuardrailIdentifier: aws.String(g.ID), GuardrailVersion: aws.String(g.Version),
		Trace: types.GuardrailTrace(g.Trace), StreamProcessingMode: types.GuardrailStreamProcessingMode(g.StreamMode)}
}

// traceJSON is a guardrail trace as Bedrock sent it, its JSON written by
// the SDK's own serializer for the shape; nil for none.
func traceJSON(t *types.GuardrailTraceAssessment) json.RawMessage {
	if t == nil {
		return nil
	}
	// The SDK writes a shape's JSON only into an event message: the
	// payload is the shape's JSON.
	var buf bytes.Buffer
	if err := restjson1.New(nil).SerializeEventMessage(schemas.ConverseTrace, schemas.ConverseTrace_guardrail, t, &buf); err != nil {
		return nil
	}
	m, err := eventstream.NewDecoder().Decode(&buf, nil)
	if err != nil || !json.Valid(m.Payload) {
		return nil
	}
	return m.Payload
}
