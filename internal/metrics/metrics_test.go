package metrics

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fmgate/fmgate/internal/events"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		give Options
		want string // error substring; "" for valid
	}{
		{"zero value", Options{}, ""},
		{"models", Options{Models: testModels}, ""},
		{"empty model", Options{Models: []string{"sonnet", ""}}, "models[1]: empty"},
		{"reserved other", Options{Models: []string{"other"}}, `models[0]: "other" is a reserved label value`},
		{"reserved none", Options{Models: []string{"none"}}, `models[0]: "none" is a reserved`},
		{"reserved primary", Options{Models: []string{"primary"}}, `models[0]: "primary" is a reserved`},
		{"bad utf8", Options{Models: []string{"\xff"}}, "models[0]: not valid UTF-8"},
		{"negative pending", Options{TTFTPending: -1}, "ttftPending: must not be negative"},
		{"negative age", Options{TTFTMaxAge: -time.Second}, "ttftMaxAge: must not be negative"},
		{"negative timeout", Options{StateTimeout: -time.Second}, "stateTimeout: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := New(tt.give); err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want %q", err, tt.want)
			}
			if _, err := New(tt.give); err == nil {
				t.Fatalf("New() accepted invalid options")
			}
		})
	}
}

func TestSinkName(t *testing.T) {
	m, _ := newTest(t, Options{})
	var s events.Sink = m
	if got := s.Name(); got != "metrics" {
		t.Fatalf("Name() = %q, want metrics", got)
	}
}

