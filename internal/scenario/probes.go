package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The rate-limit probe's user limit, written into a started fleet's config
// as the per-minute rule: probeBurst turns at once, refilled at
// probePerMinute. The refill during the probe is about one turn, so the
// count admitted hardly depends on timing and a fleet that shares its
// limits admits probeBurst + a turn, whichever instances the turns hit.
const (
	probePerMinute = 30
	probeBurst     = 50
	// probeSendRate is how fast the probe sends, round robin over the
	// instances; it sends 1.5 × probeBurst turns.
	probeSendRate = 30
)

// RateProbe is the fleet rate-limit accuracy measure: one user sends
// faster than its per-second limit, round robin over every instance; a
// fleet that shares its limits admits burst + rate × elapsed turns in all,
// whichever instances they hit.
type RateProbe struct {
	Sent, Admitted, Limited int
	Elapsed                 time.Duration
	Expected                float64
	// Error is |admitted − expected| / expected.
	Error float64
	// ByInstance counts admitted turns per instance.
	ByInstance []int
	// Outcomes counts the probe's turns by outcome and code.
	Outcomes map[string]int
	Skipped  string
}

func (r *runner) rateProbe(ctx context.Context) RateProbe {
	var p RateProbe
	if len(r.opts.Targets) > 0 {
		p.Skipped = "the probe's limit is set in the config of a fleet the scenario starts"
		return p
	}
	n := probeBurst * 3 / 2
	u := user{id: fmt.Sprintf("rl-probe-%d", r.opts.Seed%1e6), locale: "en", tier: "standard", priority: "P0"}
	p.ByInstance = make([]int, len(r.fleet.instances))
	p.Outcomes = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var first, last time.Duration
	tick := time.NewTicker(time.Second / probeSendRate)
	defer tick.Stop()
	for i := range n {
		select {
		case <-ctx.Done():
			return p
		case <-tick.C:
		}
		in := r.fleet.instances[i%len(r.fleet.instances)]
		sent := r.since()
		if i == 0 {
			first = sent
		}
		last = sent
		wg.Go(func() {
			rec := r.chatOnce(ctx, in, u, fmt.Sprintf("rl-%d", i), "hi")
			mu.Lock()
			defer mu.Unlock()
			p.Sent++
			p.Outcomes[strings.TrimSuffix(rec.Outcome+" "+rec.Code, " ")]++
			switch {
			case rec.Code == "rate_limited":
				p.Limited++
			case rec.Outcome == outNoTarget || rec.Outcome == outCut || rec.Outcome == outLost:
				// not decided by the limiter
			default:
				p.Admitted++
				p.ByInstance[in.id]++
			}
		})
	}
	wg.Wait()
	p.Elapsed = last - first
	p.Expected = probeBurst + probePerMinute*p.Elapsed.Minutes()
	if p.Expected > float64(p.Sent) {
		p.Expected = float64(p.Sent)
	}
	p.Error = math.Abs(float64(p.Admitted)-p.Expected) / p.Expected
	return p
}

// SessionProbe checks that a conversation continues whichever instance
// answers: a user's second message, sent to another instance than the
// first, must carry the first exchange as history — the model is billed
// more input tokens than the same message in a fresh session.
type SessionProbe struct {
	Pairs, Continued int
	Examples         []string
	Skipped          string
}

