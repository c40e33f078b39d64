package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/alerts"
)

// A Sonnet outage raises a breaker alert delivered to a webhook in the
// Alertmanager format; once Sonnet is back and its breaker closes, the
// alert resolves and the webhook hears that too.
func TestSonnetOutageRaisesAndResolvesBreakerAlert(t *testing.T) {
	got := make(chan alerts.Message, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m alerts.Message
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- m
	}))
	defer hook.Close()

	cfg := quickConfig()
	cfg.Alerts.Interval = 50 * time.Millisecond
	cfg.Alerts.Webhooks = []alerts.Webhook{{URL: hook.URL}}
	b := cfg.Breakers["sonnet"]
	b.OpenTimeout = 300 * time.Millisecond
	b.Stages = []int{1, 2}
	cfg.Breakers["sonnet"] = b
	sc := newScenario(t, cfg)

	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	sc.run(20, 4, "Which manga should I read next?")
	fired := waitMessage(t, got, "firing")
	a := fired.Alerts[0]
	if a.Labels["alertname"] != "FmgateBreakerOpen" || a.Labels["breaker"] != "sonnet" {
		t.Fatalf("firing alert %+v, want the sonnet breaker", a)
	}
	// The breaker probes again after 300 ms, so the alert may already have
	// resolved; either way GET /admin/alerts knows it.
	if l := listAlerts(t, sc.srv); !hasAlert(l.Firing, a.Fingerprint) && !hasAlert(l.Recent, a.Fingerprint) {
		t.Fatalf("GET /admin/alerts does not list %s: %+v", a.Fingerprint, l)
	}

	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":false}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		sc.run(4, 2, "Recommend a mystery manga")
		l := listAlerts(t, sc.srv)
		if len(l.Firing) == 0 && len(l.Recent) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker alert still firing 20 s after sonnet recovered: %+v", l.Firing)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resolved := waitMessage(t, got, "resolved")
	if resolved.Alerts[0].Fingerprint != a.Fingerprint || resolved.Alerts[0].EndsAt.IsZero() {
		t.Fatalf("resolved %+v, want the same alert with an end", resolved.Alerts[0])
	}
}

func hasAlert(as []alerts.Alert, fingerprint string) bool {
	for _, a := range as {
		if a.Fingerprint == fingerprint {
			return true
		}
	}
	return false
}

func waitMessage(t *testing.T, ch <-chan alerts.Message, status string) alerts.Message {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case m := <-ch:
			if m.Status == status {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s notification within 20 s", status)
		}
	}
}

func listAlerts(t *testing.T, srv *httptest.Server) alerts.List {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/alerts", nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l alerts.List
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		t.Fatal(err)
	}
	return l
}
