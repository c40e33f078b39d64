package live

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestHistoryIsCapped(t *testing.T) {
	clk := newClock()
	cfg := DefaultConfig()
	cfg.History = 5 * time.Second
	a := New(cfg, nil, clk.Now)
	for range 8 {
		a.step(context.Background())
		clk.Advance(time.Second)
	}
	h := a.History()
	if len(h) != 5 {
		t.Fatalf("history holds %d snapshots, want 5", len(h))
	}
	for i, s := range h {
		if want := t0.Add(time.Duration(3+i) * time.Second); !s.T.Equal(want) {
			t.Errorf("history[%d].t = %s, want %s (oldest first)", i, s.T, want)
		}
	}
}

func TestSlowSubscriberDropsFrames(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	sub, _, err := a.subscribe()
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // nobody reads: step must not block
		a.step(context.Background())
	}
	if n := len(sub.frames); n != subscriberBuffer {
		t.Errorf("%d frames buffered, want %d", n, subscriberBuffer)
	}
	if got := a.Stats().DroppedFrames; got != 20-subscriberBuffer {
		t.Errorf("dropped frames = %d, want %d", got, 20-subscriberBuffer)
	}
}

func TestRunOnce(t *testing.T) {
	a := New(DefaultConfig(), nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	for len(a.History()) == 0 { // Run takes its first snapshot at once
		time.Sleep(time.Millisecond)
	}
	if err := a.Run(ctx); err == nil {
		t.Error("a second Run did not fail")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

// sseEvent is one block of an event stream; comment holds a ": ..." line.
type sseEvent struct{ event, data, comment string }

type sseReader struct{ r *bufio.Reader }

func (s sseReader) next() (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, ":"):
			ev.comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "event: "):
			ev.event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if ev.data != "" {
				return ev, errors.New("more than one data line")
			}
			ev.data = line[len("data: "):]
		default:
			return ev, errors.New("unexpected line " + line)
		}
	}
}

// newServer serves a; it closes after the streams opened later (cleanups
// run last-in first-out), so no handler is left waiting.
func newServer(t *testing.T, a *Aggregator) *httptest.Server {
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func openStream(t *testing.T, url string) (*http.Response, sseReader) {
	t.Helper()
	resp, err := http.Get(url + "/admin/live")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, sseReader{bufio.NewReader(resp.Body)}
}

func TestSSEHistoryThenSnapshots(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	ctx := context.Background()
	for range 3 {
		a.step(ctx)
		clk.Advance(time.Second)
	}
	srv := newServer(t, a)

	resp, r := openStream(t, srv.URL)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	ev, err := r.next()
	if err != nil || ev.event != "history" {
		t.Fatalf("first event %+v, %v; want history", ev, err)
	}
	var hist struct{ Snapshots []Snapshot }
	if err := json.Unmarshal([]byte(ev.data), &hist); err != nil {
		t.Fatal(err)
	}
	if len(hist.Snapshots) != 3 || !hist.Snapshots[0].T.Equal(t0) || !hist.Snapshots[2].T.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("history = %d snapshots from %v, want 3 from %s oldest first", len(hist.Snapshots), hist.Snapshots, t0)
	}

	// The subscription exists once the history is sent; each step now
	// reaches the stream.
	for i := 1; i <= 2; i++ {
		write(t, a, turn(turnSpec{end: clk.Now(), duration: 50 * time.Millisecond, model: "sonnet"}))
		a.step(ctx)
		ev, err := r.next()
		if err != nil || ev.event != "snapshot" {
			t.Fatalf("event %d: %+v, %v; want snapshot", i, ev, err)
		}
		var s Snapshot
		if err := json.Unmarshal([]byte(ev.data), &s); err != nil {
			t.Fatal(err)
		}
		if s.Turns != int64(i) || s.Tiers["sonnet"] != int64(i) {
			t.Fatalf("snapshot %d: turns %d tiers %v", i, s.Turns, s.Tiers)
		}
		clk.Advance(time.Second)
	}

	resp.Body.Close()
	for a.Stats().Subscribers != 0 { // the handler notices the client left
		time.Sleep(time.Millisecond)
	}
}

