package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
)

// validate names an OTLP sink nothing listens at, and passes one where a
// collector answers.
func TestValidateNamesASinkWithNowhereToSend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listening := ln.Addr().String()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := dead.Addr().String()
	dead.Close()
	defer ln.Close()

	for _, tt := range []struct {
		endpoint string
		wantOK   bool
	}{
		{listening, true},
		{"http://" + listening + "/v1/traces", true},
		{nobody, false},
	} {
		path := filepath.Join(t.TempDir(), "fmgate.yaml")
		if err := os.WriteFile(path, []byte("events:\n  sinks:\n    otlp: {endpoint: \""+tt.endpoint+"\", insecure: true}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := validate(context.Background(), []string{"-config", path}, &out, &out)
		if tt.wantOK != (err == nil) || (!tt.wantOK && !strings.Contains(out.String(), "events.sinks.otlp.endpoint: nothing answers at "+nobody)) {
			t.Errorf("endpoint %s: validate = %v, output %q; want ok=%v", tt.endpoint, err, out.String(), tt.wantOK)
		}
	}
}

// The banner's second line says which mode is on and where state lives.
func TestStateLine(t *testing.T) {
	embedded := config.Default()
	if got := stateLine(embedded); !strings.HasPrefix(got, "mode: embedded") || !strings.Contains(got, embedded.EventStore.Path) || !strings.Contains(got, embedded.Events.WAL.Dir) ||
		!strings.Contains(got, "API keys in var/keys.db") {
		t.Errorf("embedded: %q", got)
	}
	fleet := config.Default()
	fleet.Fleet.Redis = "127.0.0.1:6379"
	fleet.Events.Sinks.NATS.URL = "nats://127.0.0.1:4222"
	fleet.EventStore.Driver = "postgres"
	got := stateLine(fleet)
	for _, want := range []string{"mode: fleet", "Redis 127.0.0.1:6379", `prefix "fmgate:"`, "NATS nats://127.0.0.1:4222", "PostgreSQL", "API keys in PostgreSQL"} {
		if !strings.Contains(got, want) {
			t.Errorf("fleet: %q does not say %s", got, want)
		}
	}
	// A fleet without PostgreSQL has nowhere to share run-time keys.
	fleet.EventStore.Driver = ""
	if got := stateLine(fleet); !strings.Contains(got, "no API keys created at run time") {
		t.Errorf("fleet without PostgreSQL: %q does not say that no key is created at run time", got)
	}
}