func TestWriteSpans(t *testing.T) {
	sonnet := "claude-sonnet-4-6"
	tests := []struct {
		name  string
		batch []events.Event
		want  []want
	}{
		{
			name:  "ok turn on ws",
			batch: []events.Event{mk("turn", surface("ws"), model(sonnet), at(t0, 1200*time.Millisecond))},
			want: []want{
				{"fmgate_turn_duration_seconds", []string{"route", "ws", "model", sonnet, "tier", "primary"}, 1},
				{"fmgate_turns_total", []string{"route", "ws", "status", "ok"}, 1},
				{"fmgate_turns_total", []string{"route", "sse", "status", "ok"}, 0},
				{"fmgate_errors_total", []string{"code", "rate_limited"}, 0},
				{"fmgate_fallback_total", []string{"tier", "primary"}, -1},
				{"fmgate_spans_total", []string{"span", "turn"}, 1},
			},
		},
		{
			name: "degraded turn served by the secondary model",
			batch: []events.Event{mk("turn", surface("sse"), model("claude-haiku-4-5"), status(events.StatusFallback),
				fb("haiku"), at(t0, 2*time.Second))},
			want: []want{
				{"fmgate_turn_duration_seconds", []string{"route", "sse", "model", "claude-haiku-4-5", "tier", "haiku"}, 1},
				{"fmgate_turns_total", []string{"route", "sse", "status", "fallback"}, 1},
				{"fmgate_fallback_total", []string{"tier", "haiku"}, 1},
			},
		},
		{
			name: "graceful message after both models failed",
			batch: []events.Event{mk("turn", surface("http"), status(events.StatusFallback), fb("graceful"),
				at(t0, 3500*time.Millisecond))},
			want: []want{
				{"fmgate_turn_duration_seconds", []string{"route", "http", "model", "none", "tier", "graceful"}, 1},
				{"fmgate_fallback_total", []string{"tier", "graceful"}, 1},
			},
		},
		{
			name: "failed turn counts its edge error",
			batch: []events.Event{mk("turn", surface("http"), status(events.StatusFailed), code("rate_limited"),
				at(t0, 5*time.Millisecond))},
			want: []want{
				{"fmgate_turns_total", []string{"route", "http", "status", "failed"}, 1},
				{"fmgate_errors_total", []string{"code", "rate_limited"}, 1},
				{"fmgate_errors_total", []string{"code", "other"}, 0},
				{"fmgate_turn_duration_seconds", []string{"route", "http", "model", "none", "tier", "primary"}, 1},
			},
		},
		{
			name: "unknown code, route, status, tier and model become other",
			batch: []events.Event{mk("turn", surface("carrier-pigeon"), model("gpt-99"), status("weird"),
				code("E_SOMETHING"), fb("oracle"))},
			want: []want{
				{"fmgate_turns_total", []string{"route", "other", "status", "other"}, 1},
				{"fmgate_errors_total", []string{"code", "other"}, 1},
				{"fmgate_fallback_total", []string{"tier", "other"}, 1},
				{"fmgate_turn_duration_seconds", []string{"route", "other", "model", "other", "tier", "other"}, 1},
			},
		},
		{
			name: "model attempts, tokens and cost",
			batch: []events.Event{
				mk("model_attempt", ids("t1", "a1", "s-turn"), model(sonnet), code("throttled")),
				mk("model_attempt", ids("t1", "a2", "s-turn"), model(sonnet), tokens(1200, 300), cost(0.0081)),
				mk("model_attempt", ids("t1", "a3", "s-turn"), model(sonnet), code("E_NEW_KIND")),
			},
			want: []want{
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "ok"}, 1},
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "throttled"}, 1},
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "other"}, 1},
				{"fmgate_tokens_total", []string{"model", sonnet, "direction", "in"}, 1200},
				{"fmgate_tokens_total", []string{"model", sonnet, "direction", "out"}, 300},
				{"fmgate_cost_usd_total", []string{"model", sonnet, "component", "model_attempt"}, 0.0081},
				{"fmgate_spans_total", []string{"span", "model_attempt"}, 3},
			},
		},
		{
			name: "an answer that failed the client's schema or tools is its tier's own outcome",
			batch: []events.Event{
				mk("model_attempt", ids("t1", "a1", "s-turn"), model(sonnet), code("unknown"), func(e *events.Event) { e.Outcome.VendorCode = "invalid_json_answer" }),
				mk("model_attempt", ids("t2", "a1", "s-turn"), model(sonnet), code("unknown"), func(e *events.Event) { e.Outcome.VendorCode = "invalid_tool_call" }),
				mk("model_attempt", ids("t3", "a1", "s-turn"), model(sonnet), code("unknown"), func(e *events.Event) { e.Outcome.VendorCode = "SomeVendorError" }),
			},
			want: []want{
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "invalid_json_answer"}, 1},
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "invalid_tool_call"}, 1},
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "unknown"}, 1},
			},
		},
		{
			name: "costs without a model go to model none by component",
			batch: []events.Event{
				mk("cache", cost(0.00002)),
				mk("faq", cost(0.00001)),
				mk("custom_step", cost(0.00004)),
			},
			want: []want{
				{"fmgate_cost_usd_total", []string{"model", "none", "component", "cache"}, 0.00002},
				{"fmgate_cost_usd_total", []string{"model", "none", "component", "faq"}, 0.00001},
				{"fmgate_cost_usd_total", []string{"model", "none", "component", "other"}, 0.00004},
				{"fmgate_spans_total", []string{"span", "other"}, 1},
			},
		},
		{
			name: "the turn span's own tokens and cost are not counted again",
			batch: []events.Event{
				mk("turn", surface("ws"), model(sonnet), tokens(10, 10), cost(1)),
			},
			want: []want{
				{"fmgate_tokens_total", []string{"model", sonnet, "direction", "in"}, -1},
				{"fmgate_cost_usd_total", []string{"model", sonnet, "component", "turn"}, -1},
			},
		},
		{
			name: "an embedding call is no chat turn; its attempt counts",
			batch: []events.Event{
				mk("turn", surface("http"), model(sonnet), at(t0, time.Second)),
				mk("turn", ids("t2", "e1", ""), surface("http"), model(sonnet), at(t0, 20*time.Millisecond), node(events.NodeEmbeddings)),
				mk("turn", ids("t3", "e2", ""), surface("http"), status(events.StatusFailed), code("upstream_failed"), node(events.NodeEmbeddings)),
				mk("model_attempt", ids("t2", "a1", "e1"), model(sonnet), tokens(40, 0), cost(0.0001)),
			},
			want: []want{
				{"fmgate_turns_total", []string{"route", "http", "status", "ok"}, 1},
				{"fmgate_turns_total", []string{"route", "http", "status", "failed"}, 0},
				{"fmgate_errors_total", []string{"code", "upstream_failed"}, 0},
				{"fmgate_turn_duration_seconds", []string{"route", "http", "model", sonnet, "tier", "primary"}, 1},
				{"fmgate_spans_total", []string{"span", "turn"}, 3},
				{"fmgate_model_attempts_total", []string{"model", sonnet, "outcome", "ok"}, 1},
				{"fmgate_tokens_total", []string{"model", sonnet, "direction", "in"}, 40},
				{"fmgate_cost_usd_total", []string{"model", sonnet, "component", "model_attempt"}, 0.0001},
			},
		},
		{
			name: "negative, NaN-like and absurd costs are ignored",
			batch: []events.Event{
				mk("model_attempt", model(sonnet), cost(-1)),
				mk("model_attempt", model(sonnet), cost(2e6)),
			},
			want: []want{
				{"fmgate_cost_usd_total", []string{"model", sonnet, "component", "model_attempt"}, -1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{})
			write(t, m, tt.batch...)
			check(t, gather(t, m), tt.want)
		})
	}
}

