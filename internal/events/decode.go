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
	return decodeCanonicalSyms(b, e, nil)
}

// decodeCanonicalSyms is decodeCanonical sharing the strings of fields
// with few values (names, versions, attribution) through syms, when not
// nil: a packed batch's spans repeat them, and each would otherwise be
// its own allocation.
func decodeCanonicalSyms(b []byte, e *Event, syms *symbols) bool {
	p := canon{b: b, ok: true, syms: syms}
	p.lit(`{"schema_version":`)
	e.SchemaVersion = int(p.int())
	p.lit(`,"trace_id":`)
	e.TraceID = p.str()
	p.lit(`,"span_id":`)
	e.SpanID = p.str()
	p.lit(`,"parent_span_id":`)
	e.ParentSpanID = p.nullable()
	p.lit(`,"workflow_id":`)
	e.WorkflowID = p.sym()
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
	e.Name = p.sym()
	p.lit(`,"must_persist":`)
	e.MustPersist = p.bool()
	if p.opt(`,"prompt_excerpt":`) {
		e.PromptExcerpt = p.str()
	}
	e.SampledOut = p.opt(`,"sampled_out":true`)

	p.lit(`,"node":{"graph_version":`)
	e.Node.GraphVersion = p.sym()
	p.lit(`,"node_id":`)
	e.Node.NodeID = p.sym()
	p.lit(`,"invocation_mode":`)
	e.Node.InvocationMode = InvocationMode(p.sym())

	p.lit(`},"artifact":{"artifact_kind":`)
	e.Artifact.ArtifactKind = ArtifactKind(p.sym())
	p.lit(`,"model_id":`)
	e.Artifact.ModelID = p.nullableSym()
	p.lit(`,"prompt_version":`)
	e.Artifact.PromptVersion = p.nullableSym()
	p.lit(`,"tool_id":`)
	e.Artifact.ToolID = p.nullableSym()
	p.lit(`,"tool_version":`)
	e.Artifact.ToolVersion = p.nullableSym()
	p.lit(`,"sub_agent_id":`)
	e.Artifact.SubAgentID = p.nullableSym()
	p.lit(`,"sub_agent_version":`)
	e.Artifact.SubAgentVersion = p.nullableSym()

	p.lit(`},"resource":{"tokens_in":`)
	e.Resource.TokensIn = int(p.int())
	p.lit(`,"tokens_out":`)
	e.Resource.TokensOut = int(p.int())
	p.lit(`,"cost_usd":`)
	e.Resource.CostUSD = p.float()
	if p.opt(`,"tokens_cache_read":`) {
		e.Resource.TokensCacheRead = int(p.int())
	}
	if p.opt(`,"tokens_cache_write":`) {
		e.Resource.TokensCacheWrite = int(p.int())
	}
	if p.opt(`,"cache_saved_usd":`) {
		e.Resource.CacheSavedUSD = p.float()
	}
	p.lit(`,"cache_hit":`)
	e.Resource.CacheHit = CacheHit(p.nullableSym())
	p.lit(`,"capability_flags_active":[`)
	e.Resource.CapabilityFlagsActive = []string{}
	if !p.opt(`]`) {
		for {
			e.Resource.CapabilityFlagsActive = append(e.Resource.CapabilityFlagsActive, p.sym())
			if !p.ok || p.opt(`]`) {
				break
			}
			p.lit(`,`)
		}
	}
	if p.opt(`,"tool_calls":`) {
		e.Resource.ToolCalls = int(p.int())
		p.lit(`,"tool_names":[`)
		e.Resource.ToolNames = []string{}
		if !p.opt(`]`) {
			for {
				e.Resource.ToolNames = append(e.Resource.ToolNames, p.str())
				if !p.ok || p.opt(`]`) {
					break
				}
				p.lit(`,`)
			}
		}
	}
	if p.opt(`,"images":`) {
		e.Resource.Images = int(p.int())
	}
	if p.opt(`,"image_bytes":`) {
		e.Resource.ImageBytes = int(p.int())
	}
	if p.opt(`,"image_tokens":`) {
		e.Resource.ImageTokens = int(p.int())
	}
	if p.opt(`,"image_cost_usd":`) {
		e.Resource.ImageCostUSD = p.float()
	}

	p.lit(`},"outcome":{"status":`)
	e.Outcome.Status = Status(p.sym())
	p.lit(`,"error_code":`)
	e.Outcome.ErrorCode = p.nullableSym()
	p.lit(`,"fallback_used":`)
	e.Outcome.FallbackUsed = p.nullableSym()
	p.lit(`,"eval_score":`)
	if !p.opt(`null`) {
		v := p.float()
		e.Outcome.EvalScore = &v
	}
	if p.opt(`,"vendor_code":`) {
		e.Outcome.VendorCode = p.sym()
	}
	if p.opt(`,"stop_reason":`) {
		e.Outcome.StopReason = p.sym()
	}

	p.lit(`},"attribution":{"feature":`)
	e.Attribution.Feature = p.sym()
	p.lit(`,"surface":`)
	e.Attribution.Surface = p.sym()
	p.lit(`,"locale":`)
	e.Attribution.Locale = p.sym()
	p.lit(`,"user_tier":`)
	e.Attribution.UserTier = p.sym()
	if p.opt(`,"priority":`) {
		e.Attribution.Priority = p.sym()
	}
	p.lit(`}}`)
	return p.ok && p.i == len(p.b)
}

