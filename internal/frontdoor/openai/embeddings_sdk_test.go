package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/server"
)

// embedGateway is a running fmgate that records the encoding_format of
// each embeddings request it receives.
type embedGateway struct {
	srv       *httptest.Server
	mu        sync.Mutex
	encodings []string
}

func startEmbedGateway(t *testing.T) *embedGateway {
	t.Helper()
	s, err := server.New(context.Background(), quickConfig(t), server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := &embedGateway{}
	h := s.Handler(adminToken)
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/embeddings" {
			body, _ := io.ReadAll(r.Body)
			var req struct {
				Encoding string `json:"encoding_format"`
			}
			_ = json.Unmarshal(body, &req)
			g.mu.Lock()
			g.encodings = append(g.encodings, req.Encoding)
			g.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { g.srv.Close(); s.Close() })
	return g
}

func (g *embedGateway) lastEncoding() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.encodings[len(g.encodings)-1]
}

// jsEmbeddings is what the openai npm client reported
// (testdata/embeddings.cjs).
type jsEmbeddings struct {
	Model string `json:"model"`
	Usage struct {
		Prompt int `json:"prompt_tokens"`
		Total  int `json:"total_tokens"`
	} `json:"usage"`
	Tier     string      `json:"tier"`
	Degraded string      `json:"degraded"`
	Kinds    []string    `json:"kinds"`
	Indexes  []int       `json:"indexes"`
	Vectors  [][]float64 `json:"vectors"`
	Failed   bool        `json:"failed"`
	Class    string      `json:"class"`
	Status   int         `json:"status"`
	Param    string      `json:"param"`
	Message  string      `json:"message"`
}

func runJSEmbeddings(t *testing.T, url, kase, model string, input any) jsEmbeddings {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: scripts/test installs it (apt-get install nodejs)")
	}
	modules, err := filepath.Abs("../testdata/sdk/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		t.Fatalf("the openai npm client is not installed in %s: run scripts/test (npm ci there)", modules)
	}
	in, _ := json.Marshal(input)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/embeddings.cjs", kase, model, string(in))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "FMGATE_URL="+url, "FMGATE_KEY="+testKey)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node embeddings.cjs %s: %v\n%s", kase, err, stderr.String())
	}
	var out jsEmbeddings
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	return out
}

// sameVector reports whether got, as a client decoded it, is want to the
// bit: float32 values survive both encodings exactly.
func sameVector(got []float64, want []float32) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if float32(got[i]) != want[i] {
			return false
		}
	}
	return true
}

// TestJSClientEmbeddings: the official JS client embeds a string and an
// array. By default it asks for base64 and decodes it, handing the app
// arrays of numbers; asked for base64 it hands the app the strings, which
// the app decodes; asked for floats it gets numbers: every way, the
// vectors are the simulated model's own, bit for bit.
func TestJSClientEmbeddings(t *testing.T) {
	g := startEmbedGateway(t)
	const titan = "amazon.titan-embed-text-v2:0"
	tests := []struct {
		kase         string
		input        any
		wantEncoding string
		wantKind     string
	}{
		{"default", "A fantasy manga about dragons", "base64", "Array"},
		{"default", []string{"A fantasy manga about dragons", "おすすめの漫画を教えて"}, "base64", "Array"},
		{"base64", []string{"A fantasy manga about dragons", "おすすめの漫画を教えて"}, "base64", "string"},
		{"float", []string{"A fantasy manga about dragons", "おすすめの漫画を教えて"}, "float", "Array"},
	}
	for _, tt := range tests {
		texts, ok := tt.input.([]string)
		if !ok {
			texts = []string{tt.input.(string)}
		}
		t.Run(tt.kase+"/"+map[bool]string{true: "array", false: "string"}[ok], func(t *testing.T) {
			s := runJSEmbeddings(t, g.srv.URL, tt.kase, "titan-embed", tt.input)
			if s.Failed {
				t.Fatalf("%s: %s", s.Class, s.Message)
			}
			if got := g.lastEncoding(); got != tt.wantEncoding {
				t.Errorf("the SDK sent encoding_format %q; want %q", got, tt.wantEncoding)
			}
			if s.Model != titan || s.Tier != "titan-embed" || s.Degraded != "false" {
				t.Errorf("model %q tier %q degraded %q", s.Model, s.Tier, s.Degraded)
			}
			want := 0
			for _, x := range texts {
				want += sim.CountTokens(x)
			}
			if s.Usage.Prompt != want || s.Usage.Total != want {
				t.Errorf("usage %+v; want %d tokens", s.Usage, want)
			}
			if len(s.Vectors) != len(texts) || !slices.Equal(s.Indexes, []int{0, 1}[:len(texts)]) {
				t.Fatalf("%d vectors, indexes %v, for %d inputs", len(s.Vectors), s.Indexes, len(texts))
			}
			for i, x := range texts {
				if s.Kinds[i] != tt.wantKind {
					t.Errorf("embedding %d reached the app as %s; want %s", i, s.Kinds[i], tt.wantKind)
				}
				if !sameVector(s.Vectors[i], sim.EmbedText(titan, x, 1024)) {
					t.Errorf("embedding %d is not the model's vector of %q", i, x)
				}
			}
		})
	}
	s := runJSEmbeddings(t, g.srv.URL, "default", "titan-embed", []int{1212, 318})
	if !s.Failed || s.Status != http.StatusBadRequest || s.Param != "input" || s.Class != "BadRequestError" {
		t.Errorf("token ids: %+v; want a BadRequestError on input", s)
	}
	s = runJSEmbeddings(t, g.srv.URL, "default", "text-embedding-3-small", "hello")
	if !s.Failed || s.Status != http.StatusNotFound || s.Class != "NotFoundError" {
		t.Errorf("an unknown model: %+v; want a NotFoundError", s)
	}
}

// TestGoSDKEmbeddingsAuthentication: the embeddings door takes the chat
// door's keys, and refuses others as the chat door does.
func TestGoSDKEmbeddingsAuthentication(t *testing.T) {
	g := startEmbedGateway(t)
	params := sdk.EmbeddingNewParams{Model: "titan-embed", Input: sdk.EmbeddingNewParamsInputUnion{OfString: sdk.String("hello")}}
	bad := sdk.NewClient(option.WithBaseURL(g.srv.URL+"/v1/"), option.WithAPIKey("sk-wrong"), option.WithMaxRetries(0))
	_, err := bad.Embeddings.New(context.Background(), params)
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusUnauthorized || apiErr.Code != "invalid_api_key" {
		t.Fatalf("a wrong key: %v; want 401 invalid_api_key", err)
	}
	good := sdk.NewClient(option.WithBaseURL(g.srv.URL+"/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	res, err := good.Embeddings.New(context.Background(), params)
	if err != nil || len(res.Data) != 1 || len(res.Data[0].Embedding) != 1024 {
		t.Fatalf("the test key: %v, %+v", err, res)
	}
}
