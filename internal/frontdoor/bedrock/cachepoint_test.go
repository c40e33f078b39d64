package bedrock

import (
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
)

func TestCachePointBecomesACacheMark(t *testing.T) {
	body := `{"system":[{"text":"Be brief."},{"cachePoint":{"type":"default"}},{"text":"Use the catalog."}],
		"messages":[{"role":"user","content":[{"text":"Shared context."},{"cachePoint":{"type":"default","ttl":"1h"}},{"text":"Hi"}]}]}`
	req, err := Decode("sonnet", []byte(body), vision.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(req.SystemCache) != 1 || req.System[:req.SystemCache[0].At] != "Be brief." || req.SystemCache[0].TTL != provider.CacheTTL {
		t.Errorf("system %q marks %+v", req.System, req.SystemCache)
	}
	m := req.Messages[0]
	if m.Content != "Shared context.Hi" || len(m.Cache) != 1 || m.Cache[0].At != len("Shared context.") || m.Cache[0].TTL != provider.CacheTTLLong {
		t.Errorf("message %q marks %+v", m.Content, m.Cache)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"messages":[{"role":"user","content":[{"cachePoint":{"type":"default"}},{"text":"x"}]}]}`, "must follow a text block"},
		{`{"messages":[{"role":"user","content":[{"text":"x"},{"cachePoint":{"type":"other"}}]}]}`, "type must be"},
		{`{"messages":[{"role":"user","content":[{"text":"x"},{"cachePoint":{"type":"default","ttl":"2h"}}]}]}`, "ttl"},
		{`{"messages":[{"role":"user","content":[` + strings.Repeat(`{"text":"x"},{"cachePoint":{"type":"default"}},`, 5) + `{"text":"x"}]}]}`, "limit is 4"},
	} {
		if _, err := Decode("sonnet", []byte(bad.body), vision.Limits{}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want a refusal naming %q", bad.body, err, bad.want)
		}
	}
}
