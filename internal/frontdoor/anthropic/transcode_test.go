package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// awkward is answer text that exercises every escape of the wire: quotes,
// backslashes, control characters, HTML, U+2028 and multi-byte text.
const awkward = "「進撃の巨人」 \"quoted\" back\\slash\nnew\tline \b\f\x01 <b>&amp;</b> \u2028\u2029 🍣"

// exchange is what a client received: the status, the headers and the body.
func exchange(rec *httptest.ResponseRecorder) []byte {
	res := rec.Result()
	var b bytes.Buffer
	b.WriteString(res.Status + "\n")
	var keys []string
	for k := range res.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k + ": " + strings.Join(res.Header[k], ", ") + "\n")
	}
	b.WriteString("\n")
	b.Write(rec.Body.Bytes())
	return b.Bytes()
}

// golden compares got with testdata/transcode/name, or rewrites it with
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "transcode", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to record it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the recorded stream\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func chunkFrame(i int, text string) []byte {
	return stream.Chunk{RequestID: "r1", Index: i, Text: text}.AppendJSON(nil)
}

func doneFrame(t *testing.T, d stream.Done) []byte {
	t.Helper()
	d.RequestID = "r1"
	b, err := d.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStreamTranscodes: the contract's frames become the exact Messages
// event stream recorded in testdata/transcode: the reasoning held until
// the text, text with every escape, pings, tool calls in pieces, the stop
// sequence and the usage from the result or, without one, from the done
// frame, and an error event mid-stream.
func TestStreamTranscodes(t *testing.T) {
	weather := provider.ToolCall{ID: "toolu_1", Name: "get_weather",
		Input: json.RawMessage(`{"city":"東京都千代田区","unit":"celsius","days":7,"detail":"hourly forecast please"}`)}
	done := stream.Done{Tier: "haiku", Degraded: true, Tokens: stream.Tokens{Input: 40, Output: 7, CacheRead: 30, CacheWrite: 4}, CostUSD: 0.000125}
	tests := []struct {
		name     string
		thinking []provider.ThinkingDelta
		res      *gateway.Result
		frames   [][]byte
	}{
		{
			name: "thinking-text-tools",
			thinking: []provider.ThinkingDelta{{Block: 0, Text: "The user asks "}, {Block: 0, Text: "about <weather>."},
				{Block: 0, Signature: "c2lnbmF0dXJl"}, {Redacted: "cmVkYWN0ZWQ="}, {Block: 2, Text: "then answer"}},
			res: &gateway.Result{StopReason: "stop_sequence", StopSequence: "END", ToolCalls: []provider.ToolCall{weather},
				Usage: provider.Usage{InputTokens: 6, CachedInputTokens: 30, CacheWriteTokens: 4, OutputTokens: 7}},
			frames: [][]byte{stream.AppendHeartbeat(nil), chunkFrame(0, "Hello, "), stream.AppendHeartbeat(nil),
				chunkFrame(1, awkward), doneFrame(t, done)},
		},
		{
			name:   "tools-only",
			res:    &gateway.Result{StopReason: provider.StopToolUse, ToolCalls: []provider.ToolCall{weather}, Usage: provider.Usage{InputTokens: 9, OutputTokens: 3}},
			frames: [][]byte{doneFrame(t, done)},
		},
		{
			name:   "usage-from-done",
			frames: [][]byte{doneFrame(t, done)},
		},
		{
			name: "error-mid-stream",
			frames: [][]byte{stream.ErrorFrame{RequestID: "r1", Code: "upstream_failed", Message: "dropped"}.AppendJSON(nil),
				chunkFrame(0, "Once upon"),
				stream.ErrorFrame{RequestID: "r1", Code: "rate_limited", Message: "Too many requests, slow down.", RetryAfterSeconds: 3}.AppendJSON(nil)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s := &sender{ev: NewEvents(rec), id: "msg_r1", traceID: "0af7651916cd43dd8448eb211c80319c"}
			out := &streamOutput{snd: s}
			out.BeginTier("sonnet", "claude-sonnet-4", false)
			for _, d := range tt.thinking {
				if err := out.Think(d); err != nil {
					t.Fatal(err)
				}
			}
			s.res = tt.res
			for _, f := range tt.frames {
				if err := s.Send(context.Background(), f); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, tt.name+".txt", exchange(rec))
		})
	}
}
