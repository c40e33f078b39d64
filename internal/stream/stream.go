// Package stream carries a model's text deltas to a client connection
// (WebSocket or SSE) as the JSON frames of fmgate's external contract, or,
// to a front door that speaks a vendor's protocol, as the same frames in
// values (FrameSender), which the door encodes as its own events. It
// aggregates small deltas into chunks (every 100 ms or 4 KB), never splits
// a UTF-8 character, keeps frames under 32 KB, sends heartbeats on a silent
// connection, stops after a maximum duration, and applies backpressure: a
// slow client first pauses the stream, then blocks the writer, then cancels
// the stream, so memory stays bounded and the model call can be cancelled.
package stream

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
	"unicode/utf8"
)

// Errors returned by Write, Finish and Fail once the stream can no longer
// deliver. The caller then cancels the model call.
var (
	// ErrCanceled: the stream was closed, or the Sender reported ErrClientGone.
	ErrCanceled = errors.New("stream: canceled")
	// ErrSlowClient: MaxBackpressurePauses sends failed or were too slow.
	ErrSlowClient = errors.New("stream: client too slow")
	// ErrMaxDuration: the stream ran for MaxDuration. Finish or Fail still
	// deliver, so the client learns how the answer ended.
	ErrMaxDuration = errors.New("stream: maximum duration reached")
	// ErrFinished: Finish or Fail already took effect.
	ErrFinished = errors.New("stream: already finished")
)

// ErrClientGone is for Senders to wrap when the connection is closed for
// good, so the stream stops at once instead of pausing and retrying.
var ErrClientGone = errors.New("stream: client gone")

// Sender writes one frame to the client: a WebSocket text message or an SSE
// event. The gateway implements it per connection. Send must honour ctx,
// which expires after Config.SendTimeout, and must not keep frame after it
// returns. Only one Send runs at a time.
type Sender interface {
	Send(ctx context.Context, frame []byte) error
}

// FrameSender is a Sender that takes frames as values. A Stream finds it by
// type assertion and calls SendFrame instead of Send, so a front door that
// speaks another wire format (a vendor's events) encodes them from the
// frame's fields instead of parsing the contract's JSON back. SendFrame
// follows Send's rules: it honours ctx, runs one at a time, and keeps
// neither f nor text once it returns. A failed SendFrame is retried with
// the same frame, as a failed Send is.
type FrameSender interface {
	Sender
	// SendFrame sends f. For a chunk, text is the chunk's text and
	// f.Chunk.Text is empty: text is the stream's own buffer, which it
	// reuses once SendFrame returns. Other frames have no text.
	SendFrame(ctx context.Context, f *Frame, text []byte) error
}

// SendDecoded decodes frame, one of the contract's frames, and hands it to
// fs.SendFrame: the Send of a FrameSender, for frames that come from
// elsewhere than a Stream.
func SendDecoded(ctx context.Context, fs FrameSender, frame []byte) error {
	f, err := DecodeFrame(frame)
	if err != nil {
		return err
	}
	var text []byte
	if f.Type == TypeChunk {
		text, f.Chunk.Text = []byte(f.Chunk.Text), ""
	}
	return fs.SendFrame(ctx, &f, text)
}

// jsonSender is the FrameSender of a plain Sender: it encodes each frame
// in the contract's JSON, into a buffer it keeps for the next one.
type jsonSender struct {
	Sender
	buf []byte
}

func (j *jsonSender) SendFrame(ctx context.Context, f *Frame, text []byte) error {
	switch f.Type {
	case TypeChunk:
		j.buf = appendChunk(j.buf[:0], f.Chunk, text)
	case TypeHeartbeat:
		return j.Send(ctx, heartbeatJSON)
	default:
		var err error
		if j.buf, err = f.AppendJSON(j.buf[:0]); err != nil {
			return err
		}
	}
	return j.Send(ctx, j.buf)
}

// Metrics describe a stream so far.
type Metrics struct {
	// TTFT is from New to the first chunk frame sent; zero before it.
	TTFT time.Duration
	// Chunks counts chunk frames sent, each piece of a split chunk included.
	Chunks int
	// Bytes counts text bytes sent in chunk frames.
	Bytes int64
	// Heartbeats counts heartbeat frames sent.
	Heartbeats int
	// SlowSends counts Sends that failed or exceeded SendTimeout.
	SlowSends int
	// BackpressurePauses counts pauses taken after a slow send; the send
	// that reaches MaxBackpressurePauses cancels instead of pausing.
	BackpressurePauses int
	// PauseTime is the total time spent in backpressure pauses.
	PauseTime time.Duration
	// DeltasIn counts non-empty Writes.
	DeltasIn int
	// CompressionRatio is DeltasIn / Chunks: how many deltas one frame
	// carries on average; zero before the first chunk.
	CompressionRatio float64
}

