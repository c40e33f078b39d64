package stream

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// fakeClock fires AfterFunc callbacks synchronously inside Advance, in
// deadline order, so a test knows every timed decision was made when
// Advance returns.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	arms   map[time.Duration]int // arms per duration not yet awaited
	armed  chan struct{}
}

type fakeTimer struct {
	c      *fakeClock
	when   time.Time
	f      func()
	active bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{
		now:   time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		arms:  map[time.Duration]int{},
		armed: make(chan struct{}, 1),
	}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	was := t.active
	t.when = c.now.Add(d)
	if !t.active {
		t.active = true
		c.timers = append(c.timers, t)
	}
	c.arms[d]++
	select {
	case c.armed <- struct{}{}:
	default:
	}
	return was
}

// Advance moves time forward by d, running each callback that falls due at
// its own instant.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *fakeTimer
		live := c.timers[:0]
		for _, t := range c.timers {
			if !t.active {
				continue
			}
			live = append(live, t)
			if !t.when.After(target) && (next == nil || t.when.Before(next.when)) {
				next = t
			}
		}
		c.timers = live
		if next == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		if next.when.After(c.now) {
			c.now = next.when
		}
		next.active = false
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
}

// waitArmed waits until a timer of duration d has been armed, and consumes
// that arming.
func (c *fakeClock) waitArmed(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		c.mu.Lock()
		if c.arms[d] > 0 {
			c.arms[d]--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		select {
		case <-c.armed:
		case <-deadline:
			t.Fatalf("no timer of %v was armed", d)
		}
	}
}

// recorder is a Sender keeping a copy of every frame. behave, when set, runs
// first and may fail or block the Send.
type recorder struct {
	mu      sync.Mutex
	frames  [][]byte
	got     chan struct{}
	entered chan struct{}
	behave  func(ctx context.Context, call int) error
	calls   int
}

func newRecorder() *recorder {
	return &recorder{got: make(chan struct{}, 1), entered: make(chan struct{}, 100)}
}

func (r *recorder) Send(ctx context.Context, frame []byte) error {
	r.mu.Lock()
	r.calls++
	call := r.calls
	behave := r.behave
	r.mu.Unlock()
	select {
	case r.entered <- struct{}{}:
	default:
	}
	if behave != nil {
		if err := behave(ctx, call); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.frames = append(r.frames, append([]byte(nil), frame...))
	r.mu.Unlock()
	select {
	case r.got <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) raw() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.frames...)
}

func (r *recorder) decoded(t testing.TB) []Frame {
	t.Helper()
	var out []Frame
	for _, b := range r.raw() {
		f, err := DecodeFrame(b)
		if err != nil {
			t.Fatalf("frame %s: %v", b, err)
		}
		out = append(out, f)
	}
	return out
}

// waitFrames waits until at least n frames were sent and returns them all.
func (r *recorder) waitFrames(t testing.TB, n int) []Frame {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		r.mu.Lock()
		have := len(r.frames)
		r.mu.Unlock()
		if have >= n {
			return r.decoded(t)
		}
		select {
		case <-r.got:
		case <-deadline:
			t.Fatalf("got %d frames, want %d", have, n)
		}
	}
}

// waitIdle waits until the sender goroutine has nothing left to do, so a test
// can assert that no frame is coming.
func waitIdle(t testing.TB, s *Stream) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		idle := s.waiting && !s.hasWorkLocked()
		s.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("stream never became idle")
		}
		runtime.Gosched()
	}
}

// texts returns the chunk texts and the other frames' types in order.
func texts(frames []Frame) (chunks []string, others []Type) {
	for _, f := range frames {
		if f.Type == TypeChunk {
			chunks = append(chunks, f.Chunk.Text)
		} else {
			others = append(others, f.Type)
		}
	}
	return chunks, others
}
