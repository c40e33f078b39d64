package stream

import "time"

// Clock is the time source of a stream. Every timed behaviour (flush,
// heartbeat, maximum duration, send timeout, backpressure pause) goes through
// it, so tests drive a fake clock instead of sleeping.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has elapsed, like
	// time.AfterFunc.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started and reports whether it did.
	Stop() bool
	// Reset schedules the call again, d from now.
	Reset(d time.Duration) bool
}

// SystemClock is the real Clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
