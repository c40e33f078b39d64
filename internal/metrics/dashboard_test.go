package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

const dashboardPath = "../../docs/grafana/fmgate-dashboard.json"

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type grafanaPanel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *grafanaDS     `json:"datasource"`
	Panels      []grafanaPanel `json:"panels"` // a collapsed row's panels
	Targets     []struct {
		RefID        string     `json:"refId"`
		Expr         string     `json:"expr"`
		LegendFormat string     `json:"legendFormat"`
		Datasource   *grafanaDS `json:"datasource"`
	} `json:"targets"`
}

type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

var (
	metricRe  = regexp.MustCompile(`\b(?:fmgate|go|process|promhttp)_[a-zA-Z0-9_:]*`)
	groupRe   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	matcherRe = regexp.MustCompile(`\{([^}]*)\}`)
	nameRe    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	legendRe  = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// exported returns every series name the registry can expose (histograms
// as _bucket, _sum and _count) with the label names each carries.
func exported(t *testing.T) map[string][]string {
	t.Helper()
	m, _ := newTest(t, Options{})
	feedAll(t, m)
	out := map[string][]string{}
	for name, f := range gather(t, m) {
		var labels []string
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[name+"_bucket"] = append(slices.Clone(labels), "le")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		case dto.MetricType_SUMMARY:
			out[name] = append(slices.Clone(labels), "quantile")
			out[name+"_sum"] = labels
			out[name+"_count"] = labels
		default:
			out[name] = labels
		}
	}
	return out
}

func flatten(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

// TestDashboard keeps docs/grafana/fmgate-dashboard.json in step with the
// code: it must parse, use the ${DS_PROMETHEUS} data source variable, and
// every metric and label its queries and legends name must be exported.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: both required", d.UID, d.Title)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Errorf("no datasource variable DS_PROMETHEUS of type prometheus")
	}

	names := exported(t)
	ids := map[int]string{}
	used := map[string]bool{}
	panels := 0
	for _, p := range flatten(d.Panels) {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		panels++
		if p.Title == "" || p.Description == "" {
			t.Errorf("panel %d: title %q, description %q: both required", p.ID, p.Title, p.Description)
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource %+v, want uid ${DS_PROMETHEUS}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q query %s: datasource %+v, want uid ${DS_PROMETHEUS}", p.Title, tg.RefID, tg.Datasource)
			}
			metrics := metricRe.FindAllString(tg.Expr, -1)
			if len(metrics) == 0 {
				t.Errorf("panel %q query %s names no metric: %q", p.Title, tg.RefID, tg.Expr)
			}
			var labels []string // label names the query's metrics carry
			for _, name := range metrics {
				l, ok := names[name]
				if !ok {
					t.Errorf("panel %q: metric %s is not exported", p.Title, name)
					continue
				}
				used[name] = true
				labels = append(labels, l...)
			}
			var refs []string
			for _, g := range groupRe.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					if l = strings.TrimSpace(l); l != "" {
						refs = append(refs, l)
					}
				}
			}
			for _, sel := range matcherRe.FindAllStringSubmatch(tg.Expr, -1) {
				for _, n := range nameRe.FindAllStringSubmatch(sel[1], -1) {
					refs = append(refs, n[1])
				}
			}
			for _, n := range legendRe.FindAllStringSubmatch(tg.LegendFormat, -1) {
				refs = append(refs, n[1])
			}
			for _, l := range refs {
				if !slices.Contains(labels, l) {
					t.Errorf("panel %q: label %q is not a label of %v", p.Title, l, metrics)
				}
			}
		}
	}
	if panels < 12 {
		t.Errorf("%d panels, want at least the 12 documented ones", panels)
	}
	// The panels the dashboard promises (docs/grafana/README.md).
	for _, name := range []string{
		"fmgate_turn_duration_seconds_bucket", "fmgate_turn_ttft_seconds_bucket", "fmgate_errors_total",
		"fmgate_throttles_total", "fmgate_fallback_total", "fmgate_breaker_state",
		"fmgate_quota_saturation_ratio", "fmgate_queue_depth", "fmgate_tokens_total",
		"fmgate_cost_usd_total", "fmgate_retries_total",
	} {
		if !used[name] {
			t.Errorf("no panel queries %s", name)
		}
	}
}
