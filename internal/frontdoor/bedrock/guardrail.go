package bedrock

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

// guardrailVersionRE is a guardrail version as Bedrock takes it: a number
// or DRAFT.
var guardrailVersionRE = regexp.MustCompile(`^(?:[1-9][0-9]{0,7}|DRAFT)$`)

// maxGuardrailIDBytes bounds guardrailConfig.guardrailIdentifier (an id or
// an ARN), as Bedrock does.
const maxGuardrailIDBytes = 2048

// decodeGuardrail reads guardrailConfig: {"guardrailIdentifier",
// "guardrailVersion", "trace": "enabled" | "enabled_full" | "disabled",
// "streamProcessingMode": "sync" | "async"}. The guardrail is Bedrock's
// to apply: the turn goes only to tiers that pass it on (the guardrails
// capability).
func decodeGuardrail(raw json.RawMessage) (*provider.Guardrail, error) {
	var w struct {
		ID         *string `json:"guardrailIdentifier"`
		Version    *string `json:"guardrailVersion"`
		Trace      *string `json:"trace"`
		StreamMode *string `json:"streamProcessingMode"`
	}
	if err := strictUnmarshal(raw, &w); err != nil {
		return nil, invalidf("guardrailConfig must be {\"guardrailIdentifier\": \"…\", \"guardrailVersion\": \"…\"}, optionally with \"trace\" and \"streamProcessingMode\": %s", jsonProblem(err))
	}
	g := &provider.Guardrail{}
	switch {
	case w.ID == nil || *w.ID == "":
		return nil, invalidf("guardrailConfig.guardrailIdentifier is required")
	case len(*w.ID) > maxGuardrailIDBytes || !utf8.ValidString(*w.ID) || strings.ContainsFunc(*w.ID, unicode.IsSpace) ||
		strings.ContainsFunc(*w.ID, unicode.IsControl) || strings.Contains(*w.ID, "/") && !strings.HasPrefix(*w.ID, "arn:"):
		return nil, invalidf("guardrailConfig.guardrailIdentifier must be a guardrail id or ARN of at most %d bytes", maxGuardrailIDBytes)
	case w.Version == nil || !guardrailVersionRE.MatchString(*w.Version):
		return nil, invalidf("guardrailConfig.guardrailVersion must be a version number or \"DRAFT\"")
	}
	g.ID, g.Version = *w.ID, *w.Version
	if w.Trace != nil {
		switch *w.Trace {
		case "enabled", "enabled_full", "disabled":
			g.Trace = *w.Trace
		default:
			return nil, invalidf("guardrailConfig.trace must be enabled, enabled_full or disabled, not %q", truncate(*w.Trace, 20))
		}
	}
	if w.StreamMode != nil {
		switch *w.StreamMode {
		case "sync", "async":
			g.StreamMode = *w.StreamMode
		default:
			return nil, invalidf("guardrailConfig.streamProcessingMode must be sync or async, not %q", truncate(*w.StreamMode, 20))
		}
	}
	return g, nil
}

// guardrailTrace is the trace object of an answer: Bedrock's
// trace.guardrail as Bedrock sent it.
type guardrailTrace struct {
	Guardrail json.RawMessage `json:"guardrail"`
}

func traceOf(raw json.RawMessage) *guardrailTrace {
	if len(raw) == 0 || !json.Valid(raw) {
		return nil
	}
	return &guardrailTrace{Guardrail: raw}
}