// canon reads b from i; the first mismatch clears ok, after which every
// read returns a zero value.
type canon struct {
	b    []byte
	i    int
	ok   bool
	syms *symbols
}

// symbols hands out one string per distinct value, for up to maxSymbols
// values; beyond that each read allocates its own.
type symbols struct{ m map[string]string }

const maxSymbols = 512

func (t *symbols) get(b []byte) string {
	if s, ok := t.m[string(b)]; ok { // the lookup does not allocate
		return s
	}
	s := string(b)
	if t.m == nil {
		t.m = make(map[string]string, 64)
	}
	if len(t.m) < maxSymbols {
		t.m[s] = s
	}
	return s
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
	if b := p.strBytes(); p.ok {
		return string(b)
	}
	return ""
}

// sym is str for a field of few values, shared through p.syms.
func (p *canon) sym() string {
	b := p.strBytes()
	switch {
	case !p.ok:
		return ""
	case p.syms == nil:
		return string(b)
	}
	return p.syms.get(b)
}

// strBytes reads a string as str does and returns its bytes in p.b.
func (p *canon) strBytes() []byte {
	if !p.has(`"`) {
		p.ok = false
		return nil
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := p.b[start:j]
			if !utf8.Valid(s) {
				p.ok = false
				return nil
			}
			p.i = j + 1
			return s
		case c < 0x20 || c == '\\':
			p.ok = false
			return nil
		}
	}
	p.ok = false
	return nil
}

func (p *canon) nullable() string {
	if p.opt(`null`) {
		return ""
	}
	return p.str()
}

func (p *canon) nullableSym() string {
	if p.opt(`null`) {
		return ""
	}
	return p.sym()
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
	b := p.strBytes()
	if !p.ok {
		return time.Time{}
	}
	if t, ok := parseUTCMillis(b); ok {
		return t
	}
	s := string(b)
	t, err := time.Parse(timeLayout, s)
	if err != nil || t.Format(timeLayout) != s {
		p.ok = false
		return time.Time{}
	}
	return t
}

// parseUTCMillis reads the form appendTime writes for a year 0000–9999,
// "2006-01-02T15:04:05.000Z", without time.Parse's generality. It reports
// false for anything else, including a date that does not exist.
func parseUTCMillis(b []byte) (time.Time, bool) {
	if len(b) != 24 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[19] != '.' || b[23] != 'Z' {
		return time.Time{}, false
	}
	ok := true
	num := func(i, n int) int {
		v := 0
		for _, c := range b[i : i+n] {
			if c < '0' || c > '9' {
				ok = false
			}
			v = v*10 + int(c-'0')
		}
		return v
	}
	year, month, day := num(0, 4), num(5, 2), num(8, 2)
	hour, minute, sec, ms := num(11, 2), num(14, 2), num(17, 2), num(20, 3)
	if !ok || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, ms*1e6, time.UTC)
	if t.Day() != day { // 31 April, 29 February of a common year
		return time.Time{}, false
	}
	return t, true
}
