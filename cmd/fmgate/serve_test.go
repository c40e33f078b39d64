package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
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