// Stream is one answer on its way to a client. Write, Finish, Fail, Discard,
// Started, Metrics and Close may be called from any goroutine.
type Stream struct {
	parent    context.Context
	ctx       context.Context // canceled when the stream dies, aborting a Send
	cancel    context.CancelFunc
	sender    FrameSender
	requestID string
	// ridLen is the length of requestID quoted, for sizing chunk frames.
	ridLen    int
	cfg       Config
	clock     Clock
	start     time.Time
	stopWatch func() bool
	exited    chan struct{}

	mu   sync.Mutex
	cond sync.Cond // signalled on every change of the fields below

	buf      []byte // complete UTF-8 text not yet handed to the Sender
	spare    []byte // the previous buf, reused once its text is sent
	partial  [utf8.UTFMax - 1]byte
	npartial int // bytes of an unfinished character held for the next Write
	inflight int // text bytes handed to the Sender and not yet delivered

	flushReq   bool // the sender should send buf now
	flushArmed bool
	hbReq      bool
	pauseOver  bool
	waiting    bool // the sender goroutine is idle in cond.Wait

	status    *StatusFrame // the latest status not yet sent; dropped once text flows
	final     *ending
	finished  bool // Finish or Fail was called
	finalDone bool
	finalErr  error
	closed    bool
	writeErr  error // what Write returns
	deadErr   error // why nothing can be delivered any more

	started      bool
	nextIndex    int
	lastChunkAt  time.Time // zero until the first chunk is handed over
	lastFrameAt  time.Time
	firstDeltaAt time.Time
	lastDeltaAt  time.Time
	m            Metrics

	flushTimer, hbTimer, maxTimer, pauseTimer Timer

	send sendSlot // the run goroutine's own
	out  Frame    // the frame being sent; the run goroutine's own
}

// sendSlot is the context a Send gets, cancelled by its timer SendTimeout
// after the send began. One context and one timer serve every send of a
// stream until one of them times out; a send allocated both before.
type sendSlot struct {
	ctx   context.Context
	stop  context.CancelFunc
	timer Timer
}

// begin readies the slot for one send and returns its context.
func (sl *sendSlot) begin(parent context.Context, clock Clock, timeout time.Duration) context.Context {
	if sl.ctx == nil {
		sl.ctx, sl.stop = context.WithCancel(parent)
		sl.timer = clock.AfterFunc(timeout, sl.stop)
	} else {
		sl.timer.Reset(timeout)
	}
	return sl.ctx
}

// end stops the send's timer; a timer that fired has cancelled the
// context, so the next send gets new ones.
func (sl *sendSlot) end() {
	if !sl.timer.Stop() {
		sl.release()
	}
}

// release cancels the slot's context and forgets it.
func (sl *sendSlot) release() {
	if sl.ctx != nil {
		sl.timer.Stop()
		sl.stop()
		*sl = sendSlot{}
	}
}

type ending struct {
	done *Done
	fail *ErrorFrame
}

// New starts a stream for requestID that sends through s: as the
// contract's JSON frames, or as values when s is a FrameSender. Zero fields
// of cfg take their defaults and a nil clock means SystemClock. Canceling
// ctx (the client went away) stops the stream. Call Close when done with it.
func New(ctx context.Context, s Sender, requestID string, cfg Config, clock Clock) *Stream {
	if clock == nil {
		clock = SystemClock{}
	}
	fs, ok := s.(FrameSender)
	if !ok {
		fs = &jsonSender{Sender: s}
	}
	st := &Stream{
		parent:    ctx,
		sender:    fs,
		requestID: requestID,
		ridLen:    jsonStringLen(requestID),
		cfg:       cfg.withDefaults(),
		clock:     clock,
		exited:    make(chan struct{}),
	}
	st.ctx, st.cancel = context.WithCancel(ctx)
	st.cond.L = &st.mu
	st.start = clock.Now()
	st.lastFrameAt = st.start

	st.mu.Lock()
	st.hbTimer = clock.AfterFunc(st.cfg.HeartbeatInterval, st.heartbeatDue)
	st.maxTimer = clock.AfterFunc(st.cfg.MaxDuration, st.maxDurationReached)
	st.mu.Unlock()
	st.stopWatch = context.AfterFunc(ctx, func() {
		st.mu.Lock()
		st.killLocked(ctx.Err())
		st.mu.Unlock()
	})
	go st.run()
	return st
}