func (r *runner) sessionProbe(ctx context.Context) SessionProbe {
	var p SessionProbe
	ins := r.fleet.instances
	if len(ins) < 2 {
		p.Skipped = "needs two instances or more"
		return p
	}
	const pairs = 6
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range pairs {
		wg.Go(func() {
			u := user{id: fmt.Sprintf("sess-probe-%d-%d", r.opts.Seed%1e6, i), locale: []string{"ja", "en"}[i%2], tier: "standard", priority: "P0"}
			a, b := ins[i%len(ins)], ins[(i+1)%len(ins)]
			var first, second, fresh TurnRecord
			// The two turns compared must be alike but for the history: an
			// answer given without its catalog context (a search too slow
			// under load: marked degraded) is tens of tokens shorter, so a
			// pair answered differently — one degraded and not the other, or
			// by different tiers (one without its context, the other by the
			// next tier with it) — is tried again, in a new conversation.
			for try := range 3 {
				session := fmt.Sprintf("conv-%s-%d", u.id, try)
				first = r.chatOnce(ctx, a, u, session, messageFor(u, i))
				second = r.chatOnce(ctx, b, u, session, messageFor(u, i+1))
				fresh = r.chatOnce(ctx, b, u, session+"-fresh", messageFor(u, i+1))
				if alike(second, fresh) {
					break
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if first.Outcome != outAnswered || second.Outcome != outAnswered || fresh.Outcome != outAnswered {
				p.Examples = append(p.Examples, fmt.Sprintf("pair %d: not answered (%s/%s/%s)", i, first.Outcome, second.Outcome, fresh.Outcome))
				return
			}
			if !alike(second, fresh) {
				p.Examples = append(p.Examples, fmt.Sprintf("pair %d: never answered alike (%s degraded %v / %s degraded %v) in 3 tries",
					i, second.Tier, second.Degraded, fresh.Tier, fresh.Degraded))
				return
			}
			p.Pairs++
			// The first exchange is tens of tokens at least.
			if second.InputTokens >= fresh.InputTokens+10 {
				p.Continued++
			} else {
				p.Examples = append(p.Examples, fmt.Sprintf("instance %d → %d: second message billed %d input tokens, a fresh session %d: the history did not follow",
					a.id, b.id, second.InputTokens, fresh.InputTokens))
			}
		})
	}
	wg.Wait()
	return p
}

// alike reports whether two turns were answered the same way: by the same
// tier, both degraded or neither.
func alike(a, b TurnRecord) bool { return a.Tier == b.Tier && a.Degraded == b.Degraded }

// BatchOutcome is the batch job's end.
type BatchOutcome struct {
	Instance         int
	Total, Completed int
	Failed           int
	Status           string
	Error            string
}

// startBatch posts a batch job (P3) to the last instance, which no
// scenario kills first.
func (r *runner) startBatch(ctx context.Context) (string, *instance, error) {
	in := r.fleet.instances[len(r.fleet.instances)-1]
	n := min(200, max(10, int(r.opts.Rate*r.opts.Duration.Seconds()/20)))
	type msg struct {
		SessionID string `json:"sessionId"`
		Message   string `json:"message"`
		Locale    string `json:"locale"`
	}
	body := struct {
		Messages []msg  `json:"messages"`
		Feature  string `json:"feature"`
	}{Feature: "scenario-batch"}
	for i := range n {
		loc := []string{"ja", "en"}[i%2]
		body.Messages = append(body.Messages, msg{SessionID: fmt.Sprintf("batch-%d", i), Message: messages[loc][i%len(messages[loc])], Locale: loc})
	}
	b, _ := json.Marshal(body)
	data, status, err := r.request(ctx, in, http.MethodPost, "/v1/batch", string(b), func(h http.Header) { h.Set("X-User-Id", "batch-owner") })
	if err != nil {
		return "", nil, err
	}
	if status != http.StatusAccepted {
		return "", nil, fmt.Errorf("POST /v1/batch: status %d: %s", status, data)
	}
	var a struct {
		JobID string `json:"jobId"`
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return "", nil, fmt.Errorf("POST /v1/batch: %w", err)
	}
	return a.JobID, in, nil
}

// waitBatch polls the job through the balancer, as its client would (a
// fleet answers a job's status from any instance), until it finishes or
// batchWait passes. An instance that does not know the job (a gateway
// outside fleet mode, with -targets) sends the poll to the one it ran on.
func (r *runner) waitBatch(ctx context.Context, in *instance, id string) BatchOutcome {
	out := BatchOutcome{Instance: in.id}
	deadline := time.Now().Add(batchWait)
	owner := func(h http.Header) { h.Set("X-User-Id", "batch-owner") }
	for {
		at := r.lb.pick(nil)
		if at == nil {
			at = in
		}
		data, status, err := r.request(ctx, at, http.MethodGet, "/v1/batch/"+id, "", owner)
		if err == nil && status == http.StatusNotFound && at != in {
			data, status, err = r.request(ctx, in, http.MethodGet, "/v1/batch/"+id, "", owner)
		}
		if err != nil {
			out.Error = err.Error()
			return out
		}
		var s struct {
			Status    string `json:"status"`
			Total     int    `json:"total"`
			Completed int    `json:"completed"`
			Failed    int    `json:"failed"`
		}
		if status != http.StatusOK || json.Unmarshal(data, &s) != nil {
			out.Error = fmt.Sprintf("GET /v1/batch/%s: status %d", id, status)
			return out
		}
		out.Status, out.Total, out.Completed, out.Failed = s.Status, s.Total, s.Completed, s.Failed
		if s.Status == "done" || s.Status == "canceled" || time.Now().After(deadline) || ctx.Err() != nil {
			return out
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Persistence is the must-persist check: every answered turn's turn span
// (a cost record, written through the write-ahead log) is in one of the
// instances' event stores.
type Persistence struct {
	Answered, Found int
	Missing         []string
	Skipped         string
}

func (r *runner) checkPersisted(ctx context.Context) Persistence {
	var p Persistence
	want := map[string]bool{}
	for _, t := range r.rec.all() {
		if t.Outcome == outAnswered && t.TraceID != "" {
			want[t.TraceID] = true
		}
	}
	p.Answered = len(want)
	from := r.start.Add(-time.Minute).UTC().Format(time.RFC3339)
	to := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	deadline := time.Now().Add(storeWait)
	for {
		found := map[string]bool{}
		served := 0
		for _, in := range r.fleet.instances {
			data, status, err := r.admin(ctx, in, http.MethodGet, "/admin/cost?by=turn&limit=10000&from="+from+"&to="+to, "")
			if err != nil || status != http.StatusOK {
				continue
			}
			served++
			var rep struct {
				Rows []struct {
					Key   string `json:"key"`
					Turns int64  `json:"turns"`
				} `json:"rows"`
			}
			if json.Unmarshal(data, &rep) != nil {
				continue
			}
			for _, row := range rep.Rows {
				if row.Turns > 0 {
					found[row.Key] = true
				}
			}
		}
		if served == 0 {
			p.Skipped = "no instance serves /admin/cost (event store off?)"
			return p
		}
		p.Found, p.Missing = 0, p.Missing[:0]
		for id := range want {
			if found[id] {
				p.Found++
			} else if len(p.Missing) < 20 {
				p.Missing = append(p.Missing, id)
			}
		}
		if p.Found == p.Answered || time.Now().After(deadline) || ctx.Err() != nil {
			return p
		}
		select {
		case <-ctx.Done():
			return p
		case <-time.After(time.Second):
		}
	}
}

// LiveView is what the dashboards' live feed said at the end of the load.
type LiveView struct {
	Turns          int64   `json:"turns"`
	TurnsPerSecond float64 `json:"turnsPerSecond"`
	Errors         int64   `json:"errors"`
	LatencyMs      struct {
		P50 *float64 `json:"p50"`
		P99 *float64 `json:"p99"`
	} `json:"latencyMs"`
	Instances []struct {
		ID             string    `json:"id"`
		LastSeen       time.Time `json:"lastSeen"`
		Turns          int64     `json:"turns"`
		TurnsPerSecond float64   `json:"turnsPerSecond"`
		Errors         int64     `json:"errors"`
	} `json:"instances"`
	FleetError string `json:"fleetError"`
	Error      string `json:"-"`
}

// liveView reads the live snapshot of the first instance that answers.
func (r *runner) liveView(ctx context.Context) LiveView {
	var v LiveView
	for _, in := range r.fleet.instances {
		data, status, err := r.admin(ctx, in, http.MethodGet, "/admin/live/snapshot", "")
		if err != nil || status != http.StatusOK {
			v.Error = fmt.Sprintf("instance %d: status %d %v", in.id, status, err)
			continue
		}
		if err := json.Unmarshal(data, &v); err != nil {
			v.Error = err.Error()
			continue
		}
		v.Error = ""
		return v
	}
	return v
}
