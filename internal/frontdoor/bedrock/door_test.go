package bedrock_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	providerbedrock "github.com/fmgate/fmgate/internal/provider/bedrock"
	"github.com/fmgate/fmgate/internal/ratelimit"
	"github.com/fmgate/fmgate/internal/server"
)

const (
	testKeyID     = "AKIDFMGATEDOORTEST"
	testSecretEnv = "FMGATE_TEST_BEDROCK_SECRET"
	testSecret    = "door-test-secret-0123456789"
	sonnetModelID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
)

func h2c() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// gatewayConfig is the MangaAssist profile with a fast simulator, one
// SigV4 key and the signing region's model ids on its tiers.
func gatewayConfig(t *testing.T) config.Config {
	t.Helper()
	cfg := config.Default()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 5
		st.TokensPerSecond = 3000
		cfg.Sim.Models[name] = st
	}
	cfg.Models[0].ModelID = sonnetModelID
	// Generous deadlines: the race detector on a shared machine must not
	// turn a slow first call into a fallback answer.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{testKeyID: {UserID: "door-app", SecretKeyEnv: testSecretEnv}}
	dir := t.TempDir()
	cfg.EventStore.Path = filepath.Join(dir, "events.db")
	cfg.Events.WAL.Dir = filepath.Join(dir, "wal")
	return cfg
}

// startGateway runs a whole gateway with cfg on an h2c listener.
func startGateway(t *testing.T, cfg config.Config) (*server.Server, *httptest.Server) {
	t.Helper()
	t.Setenv(testSecretEnv, testSecret)
	s, err := server.New(context.Background(), cfg, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewUnstartedServer(s.Handler("admin-token"))
	srv.Config.Protocols = h2c()
	srv.Start()
	t.Cleanup(srv.Close)
	return s, srv
}

func client(url, keyID, secret string) *bedrockruntime.Client {
	return bedrockruntime.New(bedrockruntime.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  credentials.NewStaticCredentialsProvider(keyID, secret, ""),
		Retryer:      aws.NopRetryer{},
	})
}

func userMessage(text string) []types.Message {
	return []types.Message{{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: text}}}}
}

func hasJapanese(s string) bool {
	for _, r := range s {
		if unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) {
			return true
		}
	}
	return false
}

func header(md middleware.Metadata, name string) string {
	resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response)
	if !ok {
		return ""
	}
	return resp.Header.Get(name)
}

func TestGoSDKConverse(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	tests := []struct {
		name   string
		model  string
		msg    string
		wantJA bool
	}{
		{"en by model id", sonnetModelID, "Recommend a fantasy manga", false},
		{"ja by tier name", "sonnet", "おすすめの漫画を教えて", true},
		// The ids apps already send: an alias, an inference profile of
		// one, its ARN, and a model no tier answers to (the first tier).
		{"en by an alias", "anthropic.claude-3-5-sonnet-20240620-v1:0", "Recommend a fantasy manga", false},
		{"en by an inference profile", "us.anthropic.claude-3-5-sonnet-20241022-v2:0", "Recommend a fantasy manga", false},
		{"en by an inference profile ARN", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-3-5-sonnet-20241022-v2:0", "Recommend a fantasy manga", false},
		{"en by an unknown model", "amazon.titan-text-express-v1", "Recommend a fantasy manga", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{
				ModelId:  aws.String(tt.model),
				Messages: userMessage(tt.msg),
				System:   []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "Answer briefly."}},
				InferenceConfig: &types.InferenceConfiguration{
					MaxTokens: aws.Int32(400), Temperature: aws.Float32(0.2), StopSequences: []string{"\n\n\n"},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			msg := out.Output.(*types.ConverseOutputMemberMessage).Value
			text := msg.Content[0].(*types.ContentBlockMemberText).Value
			if text == "" || hasJapanese(text) != tt.wantJA || msg.Role != types.ConversationRoleAssistant {
				t.Fatalf("answer %q (role %s): Japanese = %v, want %v", text, msg.Role, hasJapanese(text), tt.wantJA)
			}
			if out.StopReason != types.StopReasonEndTurn {
				t.Fatalf("stop reason %q", out.StopReason)
			}
			u := out.Usage
			// fmgate's own system prompt is marked for the prompt cache:
			// Bedrock's total counts the tokens read and written too.
			cached := aws.ToInt32(u.CacheReadInputTokens) + aws.ToInt32(u.CacheWriteInputTokens)
			if aws.ToInt32(u.InputTokens) == 0 || aws.ToInt32(u.OutputTokens) == 0 || cached == 0 ||
				aws.ToInt32(u.TotalTokens) != aws.ToInt32(u.InputTokens)+aws.ToInt32(u.OutputTokens)+cached {
				t.Fatalf("usage %d in, %d out, %d read from or written to the cache, %d total", aws.ToInt32(u.InputTokens), aws.ToInt32(u.OutputTokens), cached, aws.ToInt32(u.TotalTokens))
			}
			if got := header(out.ResultMetadata, "X-Fmgate-Tier"); got != "sonnet" {
				t.Fatalf("x-fmgate-tier %q, want sonnet", got)
			}
			if header(out.ResultMetadata, "X-Fmgate-Degraded") != "false" || header(out.ResultMetadata, "X-Fmgate-Trace-Id") == "" {
				t.Fatal("x-fmgate-degraded / x-fmgate-trace-id missing")
			}
		})
	}
}

