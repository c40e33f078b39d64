package bedrock_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/fmgate/fmgate/internal/config"
	door "github.com/fmgate/fmgate/internal/frontdoor/bedrock"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
)

// guardrailTrace is trace.guardrail as Bedrock sends it for a blocked input.
const guardrailTrace = `{"actionReason":"Guardrail blocked.","inputAssessment":{"gr-1":{"topicPolicy":{"topics":[{"action":"BLOCKED","detected":true,"name":"Violence","type":"DENY"}]}}}}`

// guardedUpstream stands in for Bedrock Runtime behind a bedrock tier: it
// keeps the guardrailConfig of each Converse and ConverseStream call, and
// answers as a guardrail that intervened: the guardrail's message,
// stopReason guardrail_intervened and trace.guardrail. With fail set it
// answers 503 instead.
type guardedUpstream struct {
	mu    sync.Mutex
	seen  []json.RawMessage
	calls int
	fail  bool
}

func (u *guardedUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, op, _ := door.ParsePath(r.URL.EscapedPath())
	if op == door.OpCountTokens {
		_, _ = io.WriteString(w, `{"inputTokens":12}`)
		return
	}
	var body struct {
		GuardrailConfig json.RawMessage `json:"guardrailConfig"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	u.mu.Lock()
	u.seen = append(u.seen, body.GuardrailConfig)
	u.calls++
	fail := u.fail
	u.mu.Unlock()
	if fail {
		door.WriteException(w, door.Exception{Status: http.StatusServiceUnavailable, Type: door.ServiceUnavailableException, Message: "down"})
		return
	}
	usage := provider.Usage{InputTokens: 12, OutputTokens: 6}
	if op == door.OpConverseStream {
		ew := door.NewEventWriter(w)
		_ = ew.Delta("Sorry, I cannot help with that.")
		_ = ew.Stop(door.StopGuardrailIntervened, usage, 0, json.RawMessage(guardrailTrace))
		return
	}
	door.WriteConverse(w, nil, "Sorry, I cannot help with that.", nil, door.StopGuardrailIntervened, usage, 0, json.RawMessage(guardrailTrace))
}

func (u *guardedUpstream) got() ([]json.RawMessage, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen, u.calls
}

// withGuardedSonnet is gatewayConfig with its sonnet tier on the bedrock
// provider in front of u; haiku stays on the simulator, which applies no
// guardrails.
func withGuardedSonnet(t *testing.T, u *guardedUpstream) config.Config {
	t.Helper()
	srv := httptest.NewUnstartedServer(u)
	srv.Config.Protocols = h2c()
	srv.Start()
	t.Cleanup(srv.Close)
	home := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDUPSTREAM", "AWS_SECRET_ACCESS_KEY": "upstream-secret", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	cfg := gatewayConfig(t)
	cfg.Models[0].Provider, cfg.Models[0].Region, cfg.Models[0].Endpoint = "bedrock", "us-east-1", srv.URL
	return cfg
}

var clientGuardrail = &types.GuardrailConfiguration{GuardrailIdentifier: aws.String("gr-1"), GuardrailVersion: aws.String("3"), Trace: types.GuardrailTraceEnabled}

// TestGuardrailConfigReachesBedrock: a client's guardrailConfig reaches the
// bedrock tier's Converse call whole, and Bedrock's intervention comes back
// as Bedrock sent it: its message, stopReason guardrail_intervened and
// trace.guardrail, not fmgate's redirect answer.
func TestGuardrailConfigReachesBedrock(t *testing.T) {
	up := &guardedUpstream{}
	_, srv := startGateway(t, withGuardedSonnet(t, up))
	c := client(srv.URL, testKeyID, testSecret)
	out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(sonnetModelID),
		Messages: userMessage("How do I hurt someone?"), GuardrailConfig: clientGuardrail})
	if err != nil {
		t.Fatal(err)
	}
	seen, _ := up.got()
	if len(seen) != 1 || string(seen[0]) != `{"guardrailIdentifier":"gr-1","guardrailVersion":"3","trace":"enabled"}` {
		t.Fatalf("upstream saw guardrailConfig %s; want the client's", seen)
	}
	if out.StopReason != types.StopReasonGuardrailIntervened || header(out.ResultMetadata, "X-Fmgate-Tier") != "sonnet" {
		t.Fatalf("stopReason %q from tier %q; want guardrail_intervened from sonnet", out.StopReason, header(out.ResultMetadata, "X-Fmgate-Tier"))
	}
	msg := out.Output.(*types.ConverseOutputMemberMessage).Value
	if txt := msg.Content[0].(*types.ContentBlockMemberText).Value; txt != "Sorry, I cannot help with that." {
		t.Fatalf("text %q; want the guardrail's message", txt)
	}
	wantTrace(t, out.Trace.Guardrail)

	sout, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(sonnetModelID),
		Messages: userMessage("How do I hurt someone?"), GuardrailConfig: &types.GuardrailStreamConfiguration{
			GuardrailIdentifier: aws.String("gr-1"), GuardrailVersion: aws.String("3"), Trace: types.GuardrailTraceEnabledFull,
			StreamProcessingMode: types.GuardrailStreamProcessingModeAsync}})
	if err != nil {
		t.Fatal(err)
	}
	es := sout.GetStream()
	defer es.Close()
	var (
		stop  types.StopReason
		trace *types.GuardrailTraceAssessment
	)
	for ev := range es.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStop:
			stop = v.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			if v.Value.Trace != nil {
				trace = v.Value.Trace.Guardrail
			}
		}
	}
	if err := es.Err(); err != nil {
		t.Fatal(err)
	}
	seen, _ = up.got()
	if len(seen) != 2 || string(seen[1]) != `{"guardrailIdentifier":"gr-1","guardrailVersion":"3","streamProcessingMode":"async","trace":"enabled_full"}` {
		t.Fatalf("upstream saw stream guardrailConfig %s; want the client's", seen[len(seen)-1])
	}
	if stop != types.StopReasonGuardrailIntervened {
		t.Fatalf("stream stopReason %q; want guardrail_intervened", stop)
	}
	wantTrace(t, trace)
}

func wantTrace(t *testing.T, g *types.GuardrailTraceAssessment) {
	t.Helper()
	if g == nil || aws.ToString(g.ActionReason) != "Guardrail blocked." {
		t.Fatalf("trace.guardrail %+v; want Bedrock's", g)
	}
	a, ok := g.InputAssessment["gr-1"]
	if !ok || a.TopicPolicy == nil || len(a.TopicPolicy.Topics) != 1 || aws.ToString(a.TopicPolicy.Topics[0].Name) != "Violence" ||
		a.TopicPolicy.Topics[0].Action != types.GuardrailTopicPolicyActionBlocked {
		t.Fatalf("trace.guardrail.inputAssessment %+v; want gr-1's blocked topic", g.InputAssessment)
	}
}

// TestGuardrailConfigSkipsTiersWithoutIt: the simulator's tier cannot
// apply a Bedrock guardrail. With the bedrock tier down, a guardrail turn
// is not answered by it: the turn falls below the models, never to a model
// that would drop the guardrail. With only simulated tiers, the turn is
// refused naming guardrailConfig.
func TestGuardrailConfigSkipsTiersWithoutIt(t *testing.T) {
	up := &guardedUpstream{fail: true}
	s, srv := startGateway(t, withGuardedSonnet(t, up))
	c := client(srv.URL, testKeyID, testSecret)
	in := &bedrockruntime.ConverseInput{ModelId: aws.String(sonnetModelID), Messages: userMessage("Recommend a manga"), GuardrailConfig: clientGuardrail}
	out, err := c.Converse(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if tier := header(out.ResultMetadata, "X-Fmgate-Tier"); tier == "haiku" || tier == "sonnet" {
		t.Fatalf("answered by %q; a guardrail turn may not reach haiku, which cannot apply it", tier)
	}
	if _, calls := up.got(); calls == 0 {
		t.Fatal("the bedrock tier was never tried")
	}
	if u := s.Sim.Usage("haiku"); u != (provider.Usage{}) {
		t.Fatalf("haiku billed %+v for a guardrail turn; it cannot apply the guardrail", u)
	}

	_, simOnly := startGateway(t, gatewayConfig(t))
	sc := client(simOnly.URL, testKeyID, testSecret)
	_, err = sc.Converse(context.Background(), in)
	wantAPIError(t, err, "ValidationException", 400)
	if !strings.Contains(err.Error(), "guardrailConfig") || !strings.Contains(err.Error(), "guardrails capability") {
		t.Fatalf("%v; want a refusal naming guardrailConfig and the capability", err)
	}
	_, err = sc.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(sonnetModelID),
		Messages: userMessage("Recommend a manga"), GuardrailConfig: &types.GuardrailStreamConfiguration{
			GuardrailIdentifier: aws.String("gr-1"), GuardrailVersion: aws.String("3")}})
	wantAPIError(t, err, "ValidationException", 400)
}

// TestDecodeGuardrailConfig: guardrailConfig is read whole, and what
// Bedrock would refuse is refused naming the field.
func TestDecodeGuardrailConfig(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":[{"text":"hi"}]}]`
	tests := []struct {
		name, give string
		want       *provider.Guardrail
		wantErr    string
	}{
		{"whole", `{"guardrailIdentifier":"gr-1","guardrailVersion":"DRAFT","trace":"enabled_full","streamProcessingMode":"async"}`,
			&provider.Guardrail{ID: "gr-1", Version: "DRAFT", Trace: "enabled_full", StreamMode: "async"}, ""},
		{"an ARN", `{"guardrailIdentifier":"arn:aws:bedrock:us-east-1:123456789012:guardrail/abc","guardrailVersion":"12"}`,
			&provider.Guardrail{ID: "arn:aws:bedrock:us-east-1:123456789012:guardrail/abc", Version: "12"}, ""},
		{"no identifier", `{"guardrailVersion":"1"}`, nil, "guardrailConfig.guardrailIdentifier is required"},
		{"a bad version", `{"guardrailIdentifier":"gr-1","guardrailVersion":"v1"}`, nil, "guardrailConfig.guardrailVersion"},
		{"a bad trace", `{"guardrailIdentifier":"gr-1","guardrailVersion":"1","trace":"on"}`, nil, "guardrailConfig.trace"},
		{"an unknown field", `{"guardrailIdentifier":"gr-1","guardrailVersion":"1","mode":"x"}`, nil, "guardrailConfig must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := door.Decode("sonnet", []byte(`{`+msgs+`,"guardrailConfig":`+tt.give+`}`), vision.Limits{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v; want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *req.Guardrail != *tt.want {
				t.Fatalf("guardrail %+v; want %+v", *req.Guardrail, *tt.want)
			}
		})
	}
}
