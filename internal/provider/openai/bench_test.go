package openai_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/openai"
)

// chunkedServer answers every call with the same stream of n
// chat.completion.chunk events and a usage chunk, as a server at full speed
// does: what is left is the adapter's, the SDK's and the wire's cost.
func chunkedServer(b *testing.B, n int) string {
	b.Helper()
	var body strings.Builder
	for i := range n {
		delta := fmt.Sprintf(`{"content":"tok%d "}`, i)
		if i == 0 {
			delta = `{"role":"assistant","content":"tok0 "}`
		}
		finish := "null"
		if i == n-1 {
			finish = `"stop"`
		}
		fmt.Fprintf(&body, "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]}\n\n", delta, finish)
	}
	fmt.Fprintf(&body, "data: {\"id\":\"chatcmpl-b\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-x\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", n, n+5)
	body.WriteString("data: [DONE]\n\n")
	stream := body.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, stream)
	}))
	b.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// BenchmarkStream is one streamed answer of 20 chunks plus the usage chunk
// from a loopback server that costs almost nothing: the adapter's decoding
// of the request and the stream, the SDK's request path and the wire.
//
//	go test -run '^$' -bench BenchmarkStream -benchmem ./internal/provider/openai
func BenchmarkStream(b *testing.B) {
	p, req := benchProvider(b, chunkedServer(b, 20))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := p.Stream(ctx, req, func(string) error { return nil })
		if err != nil {
			b.Fatal(err)
		}
		if resp.Usage.OutputTokens != 20 {
			b.Fatalf("usage %+v", resp.Usage)
		}
	}
}

// BenchmarkComplete is one whole answer from a loopback server that costs
// almost nothing: the adapter's request and answer, the SDK's request path
// and the wire.
//
//	go test -run '^$' -bench BenchmarkComplete -benchmem ./internal/provider/openai
func BenchmarkComplete(b *testing.B) {
	const answer = `{"id":"chatcmpl-b","object":"chat.completion","created":1700000000,"model":"gpt-x",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Try Frieren."},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	b.Cleanup(srv.Close)
	p, req := benchProvider(b, srv.URL+"/v1")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := p.Complete(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if resp.Usage.OutputTokens != 3 {
			b.Fatalf("usage %+v", resp.Usage)
		}
	}
}

// benchProvider is the provider the benchmarks call at base, and the
// request they send: a short system prompt and one question.
func benchProvider(b *testing.B, base string) (*openai.Provider, *provider.Request) {
	b.Helper()
	p, err := openai.New(openai.Config{Name: "local", ModelID: "gpt-x", BaseURL: base, APIKey: "sk-test"})
	if err != nil {
		b.Fatal(err)
	}
	return p, &provider.Request{Model: "local", System: "You are the store assistant.", MaxTokens: 400,
		Messages: []provider.Message{{Role: provider.RoleUser, Content: "Which fantasy manga should I read next?"}}}
}