func TestTurnDurationBuckets(t *testing.T) {
	m, _ := newTest(t, Options{})
	for _, d := range []time.Duration{40 * time.Millisecond, 900 * time.Millisecond, 2700 * time.Millisecond, 12 * time.Second} {
		write(t, m, mk("turn", surface("ws"), model("sonnet"), at(t0, d)))
	}
	fams := gather(t, m)
	kv := []string{"route", "ws", "model", "sonnet", "tier", "primary"}
	tests := []struct {
		le   float64
		want float64
	}{{0.05, 1}, {0.75, 1}, {1, 2}, {2.5, 2}, {3, 3}, {10, 3}}
	for _, tt := range tests {
		if got := bucket(fams, tt.le, "fmgate_turn_duration_seconds", kv...); got != tt.want {
			t.Errorf("bucket le=%v = %v, want %v", tt.le, got, tt.want)
		}
	}
	mt := series(fams, "fmgate_turn_duration_seconds", kv...)
	if got, want := mt.GetHistogram().GetSampleSum(), 0.04+0.9+2.7+12; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("sum = %v, want %v", got, want)
	}
	if got := mt.GetHistogram().GetSampleCount(); got != 4 {
		t.Errorf("count = %d, want 4", got)
	}
}

func TestTTFT(t *testing.T) {
	kv := []string{"route", "ws", "model", "sonnet", "tier", "primary"}
	turn := func(trace, id string) events.Event {
		return mk("turn", ids(trace, id, ""), surface("ws"), model("sonnet"), at(t0, 2*time.Second))
	}
	stream := func(trace, parent string, first time.Duration) events.Event {
		return mk("stream", ids(trace, "st-"+parent, parent), at(t0.Add(first), time.Second))
	}
	tests := []struct {
		name        string
		batches     [][]events.Event
		wantCount   float64
		wantSum     float64
		wantPending float64
	}{
		{
			name:      "stream then turn in one batch",
			batches:   [][]events.Event{{stream("t1", "turn1", 350*time.Millisecond), turn("t1", "turn1")}},
			wantCount: 1, wantSum: 0.35,
		},
		{
			name:      "stream and turn in separate batches",
			batches:   [][]events.Event{{stream("t1", "turn1", 800*time.Millisecond)}, {turn("t1", "turn1")}},
			wantCount: 1, wantSum: 0.8,
		},
		{
			name:      "turn without a stream span",
			batches:   [][]events.Event{{turn("t1", "turn1")}},
			wantCount: -1,
		},
		{
			name:        "stream of another trace with the same parent id",
			batches:     [][]events.Event{{stream("t2", "turn1", 300*time.Millisecond), turn("t1", "turn1")}},
			wantCount:   -1,
			wantPending: 1,
		},
		{
			name:        "stream after its turn is not matched and waits",
			batches:     [][]events.Event{{turn("t1", "turn1"), stream("t1", "turn1", 300*time.Millisecond)}},
			wantCount:   -1,
			wantPending: 1,
		},
		{
			name: "a second stream span for the same turn keeps the first byte",
			batches: [][]events.Event{{stream("t1", "turn1", 300*time.Millisecond),
				stream("t1", "turn1", 900*time.Millisecond), turn("t1", "turn1")}},
			wantCount: 1, wantSum: 0.3,
		},
		{
			name:      "first byte before the turn start is not observed",
			batches:   [][]events.Event{{stream("t1", "turn1", -time.Millisecond), turn("t1", "turn1")}},
			wantCount: -1,
		},
		{
			name: "interleaved turns",
			batches: [][]events.Event{{
				stream("t1", "a", 100*time.Millisecond), stream("t2", "b", 200*time.Millisecond),
				turn("t2", "b"), stream("t3", "c", 400*time.Millisecond), turn("t1", "a"), turn("t3", "c"),
			}},
			wantCount: 3, wantSum: 0.7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{})
			for _, b := range tt.batches {
				write(t, m, b...)
			}
			fams := gather(t, m)
			if got := value(fams, "fmgate_turn_ttft_seconds", kv...); got != tt.wantCount {
				t.Fatalf("ttft count = %v, want %v", got, tt.wantCount)
			}
			if tt.wantCount > 0 {
				sum := series(fams, "fmgate_turn_ttft_seconds", kv...).GetHistogram().GetSampleSum()
				if sum < tt.wantSum-1e-9 || sum > tt.wantSum+1e-9 {
					t.Errorf("ttft sum = %v, want %v", sum, tt.wantSum)
				}
			}
			if got := value(fams, "fmgate_ttft_pending"); got != tt.wantPending {
				t.Errorf("pending = %v, want %v", got, tt.wantPending)
			}
		})
	}
}

