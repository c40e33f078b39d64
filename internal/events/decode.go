package events

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeCanonical decodes b when it is exactly what AppendJSON writes:
// its keys in its order, no whitespace, strings without escapes, numbers
// and times as it formats them. It reports false for anything else, which
// Decode then leaves to encoding/json; what it accepts decodes to the
// Event encoding/json would make (FuzzDecodeCanonical holds it to that).
// Spans cross NATS in this form, and reflection made decoding them cost
// more than storing them.
func decodeCanonical(b []byte, e *Event) bool {
	p := canon{b: b, ok: true}
	p.lit(`{"schema_version":`)
	e.SchemaVersion = int(p.int())
	p.lit(`,"trace_id":`)
	e.TraceID = p.str()
	p.lit(`,"span_id":`)
	e.SpanID = p.str()
	p.lit(`,"parent_span_id":`)
	e.ParentSpanID = p.nullable()
	p.lit(`,"workflow_id":`)
	e.WorkflowID = p.str()
	p.lit(`,"user_id_hash":`)
	e.UserIDHash = p.str()
	p.lit(`,"session_id":`)
	e.SessionID = p.str()
	p.lit(`,"ts_start":`)
	e.TSStart = p.time()
	p.lit(`,"ts_end":`)
	e.TSEnd = p.time()
	p.lit(`,"duration_ms":`)
	e.DurationMS = p.int()
	p.lit(`,"name":`)
	e.Name = p.str()
	p.lit(`,"must_persist":`)
	e.MustPersist = p.bool()
	if p.opt(`,"prompt_excerpt":`) {
		e.PromptExcerpt = p.str()
	}
	e.SampledOut = p.opt(`,"sampled_out":true`)

	p.lit(`,"node":{"graph_version":`)
	e.Node.GraphVersion = p.str()
	p.lit(`,"node_id":`)
	e.Node.NodeID = p.str()
	p.lit(`,"invocation_mode":`)
	e.Node.InvocationMode = InvocationMode(p.str())

	p.lit(`},"artifact":{"artifact_kind":`)
	e.Artifact.ArtifactKind = ArtifactKind(p.str())
	p.lit(`,"model_id":`)
	e.Artifact.ModelID = p.nullable()
	p.lit(`,"prompt_version":`)
	e.Artifact.PromptVersion = p.nullable()
	p.lit(`,"tool_id":`)
	e.Artifact.ToolID = p.nullable()
	p.lit(`,"tool_version":`)
	e.Artifact.ToolVersion = p.nullable()
	p.lit(`,"sub_agent_id":`)
	e.Artifact.SubAgentID = p.nullable()
	p.lit(`,"sub_agent_version":`)
	e.Artifact.SubAgentVersion = p.nullable()

	p.lit(`},"resource":{"tokens_in":`)
	e.Resource.TokensIn = int(p.int())
	p.lit(`,"tokens_out":`)
	e.Resource.TokensOut = int(p.int())
	p.lit(`,"cost_usd":`)
	e.Resource.CostUSD = p.float()
	p.lit(`,"cache_hit":`)
	e.Resource.CacheHit = CacheHit(p.nullable())
	p.lit(`,"capability_flags_active":[`)
	e.Resource.CapabilityFlagsActive = []string{}
	if !p.opt(`]`) {
		for {
			e.Resource.CapabilityFlagsActive = append(e.Resource.CapabilityFlagsActive, p.str())
			if !p.ok || p.opt(`]`) {
				break
			}
			p.lit(`,`)
		}
	}

	p.lit(`},"outcome":{"status":`)
	e.Outcome.Status = Status(p.str())
	p.lit(`,"error_code":`)
	e.Outcome.ErrorCode = p.nullable()
	p.lit(`,"fallback_used":`)
	e.Outcome.FallbackUsed = p.nullable()
	p.lit(`,"eval_score":`)
	if !p.opt(`null`) {
		v := p.float()
		e.Outcome.EvalScore = &v
	}
	if p.opt(`,"vendor_code":`) {
		e.Outcome.VendorCode = p.str()
	}

	p.lit(`},"attribution":{"feature":`)
	e.Attribution.Feature = p.str()
	p.lit(`,"surface":`)
	e.Attribution.Surface = p.str()
	p.lit(`,"locale":`)
	e.Attribution.Locale = p.str()
	p.lit(`,"user_tier":`)
	e.Attribution.UserTier = p.str()
	if p.opt(`,"priority":`) {
		e.Attribution.Priority = p.str()
	}
	p.lit(`}}`)
	return p.ok && p.i == len(p.b)
}

// canon reads b from i; the first mismatch clears ok, after which every
// read returns a zero value.
type canon struct {
	b  []byte
	i  int
	ok bool
}

func (p *canon) has(s string) bool {
	return p.ok && len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s
}

func (p *canon) lit(s string) {
	if !p.has(s) {
		p.ok = false
		return
	}
	p.i += len(s)
}

// opt consumes s when it comes next.
func (p *canon) opt(s string) bool {
	if !p.has(s) {
		return false
	}
	p.i += len(s)
	return true
}

// str reads a string without escapes or control characters, in valid
// UTF-8 (encoding/json would replace invalid bytes).
func (p *canon) str() string {
	if !p.has(`"`) {
		p.ok = false
		return ""
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[start:j]
			if !utf8.Valid(s) {
				p.ok = false
				return ""
			}
			p.i = j + 1
			return string(s)
		case c < 0x20 || c == '\\':
			p.ok = false
			return ""
		}
	}
	p.ok = false
	return ""
}

func (p *canon) nullable() string {
	if p.opt(`null`) {
		return ""
	}
	return p.str()
}

func (p *canon) bool() bool {
	if p.opt(`true`) {
		return true
	}
	p.lit(`false`)
	return false
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
// and reports whether it is an integer.
func (p *canon) number() (tok []byte, integer bool) {
	if !p.ok {
		return nil, false
	}
	b, j := p.b, p.i
	digits := func() int {
		n := 0
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
			n++
		}
		return n
	}
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case digits() == 0:
		p.ok = false
		return nil, false
	}
	integer = true
	if j < len(b) && b[j] == '.' {
		j++
		integer = false
		if digits() == 0 {
			p.ok = false
			return nil, false
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		integer = false
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if digits() == 0 {
			p.ok = false
			return nil, false
		}
	}
	tok, p.i = b[p.i:j], j
	return tok, integer
}

func (p *canon) int() int64 {
	tok, integer := p.number()
	if !p.ok || !integer {
		p.ok = false
		return 0
	}
	v, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil {
		p.ok = false
	}
	return v
}

func (p *canon) float() float64 {
	tok, _ := p.number()
	if !p.ok {
		return 0
	}
	v, err := strconv.ParseFloat(string(tok), 64)
	if err != nil {
		p.ok = false
	}
	return v
}

// time reads null (the zero time) or a time exactly as appendTime writes
// it.
func (p *canon) time() time.Time {
	if p.opt(`null`) {
		return time.Time{}
	}
	s := p.str()
	if !p.ok {
		return time.Time{}
	}
	t, err := time.Parse(timeLayout, s)
	if err != nil || t.Format(timeLayout) != s {
		p.ok = false
		return time.Time{}
	}
	return t
}