func TestGoSDKConverseStream(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	out, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{
		ModelId:  aws.String(sonnetModelID),
		Messages: userMessage("ワンピースのおすすめを教えて"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := header(out.ResultMetadata, "X-Fmgate-Tier"); got != "sonnet" {
		t.Fatalf("x-fmgate-tier %q, want sonnet", got)
	}
	es := out.GetStream()
	defer es.Close()
	var (
		text  strings.Builder
		order []string
		stop  types.StopReason
		usage *types.TokenUsage
	)
	for ev := range es.Events() {
		switch v := ev.(type) {
		case *types.ConverseStreamOutputMemberMessageStart:
			order = append(order, "messageStart")
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			if len(order) == 0 || order[len(order)-1] != "delta" {
				order = append(order, "delta")
			}
			text.WriteString(v.Value.Delta.(*types.ContentBlockDeltaMemberText).Value)
		case *types.ConverseStreamOutputMemberContentBlockStop:
			order = append(order, "contentBlockStop")
		case *types.ConverseStreamOutputMemberMessageStop:
			order = append(order, "messageStop")
			stop = v.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			order = append(order, "metadata")
			usage = v.Value.Usage
		}
	}
	if err := es.Err(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "messageStart,delta,contentBlockStop,messageStop,metadata" {
		t.Fatalf("events %s", got)
	}
	if !hasJapanese(text.String()) || stop != types.StopReasonEndTurn || usage == nil || aws.ToInt32(usage.OutputTokens) == 0 {
		t.Fatalf("text %q stop %q usage %+v", text.String(), stop, usage)
	}
}

// TestSignatureIsVerified: a wrong secret, an unknown key, a stale date, a
// body that is not the signed one: each is refused with Bedrock's 403.
func TestSignatureIsVerified(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	t.Run("wrong secret", func(t *testing.T) {
		_, err := client(srv.URL, testKeyID, "not-the-secret").Converse(context.Background(), &bedrockruntime.ConverseInput{
			ModelId: aws.String("sonnet"), Messages: userMessage("hello")})
		wantAPIError(t, err, "InvalidSignatureException", 403)
	})
	t.Run("unknown key", func(t *testing.T) {
		_, err := client(srv.URL, "AKIDUNKNOWN", testSecret).Converse(context.Background(), &bedrockruntime.ConverseInput{
			ModelId: aws.String("sonnet"), Messages: userMessage("hello")})
		wantAPIError(t, err, "UnrecognizedClientException", 403)
	})
	body := `{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`
	tests := []struct {
		name     string
		signedAt time.Time
		send     string // the body sent, when not the signed one
		wantType string
		wantMsg  string
	}{
		{"signed 10 minutes ago", time.Now().Add(-10 * time.Minute), "", "InvalidSignatureException", "expired"},
		{"signed 10 minutes ahead", time.Now().Add(10 * time.Minute), "", "InvalidSignatureException", "expired"},
		{"body swapped after signing", time.Now(), `{"messages":[{"role":"user","content":[{"text":"something else"}]}]}`, "InvalidSignatureException", "x-amz-content-sha256"},
		{"signed now", time.Now(), "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := signedRequest(t, srv.URL+"/model/sonnet/converse", body, tt.signedAt)
			if tt.send != "" {
				req.Body = io.NopCloser(strings.NewReader(tt.send))
				req.ContentLength = int64(len(tt.send))
			}
			status, errType, msg := do(t, req)
			if tt.wantType == "" {
				if status != 200 {
					t.Fatalf("status %d %s %s", status, errType, msg)
				}
				return
			}
			if status != 403 || errType != tt.wantType || !strings.Contains(msg, tt.wantMsg) {
				t.Fatalf("status %d, %s %q; want 403 %s mentioning %q", status, errType, msg, tt.wantType, tt.wantMsg)
			}
		})
	}
}

// signedRequest signs body for url with the test key at signedAt, as the
// SDKs do (x-amz-content-sha256 included).
func signedRequest(t *testing.T, url, body string, signedAt time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256([]byte(body))
	hash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", hash)
	creds := aws.Credentials{AccessKeyID: testKeyID, SecretAccessKey: testSecret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, "bedrock", "us-east-1", signedAt); err != nil {
		t.Fatal(err)
	}
	return req
}

func do(t *testing.T, req *http.Request) (status int, errType, message string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &body)
	return resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"), body.Message
}

func wantAPIError(t *testing.T, err error, code string, status int) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != code {
		t.Fatalf("err = %v; want %s", err, code)
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("err = %v; want HTTP %d", err, status)
	}
}

