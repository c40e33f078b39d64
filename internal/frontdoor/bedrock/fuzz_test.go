package bedrock

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
	"github.com/fmgate/fmgate/internal/vision"
)

// fakePipeline answers every turn at once with a fixed text, trusting any
// caller (the demo profile): the fuzz targets exercise the door's decoding.
type fakePipeline struct{}

func (fakePipeline) Run(_ context.Context, t *gateway.Turn, out gateway.Output) (*gateway.Result, error) {
	if t.Message == "" && len(t.ToolResults) == 0 && len(t.Images) == 0 || t.StartTier == "" {
		return nil, errors.New("the door passed an empty turn")
	}
	if err := out.Write("ok"); err != nil {
		return nil, err
	}
	res := &gateway.Result{Text: "ok", Tier: "sonnet", StopReason: "end_turn"}
	return res, out.Finish(res)
}

func (fakePipeline) NewStreamOutput(context.Context, stream.Sender, string) *gateway.StreamOutput {
	panic("not used: the fuzz targets call converse")
}

func (fakePipeline) Authenticate(_ *http.Request, _, _ string, t *gateway.Turn) error {
	t.UserID = "fuzz"
	return nil
}

func (fakePipeline) AuthenticateSigned(*http.Request, string, *gateway.Turn) error {
	return errors.New("no signed keys in the fuzz targets")
}

func (fakePipeline) SigningSecret(string, func(string) string) (string, bool) { return "", false }

func (fakePipeline) CountTokens(_ context.Context, t *gateway.Turn) (int, bool, error) {
	return len(t.Message), true, nil
}

func (fakePipeline) ResolveModel(name string) (config.Model, bool) {
	return config.Model{Name: "sonnet"}, name == "sonnet"
}

var seeds = []string{
	`{"messages":[{"role":"user","content":[{"text":"hello"}]}]}`,
	`{"messages":[{"role":"user","content":[{"text":"こんにちは"},{"text":"!"}]},{"role":"assistant","content":[{"text":"はい"}]},{"role":"user","content":[{"text":"続けて"}]}],"system":[{"text":"be brief"}],"inferenceConfig":{"maxTokens":10,"temperature":0.5,"stopSequences":["END"]}}`,
	`{"messages":[{"role":"user","content":[{"image":{"format":"png","source":{"bytes":"AAAA"}}}]}]}`,
	`{"messages":[{"role":"user","content":[{"image":{"format":"png","source":{"bytes":"iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAIAAAASFvFNAAAAGklEQVR4nGJhYGhgZGBgZGBgARFgAAgAAP//CTEAjOq97YwAAAAASUVORK5CYII="}}},{"text":"what is it?"}]}]}`,
	`{"messages":[{"role":"user","content":[{"image":{"format":"jpeg","source":{"s3Location":{"uri":"s3://b/k.jpg"}}}},{"text":"x"}]}]}`,
	`{"messages":[{"role":"user","content":[{"image":{"format":"bmp","source":{"bytes":"Qk0="}}}]}]}`,
	`{"messages":[],"toolConfig":{"tools":[]}}`,
	`{"messages":[{"role":"user","content":[{"text":1}]}]}`,
	`{"messages":[{"role":"user","content":[{"text":"x"}]}],"inferenceConfig":{"topP":0.1}}`,
	`{"messages":[{"role":"user","content":[{"text":"weather?"}]},{"role":"assistant","content":[{"text":"Looking."},{"toolUse":{"toolUseId":"t1","name":"get_weather","input":{"city":"東京"}}}]},{"role":"user","content":[{"toolResult":{"toolUseId":"t1","content":[{"text":"rain"},{"json":{"mm":3}}],"status":"error"}},{"cachePoint":{"type":"default"}}]}],"toolConfig":{"tools":[{"toolSpec":{"name":"get_weather","description":"d","inputSchema":{"json":{"type":"object"}}}}],"toolChoice":{"tool":{"name":"get_weather"}}}}`,
	`{"messages":[{"role":"user","content":[{"text":"x"}]}],"toolConfig":{"tools":[{"cachePoint":{"type":"default"}}],"toolChoice":{"any":{}}}}`,
	`{"messages":[{"role":"user","content":[{"text":"x"}]}],"guardrailConfig":{"guardrailIdentifier":"gr-1","guardrailVersion":"DRAFT","trace":"enabled","streamProcessingMode":"sync"}}`,
	`{"messages":[{"role":"user","content":[{"text":"x"}]}],"outputConfig":{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"name":"manga","schema":"{\"type\":\"object\",\"properties\":{\"t\":{\"$ref\":\"#/$defs/s\"}},\"$defs\":{\"s\":{\"type\":\"string\"}}}"}}}}}`,
	`{"messages":[{"role":"user","content":[{"text":"x"}]}],"outputConfig":{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"schema":"{\"$ref\":\"http://169.254.169.254/\"}"}}},"effort":"high"}}`,
	`{"messages":null}`, `[]`, `{`, ``, `{"messages":[{"role":"user","content":[{"text":"x"}]}]} {}`,
}

