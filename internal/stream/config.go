package stream

import (
	"errors"
	"fmt"
	"time"
)

// minFrameBytes leaves room for the JSON envelope of a chunk frame plus at
// least one escaped character, so splitting an oversize chunk always makes
// progress.
const minFrameBytes = 256

// Config tunes one stream. The zero value of a field means its default; see
// DefaultConfig for the MangaAssist values.
type Config struct {
	// FlushInterval is the longest text waits in the buffer once a chunk has
	// been sent (default 100ms). The first text of a stream is sent at once.
	FlushInterval time.Duration `yaml:"flushInterval"`
	// MaxBufferBytes flushes the buffer as soon as it holds this many bytes of
	// text (default 4096).
	MaxBufferBytes int `yaml:"maxBufferBytes"`
	// MaxFrameBytes is the largest frame sent (default 32768, the API Gateway
	// WebSocket limit); a longer chunk is split into frames sharing its index,
	// numbered by subIndex, never inside a UTF-8 character. At least 256.
	MaxFrameBytes int `yaml:"maxFrameBytes"`
	// HeartbeatInterval sends a heartbeat frame after this long without any
	// frame, so proxies and clients keep an idle connection open (default 5s).
	HeartbeatInterval time.Duration `yaml:"heartbeatInterval"`
	// MaxDuration stops accepting text this long after the stream started
	// (default 120s). The gateway's pipeline also cancels the model call at
	// this age, so a model that stalls near the end cannot hold the stream.
	MaxDuration time.Duration `yaml:"maxDuration"`
	// SendTimeout is how long one Send may take; a slower or failed Send is
	// backpressure (default 500ms).
	SendTimeout time.Duration `yaml:"sendTimeout"`
	// BackpressurePause is the wait after a failed or slow Send before the
	// stream tries again (default 500ms).
	BackpressurePause time.Duration `yaml:"backpressurePause"`
	// MaxBackpressurePauses cancels the stream with ErrSlowClient at this
	// many failed or slow Sends (default 10).
	MaxBackpressurePauses int `yaml:"maxBackpressurePauses"`
	// MaxPendingBytes bounds the text written but not yet delivered; Write
	// blocks at this size until sending catches up (default 65536). It must
	// be at least MaxBufferBytes.
	MaxPendingBytes int `yaml:"maxPendingBytes"`
	// Continuation, when on, lets a fallback model finish an answer whose
	// model failed after text reached the client, in the same stream (at
	// most once per turn); the done frame then says continued and names the
	// tier of each part. Off by default: such an answer ends with an error
	// frame.
	Continuation bool `yaml:"continuation"`
}

// DefaultConfig returns the MangaAssist streaming defaults.
func DefaultConfig() Config {
	return Config{
		FlushInterval:         100 * time.Millisecond,
		MaxBufferBytes:        4096,
		MaxFrameBytes:         32768,
		HeartbeatInterval:     5 * time.Second,
		MaxDuration:           120 * time.Second,
		SendTimeout:           500 * time.Millisecond,
		BackpressurePause:     500 * time.Millisecond,
		MaxBackpressurePauses: 10,
		MaxPendingBytes:       65536,
	}
}

// Validate reports every field that is out of range, each as "field: problem".
func (c Config) Validate() error {
	var errs []error
	positive := func(name string, v int64) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0", name))
		}
	}
	positive("flushInterval", int64(c.FlushInterval))
	positive("maxBufferBytes", int64(c.MaxBufferBytes))
	positive("heartbeatInterval", int64(c.HeartbeatInterval))
	positive("maxDuration", int64(c.MaxDuration))
	positive("sendTimeout", int64(c.SendTimeout))
	positive("backpressurePause", int64(c.BackpressurePause))
	positive("maxBackpressurePauses", int64(c.MaxBackpressurePauses))
	positive("maxPendingBytes", int64(c.MaxPendingBytes))
	if c.MaxFrameBytes < minFrameBytes {
		errs = append(errs, fmt.Errorf("maxFrameBytes: must be >= %d", minFrameBytes))
	}
	if c.MaxBufferBytes > 0 && c.MaxPendingBytes > 0 && c.MaxPendingBytes < c.MaxBufferBytes {
		errs = append(errs, errors.New("maxPendingBytes: must be >= maxBufferBytes"))
	}
	return errors.Join(errs...)
}

// withDefaults fills zero fields, so a partly written Config still streams.
// WriteLimit bounds one write of a Sender whose transport cannot abandon a
// write without closing the connection (a WebSocket): the time the stream
// gives a slow client in all, its SendTimeout for each of its
// MaxBackpressurePauses slow sends. Such a Sender ignores the send's own
// context deadline, which would cut the client at its first slow send; the
// stream counts a send that took longer than SendTimeout as slow (a
// pause, no resend) all the same.
func (c Config) WriteLimit() time.Duration {
	d := c.withDefaults()
	return d.SendTimeout * time.Duration(d.MaxBackpressurePauses)
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	setInt := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	setDur(&c.FlushInterval, d.FlushInterval)
	setInt(&c.MaxBufferBytes, d.MaxBufferBytes)
	setInt(&c.MaxFrameBytes, d.MaxFrameBytes)
	setDur(&c.HeartbeatInterval, d.HeartbeatInterval)
	setDur(&c.MaxDuration, d.MaxDuration)
	setDur(&c.SendTimeout, d.SendTimeout)
	setDur(&c.BackpressurePause, d.BackpressurePause)
	setInt(&c.MaxBackpressurePauses, d.MaxBackpressurePauses)
	setInt(&c.MaxPendingBytes, d.MaxPendingBytes)
	if c.MaxPendingBytes < c.MaxBufferBytes {
		c.MaxPendingBytes = c.MaxBufferBytes
	}
	return c
}
