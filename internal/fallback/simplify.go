package fallback

import "github.com/fmgate/fmgate/internal/provider"

// Instructions appended to the system prompt of a simplified request.
const (
	briefEN = "The service is under heavy load: answer briefly, in at most three short sentences, without lists."
	briefJA = "ただいま混み合っています。箇条書きを使わず、3文以内で簡潔に答えてください。"
)

// Simplified returns the request the gateway sends to the cheaper model after
// the primary timed out: model replaced, answer capped at
// Config.Simplified.MaxTokens (default 256), only the latest
// Config.Simplified.History messages (default 3) starting from a user
// message, and an instruction to answer briefly in the request's language.
// req is not modified.
func (r *Resolver) Simplified(req *provider.Request, model string) *provider.Request {
	return simplified(req, model, r.cfg.Simplified)
}

func simplified(req *provider.Request, model string, sc SimplifiedConfig) *provider.Request {
	out := *req
	out.Model = model
	if out.MaxTokens <= 0 || out.MaxTokens > sc.MaxTokens {
		out.MaxTokens = sc.MaxTokens
	}
	msgs := req.Messages[max(0, len(req.Messages)-sc.History):]
	for len(msgs) > 1 && msgs[0].Role != provider.RoleUser {
		msgs = msgs[1:]
	}
	out.Messages = append([]provider.Message(nil), msgs...)

	var last string
	if n := len(out.Messages); n > 0 {
		last = out.Messages[n-1].Content
	}
	brief := briefEN
	if Lang(req.Locale, last) == LangJA {
		brief = briefJA
	}
	if out.System == "" {
		out.System = brief
	} else {
		out.System += "\n\n" + brief
	}
	return &out
}
