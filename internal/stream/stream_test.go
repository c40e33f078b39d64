package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

func newTestStream(t *testing.T, cfg Config) (*Stream, *recorder, *fakeClock) {
	t.Helper()
	r := newRecorder()
	c := newFakeClock()
	s := New(context.Background(), r, "r1", cfg, c)
	t.Cleanup(s.Close)
	return s, r, c
}

// sent waits for n frames and for the sender to go idle, so advancing the
// fake clock next cannot make an in-progress Send look slow.
func sent(t *testing.T, s *Stream, r *recorder, n int) []Frame {
	t.Helper()
	frames := r.waitFrames(t, n)
	waitIdle(t, s)
	return frames
}

func mustWrite(t *testing.T, s *Stream, text string) {
	t.Helper()
	if err := s.Write(text); err != nil {
		t.Fatalf("Write(%q): %v", text, err)
	}
}

func TestFirstTextIsSentAtOnceThenEvery100ms(t *testing.T) {
	s, r, c := newTestStream(t, DefaultConfig())
	if s.Started() {
		t.Fatal("Started before any text")
	}
	mustWrite(t, s, "こんにちは")
	frames := sent(t, s, r, 1)
	if got := frames[0].Chunk; got.Text != "こんにちは" || got.Index != 0 || got.RequestID != "r1" {
		t.Fatalf("first chunk = %+v", got)
	}
	if !s.Started() {
		t.Fatal("Started false after the first chunk")
	}

	mustWrite(t, s, "、")
	c.Advance(50 * time.Millisecond)
	mustWrite(t, s, "世界")
	c.Advance(49 * time.Millisecond)
	waitIdle(t, s)
	if n := len(r.raw()); n != 1 {
		t.Fatalf("%d frames before 100ms, want 1", n)
	}
	c.Advance(time.Millisecond)
	frames = r.waitFrames(t, 2)
	if got := frames[1].Chunk; got.Text != "、世界" || got.Index != 1 {
		t.Fatalf("second chunk = %+v, want the text buffered for 100ms as index 1", got)
	}
}

func TestSizeFlushAt4KB(t *testing.T) {
	s, r, _ := newTestStream(t, DefaultConfig())
	mustWrite(t, s, "a")
	sent(t, s, r, 1)
	mustWrite(t, s, strings.Repeat("b", 4095))
	waitIdle(t, s)
	if n := len(r.raw()); n != 1 {
		t.Fatalf("flushed below 4096 bytes: %d frames", n)
	}
	mustWrite(t, s, "c")
	frames := r.waitFrames(t, 2)
	if got := frames[1].Chunk.Text; len(got) != 4096 || !strings.HasSuffix(got, "bc") {
		t.Fatalf("size flush sent %d bytes, want 4096", len(got))
	}
}

// randomText mixes Japanese, emoji (4-byte and joined sequences), ASCII and
// characters JSON must escape.
func randomText(rng *rand.Rand, n int) string {
	pieces := []string{"漫画", "おすすめ", "ワンピース", "😀", "👨‍👩‍👧", "🇯🇵", "a", "Vol. 3 ", "\n", "\"", "<&>", "\u2028", "é", "ｶﾀｶﾅ", "\t"}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}

func TestUTF8NeverSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		input := randomText(rng, 1+rng.IntN(3000))
		cfg := DefaultConfig()
		cfg.MaxBufferBytes = 1 + rng.IntN(64)
		cfg.MaxFrameBytes = 100 + rng.IntN(200) // below the minimum on purpose: forces splits
		cfg.MaxPendingBytes = cfg.MaxBufferBytes + rng.IntN(256)
		r := newRecorder()
		c := newFakeClock()
		s := New(context.Background(), r, "r1", cfg, c)

		for rest := input; rest != ""; {
			n := min(len(rest), 1+rng.IntN(12)) // byte offsets: deltas end mid-character
			if err := s.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
			waitIdle(t, s)
			c.Advance(time.Duration(rng.IntN(40)) * time.Millisecond)
		}
		if err := s.Finish(Done{Tier: "sonnet"}); err != nil {
			t.Fatal(err)
		}
		s.Close()

		var got strings.Builder
		for i, raw := range r.raw() {
			f, err := DecodeFrame(raw)
			if err != nil {
				t.Fatal(err)
			}
			if f.Type != TypeChunk {
				continue
			}
			if len(raw) > cfg.MaxFrameBytes {
				t.Fatalf("iter %d: frame %d is %d bytes > %d", iter, i, len(raw), cfg.MaxFrameBytes)
			}
			if !utf8.ValidString(f.Chunk.Text) || !utf8.Valid(raw) {
				t.Fatalf("iter %d: frame %d is not valid UTF-8: %q", iter, i, raw)
			}
			if strings.Contains(f.Chunk.Text, "\uFFFD") {
				t.Fatalf("iter %d: a character was split: %q", iter, f.Chunk.Text)
			}
			got.WriteString(f.Chunk.Text)
		}
		if got.String() != input {
			t.Fatalf("iter %d: frames carry %q, want %q", iter, got.String(), input)
		}
	}
}

