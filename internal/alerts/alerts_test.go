package alerts

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/live"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)} }
func ptr(v float64) *float64         { return &v }
func snap(turns int64) live.Snapshot {
	return live.Snapshot{Turns: turns, WindowSeconds: 60, Tiers: map[string]int64{}}
}
func names(as []Alert) (out []string) {
	for _, a := range as {
		out = append(out, a.Name+"/"+a.Labels["breaker"]+a.Labels["model"]+a.Labels["sink"])
	}
	return out
}

func TestRulesFireAfterTheirForAndResolve(t *testing.T) {
	tests := []struct {
		name    string
		give    Observation
		wantFor time.Duration
		want    string
	}{
		{"breaker open", Observation{Live: live.Snapshot{Breakers: []live.Breaker{{Name: "sonnet", State: "open"}, {Name: "haiku", State: "closed"}}}},
			0, "FmgateBreakerOpen/sonnet"},
		{"quota saturation", Observation{Live: live.Snapshot{Quota: []live.Quota{{Model: "sonnet", Saturation: 0.9}, {Model: "haiku", Saturation: 0.5}}}},
			time.Minute, "FmgateQuotaSaturation/sonnet"},
		{"saturated fallback", Observation{Primary: "sonnet-id", Live: func() live.Snapshot {
			s := snap(40)
			s.Tiers = map[string]int64{"sonnet-id": 10, "haiku-id": 20, "faq": 5, "none": 5}
			return s
		}()}, 2 * time.Minute, "FmgateSaturatedFallback/"},
		{"error rate", Observation{Live: func() live.Snapshot {
			s := snap(100)
			s.Errors, s.ErrorRate = 10, 0.1
			s.ErrorsByCode = map[string]int64{"upstream_failed": 7, "stream_timeout": 3}
			return s
		}()}, 2 * time.Minute, "FmgateErrorRate/"},
		{"slow first byte", Observation{Live: func() live.Snapshot {
			s := snap(50)
			s.TTFTMs.P99 = ptr(4200)
			return s
		}()}, 2 * time.Minute, "FmgateSlowFirstByte/"},
		{"canary failed", Observation{Canary: &Canary{Kind: "prompt", A: "p@aaa", B: "p@bbb", Failed: true, Reasons: []string{"error rate 9% vs 1%"}}},
			0, "FmgateCanaryFailed/"},
		{"config reload failed", Observation{ReloadFailed: &ReloadFailure{Path: "fmgate.yaml", Code: "invalid_config",
			Problems: []string{"rateLimit.user.perMinute.rate: must be >= 0"}}}, 0, "FmgateConfigReloadFailed/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			m := New(DefaultConfig(), c.now, nil)
			m.Evaluate(tt.give)
			l := m.List()
			if tt.wantFor > 0 {
				if len(l.Firing) != 0 || len(l.Pending) != 1 {
					t.Fatalf("at once: firing %v pending %v, want one pending", names(l.Firing), names(l.Pending))
				}
				c.add(tt.wantFor - time.Second)
				m.Evaluate(tt.give)
				if len(m.List().Firing) != 0 {
					t.Fatalf("fired before its for: %s", tt.wantFor)
				}
				c.add(time.Second)
				m.Evaluate(tt.give)
				l = m.List()
			}
			if got := names(l.Firing); len(got) != 1 || got[0] != tt.want {
				t.Fatalf("firing = %v, want [%s]", got, tt.want)
			}
			c.add(time.Second)
			m.Evaluate(Observation{Live: snap(0)})
			l = m.List()
			if len(l.Firing) != 0 || len(l.Recent) != 1 || l.Recent[0].State != StateResolved || l.Recent[0].EndsAt == nil {
				t.Fatalf("after the condition cleared: firing %v recent %+v", names(l.Firing), l.Recent)
			}
		})
	}
}

func TestRatesNeedEnoughTurns(t *testing.T) {
	m := New(DefaultConfig(), newClock().now, nil)
	s := snap(5) // below minTurns 20
	s.Errors, s.ErrorRate = 5, 1
	s.TTFTMs.P99 = ptr(9000)
	m.Evaluate(Observation{Live: s})
	if l := m.List(); len(l.Pending)+len(l.Firing) != 0 {
		t.Fatalf("5 turns raised %v %v", names(l.Pending), names(l.Firing))
	}
}

func TestSinkDropsCountOnlyNewLosses(t *testing.T) {
	m := New(DefaultConfig(), newClock().now, nil)
	m.Evaluate(Observation{Dropped: map[string]uint64{"otlp": 40}}) // losses before alerting started
	if l := m.List(); len(l.Firing) != 0 {
		t.Fatalf("old losses fired %v", names(l.Firing))
	}
	m.Evaluate(Observation{Dropped: map[string]uint64{"otlp": 45}})
	l := m.List()
	if got := names(l.Firing); len(got) != 1 || got[0] != "FmgateEventsDropped/otlp" || l.Firing[0].Value != 5 {
		t.Fatalf("firing %v (%+v), want otlp losing 5", got, l.Firing)
	}
	m.Evaluate(Observation{Dropped: map[string]uint64{"otlp": 45}})
	if l := m.List(); len(l.Firing) != 0 || len(l.Recent) != 1 {
		t.Fatalf("no new loss: firing %v", names(l.Firing))
	}
}

// receiver is a webhook endpoint that records Alertmanager messages; it
// fails the first failures requests with 503.
type receiver struct {
	mu       sync.Mutex
	failures int
	got      []Message
	calls    int
	ch       chan Message
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.calls++
	if r.failures > 0 {
		r.failures--
		r.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.mu.Unlock()
	var m Message
	if err := json.NewDecoder(req.Body).Decode(&m); err != nil || req.Header.Get("Content-Type") != "application/json" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, m)
	r.mu.Unlock()
	r.ch <- m
}

