package alerts

import (
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const promRules = "../../docs/prometheus/fmgate-alerts.yml"

// checkPromRules does what `promtool check rules` does, with Prometheus's
// own rule-file parser: the YAML must hold only known fields, every
// expression must parse as PromQL, every label and annotation template
// must parse, durations must be valid, and no two rules may share a name
// and labels.
func checkPromRules(content []byte) (*rulefmt.RuleGroups, []error) {
	p := parser.NewParser(parser.Options{})
	rgs, errs := rulefmt.Parse(content, false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		return nil, errs
	}
	seen := map[string]bool{}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			keys := make([]string, 0, len(r.Labels))
			for k, v := range r.Labels {
				keys = append(keys, k+"="+v)
			}
			slices.Sort(keys)
			id := g.Name + "/" + name + "{" + strings.Join(keys, ",") + "}"
			if seen[id] {
				errs = append(errs, &duplicateRule{id})
			}
			seen[id] = true
		}
	}
	return rgs, errs
}

type duplicateRule struct{ id string }

func (d *duplicateRule) Error() string { return "duplicate rule " + d.id }

// The Prometheus rules shipped in docs/ pass Prometheus's own checks, and
// alert under the same names as the in-process rules, so a team can switch
// between them.
func TestPrometheusRulesMatchTheInProcessRules(t *testing.T) {
	b, err := os.ReadFile(promRules)
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := checkPromRules(b)
	for _, err := range errs {
		t.Errorf("%s: %v", promRules, err)
	}
	if t.Failed() {
		t.FailNow()
	}
	var inFile []string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			inFile = append(inFile, r.Alert)
		}
	}
	// Every in-process rule but the canary (its verdict lives in the event
	// store, not in the metrics) has its Prometheus twin.
	want := []string{"FmgateBreakerOpen", "FmgateQuotaSaturation", "FmgateSaturatedFallback",
		"FmgateErrorRate", "FmgateSlowFirstByte", "FmgateEventsDropped"}
	slices.Sort(inFile)
	slices.Sort(want)
	if !slices.Equal(inFile, want) {
		t.Fatalf("rules in %s = %v, want %v", promRules, inFile, want)
	}
}

// The check refuses what promtool refuses, so the test above can fail.
func TestPromRulesCheckRefusesBrokenRules(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"bad PromQL", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum(rate(x[1m])\n", "unclosed left parenthesis"},
		{"misspelled field", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    anotations: {summary: s}\n", "anotations"},
		{"bad template", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    annotations: {summary: \"{{ $labels.x \"}\n", "template"},
		{"bad duration", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n    for: 5 minutes\n", "5 minutes"},
		{"duplicate", "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n  - alert: A\n    expr: up == 1\n", "duplicate rule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := checkPromRules([]byte(tt.give))
			var all []string
			for _, err := range errs {
				all = append(all, err.Error())
			}
			if !strings.Contains(strings.Join(all, "\n"), tt.want) {
				t.Fatalf("errors = %q, want one mentioning %q", all, tt.want)
			}
		})
	}
}
