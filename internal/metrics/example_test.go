package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/metrics"
)

// The gateway builds one Metrics, hands it to the event emitter as a sink,
// calls Throttle and Retry from the pipeline, installs a state callback and
// mounts Handler at GET /metrics.
func Example() {
	m, err := metrics.New(metrics.Options{Models: []string{"sonnet", "haiku", "claude-sonnet-4-6"}})
	if err != nil {
		panic(err)
	}
	// In the server: events.New(ctx, cfg, []events.Sink{…, m}, log).
	var _ events.Sink = m

	start := time.Date(2026, 4, 29, 14, 2, 13, 0, time.UTC)
	_ = m.Write(context.Background(), []events.Event{
		{TraceID: "t1", SpanID: "st", ParentSpanID: "turn1", Name: "stream",
			TSStart: start.Add(400 * time.Millisecond), TSEnd: start.Add(1200 * time.Millisecond)},
		{TraceID: "t1", SpanID: "turn1", Name: "turn", TSStart: start, TSEnd: start.Add(1200 * time.Millisecond),
			Artifact:    events.Artifact{ModelID: "claude-sonnet-4-6"},
			Outcome:     events.Outcome{Status: events.StatusOK},
			Attribution: events.Attribution{Surface: "ws"}},
	})
	m.Throttle("user_per_minute") // ratelimit's Result.Limit names work as they are
	m.SetState(func(ctx context.Context) (metrics.State, error) {
		return metrics.State{Breakers: []metrics.BreakerState{{Name: "sonnet", State: "closed"}}}, nil
	})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		for _, p := range []string{
			`fmgate_turns_total{route="ws",status="ok"}`,
			`fmgate_turn_ttft_seconds_sum`,
			`fmgate_throttles_total{scope="user"}`,
			`fmgate_breaker_state{breaker="sonnet"`,
		} {
			if strings.HasPrefix(line, p) {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// fmgate_breaker_state{breaker="sonnet",state="closed"} 1
	// fmgate_breaker_state{breaker="sonnet",state="half_open"} 0
	// fmgate_breaker_state{breaker="sonnet",state="open"} 0
	// fmgate_throttles_total{scope="user"} 1
	// fmgate_turn_ttft_seconds_sum{model="claude-sonnet-4-6",route="ws",tier="primary"} 0.4
	// fmgate_turns_total{route="ws",status="ok"} 1
}