func TestSSEPing(t *testing.T) {
	a := New(DefaultConfig(), nil, newClock().Now)
	a.pingEach = 10 * time.Millisecond
	srv := newServer(t, a)
	_, r := openStream(t, srv.URL)
	if ev, err := r.next(); err != nil || ev.event != "history" || ev.data != `{"snapshots":[]}` {
		t.Fatalf("first event %+v, %v; want an empty history", ev, err)
	}
	if ev, err := r.next(); err != nil || ev.comment != "ping" || ev.event != "" {
		t.Fatalf("second block %+v, %v; want a ping comment", ev, err)
	}
}

func TestSubscriberCap(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSubscribers = 2
	a := New(cfg, nil, newClock().Now)
	srv := newServer(t, a)

	first, r1 := openStream(t, srv.URL)
	_, r2 := openStream(t, srv.URL)
	for _, r := range []sseReader{r1, r2} {
		if ev, err := r.next(); err != nil || ev.event != "history" {
			t.Fatalf("%+v, %v", ev, err)
		}
	}
	resp, err := http.Get(srv.URL + "/admin/live")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Error struct{ Code, Message string }
	}
	if resp.StatusCode != http.StatusServiceUnavailable || json.Unmarshal(body, &e) != nil || e.Error.Code != "overloaded" || e.Error.Message == "" {
		t.Fatalf("third stream: %d %s; want 503 overloaded", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}

	first.Body.Close()
	for a.Stats().Subscribers != 1 {
		time.Sleep(time.Millisecond)
	}
	_, r3 := openStream(t, srv.URL)
	if ev, err := r3.next(); err != nil || ev.event != "history" {
		t.Fatalf("after one left: %+v, %v; want a stream", ev, err)
	}
}

func TestSSEEndsWhenRunStops(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Interval = time.Hour
	cfg.Window = time.Hour
	cfg.History = time.Hour
	a := New(cfg, nil, newClock().Now)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	for len(a.History()) == 0 { // the first snapshot goes to the history, not the stream
		time.Sleep(time.Millisecond)
	}
	srv := newServer(t, a)

	_, r := openStream(t, srv.URL)
	if ev, err := r.next(); err != nil || ev.event != "history" {
		t.Fatalf("%+v, %v", ev, err)
	}
	cancel()
	if ev, err := r.next(); err != io.EOF {
		t.Fatalf("after stop: %+v, %v; want the stream to end", ev, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + "/admin/live")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("stream after stop: %d, want 503", resp.StatusCode)
	}
}

func TestSnapshotEndpoint(t *testing.T) {
	clk := newClock()
	a := New(DefaultConfig(), nil, clk.Now)
	write(t, a, turn(turnSpec{end: clk.Now(), duration: 20 * time.Millisecond, model: "haiku"}))
	srv := newServer(t, a)

	tests := []struct {
		name, method, path string
		status             int
		check              func(t *testing.T, body []byte)
	}{
		{"snapshot", http.MethodGet, "/admin/live/snapshot", 200, func(t *testing.T, body []byte) {
			var s Snapshot
			if err := json.Unmarshal(body, &s); err != nil {
				t.Fatal(err)
			}
			if s.Turns != 1 || s.Tiers["haiku"] != 1 || s.LatencyMs.P99 == nil || *s.LatencyMs.P99 != 20 {
				t.Fatalf("snapshot %s", body)
			}
		}},
		{"wrong method", http.MethodPost, "/admin/live/snapshot", 405, errorCode("method_not_allowed")},
		{"unknown path", http.MethodGet, "/admin/live/nope", 404, errorCode("not_found")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %s; want %d JSON", resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.status)
			}
			tt.check(t, body)
		})
	}
}

func errorCode(code string) func(*testing.T, []byte) {
	return func(t *testing.T, body []byte) {
		var e struct{ Error struct{ Code string } }
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != code {
			t.Fatalf("body %s, want error code %q", body, code)
		}
	}
}
