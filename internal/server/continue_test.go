package server

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/stream"
)

// TestContinuationAfterMidStreamCut: with stream.continuation on, an answer
// whose model drops mid-stream is finished by the next tier in the same
// stream; the done frame says continued, names the tier of each part, and
// bills both: its tokens and cost are the sums of the two model calls'
// spans. With it off (the default), the same cut ends with an error frame.
func TestContinuationAfterMidStreamCut(t *testing.T) {
	tests := []struct {
		name         string
		continuation bool
	}{
		{"on", true},
		{"off by default", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := quickConfig()
			cfg.Stream.Continuation = tt.continuation
			path := filepath.Join(t.TempDir(), "events.jsonl")
			cfg.Events.Sinks.JSONL.Path = path
			sc := newScenario(t, cfg)
			adminPut(t, sc.srv, "/admin/sim/sonnet", `{"cutAfterTokens":20}`)

			frames := sseFrames(t, sc.srv.URL, "cut-"+strings.ReplaceAll(tt.name, " ", "-"), "Can you recommend a good manga?", "en")
			var text strings.Builder
			for _, f := range frames {
				if f.Type == stream.TypeChunk {
					text.WriteString(f.Chunk.Text)
				}
			}
			last := frames[len(frames)-1]
			if !tt.continuation {
				if last.Type != stream.TypeError || text.Len() == 0 {
					t.Fatalf("last frame %+v after %q: want the honest error frame", last, text.String())
				}
				return
			}
			if last.Type != stream.TypeDone {
				t.Fatalf("last frame %+v: want done", last)
			}
			d := last.Done
			want := [stream.MaxParts]stream.Part{{Tier: "sonnet"}, {Tier: "haiku"}}
			if !d.Continued || d.Parts[0].Tier != want[0].Tier || d.Parts[1].Tier != want[1].Tier || d.Tier != "haiku" || !d.Degraded {
				t.Fatalf("done %+v: want continued, parts sonnet then haiku, degraded", d)
			}
			if got := utf8.RuneCountInString(text.String()); got != d.Parts[0].Chars+d.Parts[1].Chars || d.Parts[0].Chars == 0 || d.Parts[1].Chars == 0 {
				t.Fatalf("text has %d characters; parts say %d + %d", got, d.Parts[0].Chars, d.Parts[1].Chars)
			}
			sc.s.Close() // flush the emitter
			var in, out int
			var usd float64
			for _, e := range readSpans(t, path) {
				if e.Name == "model_attempt" && e.TraceID == d.TraceID {
					in += e.Resource.TokensIn
					out += e.Resource.TokensOut
					usd += e.Resource.CostUSD
				}
			}
			if d.Tokens.Input != in || d.Tokens.Output != out || d.Tokens.Output == 0 {
				t.Errorf("done tokens %+v; the model calls' spans add up to %d in, %d out", d.Tokens, in, out)
			}
			if diff := d.CostUSD - usd; diff > 1e-12 || diff < -1e-12 {
				t.Errorf("done cost %v; the model calls' spans add up to %v", d.CostUSD, usd)
			}
		})
	}
}
