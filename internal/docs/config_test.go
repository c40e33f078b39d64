package docs

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
)

var update = flag.Bool("update", false, "rewrite the generated reference in docs/configuration.md")

// root is the module's root directory, where README.md and docs/ live.
const root = "../.."

// TestConfigReference: every field of the configuration, nested, is
// documented in docs/configuration.md by its path, and every path the
// reference documents is a field; a field added without documentation fails
// with the path to document.
func TestConfigReference(t *testing.T) {
	fields := Fields(reflect.ValueOf(config.Default()))
	if len(fields) < 100 {
		t.Fatalf("found %d configuration fields; the walk lost some", len(fields))
	}
	path := filepath.Join(root, "docs", "configuration.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	if *update {
		c, err := NewComments(root)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := Reference(fields, c, Meanings(doc))
		if err != nil {
			t.Fatal(err)
		}
		before, _, ok1 := strings.Cut(doc, ReferenceBegin)
		_, after, ok2 := strings.Cut(doc, ReferenceEnd+"\n")
		if !ok1 || !ok2 {
			t.Fatalf("%s lacks the lines that frame the generated reference:\n%s\n%s", path, ReferenceBegin, ReferenceEnd)
		}
		doc = before + ref + after
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	known := map[string]bool{}
	for _, f := range fields {
		known[f.Path] = true
		if !strings.Contains(doc, "`"+f.Path+"`") {
			t.Errorf("docs/configuration.md does not document %s (field %s of %s): add a row `%s` under its section, "+
				"or regenerate the reference: go test ./internal/docs -run TestConfigReference -update",
				f.Path, f.Name, f.Owner, f.Path)
		}
	}
	_, ref, _ := strings.Cut(doc, ReferenceBegin)
	ref, _, _ = strings.Cut(ref, ReferenceEnd)
	for _, m := range rowPath.FindAllStringSubmatch(ref, -1) {
		if !known[m[1]] {
			t.Errorf("docs/configuration.md documents %s, which is no configuration field: remove its row", m[1])
		}
	}
}

// rowPath finds the path of each row of the reference's tables.
var rowPath = regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")

// TestFieldsWalkNestedTypes: the walk reaches fields inside lists and maps
// of mappings and inside inline structs, with the defaults of their entries.
func TestFieldsWalkNestedTypes(t *testing.T) {
	fields := Fields(reflect.ValueOf(config.Default()))
	byPath := map[string]Field{}
	for _, f := range fields {
		byPath[f.Path] = f
	}
	for path, wantDefault := range map[string]string{
		"server.addr":            "127.0.0.1:8080",
		"server.drainTimeout":    "30s",
		"models[].inputPerMTok":  "sonnet: 3, haiku: 0.25",
		"models[].contextWindow": "200000",
		"locales":                "[ja, en]",
		"rateLimit":              "",
		"auth.keys.*.userId":     "",
		"breakers.*.openTimeout": "",
		"events.sinks.nats.url":  `""`,
		"eventStore.driver":      "",
	} {
		f, ok := byPath[path]
		if !ok {
			t.Errorf("no field %s in the walk", path)
			continue
		}
		if wantDefault != "" && f.Default != wantDefault {
			t.Errorf("%s: default %q, want %q", path, f.Default, wantDefault)
		}
	}
}
