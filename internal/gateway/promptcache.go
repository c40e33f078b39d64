package gateway

import (
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// markPrefixes puts the prompt cache marks on req: the client's own, where
// its system prompt sits within req.System, and, with promptCaching auto,
// fmgate's: the end of its own system prompt, which every turn of every
// conversation starts with, and the end of the retrieved context. The
// client's marks come first within the vendors' limit of four. A mark a
// trimmed history message no longer reaches is dropped.
func markPrefixes(t *Turn, tier modelConfig, req *provider.Request) {
	own := len(t.System) - len(t.ClientSystem)
	if t.ClientSystem != "" && own > 0 {
		own -= len("\n\n") // appendPrompt's separator
	}
	var sys []provider.CacheMark
	for _, m := range t.ClientSystemCache {
		at := m.At
		if own > 0 {
			at += own + len("\n\n")
		}
		sys = append(sys, provider.CacheMark{At: at, TTL: m.TTL})
	}
	for i := range req.Messages {
		req.Messages[i].Cache = within(req.Messages[i].Cache, len(req.Messages[i].Content))
	}
	room := provider.MaxCacheMarks - len(sys)
	for _, m := range req.Messages {
		room -= len(m.Cache)
	}
	if tier.PromptCaching != config.PromptCachingOff {
		var mine []provider.CacheMark
		if own > 0 {
			mine = append(mine, provider.CacheMark{At: own, TTL: provider.CacheTTL})
		}
		if t.Context != "" && len(req.System) > len(t.System) {
			mine = append(mine, provider.CacheMark{At: len(req.System), TTL: provider.CacheTTL})
		}
		for _, m := range mine {
			if room <= 0 {
				break
			}
			sys = append(sys, m)
			room--
		}
	}
	req.SystemCache = sortedMarks(within(sys, len(req.System)))
}

// within keeps the marks that fall inside a text of n bytes.
func within(marks []provider.CacheMark, n int) []provider.CacheMark {
	var out []provider.CacheMark
	for _, m := range marks {
		if m.At > 0 && m.At <= n {
			out = append(out, m)
		}
	}
	return out
}

// sortedMarks orders marks by position, one per position (the longer TTL
// kept).
func sortedMarks(marks []provider.CacheMark) []provider.CacheMark {
	out := make([]provider.CacheMark, 0, len(marks))
	for _, m := range marks {
		i := 0
		for i < len(out) && out[i].At < m.At {
			i++
		}
		if i < len(out) && out[i].At == m.At {
			out[i].TTL = max(out[i].TTL, m.TTL)
			continue
		}
		out = append(out[:i], append([]provider.CacheMark{m}, out[i:]...)...)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