// Write appends a text delta. A delta may end inside a UTF-8 character; the
// unfinished bytes wait for the next delta. Invalid bytes become U+FFFD.
// Write blocks while MaxPendingBytes of text are undelivered, which slows the
// model consumption to the client's pace. Once the stream cannot deliver, it
// returns ErrCanceled, ErrSlowClient, ErrMaxDuration, ErrFinished or the
// context's error, and the caller should cancel the model call.
func (s *Stream) Write(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	if text == "" {
		return nil
	}
	now := s.clock.Now()
	s.m.DeltasIn++
	if s.firstDeltaAt.IsZero() {
		s.firstDeltaAt = now
	}
	s.lastDeltaAt = now
	s.appendLocked(text)

	if !s.flushReq && len(s.buf) > 0 {
		since := now.Sub(s.lastChunkAt)
		switch {
		case len(s.buf) >= s.cfg.MaxBufferBytes, s.lastChunkAt.IsZero(), since >= s.cfg.FlushInterval:
			// The first text goes out at once: time to first token is what
			// the user waits for.
			s.flushReq = true
			s.cond.Broadcast()
		case !s.flushArmed:
			s.flushArmed = true
			if s.flushTimer == nil {
				s.flushTimer = s.clock.AfterFunc(s.cfg.FlushInterval-since, s.flushDue)
			} else {
				s.flushTimer.Reset(s.cfg.FlushInterval - since)
			}
		}
	}
	for s.writeErr == nil && len(s.buf)+s.inflight >= s.cfg.MaxPendingBytes {
		s.cond.Wait()
	}
	return s.writeErr
}

// appendLocked adds text to buf, holding back a trailing unfinished
// character and replacing invalid bytes.
func (s *Stream) appendLocked(text string) {
	from := len(s.buf)
	s.buf = append(s.buf, s.partial[:s.npartial]...)
	s.npartial = 0
	s.buf = append(s.buf, text...)
	tail := len(s.buf)
	for i := len(s.buf) - 1; i >= from && i >= len(s.buf)-(utf8.UTFMax-1); i-- {
		if utf8.RuneStart(s.buf[i]) {
			if !utf8.FullRune(s.buf[i:]) {
				tail = i
			}
			break
		}
	}
	s.npartial = copy(s.partial[:], s.buf[tail:])
	s.buf = s.buf[:tail]
	if !utf8.Valid(s.buf[from:]) {
		s.buf = append(s.buf[:from], sanitize(s.buf[from:])...)
	}
}

// sanitize replaces each invalid byte with U+FFFD, as a JSON decoder would.
func sanitize(b []byte) []byte {
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, b[:size]...)
		}
		b = b[size:]
	}
	return out
}

// Started reports whether a chunk frame has been handed to the Sender and so
// may have reached the client. From then on the gateway must not retry or
// fall back: the answer ends with Finish or Fail.
func (s *Stream) Started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// Discard drops the text written so far if none of it has been handed to the
// Sender, and reports whether it did. It lets a retry or a fallback model
// write into the same stream; deciding under the stream's lock closes the
// window between checking Started and the next flush.
func (s *Stream) Discard() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.finished || s.deadErr != nil {
		return false
	}
	s.buf = s.buf[:0]
	s.npartial = 0
	s.flushReq = false
	s.firstDeltaAt, s.lastDeltaAt = time.Time{}, time.Time{}
	s.cond.Broadcast()
	return true
}

// Finish sends the remaining text, then the done frame with d's answer
// fields and the metrics measured here (RequestID and Metrics are filled in).
// It returns when the done frame is delivered or cannot be. Only the first
// of Finish and Fail takes effect; later calls return ErrFinished. A Done
// with a NaN or infinite float is rejected without finishing the stream.
func (s *Stream) Finish(d Done) error {
	if err := d.checkFinite(); err != nil {
		return err
	}
	return s.end(ending{done: &d})
}

// Fail sends the remaining text, then the error frame e (RequestID is filled
// in), so a failure after the first chunk ends with an explicit error, never
// a done. See Finish for when it returns.
func (s *Stream) Fail(e ErrorFrame) error {
	return s.end(ending{fail: &e})
}

func (s *Stream) end(e ending) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return ErrFinished
	}
	s.finished = true
	if s.deadErr != nil {
		return s.deadErr
	}
	s.writeErr = ErrFinished
	if s.npartial > 0 {
		// The model stopped inside a character; show that something was cut.
		s.buf = append(s.buf, sanitize(s.partial[:s.npartial])...)
		s.npartial = 0
	}
	s.final = &e
	s.cond.Broadcast()
	for !s.finalDone {
		s.cond.Wait()
	}
	return s.finalErr
}

