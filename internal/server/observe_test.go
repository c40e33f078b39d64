package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestMetricsAndLiveFromTurns serves turns with a primary outage and checks
// what GET /metrics and GET /admin/live/snapshot report about them.
func TestMetricsAndLiveFromTurns(t *testing.T) {
	sc := newScenario(t, quickConfig())
	for range 3 {
		if a := sc.chat("m-user", "What's new in manga this week?", "en"); a.Tier != "sonnet" {
			t.Fatalf("answer %+v", a)
		}
	}
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	for range 2 {
		if a := sc.chat("m-user2", "Recommend a manga like Frieren", "en"); a.Tier != "haiku" {
			t.Fatalf("answer %+v", a)
		}
	}
	// Spans reach the sinks asynchronously: wait until all five turns have.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(adminGet(t, sc.srv.URL+"/metrics"), `fmgate_turns_total{route="http",status="fallback"} 2`) {
		if time.Now().After(deadline) {
			t.Fatal("the metrics never counted the five turns")
		}
		time.Sleep(20 * time.Millisecond)
	}

	resp, err := http.Get(sc.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token: %d, want 401", resp.StatusCode)
	}
	body := adminGet(t, sc.srv.URL+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	count := func(name string, labels map[string]string) float64 {
		var sum float64
		for _, m := range fams[name].GetMetric() {
			ok := true
			for _, lp := range m.GetLabel() {
				if want, has := labels[lp.GetName()]; has && want != lp.GetValue() {
					ok = false
				}
			}
			if !ok {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	if got := count("fmgate_turns_total", map[string]string{"route": "http"}); got != 5 {
		t.Errorf("fmgate_turns_total{route=http} = %v, want 5", got)
	}
	if got := count("fmgate_turn_duration_seconds", map[string]string{"tier": "haiku"}); got != 2 {
		t.Errorf("turn latency samples at tier haiku = %v, want 2", got)
	}
	if got := count("fmgate_turn_ttft_seconds", nil); got != 5 {
		t.Errorf("ttft samples = %v, want 5", got)
	}
	if got := count("fmgate_fallback_total", map[string]string{"tier": "haiku"}); got != 2 {
		t.Errorf("fmgate_fallback_total{tier=haiku} = %v, want 2", got)
	}
	if got := count("fmgate_model_attempts_total", map[string]string{"outcome": "unavailable"}); got < 2 {
		t.Errorf("failed sonnet attempts = %v, want >= 2", got)
	}
	if _, ok := fams["fmgate_breaker_state"]; !ok {
		t.Error("no fmgate_breaker_state gauge")
	}
	if _, ok := fams["fmgate_quota_saturation_ratio"]; !ok {
		t.Error("no fmgate_quota_saturation_ratio gauge")
	}

	var snap struct {
		Turns int            `json:"turns"`
		Tiers map[string]int `json:"tiers"`
		Quota []struct {
			Model string `json:"model"`
		} `json:"quota"`
		Breakers []struct {
			Name string `json:"name"`
		} `json:"breakers"`
	}
	if err := json.Unmarshal([]byte(adminGet(t, sc.srv.URL+"/admin/live/snapshot")), &snap); err != nil {
		t.Fatal(err)
	}
	// Quota: the two model tiers and the two embedding tiers.
	if snap.Turns != 5 || snap.Tiers["haiku"] != 2 || len(snap.Quota) != 4 || len(snap.Breakers) == 0 {
		t.Fatalf("live snapshot %+v", snap)
	}
}

func adminGet(t *testing.T, url string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}
