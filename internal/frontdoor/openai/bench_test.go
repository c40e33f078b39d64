package openai

import (
	"testing"

	"github.com/fmgate/fmgate/internal/vision"
)

var benchBody = []byte(`{"model":"sonnet","stream":true,"stream_options":{"include_usage":true},"max_tokens":256,` +
	`"messages":[{"role":"system","content":"Answer briefly."},{"role":"user","content":"hello"},` +
	`{"role":"assistant","content":"Hello! How can I help?"},{"role":"user","content":"おすすめのファンタジー漫画を教えて"}]}`)

func BenchmarkDecodeChat(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchBody)))
	for b.Loop() {
		if _, e := DecodeChat(benchBody, vision.Limits{}); e != nil {
			b.Fatal(e)
		}
	}
}

func BenchmarkAppendDelta(b *testing.B) {
	meta := chunkMeta{id: "chatcmpl-0123456789abcdef01234567", created: 1795558911, model: "anthropic.claude-3-sonnet-20240229-v1:0", includeUsage: true}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = meta.appendDelta(buf[:0], "『進撃の巨人』（ダークファンタジー、全34巻完結）", false)
	}
}
