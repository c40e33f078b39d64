package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"runtime/debug"
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

// server.gcPercent and server.memoryLimit set the collector's target and
// the heap's soft limit, unless GOGC or GOMEMLIMIT chose them; "auto" is
// three quarters of the cgroup's memory limit, or none without one.
func TestSetMemory(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if v, ok := m[name]; ok {
				return []byte(v), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	v2 := map[string]string{"/sys/fs/cgroup/memory.max": "2147483648\n"}
	v1 := map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n"}
	v1None := map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}
	v2None := map[string]string{"/sys/fs/cgroup/memory.max": "max\n", "/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824"}
	// A cgroup of its own, seen from the host's namespace: its file, not
	// the root's.
	v1Own := map[string]string{
		"/proc/self/cgroup": "5:devices:/\n4:memory:/pods/gw\n0::/\n",
		"/sys/fs/cgroup/memory/pods/gw/memory.limit_in_bytes": "1073741824\n",
		"/sys/fs/cgroup/memory/memory.limit_in_bytes":         "9223372036854771712\n",
	}
	v2Own := map[string]string{
		"/proc/self/cgroup": "0::/system.slice/gw.service\n",
		"/sys/fs/cgroup/system.slice/gw.service/memory.max": "2147483648\n",
		"/sys/fs/cgroup/memory.max":                         "max\n",
	}
	for _, tt := range []struct {
		name          string
		gc            int
		limit         string
		env           map[string]string
		cgroup        map[string]string
		wantGC        int
		wantLimit     int64
		wantLimitFrom string
	}{
		{"defaults, no cgroup", 0, "", nil, nil, config.DefaultGCPercent, 0, "no cgroup limit"},
		{"cgroup v2 limit", 0, "auto", nil, v2, config.DefaultGCPercent, 3 << 29, "cgroup"},
		{"cgroup v1 limit", 0, "", nil, v1, config.DefaultGCPercent, 3 << 28, "cgroup"},
		{"cgroup v1 without a limit", 0, "", nil, v1None, config.DefaultGCPercent, 0, "no cgroup limit"},
		{"cgroup v2 without a limit", 0, "", nil, v2None, config.DefaultGCPercent, 0, "no cgroup limit"},
		{"own cgroup v1", 0, "", nil, v1Own, config.DefaultGCPercent, 3 << 28, "cgroup"},
		{"own cgroup v2", 0, "", nil, v2Own, config.DefaultGCPercent, 3 << 29, "cgroup"},
		{"set in the config", 400, "1GiB", nil, v2, 400, 1 << 30, "config"},
		{"off", 0, "off", nil, v2, config.DefaultGCPercent, 0, "off"},
		{"environment wins", 400, "1GiB", map[string]string{"GOGC": "150", "GOMEMLIMIT": "300MiB"}, v2, 75, 300 << 20, "GOMEMLIMIT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// What the runtime would have read from the environment.
			debug.SetGCPercent(75)
			debug.SetMemoryLimit(300 << 20)
			m, err := setMemory(config.Server{GCPercent: tt.gc, MemoryLimit: tt.limit},
				func(k string) string { return tt.env[k] }, files(tt.cgroup))
			if err != nil {
				t.Fatal(err)
			}
			if got := debug.SetGCPercent(100); got != tt.wantGC || m.GCPercent != tt.wantGC {
				t.Errorf("collector target %d (reported %d), want %d", got, m.GCPercent, tt.wantGC)
			}
			got := debug.SetMemoryLimit(math.MaxInt64)
			if tt.wantLimit == 0 && got != math.MaxInt64 || tt.wantLimit != 0 && got != tt.wantLimit {
				t.Errorf("heap limit %d, want %d", got, tt.wantLimit)
			}
			if m.Limit != tt.wantLimit || m.LimitFrom != tt.wantLimitFrom {
				t.Errorf("reported limit %d from %s, want %d from %s", m.Limit, m.LimitFrom, tt.wantLimit, tt.wantLimitFrom)
			}
		})
	}
	if _, err := setMemory(config.Server{MemoryLimit: "lots"}, func(string) string { return "" }, files(nil)); err == nil {
		t.Error("a memory limit that is no size was accepted")
	}
}
