package bedrock_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/fmgate/fmgate/internal/guardrail"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

// applyStub is Bedrock Runtime's ApplyGuardrail on the wire: it checks the
// request's path and body and answers body.
func applyStub(t *testing.T, body string, seen *applyRequest) string {
	t.Helper()
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/guardrail/gr-123/version/7/apply" {
			t.Errorf("%s %s; want POST /guardrail/gr-123/version/7/apply", r.Method, r.URL.Path)
		}
		if !strings.Contains(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") {
			t.Errorf("request not signed with the configured credentials: %q", r.Header.Get("Authorization"))
		}
		b, _ := io.ReadAll(r.Body)
		if seen != nil {
			if err := json.Unmarshal(b, seen); err != nil {
				t.Errorf("request body %s: %v", b, err)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	return srv.URL
}

type applyRequest struct {
	Source  string `json:"source"`
	Content []struct {
		Text struct {
			Text string `json:"text"`
		} `json:"text"`
	} `json:"content"`
}

func newGuardrail(t *testing.T, endpoint string, price float64) *bedrock.Guardrail {
	t.Helper()
	g, err := bedrock.NewGuardrail(context.Background(), guardrail.BedrockConfig{GuardrailID: "gr-123", GuardrailVersion: "7",
		Region: "us-east-1", Endpoint: endpoint, PricePer1kTextUnits: price},
		bedrock.Options{Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestApplyGuardrailVerdicts(t *testing.T) {
	const msg = "My name is Taro and I want to know about One Piece."
	tests := []struct {
		name      string
		body      string
		blocked   bool
		text      string
		kinds     string
		action    string
		units     int
		wantPrice float64
	}{
		{"none", `{"action":"NONE","outputs":[],"assessments":[{}],"usage":{"topicPolicyUnits":1,"contentPolicyUnits":1,"wordPolicyUnits":1}}`,
			false, msg, "", "NONE", 2, 0.0003},
		{"intervened: a denied topic", `{"action":"GUARDRAIL_INTERVENED","actionReason":"Guardrail blocked.",
			"outputs":[{"text":"Sorry, I cannot help with that."}],
			"assessments":[{"topicPolicy":{"topics":[{"name":"Violence","type":"DENY","action":"BLOCKED","detected":true}]}}],
			"usage":{"topicPolicyUnits":1,"contentPolicyUnits":1}}`,
			true, msg, "remote:topic", "GUARDRAIL_INTERVENED", 2, 0.0003},
		{"intervened: masking and a block", `{"action":"GUARDRAIL_INTERVENED","outputs":[{"text":"blocked"}],
			"assessments":[{"sensitiveInformationPolicy":{"piiEntities":[{"match":"Taro","type":"NAME","action":"ANONYMIZED","detected":true}]},
			"contentPolicy":{"filters":[{"type":"VIOLENCE","confidence":"HIGH","action":"BLOCKED","detected":true}]}}]}`,
			true, msg, "remote:content", "GUARDRAIL_INTERVENED", 0, 0},
		{"intervened: masked only", `{"action":"GUARDRAIL_INTERVENED",
			"outputs":[{"text":"My name is {NAME} and I want to know about One Piece."}],
			"assessments":[{"sensitiveInformationPolicy":{"piiEntities":[{"match":"Taro","type":"NAME","action":"ANONYMIZED","detected":true}]}}],
			"usage":{"sensitiveInformationPolicyUnits":1,"sensitiveInformationPolicyFreeUnits":1}}`,
			false, "My name is {NAME} and I want to know about One Piece.", guardrail.KindMasked, "GUARDRAIL_INTERVENED", 1, 0.00015},
		{"intervened without assessments: blocked", `{"action":"GUARDRAIL_INTERVENED","outputs":[{"text":"no"}],"assessments":[]}`,
			true, msg, "remote:intervened", "GUARDRAIL_INTERVENED", 0, 0},
		{"none, output differs: masked", `{"action":"NONE","outputs":[{"text":"My name is {NAME}."}],"assessments":[]}`,
			false, "My name is {NAME}.", guardrail.KindMasked, "NONE", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen applyRequest
			g := newGuardrail(t, applyStub(t, tt.body, &seen), 0.15)
			v, err := g.Check(context.Background(), msg)
			if err != nil {
				t.Fatal(err)
			}
			if seen.Source != "INPUT" || len(seen.Content) != 1 || seen.Content[0].Text.Text != msg {
				t.Errorf("sent %+v; want source INPUT and the message as one text block", seen)
			}
			if v.Blocked != tt.blocked || v.Text != tt.text || strings.Join(v.Kinds(), ",") != tt.kinds {
				t.Errorf("verdict blocked %v, text %q, kinds %v; want %v, %q, %s", v.Blocked, v.Text, v.Kinds(), tt.blocked, tt.text, tt.kinds)
			}
			if v.Remote == nil || v.Remote.Check != "bedrock" || v.Remote.Action != tt.action || v.Remote.TextUnits != tt.units {
				t.Fatalf("remote %+v; want bedrock, %s, %d units", v.Remote, tt.action, tt.units)
			}
			if d := v.Remote.CostUSD - tt.wantPrice; d > 1e-12 || d < -1e-12 {
				t.Errorf("cost %v; want %v", v.Remote.CostUSD, tt.wantPrice)
			}
		})
	}
}

// TestApplyGuardrailFailures: a slow or failing service is an error for
// the caller's policy, never a verdict.
func TestApplyGuardrailFailures(t *testing.T) {
	release := make(chan struct{})
	slow := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := newGuardrail(t, slow.URL, 0).Check(ctx, "hello"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow service: err %v; want the deadline", err)
	}
	failing := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Amzn-ErrorType", "ResourceNotFoundException")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"The guardrail was not found."}`)
	}))
	if _, err := newGuardrail(t, failing.URL, 0).Check(context.Background(), "hello"); err == nil || !strings.Contains(err.Error(), "ResourceNotFoundException") {
		t.Errorf("failing service: err %v; want its exception", err)
	}
}

// TestSimRefusesGuardrailConfig: the simulator on Bedrock's wire applies
// no guardrails, so it refuses a call that names one rather than answer as
// if it had.
func TestSimRefusesGuardrailConfig(t *testing.T) {
	_, srv := startSim(t)
	req := request("hello")
	req.Guardrail = &provider.Guardrail{ID: "gr-1", Version: "1"}
	_, err := newProvider(t, srv.URL).Complete(context.Background(), req)
	if provider.KindOf(err) != provider.KindValidation || !strings.Contains(err.Error(), "guardrailConfig") {
		t.Fatalf("err %v; want a validation error naming guardrailConfig", err)
	}
}
