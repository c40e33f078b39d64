package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTarget(url string, timeout time.Duration) *Target {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1000
	return &Target{URL: url, Body: []byte(`{}`), Timeout: timeout, Client: &http.Client{Transport: tr}}
}

// concurrency tracks how many handlers run at once, and the most seen.
type concurrency struct{ now, peak atomic.Int64 }

func (c *concurrency) enter() {
	n := c.now.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

func TestRunRateHoldsScheduleWhileAnswersAreSlow(t *testing.T) {
	// Every answer takes 100 ms. A closed loop over few connections would
	// send a handful; the open loop sends on schedule regardless.
	var (
		mu       sync.Mutex
		arrivals []time.Time
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		w.Write([]byte("ok"))
	}))
	defer srv.Close()

	cfg := RateConfig{Rate: 200, Duration: 500 * time.Millisecond, MaxInFlight: 1000, LateAfter: 50 * time.Millisecond}
	res, err := RunRate(context.Background(), newTarget(srv.URL, 5*time.Second), cfg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 100 || res.Sent != 100 || len(res.Total) != 100 {
		t.Fatalf("scheduled %d, sent %d, ok %d; want 100 each", res.Scheduled, res.Sent, len(res.Total))
	}
	// The sends span the whole schedule: the last arrives about 495 ms
	// after the first, not all at once and not 100 × 100 ms later.
	mu.Lock()
	defer mu.Unlock()
	first, last := arrivals[0], arrivals[0]
	for _, a := range arrivals {
		if a.Before(first) {
			first = a
		}
		if a.After(last) {
			last = a
		}
	}
	if span := last.Sub(first); span < 400*time.Millisecond || span > 800*time.Millisecond {
		t.Errorf("arrivals spread over %s, want about 495ms", span)
	}
	// And each half of the run carries about half of the requests.
	mid := first.Add(250 * time.Millisecond)
	early := 0
	for _, a := range arrivals {
		if a.Before(mid) {
			early++
		}
	}
	if early < 35 || early > 65 {
		t.Errorf("%d of 100 requests in the first half of the run, want about 50", early)
	}
	if p := Summarize(res.Total); p.P50 < 100*time.Millisecond {
		t.Errorf("p50 %s below the server's 100 ms", p.P50)
	}
}

func TestRunRateInFlightCap(t *testing.T) {
	var c concurrency
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.enter()
		defer c.leave()
		<-release
	}))
	defer srv.Close()
	defer close(release)

	cfg := RateConfig{Rate: 500, Duration: 200 * time.Millisecond, MaxInFlight: 5, LateAfter: time.Second}
	done := make(chan *Result)
	go func() {
		res, err := RunRate(context.Background(), newTarget(srv.URL, 5*time.Second), cfg, time.Now)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	time.Sleep(400 * time.Millisecond) // the schedule is over; the five are still held
	if peak := c.peak.Load(); peak != 5 {
		t.Errorf("server saw %d requests at once, want the cap of 5", peak)
	}
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	release <- struct{}{}
	res := <-done
	if res.Sent != 5 || res.Overflow != 95 || res.Sent+res.Overflow != res.Scheduled {
		t.Errorf("sent %d, overflow %d of %d scheduled; want 5 and 95", res.Sent, res.Overflow, res.Scheduled)
	}
}

func TestRunRateCountsFailures(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 5 {
		case 4:
			w.Header().Set("X-Degraded", "true")
			w.Write([]byte("a fallback answer"))
		case 0:
			http.Error(w, "boom", http.StatusInternalServerError)
		case 1:
			time.Sleep(300 * time.Millisecond) // past the request's timeout
		case 2:
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			w.Write([]byte("ok"))
		}
	}))
	defer srv.Close()

	cfg := RateConfig{Rate: 100, Duration: 500 * time.Millisecond, MaxInFlight: 100, LateAfter: time.Second}
	tgt := newTarget(srv.URL, 100*time.Millisecond)
	tgt.Exclude = HeaderMatch{Name: "X-Degraded", Value: "true"}
	res, err := RunRate(context.Background(), tgt, cfg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Non2xx != 10 || res.Errors != 20 || res.Excluded != 10 || len(res.Total) != 10 {
		t.Errorf("non2xx %d, errors %d, excluded %d, ok %d; want 10, 20 (timeouts and resets), 10, 10",
			res.Non2xx, res.Errors, res.Excluded, len(res.Total))
	}
	if len(res.FirstErrors) < 2 {
		t.Errorf("first errors %q, want the timeout and the reset", res.FirstErrors)
	}
	var out bytes.Buffer
	Report(&out, "x", res)
	if !strings.Contains(out.String(), "RESULT label=x ok=10 excluded=10 non2xx=10 errors=20 ") {
		t.Errorf("report does not show the counts:\n%s", out.String())
	}
}

func TestRunStreamsHoldsStreamsAndTimesFirstByte(t *testing.T) {
	var c concurrency
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.enter()
		defer c.leave()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // headers now, the first byte of the body later
		time.Sleep(30 * time.Millisecond)
		for range 3 {
			w.Write([]byte("data: {}\n\n"))
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	defer srv.Close()

	cfg := StreamConfig{Streams: 8, Duration: 400 * time.Millisecond, Ramp: 80 * time.Millisecond}
	res, err := RunStreams(context.Background(), newTarget(srv.URL, 5*time.Second), cfg, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if peak := c.peak.Load(); peak != 8 {
		t.Errorf("server saw %d streams at once, want 8", peak)
	}
	if res.Errors != 0 || res.Non2xx != 0 || len(res.Total) < 8 || res.Warmup < 1 {
		t.Fatalf("ok %d, errors %d, non2xx %d, warm-up %d", len(res.Total), res.Errors, res.Non2xx, res.Warmup)
	}
	ttfb, total := Summarize(res.TTFB), Summarize(res.Total)
	if ttfb.P50 < 30*time.Millisecond || ttfb.P50 > 60*time.Millisecond {
		t.Errorf("ttfb p50 %s, want the server's 30 ms before the first byte", ttfb.P50)
	}
	if total.P50 < 90*time.Millisecond {
		t.Errorf("total p50 %s, want at least the stream's 90 ms", total.P50)
	}
}

func TestSummarize(t *testing.T) {
	seq := func(n int) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = time.Duration(n-i) * time.Millisecond // reversed: Summarize must sort
		}
		return s
	}
	tests := []struct {
		name string
		give []time.Duration
		want Percentiles
	}{
		{name: "empty", give: nil, want: Percentiles{}},
		{name: "one", give: []time.Duration{7}, want: Percentiles{N: 1, P50: 7, P90: 7, P99: 7, P999: 7, Max: 7}},
		{name: "1..100 ms", give: seq(100), want: Percentiles{N: 100, P50: 50 * time.Millisecond,
			P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, P999: 100 * time.Millisecond, Max: 100 * time.Millisecond}},
		{name: "1..1000 ms", give: seq(1000), want: Percentiles{N: 1000, P50: 500 * time.Millisecond,
			P90: 900 * time.Millisecond, P99: 990 * time.Millisecond, P999: 999 * time.Millisecond, Max: 1000 * time.Millisecond}},
		{name: "one outlier in 200", give: append(make([]time.Duration, 199), time.Second), want: Percentiles{N: 200,
			P999: time.Second, Max: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.give); got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}