// TestUnsupportedFieldsAreRefused: what fmgate cannot honour gets a
// ValidationException naming it, through the real SDK.
func TestUnsupportedFieldsAreRefused(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	tests := []struct {
		name string
		in   *bedrockruntime.ConverseInput
		want string
	}{
		{"tool without a schema", &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: userMessage("hi"),
			ToolConfig: &types.ToolConfiguration{Tools: []types.Tool{&types.ToolMemberToolSpec{Value: types.ToolSpecification{
				Name: aws.String("lookup"), InputSchema: &types.ToolInputSchemaMemberJson{}}}}}}, "toolConfig.tools[0].toolSpec.inputSchema.json"},
		{"image block", &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: []types.Message{{Role: types.ConversationRoleUser,
			Content: []types.ContentBlock{&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormatPng,
				Source: &types.ImageSourceMemberBytes{Value: []byte{1, 2, 3}}}}}}}}, "messages[0].content[0].image.source.bytes: the data is not a image/png image"},
		{"image in S3", &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: []types.Message{{Role: types.ConversationRoleUser,
			Content: []types.ContentBlock{&types.ContentBlockMemberImage{Value: types.ImageBlock{Format: types.ImageFormatPng,
				Source: &types.ImageSourceMemberS3Location{Value: types.S3Location{Uri: aws.String("s3://bucket/a.png")}}}}}}}}, "messages[0].content[0].image.source.s3Location"},
		{"topP out of range", &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: userMessage("hi"),
			InferenceConfig: &types.InferenceConfiguration{TopP: aws.Float32(1.5)}}, "topP"},
		{"a prefill ending in a space", &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: []types.Message{
			{Role: types.ConversationRoleUser, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hi"}}},
			{Role: types.ConversationRoleAssistant, Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: "hello "}}},
		}}, "whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Converse(context.Background(), tt.in)
			wantAPIError(t, err, "ValidationException", 400)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v does not mention %q", err, tt.want)
			}
		})
	}
}

// TestRateLimitedIsThrottling: the gateway's 429 reaches the SDK as
// ThrottlingException with Retry-After.
func TestRateLimitedIsThrottling(t *testing.T) {
	cfg := gatewayConfig(t)
	cfg.Policies.RateLimit.Routes["chat"] = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}
	_, srv := startGateway(t, cfg)
	c := client(srv.URL, testKeyID, testSecret)
	in := &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: userMessage("hello")}
	if _, err := c.Converse(context.Background(), in); err != nil {
		t.Fatalf("first call: %v", err)
	}
	_, err := c.Converse(context.Background(), in)
	wantAPIError(t, err, "ThrottlingException", 429)
	var te *types.ThrottlingException
	if !errors.As(err, &te) {
		t.Fatalf("err %T is not the SDK's ThrottlingException", err)
	}
	var re *smithyhttp.ResponseError
	errors.As(err, &re)
	if re.Response.Header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
}

