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

func doneFrame(d stream.Done) step {
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
		f := st.f
		var err error
		if asJSON {
			f.Chunk.Text = st.text
			b, jerr := f.AppendJSON(nil)
			if jerr != nil {
				t.Fatal(jerr)
			}
			err = fs.Send(ctx, b)
		} else {
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

// TestStreamTranscodes: the stream's frames, as values or as the
// contract's JSON, become the exact Messages event stream recorded in
// testdata/transcode (from the sender that decoded JSON frames), each
// frame's events in one write and one flush: the reasoning held until
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
		frames   []step
	}{
		{
			name: "thinking-text-tools",
			thinking: []provider.ThinkingDelta{{Block: 0, Text: "The user asks "}, {Block: 0, Text: "about <weather>."},
				{Block: 0, Signature: "c2lnbmF0dXJl"}, {Redacted: "cmVkYWN0ZWQ="}, {Block: 2, Text: "then answer"}},
			res: &gateway.Result{StopReason: "stop_sequence", StopSequence: "END", ToolCalls: []provider.ToolCall{weather},
				Usage: provider.Usage{InputTokens: 6, CachedInputTokens: 30, CacheWriteTokens: 4, OutputTokens: 7}},
			frames: []step{heartbeat(), chunkFrame(0, "Hello, "), heartbeat(), chunkFrame(1, awkward), doneFrame(done)},
		},
		{
			name:   "tools-only",
			res:    &gateway.Result{StopReason: provider.StopToolUse, ToolCalls: []provider.ToolCall{weather}, Usage: provider.Usage{InputTokens: 9, OutputTokens: 3}},
			frames: []step{doneFrame(done)},
		},
		{
			name:   "usage-from-done",
			frames: []step{doneFrame(done)},
		},
		{
			name: "error-mid-stream",
			frames: []step{errorFrame("upstream_failed", "dropped", 0), chunkFrame(0, "Once upon"),
				errorFrame("rate_limited", "Too many requests, slow down.", 3)},
		},
	}
	for _, tt := range tests {
		for _, m := range modes {
			t.Run(tt.name+"/"+m.name, func(t *testing.T) {
				w := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
				ev := NewEvents(w)
				ev.Hold() // as Stream does
				s := &sender{ev: ev, id: "msg_r1", traceID: "0af7651916cd43dd8448eb211c80319c"}
				out := &streamOutput{snd: s}
				out.BeginTier("sonnet", "claude-sonnet-4", false)
				for _, d := range tt.thinking {
					if err := out.Think(d); err != nil {
						t.Fatal(err)
					}
				}
				s.res = tt.res
				sendAll(t, s, w, tt.frames, m.asJSON)
				golden(t, tt.name+".txt", exchange(w.ResponseRecorder))
			})
		}
	}
}
