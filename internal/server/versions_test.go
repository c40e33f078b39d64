package server

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/fmgate/fmgate/internal/artifacts"
	"github.com/fmgate/fmgate/internal/config"
)

// TestPromptSwitchWithoutRestart edits the prompt file of a running gateway
// and checks that the next turn's spans carry the new version while the
// earlier turn's keep the old one.
func TestPromptSwitchWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	prompt := filepath.Join(dir, "prompt.txt")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(prompt, "You are MangaAssist.")
	cfgPath := filepath.Join(dir, "fmgate.yaml")
	write(cfgPath, "prompt: {name: planner-prompt, file: "+prompt+", reloadInterval: 0s}\n")
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	fast := quickConfig()
	cfg.Sim = fast.Sim
	cfg.Events.Sinks.JSONL.Path = filepath.Join(dir, "events.jsonl")
	s, err := New(context.Background(), isolate(t, cfg), Options{ConfigPath: cfgPath, Catalog: sharedCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler(testAdminToken))
	defer srv.Close()
	sc := &scenario{t: t, s: s, srv: srv}

	v1 := artifacts.Version("planner-prompt", "You are MangaAssist.")
	first := sc.chat("u1", "おすすめは？", "ja")
	write(prompt, "You are MangaAssist. Answer briefly.")
	if changed, err := s.Ledger.Reload(); err != nil || !changed {
		t.Fatalf("reload: changed=%v err=%v", changed, err)
	}
	v2 := artifacts.Version("planner-prompt", "You are MangaAssist. Answer briefly.")
	second := sc.chat("u1", "おすすめは？", "ja")

	// A broken config is refused; the prompt in force stays.
	write(cfgPath, "prompt: {name: planner-prompt, file: /no/such/prompt.txt}\n")
	if _, err := s.Ledger.Reload(); err == nil {
		t.Fatal("a config naming a missing prompt file was accepted")
	}
	if _, v := s.Ledger.Active(); v != v2 {
		t.Fatalf("active prompt %s after a failed reload, want %s", v, v2)
	}
	s.Close()

	want := map[string]string{first.TraceID: v1, second.TraceID: v2}
	seen := 0
	for _, e := range readSpans(t, cfg.Events.Sinks.JSONL.Path) {
		// The catalog's embedding at start is a turn of its own, without a prompt.
		if (e.Name != "turn" && e.Name != "model_attempt") || e.Attribution.Feature == catalogIndexFeature {
			continue
		}
		if w, ok := want[e.TraceID]; !ok || e.Artifact.PromptVersion != w {
			t.Errorf("%s span of trace %s carries prompt %q, want %q", e.Name, e.TraceID, e.Artifact.PromptVersion, w)
		}
		seen++
	}
	if seen < 4 {
		t.Fatalf("saw %d turn and model_attempt spans, want at least 4", seen)
	}
}
