package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// fileBlock finds the YAML code blocks that are whole config files: their
// first line names the file ("# fleet.yaml — every gateway instance").
var fileBlock = regexp.MustCompile("(?ms)^```yaml\n(# ([\\w.-]+\\.yaml)\\b[^\n]*\n.*?)^```")

// TestConfigFilesInDocsLoad: every config file shown whole in README.md and
// docs/ loads as it stands, as fmgate serve -config would load it.
func TestConfigFilesInDocsLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	n := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fileBlock.FindAllStringSubmatch(string(data), -1) {
			n++
			if _, err := config.Parse(strings.NewReader(m[1])); err != nil {
				t.Errorf("%s: %s does not load: %v", filepath.Base(file), m[2], err)
			}
		}
	}
	if n < 3 {
		t.Fatalf("found %d whole config files in README.md and docs/; want the README's, the Anthropic one and the fleet's", n)
	}
}

// TestFleetConfigIsWhole: the fleet's file in docs/fleet.md names shared
// state, the NATS stream and PostgreSQL, and no sink without a receiver.
func TestFleetConfigIsWhole(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := ""
	for _, m := range fileBlock.FindAllStringSubmatch(string(data), -1) {
		if m[2] == "fleet.yaml" {
			text = m[1]
		}
	}
	if text == "" {
		t.Fatal("docs/fleet.md shows no fleet.yaml")
	}
	cfg, err := config.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Fleet.Redis == "" {
		t.Error("fleet.yaml: no fleet.redis, so no state is shared")
	}
	if cfg.Events.Sinks.NATS.URL == "" {
		t.Error("fleet.yaml: no events.sinks.nats, so no span reaches PostgreSQL")
	}
	if cfg.EventStore.Driver != eventstore.DriverPostgres || cfg.EventStore.DSN == "" {
		t.Error("fleet.yaml: the cost views do not read PostgreSQL")
	}
	if cfg.Events.Sinks.OTLP.Endpoint != "" {
		t.Error("fleet.yaml: an OTLP sink needs a collector the recipe does not start")
	}
	if strings.Contains(text, "path:") {
		t.Error("fleet.yaml: a file path beside driver postgres")
	}
}
