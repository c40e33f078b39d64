package stream

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// frameRecorder is a FrameSender that keeps, in its recorder, the JSON each
// frame it gets would have been; Send must never be called by a Stream.
type frameRecorder struct {
	*recorder
	sends atomic.Int32
}

func (f *frameRecorder) Send(ctx context.Context, frame []byte) error {
	f.sends.Add(1)
	return f.recorder.Send(ctx, frame)
}

func (f *frameRecorder) SendFrame(ctx context.Context, fr *Frame, text []byte) error {
	var b []byte
	if fr.Type == TypeChunk {
		if fr.Chunk.Text != "" {
			panic("a chunk's text came in Chunk.Text as well as text")
		}
		b = appendChunk(nil, fr.Chunk, text)
	} else {
		var err error
		if b, err = fr.AppendJSON(nil); err != nil {
			return err
		}
	}
	return f.recorder.Send(ctx, b)
}

// TestFrameSenderGetsTheFramesAPlainSenderGets: a FrameSender is handed, as
// values, exactly the frames a plain Sender receives as JSON — a status,
// chunks, an oversize chunk split into the same pieces, a heartbeat and the
// done frame with its metrics — and its Send is never called.
func TestFrameSenderGetsTheFramesAPlainSenderGets(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxPendingBytes = 1 << 20
	big := strings.Repeat("漫画\x01\u2028\"<&>", 3000) // escapes make its JSON ~4x its bytes
	run := func(sender interface {
		Sender
		raw() [][]byte
	}, rec *recorder) [][]byte {
		c := newFakeClock()
		s := New(context.Background(), sender, "r\"1", cfg, c)
		defer s.Close()
		s.Status(StatusFrame{State: StateQueued, Message: "queued"})
		sent(t, s, rec, 1)
		mustWrite(t, s, "こんにちは")
		sent(t, s, rec, 2)
		mustWrite(t, s, big)
		c.Advance(100 * time.Millisecond)
		frames := sent(t, s, rec, 4)
		c.Advance(5 * time.Second)
		sent(t, s, rec, len(frames)+1)
		d := Done{Tier: "sonnet", Degraded: true, Confidence: 0.75, Tokens: Tokens{Input: 40, Output: 7, CacheRead: 30, CacheWrite: 4},
			CostUSD: 0.000125, CacheSavedUSD: 0.00002, TraceID: "t1", Continued: true, Parts: [MaxParts]Part{{Tier: "sonnet", Chars: 5}, {Tier: "haiku", Chars: 3}}}
		if err := s.Finish(d); err != nil {
			t.Fatal(err)
		}
		return sender.raw()
	}
	plain := newRecorder()
	want := run(plain, plain)
	fr := &frameRecorder{recorder: newRecorder()}
	got := run(fr, fr.recorder)
	if n := fr.sends.Load(); n != 0 {
		t.Fatalf("the stream called Send %d times on a FrameSender", n)
	}
	if len(got) != len(want) {
		t.Fatalf("a FrameSender got %d frames, a plain Sender %d", len(got), len(want))
	}
	split := 0
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("frame %d:\n got %.200s\nwant %.200s", i, got[i], want[i])
		}
		if bytes.Contains(want[i], []byte(`"subIndex"`)) {
			split++
		}
	}
	if split < 2 {
		t.Fatalf("%d split pieces: the oversize chunk was not split", split)
	}
}

// TestSendDecodedHandsTheFrameOn: a FrameSender's Send can take the
// contract's JSON, which SendDecoded decodes into the values SendFrame
// takes.
func TestSendDecodedHandsTheFrameOn(t *testing.T) {
	var got []string
	fs := frameFunc(func(f *Frame, text []byte) error {
		got = append(got, string(f.Type)+":"+f.Chunk.Text+":"+string(text)+":"+f.Error.Code)
		return nil
	})
	ctx := context.Background()
	for _, frame := range [][]byte{
		Chunk{RequestID: "r", Index: 3, Text: "ワンピース \u2028"}.AppendJSON(nil),
		ErrorFrame{RequestID: "r", Code: "rate_limited"}.AppendJSON(nil),
		AppendHeartbeat(nil),
	} {
		if err := SendDecoded(ctx, fs, frame); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"chunk::ワンピース \u2028:", "error:::rate_limited", "heartbeat:::"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("SendFrame got %q, want %q", got, want)
	}
	if err := SendDecoded(ctx, fs, []byte(`{"type":"chunk"}`)); err == nil {
		t.Fatal("a chunk without index or text was handed on")
	}
}

type frameFunc func(f *Frame, text []byte) error

func (frameFunc) Send(context.Context, []byte) error { return nil }
func (ff frameFunc) SendFrame(_ context.Context, f *Frame, text []byte) error {
	return ff(f, text)
}

// FuzzChunkOverhead: the size the stream computes for a chunk frame, to
// split it without encoding it, is the size of its JSON.
func FuzzChunkOverhead(f *testing.F) {
	f.Add("r1", 0, false, 0, "ワンピース 😀")
	f.Add("r\"1\u2028", 1234567, true, 99, "a\x00\xe6\xbc\u2029<>&")
	f.Add("", -5, true, -1, "")
	f.Fuzz(func(t *testing.T, id string, index int, split bool, sub int, text string) {
		c := Chunk{RequestID: id, Index: index, Split: split, SubIndex: sub}
		want := len(appendChunk(nil, c, text))
		if got := chunkOverhead(c, jsonStringLen(id)) + jsonStringLen(text); got != want {
			t.Fatalf("computed %d bytes for a %d-byte frame", got, want)
		}
	})
}
