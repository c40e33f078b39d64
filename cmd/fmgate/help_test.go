package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpExitsZero: asking for help is not an error, for the program and
// each command, wherever the command takes it.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{
		{"-h"}, {"--help"}, {"help"}, {"serve", "-h"}, {"validate", "-h"}, {"sim", "-h"},
		{"ingest", "-h"}, {"ingest", "--help"}, {"judge", "-h"},
		{"scenario", "-h"}, {"scenario", "--help"}, {"scenario", "run", "-h"}, {"scenario", "run", "all", "-h"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Errorf("fmgate %s: %v, want success", strings.Join(args, " "), err)
		}
		if !strings.Contains(out.String()+errOut.String(), "usage") && !strings.Contains(errOut.String(), "Usage") {
			t.Errorf("fmgate %s printed no usage", strings.Join(args, " "))
		}
	}
}

// TestScenarioWithoutANameFails: only a request for help goes without a
// scenario; a command line that names none is an error, with the usage.
func TestScenarioWithoutANameFails(t *testing.T) {
	for _, args := range [][]string{{"scenario"}, {"scenario", "run"}, {"scenario", "list"}, {"scenario", "run", "-instances", "3"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err == nil {
			t.Errorf("fmgate %s succeeded, want an error", strings.Join(args, " "))
		}
		if !strings.Contains(errOut.String(), "usage") {
			t.Errorf("fmgate %s printed no usage", strings.Join(args, " "))
		}
	}
}

// TestValidateNamesFieldPaths: validate reports each problem by its field
// path, in the config's words, with the likely intended name.
func TestValidateNamesFieldPaths(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fmgate.yaml")
	if err := os.WriteFile(path, []byte("server:\n  adr: 1.2.3.4:80\n  maxMessageBytes: lots\nsim:\n  models:\n    opus: {ttftMs: 100}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "-config", path}, &out, &errOut); err == nil {
		t.Fatal("validate accepted a broken config")
	}
	got := out.String()
	for _, want := range []string{"server.adr: unknown field (did you mean addr?)", `server.maxMessageBytes: must be a whole number, not "lots"`} {
		if !strings.Contains(got, want) {
			t.Errorf("validate output lacks %q:\n%s", want, got)
		}
	}
	for _, leak := range []string{"config.Server", "line ", "int"} {
		if strings.Contains(got, leak) {
			t.Errorf("validate output shows %q:\n%s", leak, got)
		}
	}
}
