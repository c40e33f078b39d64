package alerts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

const promRules = "../../docs/prometheus/fmgate-alerts.yml"

// The Prometheus rules shipped in docs/ are valid, and alert under the same
// names as the in-process rules, so a team can switch between them.
func TestPrometheusRulesMatchTheInProcessRules(t *testing.T) {
	b, err := os.ReadFile(promRules)
	if err != nil {
		t.Fatal(err)
	}
	var inFile []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\w+)`).FindAllSubmatch(b, -1) {
		inFile = append(inFile, string(m[1]))
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

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not installed (scripts/test installs Debian's prometheus package)")
		}
		t.Skip("promtool not installed; scripts/test installs it")
	}
	abs, _ := filepath.Abs(promRules)
	out, err := exec.Command(promtool, "check", "rules", abs).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}