func (r *receiver) next(t *testing.T) Message {
	t.Helper()
	select {
	case m := <-r.ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10 s")
	}
	return Message{}
}

func TestWebhookGetsFiringAndResolvedOnceEachWithRetries(t *testing.T) {
	rec := &receiver{failures: 2, ch: make(chan Message, 10)}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClock()
	cfg := DefaultConfig()
	cfg.Webhooks = []Webhook{{URL: srv.URL, Timeout: time.Second, Attempts: 3}}
	cfg.ExternalURL = "http://127.0.0.1:8080/dashboard/"
	m := New(cfg, c.now, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.notify.run(ctx)

	open := Observation{Live: live.Snapshot{Breakers: []live.Breaker{{Name: "sonnet", State: "open"}}}}
	for range 5 { // still open at every evaluation: notified once
		m.Evaluate(open)
		c.add(time.Second)
	}
	fired := rec.next(t)
	if fired.Version != "4" || fired.Status != "firing" || len(fired.Alerts) != 1 {
		t.Fatalf("firing message %+v", fired)
	}
	a := fired.Alerts[0]
	if a.Labels["alertname"] != "FmgateBreakerOpen" || a.Labels["breaker"] != "sonnet" || a.Annotations["summary"] == "" ||
		a.StartsAt.IsZero() || !a.EndsAt.IsZero() || a.Fingerprint == "" || fired.ExternalURL != cfg.ExternalURL {
		t.Fatalf("firing alert %+v", a)
	}
	m.Evaluate(Observation{})
	resolved := rec.next(t)
	if resolved.Status != "resolved" || resolved.Alerts[0].Fingerprint != a.Fingerprint || resolved.Alerts[0].EndsAt.IsZero() {
		t.Fatalf("resolved message %+v", resolved)
	}
	select {
	case extra := <-rec.ch:
		t.Fatalf("a third notification: %+v", extra)
	case <-time.After(100 * time.Millisecond):
	}
	if st := m.List().Notifications; st.Sent != 2 || st.Failed != 0 {
		t.Fatalf("stats %+v, want 2 sent", st)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.calls != 4 {
		t.Fatalf("%d POSTs, want 4 (two 503s retried, then two deliveries)", rec.calls)
	}
}

func TestStillFiringIsRepeatedAfterRepeatInterval(t *testing.T) {
	rec := &receiver{ch: make(chan Message, 10)}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	c := newClock()
	cfg := DefaultConfig()
	cfg.RepeatInterval = time.Hour
	cfg.Webhooks = []Webhook{{URL: srv.URL}}
	m := New(cfg, c.now, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.notify.run(ctx)
	open := Observation{Live: live.Snapshot{Breakers: []live.Breaker{{Name: "haiku", State: "open"}}}}
	m.Evaluate(open)
	first := rec.next(t)
	c.add(59 * time.Minute)
	m.Evaluate(open)
	c.add(time.Minute)
	m.Evaluate(open)
	again := rec.next(t)
	if again.Status != "firing" || again.Alerts[0].Fingerprint != first.Alerts[0].Fingerprint ||
		!again.Alerts[0].StartsAt.Equal(first.Alerts[0].StartsAt) {
		t.Fatalf("repeat %+v vs first %+v", again, first)
	}
}

func TestQueueIsBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Webhooks = []Webhook{{URL: "http://127.0.0.1:1/never-read"}}
	m := New(cfg, newClock().now, nil) // no run: nothing drains the queue
	for i := range queueSize + 10 {
		m.notify.send(Alert{Name: "x", Fingerprint: string(rune('a' + i%26))})
	}
	if st := m.notify.stats(); st.Dropped != 10 {
		t.Fatalf("dropped %d, want 10", st.Dropped)
	}
}

func TestHandlerListsAlerts(t *testing.T) {
	m := New(DefaultConfig(), newClock().now, nil)
	m.Evaluate(Observation{Live: live.Snapshot{Breakers: []live.Breaker{{Name: "search", State: "open"}},
		Quota: []live.Quota{{Model: "haiku", Saturation: 0.95}}}})
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/admin/alerts", nil))
	var l List
	if err := json.NewDecoder(w.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	if len(l.Firing) != 1 || l.Firing[0].Labels["breaker"] != "search" || len(l.Pending) != 1 || l.Pending[0].Labels["model"] != "haiku" {
		t.Fatalf("list %+v", l)
	}
	w = httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/admin/alerts", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") == "" {
		t.Fatalf("POST: %d %v", w.Code, w.Header())
	}
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	c.Webhooks = []Webhook{{URL: "ftp://x"}}
	c.Rules.ErrorRate.Threshold = 2
	if err := c.Validate(); err == nil {
		t.Fatal("bad webhook URL and a share of 2 accepted")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestAnnounceSendsOneResolvedEvent(t *testing.T) {
	rec := &receiver{ch: make(chan Message, 4)}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Webhooks = []Webhook{{URL: srv.URL}}
	m := New(cfg, newClock().now, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.notify.run(ctx)
	m.Announce("FmgateCanaryStep", map[string]string{"canary": "p@bbb"}, map[string]string{"summary": "5% → 25%"})
	msg := rec.next(t)
	a := msg.Alerts[0]
	if a.Labels["alertname"] != "FmgateCanaryStep" || a.Labels["severity"] != "info" || a.EndsAt.IsZero() || a.Annotations["summary"] != "5% → 25%" {
		t.Fatalf("announcement %+v", a)
	}
	if l := m.List(); len(l.Recent) != 1 || len(l.Firing) != 0 {
		t.Fatalf("list after an announcement: %+v", l)
	}
}