func TestTTFTPendingBounded(t *testing.T) {
	kv := []string{"route", "ws", "model", "sonnet", "tier", "primary"}
	m, clk := newTest(t, Options{TTFTPending: 3, TTFTMaxAge: time.Minute})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		write(t, m, mk("stream", ids("t", "st-"+id, id), at(t0.Add(100*time.Millisecond), 0)))
	}
	fams := gather(t, m)
	check(t, fams, []want{
		{"fmgate_ttft_pending", nil, 3},
		{"fmgate_ttft_pending_dropped_total", []string{"reason", "evicted"}, 2},
		{"fmgate_ttft_pending_dropped_total", []string{"reason", "expired"}, 0},
	})
	// The two oldest were evicted: their turns get no time to first token.
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		write(t, m, mk("turn", ids("t", id, ""), surface("ws"), model("sonnet"), at(t0, time.Second)))
	}
	check(t, gather(t, m), []want{
		{"fmgate_turn_ttft_seconds", kv, 3},
		{"fmgate_turn_duration_seconds", kv, 5},
		{"fmgate_ttft_pending", nil, 0},
	})

	// A stream span whose turn span never comes expires after TTFTMaxAge,
	// when the next stream span arrives…
	write(t, m, mk("stream", ids("t", "st-x", "x"), at(t0, 0)))
	clk.advance(time.Minute)
	write(t, m, mk("stream", ids("t", "st-y", "y"), at(t0, 0)))
	// …or when its turn finally arrives too late.
	clk.advance(time.Minute)
	write(t, m, mk("turn", ids("t", "y", ""), surface("ws"), model("sonnet"), at(t0, time.Second)))
	check(t, gather(t, m), []want{
		{"fmgate_ttft_pending_dropped_total", []string{"reason", "expired"}, 2},
		{"fmgate_turn_ttft_seconds", kv, 3},
		{"fmgate_ttft_pending", nil, 0},
	})
}

// TestPendingMatchesReference drives the ring against a plain FIFO model:
// whatever the mix of puts and takes, the same entries survive and the map
// never holds more than max.
func TestPendingMatchesReference(t *testing.T) {
	const max = 8
	p := newPending(max, time.Hour)
	var ref []string // oldest first
	in := func(k string) int {
		for i, r := range ref {
			if r == k {
				return i
			}
		}
		return -1
	}
	rnd := uint64(1)
	next := func(n int) int { // xorshift: deterministic, no seed needed
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return int(rnd % uint64(n))
	}
	evictedRef, evictedGot := 0, 0
	for i := range 20000 {
		k := string(rune('a' + next(20)))
		if next(3) == 0 {
			_, ok, _ := p.take(spanKey{"t", k}, t0)
			j := in(k)
			if ok != (j >= 0) {
				t.Fatalf("op %d: take(%s) ok=%v, reference has it: %v", i, k, ok, j >= 0)
			}
			if j >= 0 {
				ref = append(ref[:j], ref[j+1:]...)
			}
			continue
		}
		ev, _ := p.put(spanKey{"t", k}, t0, t0)
		evictedGot += ev
		if in(k) < 0 {
			if len(ref) == max {
				ref = ref[1:]
				evictedRef++
			}
			ref = append(ref, k)
		}
		if p.len() != len(ref) || p.len() > max || p.n > len(p.ring) {
			t.Fatalf("op %d: len %d (ring %d/%d), reference %d", i, p.len(), p.n, len(p.ring), len(ref))
		}
	}
	if evictedGot != evictedRef {
		t.Fatalf("evicted %d, reference %d", evictedGot, evictedRef)
	}
	for _, k := range ref {
		if _, ok := p.m[spanKey{"t", k}]; !ok {
			t.Fatalf("reference entry %s missing", k)
		}
	}
}

