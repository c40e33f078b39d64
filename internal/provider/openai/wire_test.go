package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/jsonscan"
	"github.com/fmgate/fmgate/internal/provider"
)

// BenchmarkDecodeChunk is reading one chat.completion.chunk as the harness's
// mock upstream sends them.
func BenchmarkDecodeChunk(b *testing.B) {
	const data = `{"id":"chatcmpl-mock","object":"chat.completion.chunk","created":1700000000,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"tok7 "},"finish_reason":null}]}`
	var c chunk
	b.ReportAllocs()
	for b.Loop() {
		if err := c.decode(data); err != nil || c.content != "tok7 " {
			b.Fatal(err, c.content)
		}
	}
}

func TestDecodeChunk(t *testing.T) {
	tests := []struct {
		name    string
		data    string
		want    chunk
		wantErr string
	}{
		{name: "plain", data: `{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null,"logprobs":null}]}`,
			want: chunk{model: "m", content: "hi"}},
		{name: "spaces and unknown members of every kind",
			data: " {\n\t\"x\" : [1, -2.5e3, true, false, null, {\"a\":[{}]}, \"s\"] , \"choices\" : [ { \"delta\" : { \"content\" : \"a\" , \"tool_calls\" : [ ] } , \"finish_reason\" : \"stop\" } ] } \r\n",
			want: chunk{content: "a", finish: "stop"}},
		{name: "escapes", data: `{"choices":[{"index":0,"delta":{"content":"\"q\" \\ \/ \b\f\n\r\t \u3042 \ud83d\ude00 \ud83d x"}}]}`,
			want: chunk{content: "\"q\" \\ / \b\f\n\r\t あ 😀 \uFFFD x"}},
		{name: "the first choice of index 0", data: `{"choices":[{"index":1,"delta":{"content":"b"}},{"index":0,"delta":{"content":"a"}},{"index":0,"delta":{"content":"c"}}]}`,
			want: chunk{content: "a"}},
		{name: "usage", data: `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3.0,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":null}}}`,
			// prompt_tokens counts the cached tokens; Usage keeps them apart
			want: chunk{usage: provider.Usage{InputTokens: 8, OutputTokens: 3, CachedInputTokens: 4}, reported: true}},
		{name: "null usage and null delta", data: `{"choices":[{"index":0,"delta":null,"finish_reason":"length"}],"usage":null}`,
			want: chunk{finish: "length"}},
		{name: "error event", data: `{"error":{"message":"slow down","type":"requests","code":429,"param":null}}`,
			wantErr: "error event mid-stream: slow down"},
		{name: "null error", data: `{"error":null,"choices":[{"delta":{"content":"ok"}}]}`, want: chunk{content: "ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c chunk
			err := c.decode(tt.data)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				if se := err.(*streamError); se.typ != "requests" || se.code != "429" {
					t.Fatalf("error event %+v", se)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c != tt.want {
				t.Fatalf("got %+v\nwant %+v", c, tt.want)
			}
		})
	}
}

func TestDecodeChunkRefusesMalformedJSON(t *testing.T) {
	for _, data := range []string{
		``, `[]`, `"x"`, `{`, `{"choices":[`, `{"choices":[{"delta":{"content":"a"}}]`, `{"model":"m"} x`,
		`{"model":"a` + "\n" + `b"}`, `{"model":"\x"}`, `{"model":"\u12"}`, `{"a":tru}`, `{"a":-}`, `{"a":1,}`, `{,}`, `{"a" 1}`,
		`{"a":` + strings.Repeat("[", jsonscan.MaxDepth+2) + strings.Repeat("]", jsonscan.MaxDepth+2) + `}`,
	} {
		var c chunk
		if err := c.decode(data); err != errMalformed {
			t.Errorf("%q: error %v, want errMalformed", data, err)
		}
	}
}

// FuzzDecodeChunk checks the one-pass reader against encoding/json: it
// never panics, accepts every valid JSON object of a chunk's shape, and
// reads the same model and text.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
		`{"choices":[{"delta":{"content":"\u3042\ud83d\ude00\n"}}],"usage":{"prompt_tokens":1}}`,
		`{"error":{"message":"x","code":null}}`,
		`{"a":[1,2.5,-3e2,true,false,null,{}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var c chunk
		err := c.decode(data)
		var ref struct {
			Model   any `json:"model"`
			Choices []struct {
				Index *float64 `json:"index"`
				Delta *struct {
					Content any `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		obj := strings.HasPrefix(strings.TrimLeft(data, " \t\r\n"), "{")
		if !json.Valid([]byte(data)) || !obj || json.Unmarshal([]byte(data), &ref) != nil {
			return // not JSON, or not of a chunk's shape ("choices":{})
		}
		if err == errMalformed {
			t.Fatalf("%q is a valid JSON object, refused", data)
		}
		if err != nil || hasDuplicateKeys(data) {
			return
		}
		if m, ok := ref.Model.(string); ok && m != c.model {
			t.Fatalf("%q: model %q, encoding/json %q", data, c.model, m)
		}
		if len(ref.Choices) == 1 && ref.Choices[0].Index == nil && ref.Choices[0].Delta != nil {
			if s, ok := ref.Choices[0].Delta.Content.(string); ok && s != c.content {
				t.Fatalf("%q: content %q, encoding/json %q", data, c.content, s)
			}
		}
	})
}

// hasDuplicateKeys is a rough test for repeated member names, where
// encoding/json keeps the last and the reader may keep the first, and for
// names in another case ("Content"), which encoding/json matches and the
// reader, as the servers send them in lower case, does not.
func hasDuplicateKeys(data string) bool {
	lower := strings.ToLower(data)
	for _, k := range []string{`"model"`, `"choices"`, `"delta"`, `"content"`, `"index"`} {
		if n := strings.Count(data, k); n > 1 || strings.Count(lower, k) != n {
			return true
		}
	}
	return false
}