func TestIncompleteCharacterHeldUntilNextDelta(t *testing.T) {
	tests := []struct {
		name   string
		give   []string
		finish bool
		want   string
	}{
		{name: "kanji split 1+2", give: []string{"\xe6", "\xbc\xab"}, want: "漫"},
		{name: "emoji one byte at a time", give: []string{"\xf0", "\x9f", "\x98", "\x80"}, want: "😀"},
		{name: "invalid byte replaced", give: []string{"a\xffb"}, want: "a\uFFFDb"},
		{name: "cut character at the end", give: []string{"ok\xe6\xbc"}, finish: true, want: "ok\uFFFD\uFFFD"},
		{name: "broken sequence", give: []string{"\xe6", "x"}, want: "\uFFFDx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			s, r, _ := newTestStream(t, cfg)
			for _, d := range tt.give {
				mustWrite(t, s, d)
			}
			if err := s.Finish(Done{}); err != nil {
				t.Fatal(err)
			}
			chunks, _ := texts(r.decoded(t))
			if got := strings.Join(chunks, ""); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOversizeChunkSplitIntoFrames(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "japanese 96KB", give: strings.Repeat("漫画", 16*1024)},
		{name: "escapes expand 6x", give: strings.Repeat("\x01\u2028\"", 8*1024)},
		{name: "emoji", give: strings.Repeat("👨‍👩‍👧", 4000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxPendingBytes = 1 << 20
			s, r, _ := newTestStream(t, cfg)
			mustWrite(t, s, tt.give)
			mustWrite(t, s, "") // no-op
			if err := s.Finish(Done{}); err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			raws := r.raw()
			for i, raw := range raws[:len(raws)-1] {
				if len(raw) > cfg.MaxFrameBytes {
					t.Fatalf("frame %d is %d bytes", i, len(raw))
				}
				f, _ := DecodeFrame(raw)
				c := f.Chunk
				if c.Index != 0 || !c.Split || c.SubIndex != i || !utf8.ValidString(c.Text) || c.Text == "" {
					t.Fatalf("piece %d = index %d split %v sub %d", i, c.Index, c.Split, c.SubIndex)
				}
				got.WriteString(c.Text)
			}
			if len(raws) < 3 {
				t.Fatalf("%d frames, want the chunk split", len(raws))
			}
			if got.String() != tt.give {
				t.Fatal("split pieces do not join to the input")
			}
			done, _ := DecodeFrame(raws[len(raws)-1])
			if done.Type != TypeDone || done.Done.Metrics.Chunks != len(raws)-1 {
				t.Fatalf("done = %+v, want chunks=%d", done, len(raws)-1)
			}
		})
	}
}

func TestHeartbeatAfter5sOfSilence(t *testing.T) {
	s, r, c := newTestStream(t, DefaultConfig())
	c.Advance(4999 * time.Millisecond)
	waitIdle(t, s)
	if n := len(r.raw()); n != 0 {
		t.Fatalf("%d frames before 5s", n)
	}
	c.Advance(time.Millisecond)
	if f := sent(t, s, r, 1); f[0].Type != TypeHeartbeat {
		t.Fatalf("frame = %+v, want heartbeat", f[0])
	}
	if string(r.raw()[0]) != `{"type":"heartbeat"}` {
		t.Fatalf("heartbeat wire form %s", r.raw()[0])
	}

	// A chunk at 8s resets the silence: the next heartbeat is due at 13s.
	c.Advance(3 * time.Second)
	mustWrite(t, s, "a")
	sent(t, s, r, 2)
	c.Advance(4999 * time.Millisecond)
	waitIdle(t, s)
	if n := len(r.raw()); n != 2 {
		t.Fatalf("heartbeat sent %d frames after a chunk, too early", n)
	}
	c.Advance(time.Millisecond)
	if f := r.waitFrames(t, 3); f[2].Type != TypeHeartbeat {
		t.Fatalf("frame = %+v, want heartbeat", f[2])
	}

	if err := s.Finish(Done{}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Minute)
	if _, others := texts(r.decoded(t)); others[len(others)-1] != TypeDone {
		t.Fatalf("frames after done: %v", others)
	}
	if m := s.Metrics(); m.Heartbeats != 2 {
		t.Fatalf("Heartbeats = %d, want 2", m.Heartbeats)
	}
}

func TestMaxDurationStopsWritesButFailStillDelivers(t *testing.T) {
	cfg := DefaultConfig()
	// No heartbeat in flight while the clock jumps, or its Send would look slow.
	cfg.HeartbeatInterval = time.Hour
	s, r, c := newTestStream(t, cfg)
	mustWrite(t, s, "a")
	sent(t, s, r, 1)
	mustWrite(t, s, "b")
	c.Advance(100 * time.Millisecond)
	sent(t, s, r, 2)
	c.Advance(119 * time.Second)
	waitIdle(t, s)
	mustWrite(t, s, "c")
	c.Advance(time.Second)
	if err := s.Write("d"); !errors.Is(err, ErrMaxDuration) {
		t.Fatalf("Write after 120s = %v, want ErrMaxDuration", err)
	}
	if err := s.Fail(ErrorFrame{Code: "timeout", Message: "応答に時間がかかりすぎました"}); err != nil {
		t.Fatal(err)
	}
	frames := r.decoded(t)
	chunks, others := texts(frames)
	if got := strings.Join(chunks, ""); got != "abc" {
		t.Fatalf("text = %q, want abc", got)
	}
	last := frames[len(frames)-1]
	if last.Type != TypeError || last.Error.Code != "timeout" || last.Error.RequestID != "r1" {
		t.Fatalf("last frame = %+v", last)
	}
	if slices.Contains(others, TypeDone) {
		t.Fatal("a done frame after the stream failed")
	}
}

// blockingSend blocks until the send times out.
func blockingSend(ctx context.Context, _ int) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestBackpressureCancelsSlowClientAndBoundsMemory(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SendTimeout = 300 * time.Millisecond
	cfg.BackpressurePause = 700 * time.Millisecond
	cfg.HeartbeatInterval = time.Hour
	cfg.MaxBufferBytes = 16
	cfg.MaxPendingBytes = 64
	s, r, c := newTestStream(t, cfg)
	r.behave = blockingSend

	var accepted atomic.Int64
	errc := make(chan error, 1)
	go func() {
		for range 1000 {
			if err := s.Write("12345678"); err != nil {
				errc <- err
				return
			}
			accepted.Add(1)
		}
		errc <- nil
	}()

	for i := 1; i <= cfg.MaxBackpressurePauses; i++ {
		<-r.entered
		c.waitArmed(t, cfg.SendTimeout)
		c.Advance(cfg.SendTimeout)
		if i < cfg.MaxBackpressurePauses {
			c.waitArmed(t, cfg.BackpressurePause)
			select {
			case err := <-errc:
				t.Fatalf("writer stopped early (%v) after %d slow sends", err, i)
			default:
			}
			c.Advance(cfg.BackpressurePause)
		}
	}
	if err := <-errc; !errors.Is(err, ErrSlowClient) {
		t.Fatalf("blocked Write returned %v, want ErrSlowClient", err)
	}
	// One Write may overshoot the limit by its own size, never more.
	if n := accepted.Load(); n*8 > int64(cfg.MaxPendingBytes) {
		t.Fatalf("accepted %d bytes with a stalled client, limit %d", n*8, cfg.MaxPendingBytes)
	}
	m := s.Metrics()
	if m.SlowSends != 10 || m.BackpressurePauses != 9 || m.PauseTime != 9*cfg.BackpressurePause {
		t.Fatalf("metrics = %+v", m)
	}
	if m.Chunks != 0 {
		t.Fatalf("Chunks = %d with nothing delivered", m.Chunks)
	}
	if err := s.Fail(ErrorFrame{Code: "x"}); !errors.Is(err, ErrSlowClient) {
		t.Fatalf("Fail on a dead stream = %v", err)
	}
}

func TestFailedSendsAreRetriedWithoutLosingText(t *testing.T) {
	tests := []struct {
		name       string
		failures   int
		sendErr    error
		wantErr    error
		wantPauses int
	}{
		{name: "recovers after 3 failures", failures: 3, sendErr: errors.New("throttled"), wantPauses: 3},
		{name: "client gone stops at once", failures: 1, sendErr: fmt.Errorf("ws: %w", ErrClientGone), wantErr: ErrCanceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.BackpressurePause = 700 * time.Millisecond // apart from SendTimeout for waitArmed
			s, r, c := newTestStream(t, cfg)
			r.behave = func(_ context.Context, call int) error {
				if call <= tt.failures {
					return tt.sendErr
				}
				return nil
			}
			mustWrite(t, s, "漫画")
			for range tt.wantPauses {
				c.waitArmed(t, cfg.BackpressurePause)
				c.Advance(cfg.BackpressurePause)
			}
			err := s.Finish(Done{})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Finish = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				if m := s.Metrics(); m.BackpressurePauses != 0 || m.Chunks != 0 {
					t.Fatalf("metrics = %+v, want no pause and no chunk", m)
				}
				return
			}
			chunks, others := texts(r.decoded(t))
			if strings.Join(chunks, "") != "漫画" || !slices.Equal(others, []Type{TypeDone}) {
				t.Fatalf("chunks %q others %v", chunks, others)
			}
			if m := s.Metrics(); m.BackpressurePauses != tt.wantPauses {
				t.Fatalf("pauses = %d, want %d", m.BackpressurePauses, tt.wantPauses)
			}
		})
	}
}

