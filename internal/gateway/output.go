package gateway

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/fmgate/fmgate/internal/stream"
)

// StreamOutput is the Output of a streaming front door (WebSocket, SSE, a
// vendor door's event stream): the chunk aggregator over the connection's
// sender, which receives the contract's JSON frames, or the frames as
// values when it is a stream.FrameSender (a door that speaks another wire
// format encodes its events from them, without decoding JSON).
type StreamOutput struct {
	s       *stream.Stream
	settled atomic.Bool
	status  atomic.Bool // send status frames (EnableStatus)
}

// NewStreamOutput returns the Output of a streaming front door over s. Close
// it when the turn is over.
func (g *Gateway) NewStreamOutput(ctx context.Context, s stream.Sender, requestID string) *StreamOutput {
	return &StreamOutput{s: stream.New(ctx, s, requestID, g.streamCfg, stream.SystemClock{})}
}

func (o *StreamOutput) Write(text string) error {
	err := o.s.Write(text)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, stream.ErrSlowClient):
		return errors.Join(errSlowClient, err)
	case errors.Is(err, stream.ErrMaxDuration):
		return errors.Join(errStreamTooLong, err)
	}
	return err
}

func (o *StreamOutput) Started() bool { return o.s.Started() }
func (o *StreamOutput) Discard()      { o.s.Discard() }

func (o *StreamOutput) Finish(res *Result) error {
	o.settled.Store(true)
	d := stream.Done{
		Tier:       res.Tier,
		Degraded:   res.Degraded,
		Confidence: res.Confidence,
		Tokens: stream.Tokens{Input: res.Usage.Input(), Output: res.Usage.OutputTokens,
			CacheRead: res.Usage.CachedInputTokens, CacheWrite: res.Usage.CacheWriteTokens},
		CostUSD:       res.CostUSD,
		CacheSavedUSD: res.CacheSavedUSD,
		TraceID:       res.TraceID,
		CacheHit:      res.CacheHit,
		Continued:     res.Continued,
	}
	for i, p := range res.Parts {
		if i < stream.MaxParts {
			d.Parts[i] = stream.Part{Tier: p.Tier, Chars: p.Chars}
		}
	}
	return o.s.Finish(d)
}

func (o *StreamOutput) Fail(e *Error) error {
	o.settled.Store(true)
	return o.s.Fail(stream.ErrorFrame{Code: e.Code, Message: e.Message, RetryAfterSeconds: e.RetryAfterSeconds()})
}

// Settled reports whether Finish or Fail ran, so the front door does not
// send a second error frame.
func (o *StreamOutput) Settled() bool { return o.settled.Load() }

func (o *StreamOutput) Close() { o.s.Close() }
