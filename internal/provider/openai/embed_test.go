package openai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/openai"
)

// embeddingsServer speaks OpenAI's POST /v1/embeddings: it records each
// request's body and answers with answer(body).
func embeddingsServer(t *testing.T, answer func(w http.ResponseWriter, body map[string]any)) (string, *[]map[string]any) {
	t.Helper()
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/embeddings" || r.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("%s %s with %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
			http.NotFound(w, r)
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("body: %v", err)
		}
		got = append(got, body)
		answer(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1", &got
}

func newEmbedder(t *testing.T, base string) *openai.Embedder {
	t.Helper()
	e, err := openai.NewEmbedder(openai.EmbedderConfig{Config: openai.Config{Name: "oai-embed", ModelID: "text-embedding-3-small",
		BaseURL: base, APIKey: "sk-test"}, Dimensions: 1536, CountTokens: func(s string) int { return len(strings.Fields(s)) }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEmbedderSpeaksOpenAIsWire: the inputs go as one array with the
// model and encoding_format float; "dimensions" only when it is not the
// model's own length; the vectors come back in the inputs' order whatever
// the order of the data, with the server's usage.
func TestEmbedderSpeaksOpenAIsWire(t *testing.T) {
	base, got := embeddingsServer(t, func(w http.ResponseWriter, body map[string]any) {
		dims := 1536
		if d, ok := body["dimensions"].(float64); ok {
			dims = int(d)
		}
		vec := func(x float64) string {
			v := make([]string, dims)
			for i := range v {
				v[i] = fmt.Sprint(x)
			}
			return "[" + strings.Join(v, ",") + "]"
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","model":"text-embedding-3-small","data":[`+
			`{"object":"embedding","index":1,"embedding":%s},{"object":"embedding","index":0,"embedding":%s}],`+
			`"usage":{"prompt_tokens":7,"total_tokens":7}}`, vec(0.25), vec(0.5))
	})
	e := newEmbedder(t, base)
	for _, dims := range []int{1536, 256} {
		r, err := e.Embed(context.Background(), &provider.EmbedRequest{Model: "oai-embed", Inputs: []string{"first text", "second"}, Dimensions: dims})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Vectors) != 2 || len(r.Vectors[0]) != dims || r.Vectors[0][0] != 0.5 || r.Vectors[1][0] != 0.25 {
			t.Fatalf("dims %d: vectors %d×%d, firsts %v %v", dims, len(r.Vectors), len(r.Vectors[0]), r.Vectors[0][0], r.Vectors[1][0])
		}
		if r.InputTokens != 7 || r.ModelID != "text-embedding-3-small" {
			t.Fatalf("usage %d model %q", r.InputTokens, r.ModelID)
		}
	}
	if len(*got) != 2 {
		t.Fatalf("%d requests", len(*got))
	}
	first, second := (*got)[0], (*got)[1]
	if first["model"] != "text-embedding-3-small" || first["encoding_format"] != "float" ||
		!slices.Equal(toStrings(first["input"]), []string{"first text", "second"}) {
		t.Fatalf("request %v", first)
	}
	if _, sent := first["dimensions"]; sent {
		t.Fatalf("the model's own length was sent as dimensions: %v", first)
	}
	if second["dimensions"] != float64(256) {
		t.Fatalf("another length: request %v", second)
	}
}

func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestEmbedderEstimatesMissingUsage: a server that reports no usage is
// billed the gateway's count of the inputs.
func TestEmbedderEstimatesMissingUsage(t *testing.T) {
	base, _ := embeddingsServer(t, func(w http.ResponseWriter, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","model":"m","data":[{"object":"embedding","index":0,"embedding":[1,0]}]}`)
	})
	r, err := newEmbedder(t, base).Embed(context.Background(), &provider.EmbedRequest{Model: "oai-embed", Inputs: []string{"three words here"}, Dimensions: 2})
	if err != nil || r.InputTokens != 3 {
		t.Fatalf("tokens %v, err %v; want the count of 3", r, err)
	}
}

// TestEmbedderClassifiesFailures: the server's statuses become the kinds
// retries and breakers act on, with its retry hint; a vector missing from
// the answer is the server's failure.
func TestEmbedderClassifiesFailures(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		header    string
		body      string
		want      provider.Kind
		wantRetry time.Duration
	}{
		{"throttled", 429, "2", `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, provider.KindThrottled, 2 * time.Second},
		{"unavailable", 503, "", `{"error":{"message":"overloaded","type":"server_error"}}`, provider.KindUnavailable, 0},
		{"too long", 400, "", `{"error":{"message":"maximum context length is 8192 tokens","type":"invalid_request_error"}}`, provider.KindValidation, 0},
		{"missing vector", 200, "", `{"object":"list","model":"m","data":[{"object":"embedding","index":1,"embedding":[1]}],"usage":{"prompt_tokens":1,"total_tokens":1}}`, provider.KindUnavailable, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, _ := embeddingsServer(t, func(w http.ResponseWriter, _ map[string]any) {
				w.Header().Set("Content-Type", "application/json")
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			})
			_, err := newEmbedder(t, base).Embed(context.Background(), &provider.EmbedRequest{Model: "oai-embed", Inputs: []string{"a", "b"}, Dimensions: 1})
			if provider.KindOf(err) != tt.want || provider.RetryAfterOf(err) != tt.wantRetry {
				t.Fatalf("err %v (kind %s, retry %s); want %s, retry %s", err, provider.KindOf(err), provider.RetryAfterOf(err), tt.want, tt.wantRetry)
			}
		})
	}
}