func TestContextCancelUnblocksWrite(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBufferBytes, cfg.MaxPendingBytes = 4, 8
	r := newRecorder()
	r.behave = blockingSend
	ctx, cancel := context.WithCancel(context.Background())
	s := New(ctx, r, "r1", cfg, newFakeClock())
	defer s.Close()
	errc := make(chan error, 1)
	go func() {
		for {
			if err := s.Write("abcd"); err != nil {
				errc <- err
				return
			}
		}
	}()
	<-r.entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %v, want context.Canceled", err)
	}
	if err := s.Finish(Done{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Finish = %v, want context.Canceled", err)
	}
}

func TestFinishOrFailExactlyOnce(t *testing.T) {
	tests := []struct {
		name     string
		writes   []string
		fail     bool
		wantText string
		wantLast Type
	}{
		{name: "finish after text", writes: []string{"一", "二"}, wantText: "一二", wantLast: TypeDone},
		{name: "fail after text flushes then errors", writes: []string{"一", "二"}, fail: true, wantText: "一二", wantLast: TypeError},
		{name: "fail before any text", fail: true, wantLast: TypeError},
		{name: "finish empty answer", wantLast: TypeDone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r, _ := newTestStream(t, DefaultConfig())
			for _, w := range tt.writes {
				mustWrite(t, s, w)
			}
			first, second := func() error { return s.Finish(Done{Tier: "sonnet"}) },
				func() error { return s.Fail(ErrorFrame{Code: "unavailable", RetryAfterSeconds: 2}) }
			if tt.fail {
				first, second = second, first
			}
			if err := first(); err != nil {
				t.Fatal(err)
			}
			if err := second(); !errors.Is(err, ErrFinished) {
				t.Fatalf("second ending = %v, want ErrFinished", err)
			}
			if err := s.Write("late"); !errors.Is(err, ErrFinished) {
				t.Fatalf("Write after the end = %v, want ErrFinished", err)
			}
			frames := r.decoded(t)
			chunks, others := texts(frames)
			if strings.Join(chunks, "") != tt.wantText || len(others) != 1 || frames[len(frames)-1].Type != tt.wantLast {
				t.Fatalf("frames = %+v", frames)
			}
		})
	}
}