// FuzzDecode: any body decodes or is refused with a ValidationError; a
// decoded request always ends with a user message.
func FuzzDecode(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := Decode("sonnet", body, vision.Limits{})
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || ve.Msg == "" {
				t.Fatalf("err %v is not a ValidationError", err)
			}
			return
		}
		if len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Role != "user" {
			t.Fatalf("decoded %+v", req)
		}
		if err := provider.CheckTools(req.Tools, req.ToolChoice); err != nil {
			t.Fatalf("decoded tools the provider refuses: %v", err)
		}
		if err := provider.CheckToolPairing(req.Messages); err != nil {
			t.Fatalf("decoded tool blocks that do not pair: %v", err)
		}
	})
}

// FuzzDoor: whatever path and body arrive, the door answers 200 or
// Bedrock's 4xx shape (X-Amzn-ErrorType and a JSON message), never a 5xx.
func FuzzDoor(f *testing.F) {
	for _, s := range seeds {
		f.Add("sonnet", []byte(s))
	}
	f.Add("anthropic.claude-3-5-sonnet-20240620-v1%3A0", []byte(seeds[0]))
	f.Add("a%2Fb", []byte(seeds[1]))
	h := New(fakePipeline{}, Options{})
	f.Fuzz(func(t *testing.T, model string, body []byte) {
		if strings.ContainsAny(model, "/?# \t\r\n") {
			model = "x" // keep the path one segment, as a client would encode it
		}
		r := httptest.NewRequest(http.MethodPost, "/model/sonnet/converse", strings.NewReader(string(body)))
		r.URL.RawPath = "/model/" + model + "/converse"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch {
		case w.Code == http.StatusOK:
		case w.Code >= 400 && w.Code < 500:
			if w.Header().Get("X-Amzn-ErrorType") == "" || !strings.HasPrefix(w.Body.String(), `{"message":`) {
				t.Fatalf("%d without Bedrock's error shape: %q", w.Code, w.Body.String())
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	})
}

// FuzzVerifySigV4: any Authorization and X-Amz-Date headers are refused
// with a signatureError (or, by chance, verify), never a panic.
func FuzzVerifySigV4(f *testing.F) {
	f.Add("AWS4-HMAC-SHA256 Credential=AKID/20260102/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature="+strings.Repeat("ab", 32), "20260102T030405Z")
	f.Add("AWS4-HMAC-SHA256 Credential=AKID/20260102/us-east-1/bedrock/aws4_request, SignedHeaders=:authority;content-length;x-amz-date, Signature="+strings.Repeat("0", 64), "20260102T030405Z")
	f.Add("AWS4-HMAC-SHA256 Credential=/, SignedHeaders=, Signature=", "")
	f.Add("AWS4-HMAC-SHA256 ,,,==", "x")
	now, _ := time.Parse(amzDateFormat, "20260102T030405Z")
	f.Fuzz(func(t *testing.T, auth, date string) {
		r := httptest.NewRequest(http.MethodPost, "/model/sonnet/converse", strings.NewReader("{}"))
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Amz-Date", date)
		err := verifySigV4(context.Background(), r, []byte("{}"), "secret", now)
		var se *signatureError
		if err != nil && !errors.As(err, &se) {
			t.Fatalf("err %T %v is not a signatureError", err, err)
		}
	})
}
