package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/ratelimit"
)

// TestConnectionRateIsEnforced: rateLimit.routes.connect bounds how fast
// WebSockets open; past it the upgrade is refused with a 429 and
// Retry-After, and connections take nothing from a user's turns.
func TestConnectionRateIsEnforced(t *testing.T) {
	cfg := quickConfig()
	cfg.RateLimit.Routes["connect"] = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 2}}
	cfg.RateLimit.User.PerMinute = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1, Per: time.Minute, Burst: 1}}
	sc := newScenario(t, cfg)
	url := "ws" + strings.TrimPrefix(sc.srv.URL, "http") + "/ws"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	header := http.Header{"X-User-Id": {"conn-user"}}
	for i := range 2 {
		c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
		if err != nil {
			t.Fatalf("connection %d within the burst: %v", i+1, err)
		}
		defer c.CloseNow()
	}
	_, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header})
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("a third connection: %v (status %d); want 429 with Retry-After", err, status)
	}
	// The user's one turn a minute is still there: connections took nothing from it.
	if a := sc.chat("conn-user", "Recommend a manga", "en"); a.Status != http.StatusOK {
		t.Fatalf("the user's turn after two connections: %d %s", a.Status, a.Error.Code)
	}
}