func TestDoneMetrics(t *testing.T) {
	s, r, c := newTestStream(t, DefaultConfig())
	c.Advance(250 * time.Millisecond)
	mustWrite(t, s, "One Piece")
	sent(t, s, r, 1)
	for range 15 {
		c.Advance(100 * time.Millisecond)
		waitIdle(t, s)
		mustWrite(t, s, "は")
	}
	c.Advance(250 * time.Millisecond)
	err := s.Finish(Done{Tier: "sonnet", Confidence: 1, Tokens: Tokens{Input: 120, Output: 30}, CostUSD: 0.0012, TraceID: "t1", CacheHit: true})
	if err != nil {
		t.Fatal(err)
	}
	frames := r.decoded(t)
	d := frames[len(frames)-1].Done
	want := Done{
		RequestID: "r1", Tier: "sonnet", Confidence: 1, Tokens: Tokens{Input: 120, Output: 30},
		CostUSD: 0.0012, TraceID: "t1", CacheHit: true,
		// 30 tokens over 1.5 s of deltas; ends at 2 s.
		Metrics: DoneMetrics{TTFTms: 250, TotalMs: 2000, TPS: 20, Chunks: len(frames) - 1},
	}
	if d != want {
		t.Fatalf("done = %+v\nwant   %+v", d, want)
	}
	m := s.Metrics()
	if m.TTFT != 250*time.Millisecond || m.DeltasIn != 16 || m.Bytes != int64(len("One Piece")+15*len("は")) {
		t.Fatalf("metrics = %+v", m)
	}
	if want := 16 / float64(m.Chunks); m.CompressionRatio != want || m.Chunks < 2 {
		t.Fatalf("compression ratio %v over %d chunks", m.CompressionRatio, m.Chunks)
	}
}

