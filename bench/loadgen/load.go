package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Target is one HTTP endpoint under load: every request is a POST of Body
// with Header, bounded by Timeout from its start.
type Target struct {
	URL     string
	Body    []byte
	Header  http.Header
	Timeout time.Duration
	Client  *http.Client
	// Exclude, when its Name is set, marks a 2xx answer carrying that
	// header with that value (e.g. a gateway's "degraded answer" flag): it
	// is counted as Excluded and kept out of the figures, since it did not
	// take the path being measured.
	Exclude HeaderMatch
}

// HeaderMatch is a header name and the value it must have.
type HeaderMatch struct{ Name, Value string }

// outcome is what one request ended with.
type outcome struct {
	total    time.Duration // from the scheduled start to the body's end
	ttfb     time.Duration // from the scheduled start to the body's first byte; zero if none
	status   int           // zero on a transport error
	excluded bool          // 2xx but matched Target.Exclude
	err      error
}

// do sends one request scheduled at start and reads the answer to its end.
// Latencies count from start, not from when the request actually left: a
// generator that falls behind its schedule shows up in the figures instead
// of hiding the queueing (coordinated omission).
func (t *Target) do(ctx context.Context, start time.Time, now func() time.Time) outcome {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(t.Body))
	if err != nil {
		return outcome{err: fmt.Errorf("loadgen: new request: %w", err)}
	}
	for k, v := range t.Header {
		req.Header[k] = v
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return outcome{err: fmt.Errorf("loadgen: post: %w", err)}
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode}
	if t.Exclude.Name != "" && resp.Header.Get(t.Exclude.Name) == t.Exclude.Value {
		o.excluded = true
	}
	var buf [16 << 10]byte
	for {
		n, rerr := resp.Body.Read(buf[:])
		if n > 0 && o.ttfb == 0 {
			o.ttfb = now().Sub(start)
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			o.err = fmt.Errorf("loadgen: read body: %w", rerr)
			break
		}
	}
	o.total = now().Sub(start)
	return o
}

const maxFirstErrors = 3

// Result gathers the outcomes of a load run.
type Result struct {
	Scheduled int // requests the schedule asked for
	Sent      int // requests started
	Overflow  int // scheduled while the in-flight cap was reached: not sent, counted here
	Late      int // sent more than LateAfter behind their scheduled time
	Errors    int // transport errors, timeouts and cut bodies
	Non2xx    int // answered with a status outside 2xx
	Excluded  int // answered 2xx with Target.Exclude's header: not in the figures
	Warmup    int // started during the ramp: counted above, left out of the figures
	// FirstErrors holds the first few distinct transport errors, to say
	// what the Errors were.
	FirstErrors []string
	Elapsed     time.Duration

	// Total and TTFB of the requests answered 2xx without an error, in the
	// order they completed.
	Total []time.Duration
	TTFB  []time.Duration

	mu sync.Mutex
}

// add counts o, and puts its times in the figures unless warm.
func (r *Result) add(o outcome, warm bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if warm {
		r.Warmup++
	}
	switch {
	case o.err != nil:
		r.Errors++
		if msg := o.err.Error(); len(r.FirstErrors) < maxFirstErrors && !slices.Contains(r.FirstErrors, msg) {
			r.FirstErrors = append(r.FirstErrors, msg)
		}
	case o.status < 200 || o.status > 299:
		r.Non2xx++
	case o.excluded:
		r.Excluded++
	case warm:
	default:
		r.Total = append(r.Total, o.total)
		r.TTFB = append(r.TTFB, o.ttfb)
	}
}

// Measured is how many requests ended, well or not, after the warm-up.
func (r *Result) Measured() int { return r.Sent - r.Warmup }

// RateConfig is an open-loop run: requests start on a fixed schedule,
// Rate per second for Duration, whether or not earlier ones have answered.
type RateConfig struct {
	Rate        float64
	Duration    time.Duration
	MaxInFlight int           // at most this many requests outstanding; more are counted as Overflow
	LateAfter   time.Duration // a send this far behind its schedule counts as Late
}

// RunRate runs the open-loop schedule against t and returns when every sent
// request has ended (each is bounded by t.Timeout).
func RunRate(ctx context.Context, t *Target, cfg RateConfig, now func() time.Time) (*Result, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.MaxInFlight <= 0 {
		return nil, errors.New("loadgen: rate, duration and max in flight must be > 0")
	}
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	n := int(cfg.Rate * cfg.Duration.Seconds())
	res := &Result{Scheduled: n}
	slots := make(chan struct{}, cfg.MaxInFlight)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	begin := now()
	for i := 0; i < n; i++ {
		due := begin.Add(time.Duration(i) * interval)
		if wait := due.Sub(now()); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				wg.Wait()
				return res, ctx.Err()
			}
		}
		if now().Sub(due) > cfg.LateAfter {
			res.Late++
		}
		select {
		case slots <- struct{}{}:
		default:
			res.Overflow++
			continue
		}
		res.Sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			res.add(t.do(ctx, due, now), false)
		}()
	}
	wg.Wait()
	res.Elapsed = now().Sub(begin)
	return res, nil
}

// StreamConfig is a run that holds Streams requests open at once: each
// worker sends, reads the answer to its end and sends again until Duration
// has passed. Workers start evenly over Ramp; answers to requests started
// during the ramp are counted as Warmup, not in the figures.
type StreamConfig struct {
	Streams  int
	Duration time.Duration
	Ramp     time.Duration
}

// RunStreams runs cfg.Streams closed-loop workers against t.
func RunStreams(ctx context.Context, t *Target, cfg StreamConfig, now func() time.Time) (*Result, error) {
	if cfg.Streams <= 0 || cfg.Duration <= 0 || cfg.Ramp < 0 {
		return nil, errors.New("loadgen: streams and duration must be > 0, ramp >= 0")
	}
	res := &Result{}
	begin := now()
	rampEnd := begin.Add(cfg.Ramp)
	end := rampEnd.Add(cfg.Duration)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < cfg.Streams; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offset := time.Duration(int64(cfg.Ramp) * int64(w) / int64(cfg.Streams))
			if !sleepUntil(ctx, begin.Add(offset), now) {
				return
			}
			for ctx.Err() == nil {
				start := now()
				if !start.Before(end) {
					return
				}
				o := t.do(ctx, start, now)
				res.mu.Lock()
				res.Sent++
				res.Scheduled++
				res.mu.Unlock()
				res.add(o, start.Before(rampEnd))
			}
		}()
	}
	wg.Wait()
	res.Elapsed = now().Sub(rampEnd)
	return res, ctx.Err()
}

func sleepUntil(ctx context.Context, at time.Time, now func() time.Time) bool {
	d := at.Sub(now())
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
