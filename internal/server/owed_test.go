package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/breaker"
	"github.com/fmgate/fmgate/internal/budget"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/redistest"
	"github.com/fmgate/fmgate/internal/session"
)

// hangUpDoor is one front door's streaming request and the bytes of its
// last event: the client closes the connection as soon as it reads them,
// as the vendors' SDKs do.
type hangUpDoor struct {
	name, path, body, last string
}

var hangUpDoors = []hangUpDoor{
	{"sse", "/v1/chat", `{"sessionId":"%s","message":"recommend a manga","locale":"en","stream":true}`, `"type":"done"`},
	{"openai", "/v1/chat/completions", `{"model":"sonnet","stream":true,"messages":[{"role":"user","content":"recommend a manga"}]}`, "data: [DONE]"},
	{"anthropic", "/v1/messages", `{"model":"sonnet","max_tokens":400,"stream":true,"messages":[{"role":"user","content":"recommend a manga"}]}`, "message_stop"},
	{"bedrock", "/model/sonnet/converse-stream", `{"messages":[{"role":"user","content":[{"text":"recommend a manga"}]}]}`, "metadata"},
}

// hangUpAtLast sends one streamed turn and closes the connection the moment
// the door's last event arrived.
func hangUpAtLast(t *testing.T, base string, d hangUpDoor, user, session string) {
	t.Helper()
	body := d.body
	if strings.Contains(body, "%s") {
		body = fmt.Sprintf(body, session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+d.path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", d.name, resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	var seen []byte
	buf := make([]byte, 512)
	for !bytes.Contains(seen, []byte(d.last)) {
		n, err := r.Read(buf)
		seen = append(seen, buf[:n]...)
		if err != nil {
			t.Fatalf("%s: the stream ended before its last event %q: %v\n%s", d.name, d.last, err, seen)
		}
	}
	cancel() // hang up: the rest of the connection is never read
}

// Clients that close the connection as soon as they read the last event
// of each door still pay for their turns and keep their history, and the
// quota and breaker hear how every call went: in fleet mode, where every
// one of those writes goes to Redis.
func TestWhatATurnOwesIsSettledWhenTheClientHangsUpAtTheLastEvent(t *testing.T) {
	cfg := quickConfig()
	cfg.Fleet.Redis = redistest.Addr()
	cfg.Fleet.KeyPrefix = fleetConfig(t)
	// A fixed seed: the fallback cache keeps only answers that share a term
	// with their question, and the simulator's answers are drawn at random.
	sc := newScenarioSim(t, cfg, sim.Options{Rand: rand.New(rand.NewPCG(71, 3))})
	rdb, _ := redistest.Client(t)
	counters := budget.NewRedisCounters(rdb, cfg.Fleet.KeyPrefix+"budget:", cfg.Budget.SessionTTL)
	sessions := session.NewRedis(rdb, cfg.Fleet.KeyPrefix+"session:", cfg.Session.HistoryExchanges, cfg.Session.TTL)
	day := time.Now().UTC().Format(time.DateOnly)

	const perDoor = 4
	turns := 0
	for _, d := range hangUpDoors {
		for i := range perDoor {
			user, session := fmt.Sprintf("hangup-%s-%d", d.name, i), fmt.Sprintf("s-%s-%d", d.name, i)
			hangUpAtLast(t, sc.srv.URL, d, user, session)
			turns++
			waitFor(t, fmt.Sprintf("%s turn %d charged to its user's daily budget", d.name, i), func() (bool, string) {
				tot, err := counters.Load(context.Background(), user, session, day)
				return err == nil && tot.DayCostUSD > 0, fmt.Sprintf("%+v, %v", tot, err)
			})
			if d.name == "sse" {
				waitFor(t, "the exchange in the session's history", func() (bool, string) {
					h, err := sessions.History(context.Background(), user, session)
					return err == nil && len(h) == 2, fmt.Sprintf("%d messages, %v", len(h), err)
				})
			}
		}
	}
	waitFor(t, "every call's quota settled, none released", func() (bool, string) {
		s, err := sc.s.Quota.Saturation(context.Background(), "sonnet")
		return err == nil && s.RequestsUsed == turns, fmt.Sprintf("%+v, %v", s, err)
	})
	waitFor(t, "every call's outcome in sonnet's breaker", func() (bool, string) {
		s, err := sc.s.Breakers.Get("sonnet").Snapshot(context.Background())
		return err == nil && s.State == breaker.Closed && s.Calls == turns, fmt.Sprintf("%+v, %v", s, err)
	})
	waitFor(t, "the answer in the fallback cache", func() (bool, string) {
		keys, err := rdb.Keys(context.Background(), cfg.Fleet.KeyPrefix+"cache:*").Result()
		return err == nil && len(keys) > 0, fmt.Sprintf("keys %v, %v", keys, err)
	})
	if n := sc.upstream["sonnet"].calls.Load(); n != int64(turns) {
		t.Fatalf("sonnet was called %d times for %d turns", n, turns)
	}
}

// waitFor polls cond for what a turn settles after its answer, bounded by
// the gateway's settle timeout.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(6 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not settled (%s)", what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
