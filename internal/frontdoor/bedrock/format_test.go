package bedrock

import (
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision"
)

// TestDecodeOutputConfigAndMetadata: Converse's outputConfig.textFormat
// becomes the answer's JSON schema, and requestMetadata the call's
// metadata; what cannot be honoured is refused by name.
func TestDecodeOutputConfigAndMetadata(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":[{"text":"x"}]}]`
	const schema = `{\"type\":\"object\",\"properties\":{\"title\":{\"type\":\"string\"}}}`
	req, err := Decode("sonnet", []byte(`{`+msgs+`,"outputConfig":{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"name":"manga","description":"one manga","schema":"`+schema+`"}}}}}`), vision.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if f := req.Format; f.Kind != provider.FormatJSONSchema || f.Name != "manga" || f.Description != "one manga" || !strings.Contains(string(f.Schema), `"title"`) {
		t.Fatalf("format %+v", f)
	}
	tests := []struct{ name, config, want string }{
		{"effort", `{"effort":"low"}`, "outputConfig.effort"},
		{"type", `{"textFormat":{"type":"text"}}`, "outputConfig.textFormat.type"},
		{"no schema", `{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"name":"m"}}}}`, "jsonSchema.schema is required"},
		{"schema not JSON", `{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"schema":"{nope"}}}}`, "jsonSchema.schema must be"},
		{"schema does not compile", `{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"schema":"{\"type\":5}"}}}}`, "jsonSchema.schema:"},
		{"bad name", `{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"name":"a b","schema":"{}"}}}}`, "jsonSchema.name"},
		{"unknown member", `{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"schema":"{}"}}},"other":1}`, "outputConfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("sonnet", []byte(`{`+msgs+`,"outputConfig":`+tt.config+`}`), vision.Limits{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
	req, err = Decode("sonnet", []byte(`{`+msgs+`,"requestMetadata":{"tenant":"storefront"}}`), vision.Limits{})
	if err != nil || req.Metadata["tenant"] != "storefront" {
		t.Fatalf("requestMetadata: %+v (%v)", req, err)
	}
	for _, md := range []string{`{"a":1}`, `[]`, `{"":"x"}`, `{"k":"` + strings.Repeat("v", 257) + `"}`,
		`{"1":"","2":"","3":"","4":"","5":"","6":"","7":"","8":"","9":"","10":"","11":"","12":"","13":"","14":"","15":"","16":"","17":""}`} {
		if _, err := Decode("sonnet", []byte(`{`+msgs+`,"requestMetadata":`+md+`}`), vision.Limits{}); err == nil || !strings.Contains(err.Error(), "requestMetadata") {
			t.Errorf("requestMetadata %s: %v, want a refusal naming it", md, err)
		}
	}
	_, err = Decode("sonnet", []byte(`{`+msgs+`,"inferenceConfig":{"maxTokens":4000},"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":1024}},"outputConfig":{"textFormat":{"type":"json_schema","structure":{"jsonSchema":{"schema":"{}"}}}}}`), vision.Limits{})
	if err == nil || !strings.Contains(err.Error(), "thinking") {
		t.Fatalf("format with thinking: %v, want a refusal naming thinking", err)
	}
}
