package anthropic

import (
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/stream"
)

func eventNames(body string) string {
	re := regexp.MustCompile(`(?m)^event: (\S+)$`)
	var names []string
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		names = append(names, m[1])
	}
	return strings.Join(names, " ")
}

// TestSenderTranscodesFrames: heartbeats before the first text are dropped
// (the status and headers are not committed yet), later ones are pings; the
// done frame closes the block and carries the result's stop reason and
// whole usage.
func TestSenderTranscodesFrames(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &sender{ev: NewEvents(rec), id: "msg_1", traceID: "t1"}
	out := &streamOutput{snd: s}
	out.BeginTier("haiku", "claude-haiku", true)
	ctx := context.Background()
	send := func(b []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	send(stream.AppendHeartbeat(nil), nil)
	if rec.Body.Len() != 0 || s.began() {
		t.Fatalf("a heartbeat before any text wrote %q", rec.Body.String())
	}
	send(stream.Chunk{RequestID: "r", Index: 0, Text: "こんにちは"}.AppendJSON(nil), nil)
	send(stream.AppendHeartbeat(nil), nil)
	s.res = &gateway.Result{StopReason: "max_tokens", Usage: provider.Usage{InputTokens: 9, OutputTokens: 4, CachedInputTokens: 2, CacheWriteTokens: 1}}
	send(stream.Done{RequestID: "r", Tier: "haiku", Degraded: true}.AppendJSON(nil))

	body := rec.Body.String()
	want := "message_start content_block_start content_block_delta ping content_block_stop message_delta message_stop"
	if got := eventNames(body); got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	for _, w := range []string{`"model":"claude-haiku"`, `"text":"こんにちは"`, `"stop_reason":"max_tokens"`,
		`"input_tokens":9`, `"output_tokens":4`, `"cache_read_input_tokens":2`, `"cache_creation_input_tokens":1`} {
		if !strings.Contains(body, w) {
			t.Errorf("stream lacks %s:\n%s", w, body)
		}
	}
	h := rec.Header()
	if h.Get(HeaderTier) != "haiku" || h.Get(HeaderDegraded) != "true" || h.Get(HeaderTraceID) != "t1" {
		t.Errorf("headers %v", h)
	}
}

func TestSenderLeavesAnEarlyErrorToTheDoor(t *testing.T) {
	rec := httptest.NewRecorder()
	s := &sender{ev: NewEvents(rec), id: "msg_1"}
	if err := s.Send(context.Background(), stream.ErrorFrame{RequestID: "r", Code: "upstream_failed", Message: "m"}.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if rec.Body.Len() != 0 || s.began() {
		t.Fatalf("an error before any text wrote %q; the door answers it with its status", rec.Body.String())
	}
	if err := s.Send(context.Background(), stream.Chunk{RequestID: "r", Text: "a"}.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), stream.ErrorFrame{RequestID: "r", Code: "rate_limited", Message: "slow down"}.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(eventNames(rec.Body.String()), "content_block_delta error") || !strings.Contains(rec.Body.String(), `"rate_limit_error"`) {
		t.Fatalf("stream %s: want it to end with a rate_limit_error event", rec.Body.String())
	}
}
