package bedrock

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
	"time"

	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// awkward is answer text that exercises every escape of the wire: quotes,
// backslashes, control characters, HTML, U+2028 and multi-byte text.
const awkward = "「進撃の巨人」 \"quoted\" back\\slash\nnew\tline \b\f\x01 <b>&amp;</b> \u2028\u2029 🍣"

// exchange is what a client received: the status, the headers and the
// event-stream bytes.
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
		t.Errorf("%s differs from the recorded stream\ngot:  %q\nwant: %q", name, got, want)
	}
}

func chunkFrame(i int, text string) []byte {
	return stream.Chunk{RequestID: "r1", Index: i, Text: text}.AppendJSON(nil)
}

// TestConverseStreamTranscodes: the contract's frames, and the result the
// door ends the answer with, become the exact event stream recorded in
// testdata/transcode: the reasoning held until the text, text with every
// escape, tool calls in pieces, the stop reason with the usage, and an
// exception mid-stream.
func TestConverseStreamTranscodes(t *testing.T) {
	weather := provider.ToolCall{ID: "tooluse_1", Name: "get_weather",
		Input: json.RawMessage(`{"city":"東京都千代田区","unit":"celsius","days":7,"detail":"hourly forecast please"}`)}
	done := stream.Done{RequestID: "r1", Tier: "sonnet", Tokens: stream.Tokens{Input: 40, Output: 7}}
	doneJSON, err := done.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		thinking []provider.ThinkingDelta
		frames   [][]byte
		res      *gateway.Result // nil: the answer failed
	}{
		{
			name: "thinking-text-tools",
			thinking: []provider.ThinkingDelta{{Block: 0, Text: "The user asks "}, {Block: 0, Text: "about <weather>."},
				{Block: 0, Signature: "c2lnbmF0dXJl"}, {Redacted: "cmVkYWN0ZWQ="}},
			frames: [][]byte{stream.AppendHeartbeat(nil), chunkFrame(0, "Hello, "), stream.AppendHeartbeat(nil), chunkFrame(1, awkward), doneJSON},
			res: &gateway.Result{StopReason: provider.StopToolUse, ToolCalls: []provider.ToolCall{weather},
				Usage: provider.Usage{InputTokens: 6, CachedInputTokens: 30, CacheWriteTokens: 4, OutputTokens: 7}},
		},
		{
			name:   "tools-only",
			frames: [][]byte{doneJSON},
			res:    &gateway.Result{StopReason: provider.StopToolUse, ToolCalls: []provider.ToolCall{weather}, Usage: provider.Usage{InputTokens: 9, OutputTokens: 3}},
		},
		{
			name:   "empty",
			frames: [][]byte{doneJSON},
			res:    &gateway.Result{Usage: provider.Usage{InputTokens: 9}},
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
			es := &eventSender{w: rec, ew: NewEventWriter(rec), traceID: "0af7651916cd43dd8448eb211c80319c"}
			out := &tierOutput{s: es}
			out.BeginTier("sonnet", "anthropic.claude-sonnet-4", false)
			for _, d := range tt.thinking {
				if err := out.Think(d); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tt.frames {
				if err := es.Send(context.Background(), f); err != nil {
					t.Fatal(err)
				}
			}
			if tt.res != nil {
				if err := es.finish(tt.res, 1234*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, tt.name+".bin", exchange(rec))
		})
	}
}
