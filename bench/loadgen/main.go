// Command loadgen measures latency under load, where a closed-loop tool
// like hey cannot:
//
//	loadgen -url URL -rate 2000 -duration 10s        open loop: requests start on a fixed
//	                                                 schedule whatever the answers do
//	loadgen -url URL -streams 1000 -duration 10s     N requests held open at once, each
//	                                                 re-sent when its answer ends
//
// It prints p50/p90/p99/p99.9/max of the total time and of the time to the
// body's first byte (from each request's scheduled start), the counts of
// errors, non-2xx answers, overflowing and late sends, and the rate achieved.
// Every request has a timeout; in rate mode at most -max-inflight are
// outstanding, and the sends the cap refuses are counted, not queued.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type headerFlag http.Header

func (h headerFlag) String() string { return "" }

func (h headerFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	if !ok {
		return fmt.Errorf("header %q is not 'Name: value'", v)
	}
	http.Header(h).Add(strings.TrimSpace(k), strings.TrimSpace(val))
	return nil
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	url := fs.String("url", "", "URL to POST to (required)")
	body := fs.String("body", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]}`, "request body")
	header := headerFlag(http.Header{"Content-Type": {"application/json"}})
	fs.Var(header, "H", "request header 'Name: value' (repeatable)")
	rate := fs.Float64("rate", 0, "open loop: requests per second")
	streams := fs.Int("streams", 0, "requests held open at once (instead of -rate)")
	duration := fs.Duration("duration", 10*time.Second, "how long to send (after the ramp, in -streams mode)")
	ramp := fs.Duration("ramp", 2*time.Second, "-streams: start the workers evenly over this; their first answers are not counted")
	timeout := fs.Duration("timeout", 30*time.Second, "deadline of each request, body included")
	maxInFlight := fs.Int("max-inflight", 10000, "-rate: most requests outstanding; sends beyond it are counted as overflow")
	lateAfter := fs.Duration("late", time.Millisecond, "-rate: a send this far behind schedule counts as late")
	exclude := fs.String("exclude", "", "'Name: value': 2xx answers with this header are counted as excluded, not timed (e.g. 'X-Fmgate-Degraded: true')")
	label := fs.String("label", "run", "name of the run in the output")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ex HeaderMatch
	if *exclude != "" {
		k, v, ok := strings.Cut(*exclude, ":")
		if !ok {
			return fmt.Errorf("-exclude %q is not 'Name: value'", *exclude)
		}
		ex = HeaderMatch{Name: strings.TrimSpace(k), Value: strings.TrimSpace(v)}
	}
	if *url == "" || (*rate > 0) == (*streams > 0) {
		return errors.New("need -url and exactly one of -rate or -streams")
	}
	conns := *maxInFlight
	if *streams > 0 {
		conns = *streams
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConns = conns
	tr.MaxIdleConnsPerHost = conns
	tr.DisableCompression = true
	defer tr.CloseIdleConnections()
	t := &Target{URL: *url, Body: []byte(*body), Header: http.Header(header), Timeout: *timeout, Client: &http.Client{Transport: tr}, Exclude: ex}

	var (
		res *Result
		err error
	)
	if *rate > 0 {
		res, err = RunRate(ctx, t, RateConfig{Rate: *rate, Duration: *duration, MaxInFlight: *maxInFlight, LateAfter: *lateAfter}, time.Now)
	} else {
		res, err = RunStreams(ctx, t, StreamConfig{Streams: *streams, Duration: *duration, Ramp: *ramp}, time.Now)
	}
	if err != nil {
		return err
	}
	Report(stdout, *label, res)
	return nil
}
