package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// awkward is answer text that exercises every escape of the wire: quotes,
// backslashes, control characters, HTML, U+2028 and multi-byte text.
const awkward = "「進撃の巨人」 \"quoted\" back\\slash\nnew\tline \b\f\x01 <b>&amp;</b> \u2028\u2029 🍣"

// exchange is what a client received: the status, the headers that say how
// the answer was served, and the body.
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

func errorFrame(code, message string, retryAfter int) []byte {
	return stream.ErrorFrame{RequestID: "r1", Code: code, Message: message, RetryAfterSeconds: retryAfter}.AppendJSON(nil)
}

var (
	weather = provider.ToolCall{ID: "call_1", Name: "get_weather",
		Input: json.RawMessage(`{"city":"東京都千代田区","unit":"celsius","days":7,"detail":"hourly forecast please"}`)}
	search     = provider.ToolCall{ID: "call_2", Name: "search", Input: json.RawMessage(`{"q":"ワンピース"}`)}
	doneTokens = stream.Done{Tier: "sonnet", Tokens: stream.Tokens{Input: 40, Output: 7, CacheRead: 30, CacheWrite: 4}, CostUSD: 0.000125}
)

// served is what the door's output tells its transcoder before the done
// frame: who answers and how the answer ended.
type served struct {
	tier, traceID, finish string
	degraded              bool
	usage                 *Usage
	calls                 []provider.ToolCall
}

// TestChatStreamTranscodes: the contract's frames become the exact
// chat.completion.chunk stream recorded in testdata/transcode: text with
// every escape, keep-alives, tool calls in pieces, the stop sequence, the
// usage chunk from the result or, without one, from the done frame, and
// an error event mid-stream.
func TestChatStreamTranscodes(t *testing.T) {
	tests := []struct {
		name   string
		usage  bool // stream_options.include_usage
		tx     served
		stop   string
		frames [][]byte
	}{
		{
			name: "text", usage: true,
			tx: served{tier: "sonnet", traceID: "0af7651916cd43dd8448eb211c80319c", finish: FinishStop,
				usage: &Usage{PromptTokens: 40, CompletionTokens: 7, CachedTokens: 30, CacheWriteTokens: 4, CacheWrite1hTokens: 2, CostUSD: 0.000125}},
			stop: "END",
			frames: [][]byte{stream.AppendHeartbeat(nil), chunkFrame(0, "Hello, "), stream.AppendHeartbeat(nil),
				chunkFrame(1, awkward), doneFrame(t, doneTokens)},
		},
		{
			name: "tools", usage: false,
			tx:     served{tier: "haiku", degraded: true, finish: FinishToolCalls, calls: []provider.ToolCall{weather, search}},
			frames: [][]byte{doneFrame(t, doneTokens)},
		},
		{
			name: "text-then-tools", usage: true,
			tx:     served{tier: "sonnet", finish: FinishToolCalls, calls: []provider.ToolCall{weather}},
			frames: [][]byte{chunkFrame(0, "Let me check."), doneFrame(t, doneTokens)},
		},
		{
			name: "usage-from-done", usage: true,
			tx:     served{tier: "cache"},
			frames: [][]byte{doneFrame(t, doneTokens)},
		},
		{
			name: "error-mid-stream", usage: true,
			tx:     served{tier: "sonnet"},
			frames: [][]byte{errorFrame("upstream_failed", "dropped", 0), chunkFrame(0, "Once upon"), errorFrame("rate_limited", "Too many requests, slow down.", 3)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			meta := chunkMeta{id: "chatcmpl-r1", created: 1795558911, model: "claude-sonnet-4", includeUsage: tt.usage}
			tx := &transcoder{ev: newEvents(rec, meta), tier: tt.tx.tier, degraded: tt.tx.degraded, traceID: tt.tx.traceID,
				finish: tt.tx.finish, toolCalls: tt.tx.calls}
			if tt.tx.usage != nil {
				tx.usage = *tt.tx.usage
			}
			tx.ev.stopSequence = tt.stop
			for _, f := range tt.frames {
				if err := tx.Send(context.Background(), f); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, "chat-"+tt.name+".txt", exchange(rec))
		})
	}
}

// TestChatStreamDropsAnEarlyError: an error before any event leaves the
// response untouched, for the door to answer with an HTTP error.
func TestChatStreamDropsAnEarlyError(t *testing.T) {
	rec := httptest.NewRecorder()
	tx := &transcoder{ev: newEvents(rec, chunkMeta{id: "chatcmpl-r1"})}
	for _, f := range [][]byte{stream.AppendHeartbeat(nil), errorFrame("rate_limited", "slow down", 2)} {
		if err := tx.Send(context.Background(), f); err != nil {
			t.Fatal(err)
		}
	}
	if rec.Body.Len() != 0 || tx.ev.wrote {
		t.Fatalf("wrote %q before the answer began", rec.Body.String())
	}
	tx.refuse(errors.New("the turn failed"))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("refused with %d, want the door's HTTP error", rec.Code)
	}
}

// TestResponsesStreamTranscodes: the same frames become the Responses
// API's events recorded in testdata/transcode.
func TestResponsesStreamTranscodes(t *testing.T) {
	tests := []struct {
		name   string
		tx     served
		frames [][]byte
	}{
		{
			name: "text-and-tools",
			tx: served{tier: "sonnet", traceID: "0af7651916cd43dd8448eb211c80319c", finish: FinishToolCalls,
				usage: &Usage{PromptTokens: 40, CompletionTokens: 7, CachedTokens: 30}, calls: []provider.ToolCall{weather}},
			frames: [][]byte{stream.AppendHeartbeat(nil), chunkFrame(0, "Hello, "), stream.AppendHeartbeat(nil),
				chunkFrame(1, awkward), doneFrame(t, doneTokens)},
		},
		{
			name:   "usage-from-done",
			tx:     served{tier: "haiku", degraded: true, finish: FinishLength},
			frames: [][]byte{chunkFrame(0, "Once upon a time"), doneFrame(t, doneTokens)},
		},
		{
			name:   "error-mid-stream",
			tx:     served{tier: "sonnet"},
			frames: [][]byte{errorFrame("upstream_failed", "dropped", 0), chunkFrame(0, "Once upon"), errorFrame("upstream_failed", "The model stopped answering.", 0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			var kept *Response
			tx := &respTranscoder{w: rec, rc: http.NewResponseController(rec),
				st:   &ResponseStream{R: &Response{ID: "resp_r1", CreatedAt: 1795558911, Model: "claude-sonnet-4", Request: &Responses{Store: true}}},
				keep: func(r *Response) { kept = r }, now: func() time.Time { return time.Unix(1795558913, 0) },
				tier: tt.tx.tier, degraded: tt.tx.degraded, traceID: tt.tx.traceID, finish: tt.tx.finish, usage: tt.tx.usage, calls: tt.tx.calls}
			for _, f := range tt.frames {
				if err := tx.Send(context.Background(), f); err != nil {
					t.Fatal(err)
				}
			}
			golden(t, "responses-"+tt.name+".txt", exchange(rec))
			if done := tt.name != "error-mid-stream"; done != (kept != nil) {
				t.Errorf("response kept: %v, want %v", kept != nil, done)
			}
		})
	}
}
