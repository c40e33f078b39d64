package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// noAWSCredentials empties the AWS default credential chain for the test:
// no keys, no shared files, no instance role.
func noAWSCredentials(t *testing.T) {
	home := t.TempDir()
	for k, v := range map[string]string{
		"HOME": home, "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_PROFILE": "", "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": "",
	} {
		t.Setenv(k, v)
	}
}

func TestValidateNamesMissingAWSCredentials(t *testing.T) {
	noAWSCredentials(t)
	path := filepath.Join(t.TempDir(), "fmgate.yaml")
	cfg := `models:
  - {name: sonnet, provider: bedrock, modelId: anthropic.claude-3-5-sonnet-20240620-v1:0, region: us-east-1, endpoint: "http://127.0.0.1:9",
     contextWindow: 200000, maxOutputTokens: 1024, confidence: 1.0, inputPerMTok: 3, outputPerMTok: 15}
  - {name: haiku, provider: sim, modelId: anthropic.claude-3-haiku-20240307-v1:0,
     contextWindow: 200000, maxOutputTokens: 1024, confidence: 0.7, inputPerMTok: 0.25, outputPerMTok: 1.25}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err == nil || len(lines) != 1 {
		t.Fatalf("err %v, output %q; want one problem line", err, stdout.String())
	}
	for _, want := range []string{"sonnet", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "role"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("%q does not name %s", lines[0], want)
		}
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	stdout.Reset()
	if err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr); err != nil {
		t.Fatalf("with keys in the environment: %v\n%s", err, stdout.String())
	}
}

// An embedding tier on Bedrock needs credentials as a chat tier does.
func TestValidateNamesMissingAWSCredentialsOfEmbeddingTiers(t *testing.T) {
	noAWSCredentials(t)
	path := filepath.Join(t.TempDir(), "fmgate.yaml")
	cfg := `embeddings:
  - {name: titan-embed, provider: bedrock, modelId: amazon.titan-embed-text-v2:0, region: eu-west-1, endpoint: "http://127.0.0.1:9",
     dimensions: 1024, maxInputTokens: 8192, inputPerMTok: 0.02, quota: {tpm: 1000, rpm: 10}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr)
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err == nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "embeddings[0] (titan-embed): ") || !strings.Contains(lines[0], "AWS_ACCESS_KEY_ID") {
		t.Fatalf("err %v, output %q; want one line naming the embedding tier", err, stdout.String())
	}
}

func TestValidateNamesMissingDoorSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fmgate.yaml")
	cfg := `auth:
  keys:
    AKIDDOORKEY: {userId: app, secretKeyEnv: FMGATE_TEST_UNSET_SECRET}
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FMGATE_TEST_UNSET_SECRET", "")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"validate", "-config", path}, &stdout, &stderr)
	if err == nil || !strings.Contains(stdout.String(), "FMGATE_TEST_UNSET_SECRET is not set") || strings.Contains(stdout.String(), "AKIDDOORKEY") {
		t.Fatalf("err %v, output %q; want the unset variable named and the key redacted", err, stdout.String())
	}
}
