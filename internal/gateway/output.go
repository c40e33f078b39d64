package gateway

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/fmgate/fmgate/internal/stream"
)

// streamOutput is the Output of a streaming front door (WebSocket, SSE): the
// chunk aggregator over the connection's sender.
type streamOutput struct {
	s       *stream.Stream
	settled atomic.Bool
}

func (g *Gateway) newStreamOutput(ctx context.Context, s stream.Sender, requestID string) *streamOutput {
	return &streamOutput{s: stream.New(ctx, s, requestID, g.streamCfg, stream.SystemClock{})}
}

func (o *streamOutput) Write(text string) error {
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

func (o *streamOutput) Started() bool { return o.s.Started() }
func (o *streamOutput) Discard()      { o.s.Discard() }

func (o *streamOutput) Finish(res *Result) error {
	o.settled.Store(true)
	return o.s.Finish(stream.Done{
		Tier:       res.Tier,
		Degraded:   res.Degraded,
		Confidence: res.Confidence,
		Tokens:     stream.Tokens{Input: res.Usage.InputTokens, Output: res.Usage.OutputTokens},
		CostUSD:    res.CostUSD,
		TraceID:    res.TraceID,
		CacheHit:   res.CacheHit,
	})
}

func (o *streamOutput) Fail(e *Error) error {
	o.settled.Store(true)
	return o.s.Fail(stream.ErrorFrame{Code: e.Code, Message: e.Message, RetryAfterSeconds: e.RetryAfterSeconds()})
}

// Settled reports whether Finish or Fail ran, so the front door does not
// send a second error frame.
func (o *streamOutput) Settled() bool { return o.settled.Load() }

func (o *streamOutput) Close() { o.s.Close() }