// Status sends a status frame (RequestID is filled in) while no text has
// been sent: a retry or fallback is keeping the client waiting. Only the
// latest status waits to be sent; it is dropped once text is ready, so a
// status never follows the answer's first chunk. It reports whether the
// status was queued.
func (s *Stream) Status(f StatusFrame) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.finished || s.deadErr != nil {
		return false
	}
	f.RequestID = s.requestID
	s.status = &f
	s.cond.Broadcast()
	return true
}

// Metrics returns the stream's measurements so far.
func (s *Stream) Metrics() Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	if m.Chunks > 0 {
		m.CompressionRatio = float64(m.DeltasIn) / float64(m.Chunks)
	}
	return m
}

// Close stops the stream's goroutine and timers. A stream not yet finished
// is canceled: blocked Writes and Sends return. Close waits for the sender
// goroutine and may be called more than once.
func (s *Stream) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.killLocked(ErrCanceled)
	}
	s.mu.Unlock()
	<-s.exited
	s.stopWatch()
}

// killLocked makes the stream undeliverable for reason err.
func (s *Stream) killLocked(err error) {
	if s.deadErr == nil {
		s.deadErr = err
		s.cancel()
	}
	if s.writeErr == nil || s.writeErr == ErrMaxDuration {
		s.writeErr = err
	}
	for _, t := range []Timer{s.flushTimer, s.hbTimer, s.maxTimer, s.pauseTimer} {
		if t != nil {
			t.Stop()
		}
	}
	s.cond.Broadcast()
}

func (s *Stream) flushDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushArmed = false
	if len(s.buf) > 0 {
		s.flushReq = true
		s.cond.Broadcast()
	}
}

func (s *Stream) heartbeatDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished || s.deadErr != nil {
		return
	}
	idle := s.clock.Now().Sub(s.lastFrameAt)
	if idle >= s.cfg.HeartbeatInterval {
		s.hbReq = true
		s.cond.Broadcast()
		idle = 0
	}
	s.hbTimer.Reset(s.cfg.HeartbeatInterval - idle)
}

func (s *Stream) maxDurationReached() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr == nil {
		s.writeErr = ErrMaxDuration
		s.cond.Broadcast()
	}
}

func (s *Stream) pauseDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pauseOver = true
	s.cond.Broadcast()
}

// hasWorkLocked reports whether the sender goroutine has something to do.
func (s *Stream) hasWorkLocked() bool {
	return s.deadErr != nil || s.final != nil || s.hbReq || s.status != nil || (s.flushReq && len(s.buf) > 0)
}

// run is the only goroutine calling Send, so frames leave in order and a
// slow client holds up the sender, never the writer (until MaxPendingBytes).
func (s *Stream) run() {
	defer close(s.exited)
	defer s.send.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !s.hasWorkLocked() {
			s.waiting = true
			s.cond.Wait()
			s.waiting = false
		}
		now := s.clock.Now()
		switch {
		case s.deadErr != nil:
			if s.final != nil {
				// end may be waiting; no other signal follows this one.
				s.finalErr, s.finalDone = s.deadErr, true
				s.cond.Broadcast()
			}
			return
		case s.status != nil && (len(s.buf) > 0 || s.started || s.final != nil):
			s.status = nil // the answer itself is ready: the status is stale
		case s.status != nil:
			s.out = Frame{Type: TypeStatus, Status: *s.status}
			s.status = nil
			s.lastFrameAt = now
			s.mu.Unlock()
			_ = s.deliver(&s.out, nil)
			s.mu.Lock()
		case len(s.buf) > 0 && (s.flushReq || s.final != nil):
			text := s.buf
			s.buf, s.spare = s.spare[:0], nil
			s.flushReq = false
			s.inflight = len(text)
			s.started = true
			s.lastChunkAt, s.lastFrameAt = now, now
			index := s.nextIndex
			s.nextIndex++
			s.mu.Unlock()
			s.sendChunk(index, text)
			s.mu.Lock()
			s.inflight = 0
			s.spare = text[:0]
			s.cond.Broadcast()
		case s.final != nil:
			var err error
			if s.final.done != nil {
				s.out = Frame{Type: TypeDone, Done: *s.final.done}
				s.out.Done.RequestID = s.requestID
				s.out.Done.Metrics = s.doneMetricsLocked(now, s.out.Done.Tokens.Output)
				err = s.out.Done.checkFinite()
			} else {
				s.out = Frame{Type: TypeError, Error: *s.final.fail}
				s.out.Error.RequestID = s.requestID
			}
			s.lastFrameAt = now
			s.mu.Unlock()
			if err == nil {
				err = s.deliver(&s.out, nil)
			}
			s.mu.Lock()
			s.finalErr, s.finalDone = err, true
			s.killLocked(ErrFinished)
			return
		case s.hbReq:
			s.hbReq = false
			s.lastFrameAt = now
			s.mu.Unlock()
			s.out = Frame{Type: TypeHeartbeat}
			err := s.deliver(&s.out, nil)
			s.mu.Lock()
			if err == nil {
				s.m.Heartbeats++
			}
		}
	}
}

