package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// TestAuthoritySignatureAgreesWithTheSDKSigner: the hand-built canonical
// request (used only for :authority-signed requests) computes the same
// signature as aws-sdk-go-v2's signer on a host-signed request, encoded
// model id and all.
func TestAuthoritySignatureAgreesWithTheSDKSigner(t *testing.T) {
	body := `{"messages":[{"role":"user","content":[{"text":"こんにちは"}]}]}`
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Amz-Sdk-Request", "attempt=1;  max=3")
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, "bedrock", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	req.Host = req.URL.Host
	s, err := parseSigV4(req.Header.Get("Authorization"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := authoritySignature(req, s, hash, len(body), "secret", at)
	if err != nil {
		t.Fatal(err)
	}
	if got != s.Signature {
		t.Fatalf("computed %s, the SDK signed %s (signed headers %s)", got, s.Signature, s.SignedHeaders)
	}
	if err := verifySigV4(context.Background(), req, []byte(body), "secret", at.Add(time.Minute)); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := verifySigV4(context.Background(), req, []byte(body), "other", at.Add(time.Minute)); err == nil {
		t.Fatal("a wrong secret verified")
	}
}

func TestParsePath(t *testing.T) {
	tests := []struct {
		give    string
		wantID  string
		wantOp  string
		wantErr bool
	}{
		{"/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse", "anthropic.claude-3-5-sonnet-20240620-v1:0", OpConverse, false},
		{"/model/sonnet/converse-stream", "sonnet", OpConverseStream, false},
		{"/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.x/converse", "arn:aws:bedrock:us-east-1:123:inference-profile/us.x", OpConverse, false},
		{"/model/sonnet/invoke", "sonnet", OpInvoke, false},
		{"/model/sonnet/invoke-with-response-stream", "sonnet", OpInvokeStream, false},
		{"/model/sonnet/count-tokens", "sonnet", OpCountTokens, false},
		{"/model/sonnet/embed", "", "", true},
		{"/model//converse", "", "", true},
		{"/model/bad%zz/converse", "", "", true},
		{"/v1/messages", "", "", true},
	}
	for _, tt := range tests {
		id, op, err := ParsePath(tt.give)
		if (err != nil) != tt.wantErr || id != tt.wantID || op != tt.wantOp {
			t.Errorf("ParsePath(%q) = %q, %q, %v; want %q, %q, error %v", tt.give, id, op, err, tt.wantID, tt.wantOp, tt.wantErr)
		}
	}
}

// BenchmarkVerifySigV4 is the door's per-request cost of checking a
// signature (the SDK's signer over a 1 KB body).
func BenchmarkVerifySigV4(b *testing.B) {
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"` + strings.Repeat("漫画", 170) + `"}]}]}`)
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	at := time.Now()
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, "bedrock", "us-east-1", at); err != nil {
		b.Fatal(err)
	}
	req.Host = req.URL.Host
	b.ReportAllocs()
	for b.Loop() {
		if err := verifySigV4(context.Background(), req, body, "secret", at); err != nil {
			b.Fatal(err)
		}
	}
}
