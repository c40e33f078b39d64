package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeReloadsOnHangup: SIGHUP makes fmgate serve reload its config
// file: a file that does not validate is refused with the reason in the
// log and the limit in force stays; a good one applies at once. The -addr
// flag overrides the file's address on every reload, so it reads as no
// change.
func TestServeReloadsOnHangup(t *testing.T) {
	// The test process must not die of a SIGHUP that arrives before serve
	// listens for it.
	own := make(chan os.Signal, 16)
	signal.Notify(own, syscall.SIGHUP)
	defer signal.Stop(own)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "fmgate.yaml")
	write := func(perMinute string) {
		t.Helper()
		cfg := fmt.Sprintf(`eventStore: {path: %q}
events: {wal: {dir: %q}}
catalog: {enabled: false}
judge: {sampleRate: 0}
rateLimit:
  user:
    perMinute: {rate: %s, per: 1m}
`, filepath.Join(dir, "events.db"), filepath.Join(dir, "wal"), perMinute)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("1")

	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	var logs lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-config", cfgPath, "-addr", "127.0.0.1:0", "-log-level", "info"}, w, &logs)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			t.Error("serve did not stop")
		}
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("no banner: %v", <-done)
	}
	banner := lines.Text()
	go func() { _, _ = io.Copy(io.Discard, out) }()
	i := strings.Index(banner, "http://")
	if i < 0 {
		t.Fatalf("banner %q names no address", banner)
	}
	base := strings.Fields(banner[i:])[0]

	chat := func(user string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat",
			strings.NewReader(`{"sessionId":"s-`+user+`","message":"recommend a manga","locale":"en"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User-Id", user)
		c := &http.Client{Timeout: 30 * time.Second}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// hangup signals the process until the log holds want (serve may not
	// listen yet; a reload of the same file again changes nothing).
	hangup := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(logs.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", want, logs.String())
			}
			if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	if got := chat("a"); got != http.StatusOK {
		t.Fatalf("first turn: %d", got)
	}
	if got := chat("a"); got != http.StatusTooManyRequests {
		t.Fatalf("second turn under 1 a minute: %d, want 429", got)
	}

	write("-5")
	hangup(`"msg":"config reload refused; the config in force is unchanged","source":"SIGHUP"`)
	if !strings.Contains(logs.String(), "rateLimit.user.perMinute") {
		t.Errorf("the refusal does not name the field:\n%s", logs.String())
	}
	if got := chat("b"); got != http.StatusOK {
		t.Fatalf("first turn after a refused reload: %d", got)
	}
	if got := chat("b"); got != http.StatusTooManyRequests {
		t.Fatalf("second turn after a refused reload: %d, want 429 under the limit in force", got)
	}

	write("3")
	hangup(`"msg":"config reloaded","source":"SIGHUP"`)
	if !strings.Contains(logs.String(), `"changed":["rateLimit.user.perMinute.rate"]`) {
		t.Errorf("the reload does not list the changed field alone (-addr must read as no change):\n%s", logs.String())
	}
	for i := range 3 {
		if got := chat("c"); got != http.StatusOK {
			t.Fatalf("turn %d under 3 a minute: %d", i+1, got)
		}
	}
	if got := chat("c"); got != http.StatusTooManyRequests {
		t.Fatalf("fourth turn under 3 a minute: %d, want 429", got)
	}
}