// TestDegradedAnswerUnderSonnetOutage: with Sonnet down, Haiku answers; the
// SDK gets a normal 200 and the headers say how it was served.
func TestDegradedAnswerUnderSonnetOutage(t *testing.T) {
	s, srv := startGateway(t, gatewayConfig(t))
	st, _ := s.Sim.Settings("sonnet")
	st.Outage = true
	if err := s.Sim.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	c := client(srv.URL, testKeyID, testSecret)
	out, err := c.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(sonnetModelID), Messages: userMessage("Recommend a manga")})
	if err != nil {
		t.Fatal(err)
	}
	if header(out.ResultMetadata, "X-Fmgate-Tier") != "haiku" || header(out.ResultMetadata, "X-Fmgate-Degraded") != "true" {
		t.Fatalf("tier %q degraded %q; want haiku true", header(out.ResultMetadata, "X-Fmgate-Tier"), header(out.ResultMetadata, "X-Fmgate-Degraded"))
	}
	sout, err := c.ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{ModelId: aws.String(sonnetModelID), Messages: userMessage("Recommend a manga")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range sout.GetStream().Events() {
		n++
	}
	if err := sout.GetStream().Err(); err != nil || n < 5 {
		t.Fatalf("%d events, err %v", n, err)
	}
	if header(sout.ResultMetadata, "X-Fmgate-Tier") != "haiku" || header(sout.ResultMetadata, "X-Fmgate-Degraded") != "true" {
		t.Fatalf("stream: tier %q degraded %q; want haiku true", header(sout.ResultMetadata, "X-Fmgate-Tier"), header(sout.ResultMetadata, "X-Fmgate-Degraded"))
	}
}

