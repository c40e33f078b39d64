package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tier on an OpenAI-compatible server whose key variable is unset: fmgate
// validate and fmgate serve each name the variable to export, in one line.
func TestMissingOpenAIKeyIsNamed(t *testing.T) {
	t.Setenv("FMGATE_TEST_OPENAI_KEY", "")
	os.Unsetenv("FMGATE_TEST_OPENAI_KEY")
	path := filepath.Join(t.TempDir(), "fmgate.yaml")
	cfg := `models:
  - {name: sonnet, provider: openai, modelId: gpt-4o-mini, endpoint: "http://127.0.0.1:1/v1", apiKeyEnv: FMGATE_TEST_OPENAI_KEY,
     inputPerMTok: 0.15, outputPerMTok: 0.6, contextWindow: 128000, maxOutputTokens: 1024, confidence: 1}
  - {name: haiku, provider: sim, modelId: haiku-sim, inputPerMTok: 0.25, outputPerMTok: 1.25, contextWindow: 200000, maxOutputTokens: 1024, confidence: 0.7}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr)
	if err == nil {
		t.Fatalf("validate passed:\n%s", stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "FMGATE_TEST_OPENAI_KEY") || !strings.Contains(lines[0], "export") {
		t.Fatalf("validate said:\n%s\nwant one line naming FMGATE_TEST_OPENAI_KEY", stdout.String())
	}

	t.Setenv("FMGATE_TEST_OPENAI_KEY", "sk-set")
	stdout.Reset()
	if err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr); err != nil {
		t.Fatalf("with the key set: %v\n%s", err, stdout.String())
	}
}
