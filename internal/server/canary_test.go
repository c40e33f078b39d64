package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/alerts"
	"github.com/fmgate/fmgate/internal/canary"
	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// A candidate prompt that makes every turn far costlier (a bloated system
// prompt the models bill as input) takes half the sessions, is judged worse
// than the live prompt from the event store, rolled back automatically, and
// an alert reaches a webhook receiver.
func TestWorseCanaryIsRolledBackWithAnAlert(t *testing.T) {
	got := make(chan alerts.Message, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m alerts.Message
		if json.NewDecoder(r.Body).Decode(&m) == nil {
			got <- m
		}
	}))
	defer hook.Close()

	cfg := quickConfig()
	cfg.Alerts.Interval = 50 * time.Millisecond
	cfg.Alerts.Webhooks = []alerts.Webhook{{URL: hook.URL}}
	cfg.Canary.Percent = 50
	cfg.Canary.Prompt.Name = "mangaassist-system"
	cfg.Canary.Prompt.System = cfg.Prompt.System + " " + strings.Repeat("Always consider every series in the catalogue, its history and its authors before answering. ", 100)
	// Uncached, the longer prompt costs each turn a third more; read from
	// the prompt cache, the difference would be within the verdict's
	// margin.
	for i := range cfg.Models {
		cfg.Models[i].PromptCaching = config.PromptCachingOff
	}
	cfg.Canary.MinTurns = 10
	cfg.Canary.Auto.Enabled = true
	cfg.Canary.Auto.Interval = 200 * time.Millisecond
	sc := newScenario(t, cfg)

	for i := range 60 {
		a := sc.chat(fmt.Sprintf("canary-user-%d", i), "Which manga should I read next?", "en")
		if a.Status != http.StatusOK {
			t.Fatalf("turn %d: status %d", i, a.Status)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for sc.s.Canary.Percent() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("canary still at %.0f%% 20 s after the turns; verdict %+v", sc.s.Canary.Percent(), sc.s.Canary.Last())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var st canary.Status
	getJSON(t, sc.srv, "/admin/canary", &st)
	if st.Verdict == nil || st.Verdict.Status != canary.StatusFail || st.Percent != 0 {
		t.Fatalf("GET /admin/canary = %+v, want a failed verdict and 0%%", st)
	}
	if st.Verdict.A.Turns < 10 || st.Verdict.B.Turns < 10 || !strings.Contains(strings.Join(st.Verdict.Reasons, ";"), "cost per turn") {
		t.Fatalf("verdict %+v: want both sides counted and B failing on cost", st.Verdict)
	}
	last := st.Steps[len(st.Steps)-1]
	if last.To != 0 || !strings.Contains(last.Reason, "rolled back") {
		t.Fatalf("last step %+v", last)
	}
	m := waitMessage(t, got, "firing")
	for m.Alerts[0].Labels["alertname"] != "FmgateCanaryFailed" {
		m = waitMessage(t, got, "firing")
	}
	if m.Alerts[0].Labels["canary"] != st.B || !strings.Contains(m.Alerts[0].Annotations["description"], "cost per turn") {
		t.Fatalf("canary alert %+v", m.Alerts[0])
	}
	// After the rollback every session gets the live prompt again.
	for i := range 10 {
		if _, v := sc.s.Canary.ForSession(fmt.Sprintf("canary-user-%d", i), fmt.Sprintf("s-canary-user-%d", i)); v != st.A {
			t.Fatalf("session %d still on %s after the rollback", i, v)
		}
	}
}

func getJSON(t *testing.T, srv *httptest.Server, path string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// GET /admin/cost/compare, which the dashboard's canary view reads, carries
// the verdict a canary of the two versions would get: canary.Config.Judge
// under the gateway's own minimum of turns and thresholds, not figures for
// the page to judge by rules of its own.
func TestCompareCarriesTheCanaryVerdict(t *testing.T) {
	cfg := quickConfig()
	cfg.Canary.MinTurns = 3
	cfg.Canary.Thresholds.CostPerTurnRatio = 1.5
	sc := newScenario(t, cfg)
	for i := range 3 {
		if a := sc.chat(fmt.Sprintf("compare-user-%d", i), "Which manga should I read next?", "en"); a.Status != http.StatusOK {
			t.Fatalf("turn %d: status %d", i, a.Status)
		}
	}
	var live string
	deadline := time.Now().Add(10 * time.Second)
	for {
		var v struct {
			Prompt []struct {
				Version string `json:"version"`
			} `json:"prompt"`
		}
		getJSON(t, sc.srv, "/admin/cost/versions?from=-1h", &v)
		var rep eventstore.CompareReport
		if len(v.Prompt) == 1 {
			live = v.Prompt[0].Version
			getJSON(t, sc.srv, "/admin/cost/compare?dim=prompt&from=-1h&a="+url.QueryEscape(live)+"&b="+url.QueryEscape(live), &rep)
			if rep.A.Turns == 3 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store has prompt versions %+v and %d turns of the live one; want 3 turns of one", v.Prompt, rep.A.Turns)
		}
		time.Sleep(50 * time.Millisecond)
	}

	tests := []struct {
		name       string
		a, b       string
		wantStatus string
		wantReason string
	}{
		{"same version", live, live, canary.StatusNotComparable, "same version"},
		{"too few turns on B", live, "mangaassist-system@000000000000", canary.StatusNotComparable, "each side needs 3"},
		{"B against A", "mangaassist-system@000000000000", live, canary.StatusNotComparable, "A 0, B 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got struct {
				eventstore.CompareReport
				Verdict *canary.Judgement `json:"verdict"`
			}
			getJSON(t, sc.srv, "/admin/cost/compare?dim=prompt&from=-1h&a="+url.QueryEscape(tt.a)+"&b="+url.QueryEscape(tt.b), &got)
			if got.Verdict == nil {
				t.Fatal("the comparison carries no verdict")
			}
			if want := cfg.Canary.Judge(got.CompareReport); !reflect.DeepEqual(*got.Verdict, want) {
				t.Fatalf("verdict %+v; the canary's rules give %+v", *got.Verdict, want)
			}
			if got.Verdict.Status != tt.wantStatus || !strings.Contains(strings.Join(got.Verdict.Reasons, "; "), tt.wantReason) {
				t.Fatalf("verdict %s %q; want %s with a reason about %q", got.Verdict.Status, got.Verdict.Reasons, tt.wantStatus, tt.wantReason)
			}
			if got.Verdict.MinTurns != 3 || got.Verdict.Thresholds != cfg.Canary.Thresholds {
				t.Fatalf("verdict reached under minTurns %d and %+v; the gateway's are 3 and %+v", got.Verdict.MinTurns, got.Verdict.Thresholds, cfg.Canary.Thresholds)
			}
		})
	}
}