func TestDiscardBeforeStartOnly(t *testing.T) {
	cfg := DefaultConfig()
	s, r, _ := newTestStream(t, cfg)
	r.behave = blockingSend
	// Without a started chunk, text can be dropped for a fallback model.
	s.mu.Lock()
	s.appendLocked("from the failed model")
	s.mu.Unlock()
	if !s.Discard() {
		t.Fatal("Discard before start = false")
	}
	r.behave = nil
	mustWrite(t, s, "fallback")
	r.waitFrames(t, 1)
	if s.Discard() {
		t.Fatal("Discard after a chunk was sent = true")
	}
	if err := s.Finish(Done{}); err != nil {
		t.Fatal(err)
	}
	if chunks, _ := texts(r.decoded(t)); strings.Join(chunks, "") != "fallback" {
		t.Fatalf("chunks = %q", chunks)
	}
}

func TestFinishRejectsNaN(t *testing.T) {
	s, r, _ := newTestStream(t, DefaultConfig())
	if err := s.Finish(Done{Confidence: nan()}); err == nil {
		t.Fatal("Finish with NaN confidence succeeded")
	}
	if err := s.Fail(ErrorFrame{Code: "internal"}); err != nil {
		t.Fatalf("Fail after a rejected Finish = %v", err)
	}
	if _, others := texts(r.decoded(t)); !slices.Equal(others, []Type{TypeError}) {
		t.Fatalf("frames %v", others)
	}
}

func nan() float64 { var z float64; return z / z }

func TestNoGoroutineLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := range 50 {
		r := newRecorder()
		if i%2 == 0 {
			r.behave = blockingSend // Close must abort a stuck Send
		}
		cfg := DefaultConfig()
		cfg.MaxPendingBytes, cfg.MaxBufferBytes = 8, 8
		ctx, cancel := context.WithCancel(context.Background())
		s := New(ctx, r, "r1", cfg, SystemClock{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for s.Write("abcdefgh") == nil {
			}
		}()
		if i%2 == 0 {
			<-r.entered
		} else {
			_ = s.Finish(Done{})
		}
		if i%3 == 0 {
			cancel()
		}
		s.Close()
		<-done
		cancel()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before, %d after", before, runtime.NumGoroutine())
		}
		runtime.Gosched()
	}
}

