package server

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
)

// withCatalog switches the retrieval step on, with a share of the deadline
// generous enough for a test binary built with -race on a busy machine (the
// slow-search case below waits it out).
func withCatalog(cfg config.Config) config.Config {
	cfg.Catalog.Enabled = true
	cfg.Catalog.Timeout = 2 * time.Second
	return cfg
}

// TestCatalogAnswers: a question about a catalog title in either language
// is answered from the catalog (volume and price); with the search failing
// or slow the turn still answers, degraded, without inventing stock, and its
// events say the catalog was unavailable and why. Repeated failures open the
// search breaker, which then skips the search at once.
func TestCatalogAnswers(t *testing.T) {
	cfg := withCatalog(quickConfig())
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	sc := newScenario(t, cfg)

	ja := sc.chat("reader-ja", "ワンピースの最新刊は？", "ja")
	if ja.Status != 200 || !strings.Contains(ja.Text, "110巻") || !strings.Contains(ja.Text, "528円") || ja.Degraded {
		t.Fatalf("ja answer %+v: want the catalog's volume 110 at 528円, not degraded", ja)
	}
	en := sc.chat("reader-en", "What is the latest One Piece volume?", "en")
	if en.Status != 200 || !strings.Contains(en.Text, "Vol. 110") || !strings.Contains(en.Text, "¥528") || en.Degraded {
		t.Fatalf("en answer %+v: want the catalog's Vol. 110 at ¥528, not degraded", en)
	}

	adminPut(t, sc.srv, "/admin/catalog/faults", `{"fail":true}`)
	down := sc.chat("reader-down", "ワンピースの最新刊は？", "ja")
	if down.Status != 200 || !down.Degraded || strings.Contains(down.Text, "110巻") || !strings.Contains(down.Text, "確認できません") {
		t.Fatalf("answer with search down %+v: want a degraded answer that cannot check stock", down)
	}
	adminPut(t, sc.srv, "/admin/catalog/faults", `{"latencyMs":60000}`)
	slow := sc.chat("reader-slow", "What is the latest One Piece volume?", "en")
	if slow.Status != 200 || !slow.Degraded || !strings.Contains(slow.Text, "can't check stock") {
		t.Fatalf("answer with search slow %+v: want a degraded answer without stock", slow)
	}
	adminPut(t, sc.srv, "/admin/catalog/faults", `{"fail":true}`)
	for i := range 4 {
		sc.chat("reader-storm", "ワンピースの最新刊は？"+strings.Repeat("!", i), "ja")
	}
	open := sc.chat("reader-open", "ワンピースの最新刊は？", "ja")
	if !open.Degraded {
		t.Fatalf("answer with the search breaker open %+v: want degraded", open)
	}
	sc.s.Close() // flush the emitter

	codes := map[string]string{} // trace id -> the retrieve span's error code
	flags := map[string][]string{}
	for _, e := range readSpans(t, path) {
		switch e.Name {
		case "retrieve":
			codes[e.TraceID] = e.Outcome.ErrorCode
		case "turn":
			flags[e.TraceID] = e.Resource.CapabilityFlagsActive
		}
	}
	tests := []struct {
		name, trace, code, flag string
	}{
		{"ja", ja.TraceID, "", "catalog"},
		{"en", en.TraceID, "", "catalog"},
		{"down", down.TraceID, "unavailable", "catalog_unavailable"},
		{"slow", slow.TraceID, "timeout", "catalog_unavailable"},
		{"breaker open", open.TraceID, "breaker_open", "catalog_unavailable"},
	}
	for _, tt := range tests {
		if codes[tt.trace] != tt.code || !slices.Contains(flags[tt.trace], tt.flag) {
			t.Errorf("%s turn: retrieve error %q, turn flags %v; want %q and flag %q",
				tt.name, codes[tt.trace], flags[tt.trace], tt.code, tt.flag)
		}
	}
}
