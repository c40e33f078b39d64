package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
)

func TestRedisClientMessagesAreJSONWarnings(t *testing.T) {
	var buf bytes.Buffer
	l := redisLogger{slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, errors.New("connection refused"))
	var line struct{ Level, Msg, Detail string }
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %q (%v)", buf.String(), err)
	}
	if line.Level != "WARN" || line.Msg != "redis client" || !strings.Contains(line.Detail, "failed to dial after 5 attempts: connection refused") {
		t.Fatalf("line = %+v", line)
	}
}

// server.gcPercent sets the collector's target, its default 100, unless
// GOGC chose one.
func TestSetGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
	}
	for _, tt := range []struct {
		set, gogc string
		want      int
		applied   bool
	}{
		{"", "", config.DefaultGCPercent, true},
		{"400", "", 400, true},
		{"400", "150", 75, false}, // GOGC's own value stays (75 here, set below)
	} {
		debug.SetGCPercent(75)
		c := config.Server{}
		if tt.set != "" {
			c.GCPercent, _ = strconv.Atoi(tt.set)
		}
		if got := setGCPercent(c, env(tt.gogc)); got != tt.applied {
			t.Errorf("gcPercent %q, GOGC %q: applied %v, want %v", tt.set, tt.gogc, got, tt.applied)
		}
		if got := debug.SetGCPercent(100); got != tt.want {
			t.Errorf("gcPercent %q, GOGC %q: the target is %d, want %d", tt.set, tt.gogc, got, tt.want)
		}
	}
}