// sendChunk sends text as one chunk frame, or as several pieces sharing
// index when the frame would exceed MaxFrameBytes. The pieces are the same
// for a FrameSender, which never sees the JSON they are measured in: a
// door's events follow the contract's chunks one for one.
func (s *Stream) sendChunk(index int, text []byte) {
	s.out = Frame{Type: TypeChunk, Chunk: Chunk{RequestID: s.requestID, Index: index}}
	c := &s.out.Chunk
	if over := chunkOverhead(*c, s.ridLen); over+2+6*len(text) <= s.cfg.MaxFrameBytes || over+jsonStringLen(text) <= s.cfg.MaxFrameBytes {
		// Quoting makes a byte at most 6 bytes long: most chunks fit
		// without measuring.
		if s.deliver(&s.out, text) == nil {
			s.recordChunk(len(text))
		}
		return
	}
	c.Split = true
	for ; len(text) > 0; c.SubIndex++ {
		n := fitPrefix(text, s.cfg.MaxFrameBytes-chunkOverhead(*c, s.ridLen))
		if s.deliver(&s.out, text[:n]) != nil {
			return
		}
		s.recordChunk(n)
		text = text[n:]
	}
}

func (s *Stream) recordChunk(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m.Chunks == 0 {
		s.m.TTFT = s.clock.Now().Sub(s.start)
	}
	s.m.Chunks++
	s.m.Bytes += int64(n)
}

// deliver sends f (with text, a chunk's), pausing and retrying on
// failure, until it is delivered or the stream dies. A delivered but slow
// frame is not resent.
func (s *Stream) deliver(f *Frame, text []byte) error {
	for {
		start := s.clock.Now()
		err := s.sender.SendFrame(s.send.begin(s.ctx, s.clock, s.cfg.SendTimeout), f, text)
		s.send.end()
		slow := s.clock.Now().Sub(start) >= s.cfg.SendTimeout

		s.mu.Lock()
		switch {
		case s.deadErr != nil:
		case s.parent.Err() != nil:
			s.killLocked(s.parent.Err())
		case errors.Is(err, ErrClientGone):
			s.killLocked(ErrCanceled)
		case err == nil && !slow:
			s.mu.Unlock()
			return nil
		default:
			s.m.SlowSends++
			if s.m.SlowSends >= s.cfg.MaxBackpressurePauses {
				s.killLocked(ErrSlowClient)
			}
		}
		if s.deadErr != nil {
			dead := s.deadErr
			s.mu.Unlock()
			return dead
		}
		s.m.BackpressurePauses++
		pauseStart := s.clock.Now()
		s.pauseOver = false
		if s.pauseTimer == nil {
			s.pauseTimer = s.clock.AfterFunc(s.cfg.BackpressurePause, s.pauseDue)
		} else {
			s.pauseTimer.Reset(s.cfg.BackpressurePause)
		}
		for !s.pauseOver && s.deadErr == nil {
			s.cond.Wait()
		}
		s.m.PauseTime += s.clock.Now().Sub(pauseStart)
		dead := s.deadErr
		s.mu.Unlock()
		if dead != nil {
			return dead
		}
		if err == nil {
			return nil
		}
	}
}

// doneMetricsLocked computes the done frame's metrics. Generation time runs
// from the first to the last delta, or from the start when there was one.
func (s *Stream) doneMetricsLocked(now time.Time, outputTokens int) DoneMetrics {
	gen := s.lastDeltaAt.Sub(s.firstDeltaAt)
	if gen <= 0 && !s.lastDeltaAt.IsZero() {
		gen = s.lastDeltaAt.Sub(s.start)
	}
	var tps float64
	if gen > 0 && outputTokens > 0 {
		tps = math.Round(float64(outputTokens)/gen.Seconds()*10) / 10
	}
	return DoneMetrics{
		TTFTms:  s.m.TTFT.Milliseconds(),
		TotalMs: now.Sub(s.start).Milliseconds(),
		TPS:     tps,
		Chunks:  s.m.Chunks,
	}
}