func TestSlowButSuccessfulSendIsNotResent(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BackpressurePause = 700 * time.Millisecond
	s, r, c := newTestStream(t, cfg)
	r.behave = func(_ context.Context, call int) error {
		if call == 1 {
			c.Advance(600 * time.Millisecond) // the client took longer than SendTimeout
		}
		return nil
	}
	mustWrite(t, s, "遅い")
	c.waitArmed(t, cfg.BackpressurePause)
	c.Advance(cfg.BackpressurePause)
	if err := s.Finish(Done{}); err != nil {
		t.Fatal(err)
	}
	chunks, others := texts(r.decoded(t))
	if !slices.Equal(chunks, []string{"遅い"}) || !slices.Equal(others, []Type{TypeDone}) {
		t.Fatalf("chunks %q others %v, want the slow chunk once", chunks, others)
	}
	if m := s.Metrics(); m.SlowSends != 1 || m.BackpressurePauses != 1 || m.PauseTime != cfg.BackpressurePause {
		t.Fatalf("metrics = %+v", m)
	}
}

// A client that leaves while a frame is being sent and Fail is already
// waiting must not leave Fail waiting forever, whichever frame it was.
func TestClientGoneDuringSendReleasesWaitingFail(t *testing.T) {
	tests := []struct {
		name  string
		start func(s *Stream, c *fakeClock)
	}{
		{name: "chunk", start: func(s *Stream, _ *fakeClock) { mustWrite(t, s, "一") }},
		{name: "heartbeat", start: func(s *Stream, c *fakeClock) { c.Advance(s.cfg.HeartbeatInterval) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRecorder()
			release := make(chan struct{})
			r.behave = func(context.Context, int) error { <-release; return nil }
			ctx, cancel := context.WithCancel(context.Background())
			clock := newFakeClock()
			s := New(ctx, r, "r1", DefaultConfig(), clock)
			defer s.Close()
			go tt.start(s, clock)
			<-r.entered // the sender is inside Send with the lock released

			failed := make(chan error, 1)
			go func() { failed <- s.Fail(ErrorFrame{Code: "unavailable"}) }()
			waitLocked(t, s, func() bool { return s.final != nil })
			cancel()
			waitLocked(t, s, func() bool { return s.deadErr != nil })
			close(release)

			select {
			case err := <-failed:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Fail = %v, want context.Canceled", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Fail still waiting after the client left")
			}
		})
	}
}

// waitLocked polls cond under the stream's lock.
func waitLocked(t *testing.T, s *Stream, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition never held")
}

// TestStatusOnlyBeforeText: a status frame reaches a waiting client, the
// latest one wins, and none is sent once the answer's text has started.
func TestStatusOnlyBeforeText(t *testing.T) {
	s, r, _ := newTestStream(t, DefaultConfig())
	if !s.Status(StatusFrame{State: StateRetrying, Attempt: 2, Of: 4, RetryInSeconds: 2, Message: "retrying"}) {
		t.Fatal("Status refused before any text")
	}
	frames := sent(t, s, r, 1)
	want := StatusFrame{RequestID: "r1", State: StateRetrying, Attempt: 2, Of: 4, RetryInSeconds: 2, Message: "retrying"}
	if frames[0].Type != TypeStatus || frames[0].Status != want {
		t.Fatalf("frame = %+v, want status %+v", frames[0], want)
	}
	mustWrite(t, s, "こんにちは")
	sent(t, s, r, 2)
	if s.Status(StatusFrame{State: StateFallingBack, Message: "late"}) {
		t.Fatal("Status accepted after text was sent")
	}
	if err := s.Finish(Done{Tier: "sonnet", Confidence: 1}); err != nil {
		t.Fatal(err)
	}
	_, others := texts(r.decoded(t))
	if want := []Type{TypeStatus, TypeDone}; !slices.Equal(others, want) {
		t.Fatalf("non-chunk frames %v, want %v", others, want)
	}
}
