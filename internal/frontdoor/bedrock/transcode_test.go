package bedrock

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
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

// oneWrite checks that what ran since the counts before wrote and flushed
// at most once.
func oneWrite(t *testing.T, w *flushCounter, what string, before, writes, flushes int) {
	t.Helper()
	if wrote := w.Body.Len() > before; wrote && (w.writes-writes != 1 || w.flushes-flushes != 1) {
		t.Errorf("%s took %d writes and %d flushes, want 1 and 1", what, w.writes-writes, w.flushes-flushes)
	}
}

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
		oneWrite(t, w, fmt.Sprintf("frame %d (%s)", i, st.f.Type), before, writes, flushes)
	}
}

// modes are the two ways a door is handed frames.
var modes = []struct {
	name   string
	asJSON bool
}{{"values", false}, {"json", true}}

// TestConverseStreamTranscodes: the stream's frames, as values or as the
// contract's JSON, and the result the door ends the answer with, become
// the exact event stream recorded in testdata/transcode (from the sender
// that decoded JSON frames), each frame and the end in one write and one
// flush: the reasoning held until the text, text with every
// escape, tool calls in pieces, the stop reason with the usage, and an
// exception mid-stream.
func TestConverseStreamTranscodes(t *testing.T) {
	weather := provider.ToolCall{ID: "tooluse_1", Name: "get_weather",
		Input: json.RawMessage(`{"city":"東京都千代田区","unit":"celsius","days":7,"detail":"hourly forecast please"}`)}
	doneJSON := step{f: stream.Frame{Type: stream.TypeDone, Done: stream.Done{RequestID: "r1", Tier: "sonnet", Tokens: stream.Tokens{Input: 40, Output: 7}}}}
	tests := []struct {
		name     string
		thinking []provider.ThinkingDelta
		frames   []step
		res      *gateway.Result // nil: the answer failed
	}{
		{
			name: "thinking-text-tools",
			thinking: []provider.ThinkingDelta{{Block: 0, Text: "The user asks "}, {Block: 0, Text: "about <weather>."},
				{Block: 0, Signature: "c2lnbmF0dXJl"}, {Redacted: "cmVkYWN0ZWQ="}},
			frames: []step{heartbeat(), chunkFrame(0, "Hello, "), heartbeat(), chunkFrame(1, awkward), doneJSON},
			res: &gateway.Result{StopReason: provider.StopToolUse, ToolCalls: []provider.ToolCall{weather},
				Usage: provider.Usage{InputTokens: 6, CachedInputTokens: 30, CacheWriteTokens: 4, OutputTokens: 7}},
		},
		{
			name:   "tools-only",
			frames: []step{doneJSON},
			res:    &gateway.Result{StopReason: provider.StopToolUse, ToolCalls: []provider.ToolCall{weather}, Usage: provider.Usage{InputTokens: 9, OutputTokens: 3}},
		},
		{
			name:   "empty",
			frames: []step{doneJSON},
			res:    &gateway.Result{Usage: provider.Usage{InputTokens: 9}},
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
				es := &eventSender{w: w, ew: NewEventWriter(w), traceID: "0af7651916cd43dd8448eb211c80319c"}
				es.ew.Hold() // as converseStream does
				out := &tierOutput{s: es}
				out.BeginTier("sonnet", "anthropic.claude-sonnet-4", false)
				for _, d := range tt.thinking {
					if err := out.Think(d); err != nil {
						t.Fatal(err)
					}
				}
				sendAll(t, es, w, tt.frames, m.asJSON)
				if tt.res != nil {
					before, writes, flushes := w.Body.Len(), w.writes, w.flushes
					if err := es.finish(tt.res, 1234*time.Millisecond); err != nil {
						t.Fatal(err)
					}
					oneWrite(t, w, "the end", before, writes, flushes)
				}
				golden(t, tt.name+".bin", exchange(w.ResponseRecorder))
			})
		}
	}
}