// TestFmgateFrontsFmgate: fmgate's own bedrock provider, pointed at another
// gateway's door, streams its answers, usage included.
func TestFmgateFrontsFmgate(t *testing.T) {
	_, upstream := startGateway(t, gatewayConfig(t))
	p, err := providerbedrock.New(context.Background(), config.Model{
		Name: "upstream", Provider: "bedrock", ModelID: sonnetModelID, Region: "us-east-1", Endpoint: upstream.URL,
	}, providerbedrock.Options{Credentials: credentials.NewStaticCredentialsProvider(testKeyID, testSecret, "")})
	if err != nil {
		t.Fatal(err)
	}
	req := &provider.Request{Model: "upstream", MaxTokens: 300, Messages: []provider.Message{
		{Role: provider.RoleUser, Content: "Recommend a manga"},
		{Role: provider.RoleAssistant, Content: "Do you like fantasy?"},
		{Role: provider.RoleUser, Content: "はい、ファンタジーが好きです"},
	}}
	var deltas int
	resp, err := p.Stream(context.Background(), req, func(string) error { deltas++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if deltas == 0 || !hasJapanese(resp.Text) || resp.Usage.InputTokens == 0 || resp.Usage.OutputTokens == 0 || resp.Usage.Estimated {
		t.Fatalf("%d deltas, text %q, usage %+v", deltas, resp.Text, resp.Usage)
	}
	resp, err = p.Complete(context.Background(), req)
	if err != nil || resp.Text == "" || resp.StopReason != "end_turn" {
		t.Fatalf("complete: %v %q %q", err, resp.Text, resp.StopReason)
	}
}

// TestAccessKeyIDIsNotABearerKey: an access key id travels in every signed
// request's Authorization header, so it alone must not authenticate, on
// this door or any other.
func TestAccessKeyIDIsNotABearerKey(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	body := `{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/model/sonnet/converse", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKeyID)
	req.Header.Set("Content-Type", "application/json")
	if status, errType, msg := do(t, req); status != 403 || errType != "UnrecognizedClientException" {
		t.Fatalf("bedrock door: %d %s %q; want 403 UnrecognizedClientException", status, errType, msg)
	}
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", strings.NewReader(`{"sessionId":"s1","message":"hello"}`))
	req.Header.Set("Authorization", "Bearer "+testKeyID)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/v1/chat: %d; want 401", resp.StatusCode)
	}
}

// TestMidStreamFailureIsAnException: when the model's stream breaks after
// the first delta, the event stream ends with an exception message (the
// SDK's ModelStreamErrorException), never messageStop.
func TestMidStreamFailureIsAnException(t *testing.T) {
	s, srv := startGateway(t, gatewayConfig(t))
	st, _ := s.Sim.Settings("sonnet")
	st.CutAfterTokens = 30
	if err := s.Sim.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	out, err := client(srv.URL, testKeyID, testSecret).ConverseStream(context.Background(), &bedrockruntime.ConverseStreamInput{
		ModelId: aws.String("sonnet"), Messages: userMessage("Recommend a long fantasy manga series and explain why")})
	if err != nil {
		t.Fatal(err)
	}
	es := out.GetStream()
	defer es.Close()
	deltas, stopped := 0, false
	for ev := range es.Events() {
		switch ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			deltas++
		case *types.ConverseStreamOutputMemberMessageStop:
			stopped = true
		}
	}
	var mse *types.ModelStreamErrorException
	if !errors.As(es.Err(), &mse) || deltas == 0 || stopped {
		t.Fatalf("err %v after %d deltas (messageStop %v); want ModelStreamErrorException after some deltas, no messageStop", es.Err(), deltas, stopped)
	}
}

// A key whose models list leaves a tier out gets AccessDeniedException for
// it through the real SDK, and is served by the tiers it names.
func TestKeyModelListOnConverse(t *testing.T) {
	cfg := gatewayConfig(t)
	c := cfg.Auth.Keys[testKeyID]
	c.Models = []string{"haiku"}
	cfg.Auth.Keys[testKeyID] = c
	_, srv := startGateway(t, cfg)
	cl := client(srv.URL, testKeyID, testSecret)
	_, err := cl.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String(sonnetModelID), Messages: userMessage("Recommend a manga")})
	wantAPIError(t, err, "AccessDeniedException", http.StatusForbidden)
	if !strings.Contains(err.Error(), "may use haiku") {
		t.Fatalf("err = %v; want the models the key may use named", err)
	}
	out, err := cl.Converse(context.Background(), &bedrockruntime.ConverseInput{ModelId: aws.String("haiku"), Messages: userMessage("Recommend a manga")})
	if err != nil {
		t.Fatal(err)
	}
	if tier := header(out.ResultMetadata, "X-Fmgate-Tier"); tier != "haiku" {
		t.Fatalf("served by %q, want haiku", tier)
	}
}

// A key created at run time to sign Bedrock requests works through the
// real SDK with the access key pair POST /admin/keys returns, and stops
// at once when it is revoked.
func TestRuntimeSigningKey(t *testing.T) {
	t.Setenv("FMGATE_KEY_SEAL_KEY", strings.Repeat("5a", 32))
	_, srv := startGateway(t, gatewayConfig(t))
	admin := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer admin-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, body := admin(http.MethodPost, "/admin/keys", `{"name":"bedrock app","bedrock":true}`)
	var k struct {
		Key struct {
			ID          string `json:"id"`
			AccessKeyID string `json:"accessKeyId"`
		} `json:"key"`
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(body, &k); status != http.StatusCreated || err != nil || k.Key.AccessKeyID == "" {
		t.Fatalf("POST /admin/keys: %d %s", status, body)
	}
	c := client(srv.URL, k.Key.AccessKeyID, k.Secret)
	in := &bedrockruntime.ConverseInput{ModelId: aws.String("sonnet"), Messages: userMessage("Recommend a manga")}
	if _, err := c.Converse(context.Background(), in); err != nil {
		t.Fatalf("signed with the new pair: %v", err)
	}
	_, err := client(srv.URL, k.Key.AccessKeyID, "not-the-secret").Converse(context.Background(), in)
	wantAPIError(t, err, "InvalidSignatureException", http.StatusForbidden)
	// The access key id alone is no bearer key.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/model/sonnet/converse", strings.NewReader(`{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}`))
	req.Header.Set("Authorization", "Bearer "+k.Key.AccessKeyID)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode == http.StatusOK {
		t.Fatalf("the access key id as a bearer key: %v %v", resp.StatusCode, err)
	}
	if status, body := admin(http.MethodDelete, "/admin/keys/"+k.Key.ID, ""); status != http.StatusOK {
		t.Fatalf("revoke: %d %s", status, body)
	}
	_, err = c.Converse(context.Background(), in)
	wantAPIError(t, err, "UnrecognizedClientException", http.StatusForbidden)
}

// A path under /model/ that is no Bedrock Runtime operation gets
// Bedrock's own 404, and another method than POST a JSON 405, never the
// mux's plain text.
func TestUnknownOperationsInBedrocksShape(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/model/sonnet/converse-async", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	if status, typ, msg := do(t, req); status != http.StatusNotFound || typ != "UnknownOperationException" || !strings.Contains(msg, "converse-stream") {
		t.Fatalf("unknown operation: %d %s %q", status, typ, msg)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/model/sonnet/converse", nil)
	if status, typ, msg := do(t, req); status != http.StatusMethodNotAllowed || typ != "ValidationException" || !strings.Contains(msg, "POST") {
		t.Fatalf("GET: %d %s %q", status, typ, msg)
	}
}
