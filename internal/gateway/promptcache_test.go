package gateway

import (
	"reflect"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

func TestMarkPrefixes(t *testing.T) {
	own, client, ctxText := "You are MangaAssist.", "Answer briefly.", "Catalog: One Piece, 110 volumes."
	turn := func() *Turn {
		return &Turn{
			System: appendPrompt(own, client), ClientSystem: client, Context: ctxText,
			ClientSystemCache: []provider.CacheMark{{At: len(client), TTL: provider.CacheTTLLong}},
			History:           []provider.Message{{Role: provider.RoleUser, Content: "hi", Cache: []provider.CacheMark{{At: 2}, {At: 40}}}, {Role: provider.RoleAssistant, Content: "hello"}},
			Message:           "Recommend a fantasy manga",
		}
	}
	build := func(t *Turn, tier config.Model) *provider.Request {
		msgs := append(append([]provider.Message(nil), t.History...), provider.Message{Role: provider.RoleUser, Content: t.Message, Cache: t.MessageCache})
		req := &provider.Request{System: withContext(t.System, t.Context), Messages: msgs}
		markPrefixes(t, tier, req)
		return req
	}

	req := build(turn(), config.Model{})
	wantSys := []provider.CacheMark{
		{At: len(own), TTL: provider.CacheTTL},                                      // fmgate's own prompt
		{At: len(own) + 2 + len(client), TTL: provider.CacheTTLLong},                // the client's, where its prompt now sits
		{At: len(own) + 2 + len(client) + 2 + len(ctxText), TTL: provider.CacheTTL}, // the retrieved context
	}
	if !reflect.DeepEqual(req.SystemCache, wantSys) {
		t.Errorf("system marks %+v, want %+v", req.SystemCache, wantSys)
	}
	if got := req.Messages[0].Cache; len(got) != 1 || got[0].At != 2 {
		t.Errorf("history marks %+v: the one past the message's end must be dropped", got)
	}
	if req.CacheMarks() != provider.MaxCacheMarks {
		t.Errorf("%d marks, want the vendors' limit of %d", req.CacheMarks(), provider.MaxCacheMarks)
	}

	// The client's marks come first: with four of its own, fmgate adds none.
	tt := turn()
	tt.MessageCache = []provider.CacheMark{{At: 3}, {At: 9}}
	req = build(tt, config.Model{})
	if n := req.CacheMarks(); n != provider.MaxCacheMarks || len(req.SystemCache) != 1 {
		t.Errorf("with the client's four marks: %d marks, system %+v; want 4, the client's one", n, req.SystemCache)
	}

	// promptCaching off: only the client's marks.
	req = build(turn(), config.Model{PromptCaching: config.PromptCachingOff})
	if len(req.SystemCache) != 1 || req.SystemCache[0].TTL != provider.CacheTTLLong {
		t.Errorf("promptCaching off: system marks %+v, want the client's alone", req.SystemCache)
	}
}
