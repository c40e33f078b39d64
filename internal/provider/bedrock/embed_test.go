package bedrock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/bedrock"
)

const (
	titanID  = "amazon.titan-embed-text-v2:0"
	cohereID = "cohere.embed-multilingual-v3"
)

// invocation is one InvokeModel call the stub received.
type invocation struct {
	path string
	auth string
	body map[string]any
}

// invokeStub is Bedrock Runtime's InvokeModel on the wire: it records each
// call and answers with answer(call).
func invokeStub(t *testing.T, answer func(w http.ResponseWriter, c invocation)) (string, func() []invocation) {
	t.Helper()
	var mu sync.Mutex
	var calls []invocation
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		c := invocation{path: r.URL.Path, auth: r.Header.Get("Authorization")}
		if err := json.Unmarshal(raw, &c.body); err != nil {
			t.Errorf("body %q: %v", raw, err)
		}
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
		answer(w, c)
	}))
	return srv.URL, func() []invocation {
		mu.Lock()
		defer mu.Unlock()
		return append([]invocation(nil), calls...)
	}
}

func newEmbedder(t *testing.T, endpoint, modelID string, dims int) *bedrock.Embedder {
	t.Helper()
	e, err := bedrock.NewEmbedder(context.Background(), config.Model{Name: "embed", Provider: "bedrock", ModelID: modelID,
		Region: "us-east-1", Endpoint: endpoint}, dims, func(s string) int { return len(strings.Fields(s)) },
		bedrock.Options{Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// vector is a vector of n values, each x.
func vector(n int, x float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = x
	}
	return v
}

// TestTitanEmbedsEachInput: Titan gets one signed InvokeModel call per
// input at /model/{id}/invoke with {inputText, dimensions, normalize};
// the vectors come back in the inputs' order, billed with each call's
// inputTextTokenCount.
func TestTitanEmbedsEachInput(t *testing.T) {
	url, calls := invokeStub(t, func(w http.ResponseWriter, c invocation) {
		text := c.body["inputText"].(string)
		dims := int(c.body["dimensions"].(float64))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", "999") // the body's count wins
		_ = json.NewEncoder(w).Encode(map[string]any{"embedding": vector(dims, float64(len(text))), "inputTextTokenCount": len(text)})
	})
	e := newEmbedder(t, url, titanID, 1024)
	inputs := make([]string, 20)
	want := 0
	for i := range inputs {
		inputs[i] = strings.Repeat("x", i+1)
		want += i + 1
	}
	r, err := e.Embed(context.Background(), &provider.EmbedRequest{Model: "embed", Inputs: inputs, Dimensions: 256})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range r.Vectors {
		if len(v) != 256 || v[0] != float32(i+1) {
			t.Fatalf("vector %d: %d dimensions, first %v", i, len(v), v[0])
		}
	}
	if r.InputTokens != want || r.ModelID != titanID {
		t.Fatalf("tokens %d model %q; want %d", r.InputTokens, r.ModelID, want)
	}
	got := calls()
	if len(got) != len(inputs) {
		t.Fatalf("%d calls for %d inputs", len(got), len(inputs))
	}
	for _, c := range got {
		if c.path != "/model/"+titanID+"/invoke" {
			t.Fatalf("path %q", c.path)
		}
		if !strings.Contains(c.auth, "AWS4-HMAC-SHA256 Credential=AKIDTEST/") || !strings.Contains(c.auth, "/bedrock/aws4_request") {
			t.Fatalf("authorization %q: want SigV4 by the static key", c.auth)
		}
		if c.body["normalize"] != true || c.body["dimensions"] != float64(256) || len(c.body) != 3 {
			t.Fatalf("body %v", c.body)
		}
	}
}

// TestCohereEmbedsInBatches: Cohere gets the inputs CohereBatch at a time
// as search documents, without output_dimension for its own length,
// billed with InvokeModel's token header; both answer shapes are read.
func TestCohereEmbedsInBatches(t *testing.T) {
	url, calls := invokeStub(t, func(w http.ResponseWriter, c invocation) {
		texts := c.body["texts"].([]any)
		vecs := make([][]float64, len(texts))
		for i, x := range texts {
			vecs[i] = vector(4, float64(len(x.(string))))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", fmt.Sprint(10*len(texts)))
		if len(texts) == bedrock.CohereBatch {
			_ = json.NewEncoder(w).Encode(map[string]any{"id": "a", "response_type": "embeddings_floats", "embeddings": vecs})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "b", "response_type": "embeddings_by_type", "embeddings": map[string]any{"float": vecs}})
	})
	e := newEmbedder(t, url, cohereID, 4)
	inputs := make([]string, bedrock.CohereBatch+4)
	for i := range inputs {
		inputs[i] = strings.Repeat("y", i%7+1)
	}
	r, err := e.Embed(context.Background(), &provider.EmbedRequest{Model: "embed", Inputs: inputs, Dimensions: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range r.Vectors {
		if len(v) != 4 || v[0] != float32(i%7+1) {
			t.Fatalf("vector %d: %v", i, v)
		}
	}
	if r.InputTokens != 10*len(inputs) {
		t.Fatalf("tokens %d; want the headers' %d", r.InputTokens, 10*len(inputs))
	}
	got := calls()
	if len(got) != 2 || len(got[0].body["texts"].([]any)) != bedrock.CohereBatch || len(got[1].body["texts"].([]any)) != 4 {
		t.Fatalf("%d calls; want a full batch and the rest", len(got))
	}
	for _, c := range got {
		if c.path != "/model/"+cohereID+"/invoke" || c.body["input_type"] != "search_document" {
			t.Fatalf("call %s %v", c.path, c.body)
		}
		if _, sent := c.body["output_dimension"]; sent {
			t.Fatalf("the model's own length sent: %v", c.body)
		}
	}
}

// TestEmbedderFailuresAreClassified: Bedrock's exceptions become the kinds
// retries and breakers act on, as on Converse.
func TestEmbedderFailuresAreClassified(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		exception string
		want      provider.Kind
	}{
		{"throttled", 429, "ThrottlingException", provider.KindThrottled},
		{"unavailable", 503, "ServiceUnavailableException", provider.KindUnavailable},
		{"timeout", 408, "ModelTimeoutException", provider.KindTimeout},
		{"too long", 400, "ValidationException", provider.KindValidation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, _ := invokeStub(t, func(w http.ResponseWriter, _ invocation) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Amzn-ErrorType", tt.exception)
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, `{"message":"%s"}`, tt.exception)
			})
			for _, id := range []string{titanID, cohereID} {
				_, err := newEmbedder(t, url, id, 4).Embed(context.Background(), &provider.EmbedRequest{Model: "embed", Inputs: []string{"a", "b"}, Dimensions: 4})
				var pe *provider.Error
				if provider.KindOf(err) != tt.want || !errors.As(err, &pe) || pe.Code != tt.exception || pe.RetryAfter != 3*time.Second {
					t.Fatalf("%s: err %v; want %s with code %s and the retry hint", id, err, tt.want, tt.exception)
				}
			}
		})
	}
	url, _ := invokeStub(t, func(w http.ResponseWriter, _ invocation) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"inputTextTokenCount":3}`)
	})
	if _, err := newEmbedder(t, url, titanID, 4).Embed(context.Background(), &provider.EmbedRequest{Model: "embed", Inputs: []string{"a"}, Dimensions: 4}); provider.KindOf(err) != provider.KindUnavailable {
		t.Fatalf("an answer without an embedding: %v; want unavailable", err)
	}
	if _, err := bedrock.NewEmbedder(context.Background(), config.Model{Name: "e", ModelID: "amazon.titan-embed-image-v1", Region: "us-east-1"}, 4, nil,
		bedrock.Options{Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")}); err == nil {
		t.Fatal("an image embedding model was accepted")
	}
}
