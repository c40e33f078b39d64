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

// step is one frame the stream hands the door: a value, and for a chunk
// its text.
type step struct {
	f    stream.Frame
	text string
}

func chunkFrame(i int, text string) step {
	return step{f: stream.Frame{Type: stream.TypeChunk, Chunk: stream.Chunk{RequestID: "r1", Index: i}}, text: text}
}

func heartbeat() step { return step{f: stream.Frame{Type: stream.TypeHeartbeat}} }

func doneFrame(_ *testing.T, d stream.Done) step {
	d.RequestID = "r1"
	return step{f: stream.Frame{Type: stream.TypeDone, Done: d}}
}

func errorFrame(code, message string, retryAfter int) step {
	return step{f: stream.Frame{Type: stream.TypeError, Error: stream.ErrorFrame{RequestID: "r1", Code: code, Message: message, RetryAfterSeconds: retryAfter}}}
}

// flushCounter counts the writes and flushes that reach the connection.
type flushCounter struct {
	*httptest.ResponseRecorder
	writes, flushes int
}

func (c *flushCounter) Write(b []byte) (int, error) { c.writes++; return c.ResponseRecorder.Write(b) }
func (c *flushCounter) Flush()                      { c.flushes++; c.ResponseRecorder.Flush() }

// sendAll hands steps to fs as the stream does (values) or, with asJSON,
// as the contract's JSON frames through Send, and checks that each frame
// that wrote anything wrote and flushed once.
func sendAll(t *testing.T, fs stream.FrameSender, w *flushCounter, steps []step, asJSON bool) {
	t.Helper()
	ctx := context.Background()
	for i, st := range steps {
		before, writes, flushes := w.Body.Len(), w.writes, w.flushes
		var err error
		if asJSON {
			f := st.f
			f.Chunk.Text = st.text
			b, jerr := f.AppendJSON(nil)
			if jerr != nil {
				t.Fatal(jerr)
			}
			err = fs.Send(ctx, b)
		} else {
			f := st.f
			var text []byte
			if f.Type == stream.TypeChunk {
				text = []byte(st.text)
			}
			err = fs.SendFrame(ctx, &f, text)
		}
		if err != nil {
			t.Fatalf("frame %d (%s): %v", i, st.f.Type, err)
		}
		if wrote := w.Body.Len() > before; wrote && (w.writes-writes != 1 || w.flushes-flushes != 1) {
			t.Errorf("frame %d (%s) took %d writes and %d flushes, want 1 and 1", i, st.f.Type, w.writes-writes, w.flushes-flushes)
		}
	}
}

// modes are the two ways a door is handed frames.
var modes = []struct {
	name   string
	asJSON bool
}{{"values", false}, {"json", true}}

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

// TestChatStreamTranscodes: the stream's frames, as values or as the
// contract's JSON, become the exact chat.completion.chunk stream recorded
// in testdata/transcode (from the transcoder that decoded JSON frames),
// each frame in one write and one flush: text with
// every escape, keep-alives, tool calls in pieces, the stop sequence, the
// usage chunk from the result or, without one, from the done frame, and
// an error event mid-stream.
func TestChatStreamTranscodes(t *testing.T) {
	tests := []struct {
		name   string
		usage  bool // stream_options.include_usage
		tx     served
		stop   string
		frames []step
	}{
		{
			name: "text", usage: true,
			tx: served{tier: "sonnet", traceID: "0af7651916cd43dd8448eb211c80319c", finish: FinishStop,
				usage: &Usage{PromptTokens: 40, CompletionTokens: 7, CachedTokens: 30, CacheWriteTokens: 4, CacheWrite1hTokens: 2, CostUSD: 0.000125}},
			stop: "END",
			frames: []step{heartbeat(), chunkFrame(0, "Hello, "), heartbeat(),
				chunkFrame(1, awkward), doneFrame(t, doneTokens)},
		},
		{
			name: "tools", usage: false,
			tx:     served{tier: "haiku", degraded: true, finish: FinishToolCalls, calls: []provider.ToolCall{weather, search}},
			frames: []step{doneFrame(t, doneTokens)},
		},
		{
			name: "text-then-tools", usage: true,
			tx:     served{tier: "sonnet", finish: FinishToolCalls, calls: []provider.ToolCall{weather}},
			frames: []step{chunkFrame(0, "Let me check."), doneFrame(t, doneTokens)},
		},
		{
			name: "usage-from-done", usage: true,
			tx:     served{tier: "cache"},
			frames: []step{doneFrame(t, doneTokens)},
		},
		{
			name: "error-mid-stream", usage: true,
			tx:     served{tier: "sonnet"},
			frames: []step{errorFrame("upstream_failed", "dropped", 0), chunkFrame(0, "Once upon"), errorFrame("rate_limited", "Too many requests, slow down.", 3)},
		},
	}
	for _, tt := range tests {
		for _, m := range modes {
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
				meta := chunkMeta{id: "chatcmpl-r1", created: 1795558911, model: "claude-sonnet-4", includeUsage: tt.usage}
				tx := &transcoder{ev: newEvents(w, meta), tier: tt.tx.tier, degraded: tt.tx.degraded, traceID: tt.tx.traceID,
					finish: tt.tx.finish, toolCalls: tt.tx.calls}
				if tt.tx.usage != nil {
					tx.usage = *tt.tx.usage
				}
				tx.ev.stopSequence = tt.stop
				sendAll(t, tx, w, tt.frames, m.asJSON)
				golden(t, "chat-"+tt.name+".txt", exchange(w.ResponseRecorder))
			})
		}
	}
}

