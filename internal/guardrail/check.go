package guardrail

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Checker checks a user's message. The built-in checks (Config.Checker)
// are one; a guardrail service (Amazon Bedrock Guardrails) is another. An
// error says the check could not be made, never that the text is bad: the
// caller decides, by its policy, whether the message goes on unchecked.
type Checker interface {
	Check(ctx context.Context, text string) (Verdict, error)
}

// Checker is c's checks as a Checker: local, never failing.
func (c Config) Checker() Checker { return builtin{c} }

type builtin struct{ c Config }

func (b builtin) Check(_ context.Context, text string) (Verdict, error) { return b.c.Check(text), nil }

// What a remote check does when its service fails or its breaker is open
// (BedrockConfig.OnError).
const (
	// OnErrorOpen lets the message go on unchecked.
	OnErrorOpen = "open"
	// OnErrorClosed refuses the turn.
	OnErrorClosed = "closed"
)

// SourceInput is the only source a remote check reads today: the user's
// message, before any model sees it.
const SourceInput = "input"

// DefaultRemoteTimeout bounds one call to a guardrail service.
const DefaultRemoteTimeout = time.Second

// BedrockConfig is a guardrail of Amazon Bedrock Guardrails applied to the
// user's message (ApplyGuardrail), after the built-in checks and before
// any model sees it. An intervention that blocks gets the redirect answer,
// as a built-in block does; one that only masks (sensitive information
// anonymized) replaces the message with the masked text. Off while
// GuardrailID is empty. The connection fields (guardrailId,
// guardrailVersion, region, endpoint) and source take effect at start;
// the others on reload too.
type BedrockConfig struct {
	// GuardrailID is the guardrail's identifier or ARN. Empty: no remote
	// check.
	GuardrailID string `yaml:"guardrailId"`
	// GuardrailVersion is the version applied: a number, or "DRAFT".
	// Required with guardrailId.
	GuardrailVersion string `yaml:"guardrailVersion"`
	// Region is the AWS region of the guardrail. Required with
	// guardrailId. Credentials come from the AWS SDK's default chain, as
	// for bedrock model tiers.
	Region string `yaml:"region"`
	// Endpoint overrides Bedrock Runtime's base URL (a VPC endpoint, a
	// test server). Default "": the region's own.
	Endpoint string `yaml:"endpoint"`
	// Timeout bounds one check; past it the check failed (see onError).
	// Default 1s; at most 10s, as it is spent before the first byte.
	Timeout time.Duration `yaml:"timeout"`
	// OnError is what a failed check does (the service erred or timed
	// out, or its breaker, "guardrail", is open): "open" (the default)
	// lets the message go on unchecked by it, the span saying why;
	// "closed" refuses the turn with 503 guardrail_unavailable.
	OnError string `yaml:"onError"`
	// Source is what is checked: "input" (the default), the user's
	// message.
	Source string `yaml:"source"`
	// PricePer1kTextUnits is the price in USD of 1,000 text units (a text
	// unit is up to 1,000 characters) of each policy Bedrock bills,
	// counted on the check's span. Default 0: not priced; set your
	// region's price to see the checks' cost.
	PricePer1kTextUnits float64 `yaml:"pricePer1kTextUnits"`
}

// maxRemoteTimeout bounds BedrockConfig.Timeout.
const maxRemoteTimeout = 10 * time.Second

// Enabled reports whether the remote check is on.
func (b BedrockConfig) Enabled() bool { return b.GuardrailID != "" }

// Filled is b with its defaults.
func (b BedrockConfig) Filled() BedrockConfig {
	if b.Timeout == 0 {
		b.Timeout = DefaultRemoteTimeout
	}
	if b.OnError == "" {
		b.OnError = OnErrorOpen
	}
	if b.Source == "" {
		b.Source = SourceInput
	}
	return b
}

// Validate names each field that is wrong, under "bedrock.".
func (b BedrockConfig) Validate() error {
	if !b.Enabled() && b == (BedrockConfig{}) {
		return nil
	}
	var errs []error
	bad := func(field, problem string) { errs = append(errs, fmt.Errorf("bedrock.%s: %s", field, problem)) }
	if !b.Enabled() {
		bad("guardrailId", "must be set when any other bedrock field is")
	}
	if b.GuardrailVersion == "" {
		bad("guardrailVersion", `must be set: a version number, or "DRAFT"`)
	}
	if b.Region == "" {
		bad("region", "must be set: the AWS region of the guardrail")
	}
	if b.Timeout < 0 || b.Timeout > maxRemoteTimeout {
		bad("timeout", fmt.Sprintf("must be between 0 (the default, %s) and %s", DefaultRemoteTimeout, maxRemoteTimeout))
	}
	if b.OnError != "" && b.OnError != OnErrorOpen && b.OnError != OnErrorClosed {
		bad("onError", fmt.Sprintf("%q is not open or closed", b.OnError))
	}
	if b.Source != "" && b.Source != SourceInput {
		bad("source", fmt.Sprintf("%q is not input (the user's message, the only source checked)", b.Source))
	}
	if b.PricePer1kTextUnits < 0 || math.IsNaN(b.PricePer1kTextUnits) {
		bad("pricePer1kTextUnits", "must be 0 or more")
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// Remote is what a guardrail service said of a text, for the check's span.
type Remote struct {
	// Check names the check ("bedrock").
	Check string
	// Action is the service's own word for what it did
	// (GUARDRAIL_INTERVENED, NONE).
	Action string
	// TextUnits are the text units billed, over the policies billed.
	TextUnits int
	// CostUSD is what the check cost, at the configured price.
	CostUSD float64
}

// KindMasked is the kind of a remote check's finding it masked, and
// KindRemote prefixes the policy of a finding it blocked on
// ("remote:topic", "remote:content").
const (
	KindMasked = "masked"
	KindRemote = "remote:"
)

// RemoteKind is the kind of a remote check's finding under policy.
func RemoteKind(policy string) string { return KindRemote + strings.ToLower(policy) }