func TestThrottleAndRetry(t *testing.T) {
	tests := []struct {
		name string
		do   func(m *Metrics)
		want []want
	}{
		{
			name: "scope families",
			do: func(m *Metrics) {
				for _, s := range []string{"user_per_minute", "user_per_day", "user", "global", "route_chat", "quota", "session", "ip:1.2.3.4", "tenant", "provider"} {
					m.Throttle(s)
				}
			},
			want: []want{
				{"fmgate_throttles_total", []string{"scope", "user"}, 3},
				{"fmgate_throttles_total", []string{"scope", "global"}, 1},
				{"fmgate_throttles_total", []string{"scope", "route"}, 1},
				{"fmgate_throttles_total", []string{"scope", "quota"}, 1},
				{"fmgate_throttles_total", []string{"scope", "session"}, 1},
				{"fmgate_throttles_total", []string{"scope", "ip"}, 1},
				{"fmgate_throttles_total", []string{"scope", "tenant"}, 1},
				{"fmgate_throttles_total", []string{"scope", "provider"}, 1},
				{"fmgate_throttles_total", []string{"scope", "other"}, 0},
			},
		},
		{
			name: "unknown scopes",
			do: func(m *Metrics) {
				m.Throttle("")
				m.Throttle("alice@example.com")
				m.Throttle("users_per_minute")
			},
			want: []want{
				{"fmgate_throttles_total", []string{"scope", "other"}, 3},
				{"fmgate_throttles_total", []string{"scope", "user"}, 0},
			},
		},
		{
			name: "retries",
			do: func(m *Metrics) {
				m.Retry("sonnet", "throttled")
				m.Retry("sonnet", "throttled")
				m.Retry("haiku", "timeout")
				m.Retry("gpt-99", "throttled")
				m.Retry("sonnet", "because")
			},
			want: []want{
				{"fmgate_retries_total", []string{"model", "sonnet", "reason", "throttled"}, 2},
				{"fmgate_retries_total", []string{"model", "haiku", "reason", "timeout"}, 1},
				{"fmgate_retries_total", []string{"model", "other", "reason", "throttled"}, 1},
				{"fmgate_retries_total", []string{"model", "sonnet", "reason", "other"}, 1},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTest(t, Options{})
			tt.do(m)
			check(t, gather(t, m), tt.want)
		})
	}
}

func TestHandler(t *testing.T) {
	m, _ := newTest(t, Options{})
	write(t, m, mk("turn", surface("ws"), model("sonnet"), at(t0, time.Second)))
	m.Throttle("global")
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, line := range []string{
		`fmgate_turns_total{route="ws",status="ok"} 1`,
		`fmgate_throttles_total{scope="global"} 1`,
		`fmgate_turn_duration_seconds_bucket{model="sonnet",route="ws",tier="primary",le="1"} 1`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
		`promhttp_metric_handler_requests_total{code="200"} 0`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("exposition lacks %q", line)
		}
	}
}

