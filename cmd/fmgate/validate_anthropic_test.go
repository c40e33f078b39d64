package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateNamesTheAnthropicKey: a tier on Anthropic whose key variable is
// unset, or not named, gets one line saying what to set.
func TestValidateNamesTheAnthropicKey(t *testing.T) {
	tests := []struct {
		name string
		give string // the haiku tier's extra fields
		want string
	}{
		{"key unset", "apiKeyEnv: FMGATE_TEST_UNSET_ANTHROPIC_KEY", "FMGATE_TEST_UNSET_ANTHROPIC_KEY"},
		{"no apiKeyEnv", `endpoint: "http://127.0.0.1:9090"`, "apiKeyEnv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("FMGATE_TEST_UNSET_ANTHROPIC_KEY", "")
			path := filepath.Join(t.TempDir(), "fmgate.yaml")
			yaml := `models:
  - {name: sonnet, provider: sim, modelId: anthropic.claude-3-sonnet-20240229-v1:0, inputPerMTok: 3, outputPerMTok: 15,
     contextWindow: 200000, maxOutputTokens: 1024, confidence: 1.0}
  - {name: haiku, provider: anthropic, modelId: claude-3-5-haiku-latest, inputPerMTok: 0.8, outputPerMTok: 4,
     contextWindow: 200000, maxOutputTokens: 1024, confidence: 0.7, ` + tt.give + `}
`
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr strings.Builder
			err := validate([]string{"-config", path}, &stdout, &stderr)
			if err == nil {
				t.Fatalf("validate passed; stdout %q", stdout.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Fatalf("validate printed %q, want one line naming %s", stdout.String(), tt.want)
			}
		})
	}
}