// TestChatStreamDropsAnEarlyError: an error before any event leaves the
// response untouched, for the door to answer with an HTTP error.
func TestChatStreamDropsAnEarlyError(t *testing.T) {
	w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	rec := w.ResponseRecorder
	tx := &transcoder{ev: newEvents(w, chunkMeta{id: "chatcmpl-r1"})}
	sendAll(t, tx, w, []step{heartbeat(), errorFrame("rate_limited", "slow down", 2)}, false)
	if rec.Body.Len() != 0 || tx.ev.wrote || w.flushes != 0 {
		t.Fatalf("wrote %q before the answer began", rec.Body.String())
	}
	tx.refuse(errors.New("the turn failed"))
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("refused with %d, want the door's HTTP error", rec.Code)
	}
}

// TestResponsesStreamTranscodes: the same frames become the Responses
// API's events recorded in testdata/transcode, one write and one flush a
// frame.
func TestResponsesStreamTranscodes(t *testing.T) {
	tests := []struct {
		name   string
		tx     served
		frames []step
	}{
		{
			name: "text-and-tools",
			tx: served{tier: "sonnet", traceID: "0af7651916cd43dd8448eb211c80319c", finish: FinishToolCalls,
				usage: &Usage{PromptTokens: 40, CompletionTokens: 7, CachedTokens: 30}, calls: []provider.ToolCall{weather}},
			frames: []step{heartbeat(), chunkFrame(0, "Hello, "), heartbeat(),
				chunkFrame(1, awkward), doneFrame(t, doneTokens)},
		},
		{
			name:   "usage-from-done",
			tx:     served{tier: "haiku", degraded: true, finish: FinishLength},
			frames: []step{chunkFrame(0, "Once upon a time"), doneFrame(t, doneTokens)},
		},
		{
			name:   "error-mid-stream",
			tx:     served{tier: "sonnet"},
			frames: []step{errorFrame("upstream_failed", "dropped", 0), chunkFrame(0, "Once upon"), errorFrame("upstream_failed", "The model stopped answering.", 0)},
		},
	}
	for _, tt := range tests {
		for _, m := range modes {
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
				var kept *Response
				tx := &respTranscoder{w: w, rc: http.NewResponseController(w),
					st:   &ResponseStream{R: &Response{ID: "resp_r1", CreatedAt: 1795558911, Model: "claude-sonnet-4", Request: &Responses{Store: true}}},
					keep: func(r *Response) { kept = r }, now: func() time.Time { return time.Unix(1795558913, 0) },
					tier: tt.tx.tier, degraded: tt.tx.degraded, traceID: tt.tx.traceID, finish: tt.tx.finish, usage: tt.tx.usage, calls: tt.tx.calls}
				sendAll(t, tx, w, tt.frames, m.asJSON)
				golden(t, "responses-"+tt.name+".txt", exchange(w.ResponseRecorder))
				if done := tt.name != "error-mid-stream"; done != (kept != nil) {
					t.Errorf("response kept: %v, want %v", kept != nil, done)
				}
			})
		}
	}
}