// TestConcurrentUse runs writes, direct observations and scrapes together
// for the race detector, then checks nothing was lost.
func TestConcurrentUse(t *testing.T) {
	m, _ := newTest(t, Options{})
	m.SetState(func(context.Context) (State, error) {
		return State{Queue: []QueueDepth{{Priority: "P0", Depth: 1}}}, nil
	})
	const n = 200
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			id := string(rune('a'+i%26)) + string(rune('a'+i/26))
			write(t, m, mk("stream", ids("t", "st", id), at(t0.Add(time.Millisecond), 0)),
				mk("turn", ids("t", id, ""), surface("ws"), model("sonnet"), at(t0, time.Second)))
		}
	})
	wg.Go(func() {
		for range n {
			m.Throttle("user_per_minute")
			m.Retry("sonnet", "timeout")
		}
	})
	wg.Go(func() {
		for range 20 {
			gather(t, m)
		}
	})
	wg.Wait()
	kv := []string{"route", "ws", "model", "sonnet", "tier", "primary"}
	check(t, gather(t, m), []want{
		{"fmgate_turn_duration_seconds", kv, n},
		{"fmgate_turn_ttft_seconds", kv, n},
		{"fmgate_throttles_total", []string{"scope", "user"}, n},
		{"fmgate_retries_total", []string{"model", "sonnet", "reason", "timeout"}, n},
		{"fmgate_state_errors_total", []string{"reason", "busy"}, 0},
	})
}

// TestLint runs Prometheus's metric linter (naming, units, help) over every
// family after traffic.
func TestLint(t *testing.T) {
	m, _ := newTest(t, Options{})
	feedAll(t, m)
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// A model attempt is also measured as OpenTelemetry's GenAI client metrics
// name it: its tokens by type and its duration, by vendor and model, with
// the error kind of a failed call.
func TestGenAIClientMetrics(t *testing.T) {
	sonnet := "claude-sonnet-4-6"
	m, _ := newTest(t, Options{Providers: map[string]string{sonnet: "aws.bedrock"}})
	write(t, m,
		mk("model_attempt", model(sonnet), tokens(4218, 312), at(t0, 640*time.Millisecond)),
		mk("model_attempt", model(sonnet), code("throttled"), at(t0, 30*time.Millisecond)),
	)
	fams := gather(t, m)
	labels := func(kv ...string) []string {
		return append([]string{"gen_ai_operation_name", "chat", "gen_ai_provider_name", "aws.bedrock", "gen_ai_request_model", sonnet}, kv...)
	}
	for _, tt := range []struct {
		name string
		kv   []string
		want float64 // sample count
		sum  float64
	}{
		{"gen_ai_client_token_usage", labels("gen_ai_token_type", "input"), 1, 4218},
		{"gen_ai_client_token_usage", labels("gen_ai_token_type", "output"), 1, 312},
		{"gen_ai_client_operation_duration_seconds", labels("error_type", ""), 1, 0.64},
		{"gen_ai_client_operation_duration_seconds", labels("error_type", "throttled"), 1, 0.03},
	} {
		mt := series(fams, tt.name, tt.kv...)
		if mt == nil || float64(mt.GetHistogram().GetSampleCount()) != tt.want || math.Abs(mt.GetHistogram().GetSampleSum()-tt.sum) > 1e-9 {
			t.Errorf("%s%v: %v; want %v samples summing to %v", tt.name, tt.kv, mt, tt.want, tt.sum)
		}
	}
}

// A model tier added by a reload is counted by its name from then on, and
// a removed one keeps its name for the turns still running on it.
func TestAddModelsNamesNewTiers(t *testing.T) {
	m, _ := newTest(t, Options{Models: []string{"sonnet"}, Providers: map[string]string{"sonnet": "aws.bedrock"}})
	write(t, m, mk("model_attempt", model("opus")))
	if err := m.AddModels([]string{"opus"}, map[string]string{"opus": "anthropic"}); err != nil {
		t.Fatal(err)
	}
	write(t, m, mk("model_attempt", model("opus")), mk("model_attempt", model("sonnet")), mk("model_attempt", model("opus")))
	fams := gather(t, m)
	for _, c := range []struct {
		model string
		want  float64
	}{{"opus", 2}, {"sonnet", 1}, {LabelOther, 1}} {
		if got := value(fams, "fmgate_model_attempts_total", "model", c.model, "outcome", "ok"); got != c.want {
			t.Errorf("attempts of %s = %v, want %v", c.model, got, c.want)
		}
	}
	if got := value(fams, "gen_ai_client_operation_duration_seconds", "gen_ai_operation_name", "chat",
		"gen_ai_provider_name", "anthropic", "gen_ai_request_model", "opus", "error_type", ""); got != 2 {
		t.Errorf("opus's GenAI durations by its vendor = %v, want 2", got)
	}
	if err := m.AddModels([]string{LabelOther}, nil); err == nil {
		t.Error("AddModels took a reserved label value")
	}
}
