package bedrock_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

const invokeBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":300,"system":"Answer briefly.",` +
	`"messages":[{"role":"user","content":"Recommend a fantasy manga"}]}`

// messageUsage is the usage of an Anthropic message or stream event.
type messageUsage struct {
	InputTokens   int `json:"input_tokens"`
	OutputTokens  int `json:"output_tokens"`
	CacheRead     int `json:"cache_read_input_tokens"`
	CacheCreation int `json:"cache_creation_input_tokens"`
}

// TestGoSDKInvokeModel: the AWS SDK's InvokeModel with Claude's Messages
// body, by a Bedrock model id fmgate knows as an alias of Sonnet, gets
// Anthropic's message JSON, with its usage in the body and Bedrock's
// headers.
func TestGoSDKInvokeModel(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	out, err := c.InvokeModel(context.Background(), &bedrockruntime.InvokeModelInput{
		ModelId: aws.String("anthropic.claude-3-5-sonnet-20240620-v1:0"), Body: []byte(invokeBody),
		ContentType: aws.String("application/json"), Accept: aws.String("application/json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		ID, Type, Role, Model string
		Content               []struct{ Type, Text string }
		StopReason            string       `json:"stop_reason"`
		Usage                 messageUsage `json:"usage"`
	}
	if err := json.Unmarshal(out.Body, &msg); err != nil {
		t.Fatalf("body %s: %v", out.Body, err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || !strings.HasPrefix(msg.ID, "msg_bdrk_") || len(msg.Content) != 1 ||
		msg.Content[0].Text == "" || hasJapanese(msg.Content[0].Text) || msg.StopReason != "end_turn" {
		t.Fatalf("message %+v", msg)
	}
	u := msg.Usage
	if u.InputTokens == 0 || u.OutputTokens == 0 || u.CacheRead+u.CacheCreation == 0 {
		t.Fatalf("usage %+v: want input, output and fmgate's prompt read from or written to the cache", u)
	}
	if got := header(out.ResultMetadata, "X-Amzn-Bedrock-Output-Token-Count"); got == "" || got == "0" {
		t.Errorf("X-Amzn-Bedrock-Output-Token-Count %q", got)
	}
	if got := header(out.ResultMetadata, "X-Fmgate-Tier"); got != "sonnet" {
		t.Errorf("x-fmgate-tier %q, want sonnet", got)
	}
}

// TestGoSDKInvokeModelWithResponseStream: the streamed call gets chunk
// events carrying Anthropic's stream events in order, the text in
// text_delta events, and the invocation metrics on message_stop.
func TestGoSDKInvokeModelWithResponseStream(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	out, err := c.InvokeModelWithResponseStream(context.Background(), &bedrockruntime.InvokeModelWithResponseStreamInput{
		ModelId: aws.String("us.anthropic.claude-3-5-haiku-20241022-v1:0"), Body: []byte(invokeBody),
		ContentType: aws.String("application/json"),
	})
	if err != nil {
		t.Fatal(err)
	}
	es := out.GetStream()
	defer es.Close()
	var kinds []string
	var text strings.Builder
	var stop struct {
		Type    string `json:"type"`
		Metrics struct {
			InputTokenCount, OutputTokenCount, InvocationLatency, FirstByteLatency int
		} `json:"amazon-bedrock-invocationMetrics"`
	}
	for ev := range es.Events() {
		chunk, ok := ev.(*types.ResponseStreamMemberChunk)
		if !ok {
			t.Fatalf("event %T, want chunks", ev)
		}
		var e struct {
			Type  string `json:"type"`
			Delta struct{ Type, Text string }
		}
		if err := json.Unmarshal(chunk.Value.Bytes, &e); err != nil {
			t.Fatalf("chunk %s: %v", chunk.Value.Bytes, err)
		}
		if e.Type == "ping" {
			continue
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != e.Type {
			kinds = append(kinds, e.Type)
		}
		switch e.Type {
		case "content_block_delta":
			text.WriteString(e.Delta.Text)
		case "message_stop":
			_ = json.Unmarshal(chunk.Value.Bytes, &stop)
		}
	}
	if err := es.Err(); err != nil {
		t.Fatal(err)
	}
	want := "message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop"
	if got := strings.Join(kinds, ","); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if text.Len() == 0 || hasJapanese(text.String()) {
		t.Fatalf("text %q", text.String())
	}
	m := stop.Metrics
	if m.InputTokenCount == 0 || m.OutputTokenCount == 0 || m.InvocationLatency < m.FirstByteLatency || m.FirstByteLatency == 0 {
		t.Fatalf("invocation metrics %+v", m)
	}
}

// TestInvokeModelRefusesOtherBodies: a model family's body fmgate does not
// serve (Titan's) and a Messages body with an unsupported field are
// ValidationExceptions that say what is served.
func TestInvokeModelRefusesOtherBodies(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	tests := []struct{ name, body, want string }{
		{"titan", `{"inputText":"hi","textGenerationConfig":{"maxTokenCount":50}}`, "Messages body"},
		{"wrong version", `{"anthropic_version":"2023-06-01","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, "bedrock-2023-05-31"},
		{"adaptive thinking", `{"anthropic_version":"bedrock-2023-05-31","max_tokens":2048,"thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"hi"}]}`, "thinking.type"},
		{"no max_tokens", `{"anthropic_version":"bedrock-2023-05-31","messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.InvokeModel(context.Background(), &bedrockruntime.InvokeModelInput{
				ModelId: aws.String("sonnet"), Body: []byte(tt.body), ContentType: aws.String("application/json")})
			wantAPIError(t, err, "ValidationException", 400)
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v does not mention %q", err, tt.want)
			}
		})
	}
}

// TestGoSDKCountTokens: the SDK's CountTokens, for a Converse input and
// for the same conversation as an InvokeModel body, counts the same input
// tokens, fmgate's system prompt included, by the tier's own count.
func TestGoSDKCountTokens(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	ctx := context.Background()
	conv, err := c.CountTokens(ctx, &bedrockruntime.CountTokensInput{ModelId: aws.String("sonnet"),
		Input: &types.CountTokensInputMemberConverse{Value: types.ConverseTokensRequest{
			System:   []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: "Answer briefly."}},
			Messages: userMessage("Recommend a fantasy manga"),
		}}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := c.CountTokens(ctx, &bedrockruntime.CountTokensInput{ModelId: aws.String("sonnet"),
		Input: &types.CountTokensInputMemberInvokeModel{Value: types.InvokeModelTokensRequest{Body: []byte(invokeBody)}}})
	if err != nil {
		t.Fatal(err)
	}
	n := aws.ToInt32(conv.InputTokens)
	if n < 1000 || aws.ToInt32(inv.InputTokens) != n {
		t.Fatalf("converse %d, invokeModel %d input tokens; want the same count, fmgate's system prompt (over 1,000 tokens) included",
			n, aws.ToInt32(inv.InputTokens))
	}
	if got := header(conv.ResultMetadata, "X-Fmgate-Token-Count"); got != "vendor" {
		t.Errorf("x-fmgate-token-count %q, want vendor", got)
	}
}

// TestGoSDKInvokeModelTools: a Messages body offering a tool through
// InvokeModelWithResponseStream gets the model's call as Anthropic streams
// it — a tool_use block, its input in input_json_delta pieces, stop_reason
// tool_use — and InvokeModel gets the same call whole; a request signed
// with another secret is refused, as on Converse.
func TestGoSDKInvokeModelTools(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	body := []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":300,` +
		`"tools":[{"name":"get_weather","description":"The weather in a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],` +
		`"messages":[{"role":"user","content":"What is the weather in Tokyo today?"}]}`)
	out, err := c.InvokeModelWithResponseStream(context.Background(), &bedrockruntime.InvokeModelWithResponseStreamInput{
		ModelId: aws.String("sonnet"), Body: body, ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	es := out.GetStream()
	defer es.Close()
	var name, input, stop string
	for ev := range es.Events() {
		chunk, ok := ev.(*types.ResponseStreamMemberChunk)
		if !ok {
			t.Fatalf("event %T, want chunks", ev)
		}
		var e struct {
			Type         string
			ContentBlock struct{ Type, Name string } `json:"content_block"`
			Delta        struct {
				Type        string
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			}
		}
		if err := json.Unmarshal(chunk.Value.Bytes, &e); err != nil {
			t.Fatalf("chunk %s: %v", chunk.Value.Bytes, err)
		}
		switch {
		case e.Type == "content_block_start" && e.ContentBlock.Type == "tool_use":
			name = e.ContentBlock.Name
		case e.Type == "content_block_delta" && e.Delta.Type == "input_json_delta":
			input += e.Delta.PartialJSON
		case e.Type == "message_delta":
			stop = e.Delta.StopReason
		}
	}
	if err := es.Err(); err != nil {
		t.Fatal(err)
	}
	var args struct{ City string }
	if name != "get_weather" || stop != "tool_use" || json.Unmarshal([]byte(input), &args) != nil || args.City == "" {
		t.Fatalf("streamed: tool %q, input %q, stop %q; want get_weather's call with a city, stop_reason tool_use", name, input, stop)
	}

	whole, err := c.InvokeModel(context.Background(), &bedrockruntime.InvokeModelInput{ModelId: aws.String("sonnet"), Body: body,
		ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Content []struct {
			Type, Name string
			Input      map[string]any
		}
		StopReason string `json:"stop_reason"`
	}
	if err := json.Unmarshal(whole.Body, &msg); err != nil || msg.StopReason != "tool_use" || len(msg.Content) == 0 ||
		msg.Content[len(msg.Content)-1].Type != "tool_use" || msg.Content[len(msg.Content)-1].Name != "get_weather" {
		t.Fatalf("InvokeModel: %s (%v); want get_weather's tool_use block", whole.Body, err)
	}

	_, err = client(srv.URL, testKeyID, "not-the-secret").InvokeModel(context.Background(), &bedrockruntime.InvokeModelInput{
		ModelId: aws.String("sonnet"), Body: []byte(invokeBody), ContentType: aws.String("application/json")})
	wantAPIError(t, err, "InvalidSignatureException", 403)
}

// TestGoSDKInvokeModelImage: an image block with a base64 source in
// InvokeModel's Messages body reaches the model, which says what it saw.
func TestGoSDKInvokeModelImage(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	c := client(srv.URL, testKeyID, testSecret)
	body := []byte(`{"anthropic_version":"bedrock-2023-05-31","max_tokens":300,"messages":[{"role":"user","content":[` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + visiontest.Base64(visiontest.PNG(800, 600)) + `"}},` +
		`{"type":"text","text":"What manga is on this cover?"}]}]}`)
	out, err := c.InvokeModel(context.Background(), &bedrockruntime.InvokeModelInput{ModelId: aws.String("sonnet"), Body: body,
		ContentType: aws.String("application/json")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.Body), "(I looked at 1 image: 800×600 png.)") {
		t.Fatalf("answer %s; want the model to have seen the 800×600 png", out.Body)
	}
}
