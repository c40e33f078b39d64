package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestLoadWebSockets is a load run against the real binary, opt-in because
// it takes minutes: FMGATE_LOAD_IDLE_WS=N opens N idle WebSocket
// connections and reports the gateway process's resident memory per idle
// connection; FMGATE_LOAD_WS_STREAMS=M then has M of them stream one answer
// each at once (the simulator at Sonnet's pace) and counts the answers that
// did not end in a done frame. Run it without -race, so the figures are
// those of the binary users run:
//
//	FMGATE_LOAD_IDLE_WS=10000 FMGATE_LOAD_WS_STREAMS=2000 go test -run TestLoadWebSockets -v -timeout 30m ./cmd/fmgate
func TestLoadWebSockets(t *testing.T) {
	idle, _ := strconv.Atoi(os.Getenv("FMGATE_LOAD_IDLE_WS"))
	streams, _ := strconv.Atoi(os.Getenv("FMGATE_LOAD_WS_STREAMS"))
	if idle <= 0 {
		t.Skip("set FMGATE_LOAD_IDLE_WS=N (and FMGATE_LOAD_WS_STREAMS=M) to run the load run")
	}
	streams = min(streams, idle)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "fmgate.yaml")
	cfg := `server: {adminToken: ` + crashAdminToken + `, drainTimeout: 10s}
deadline: {firstByte: 60s, attempt: 50s, minAttempt: 300ms}
rateLimit:
  global: {rate: 1000000, burst: 1000000}
  routes:
    connect: {rate: 1000000, burst: 1000000}
    sendMessage: {rate: 1000000, burst: 1000000}
quota:
  models:
    sonnet: {tpm: 1000000000000, rpm: 1000000000000}
    haiku: {tpm: 1000000000000, rpm: 1000000000000}
judge: {sampleRate: 0}
events: {wal: {dir: "` + filepath.Join(dir, "wal") + `"}}
eventStore: {path: "` + filepath.Join(dir, "events.db") + `"}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, buildGateway(t), cfgPath, dir, "load")
	wsURL := "ws" + strings.TrimPrefix(g.url, "http") + "/ws"

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	conns := make([]*websocket.Conn, idle)
	var dialErr atomic.Int64
	dial := func(from, to int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := from; i < to; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
				defer dcancel()
				c, _, err := websocket.Dial(dctx, wsURL, &websocket.DialOptions{
					HTTPHeader: http.Header{"X-User-Id": {"load-user-" + strconv.Itoa(i)}}})
				if err != nil {
					dialErr.Add(1)
					return
				}
				c.SetReadLimit(1 << 20)
				conns[i] = c
			}()
		}
		wg.Wait()
	}
	const warm = 200
	dial(0, warm)
	time.Sleep(2 * time.Second)
	base := rssKiB(t, g.cmd.Process.Pid)
	start := time.Now()
	dial(warm, idle)
	t.Logf("opened %d connections in %v (%d failed)", idle, time.Since(start).Round(time.Millisecond), dialErr.Load())
	time.Sleep(5 * time.Second) // let the runtime settle
	full := rssKiB(t, g.cmd.Process.Pid)
	per := float64(full-base) / float64(idle-warm)
	t.Logf("gateway RSS: %d KiB with %d connections, %d KiB with %d: %.1f KiB per idle connection", base, warm, full, idle, per)
	if dialErr.Load() > 0 {
		t.Errorf("%d of %d connections failed to open", dialErr.Load(), idle)
	}
	// The gateway's goal for an idle chat WebSocket.
	const maxIdleKiB = 32
	if idle-warm >= 1000 && per > maxIdleKiB {
		t.Errorf("%.1f KiB of RSS per idle connection, over the %d KiB goal", per, maxIdleKiB)
	}

	if streams > 0 {
		var done, failed atomic.Int64
		var wg sync.WaitGroup
		// why the first failures failed, for the log
		var whyMu sync.Mutex
		var why []string
		fail := func(reason string) {
			failed.Add(1)
			whyMu.Lock()
			if len(why) < 5 {
				why = append(why, reason)
			}
			whyMu.Unlock()
		}
		start := time.Now()
		for i := range streams {
			c := conns[i]
			if c == nil {
				failed.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
				defer scancel()
				msg, _ := json.Marshal(map[string]string{"action": "sendMessage", "requestId": "r" + strconv.Itoa(i),
					"sessionId": "s" + strconv.Itoa(i), "message": "Which fantasy manga should I read next?", "locale": "en"})
				if err := c.Write(sctx, websocket.MessageText, msg); err != nil {
					fail("send: " + err.Error())
					return
				}
				for {
					_, data, err := c.Read(sctx)
					if err != nil {
						fail("read: " + err.Error())
						return
					}
					var f struct{ Type string }
					_ = json.Unmarshal(data, &f)
					switch f.Type {
					case "done":
						done.Add(1)
						return
					case "error":
						fail("error frame: " + string(data))
						return
					}
				}
			}()
		}
		wg.Wait()
		t.Logf("%d concurrent streams: %d done, %d failed in %v; gateway RSS %d KiB", streams, done.Load(), failed.Load(),
			time.Since(start).Round(time.Millisecond), rssKiB(t, g.cmd.Process.Pid))
		if failed.Load() > 0 {
			t.Errorf("%d of %d streams did not end in a done frame; the first: %s\nthe gateway's warnings:\n%s", failed.Load(), streams,
				strings.Join(why, "; "), tail(warnings(readFile(g.stderr)), 4000))
		}
	}
	for _, c := range conns {
		if c != nil {
			c.CloseNow()
		}
	}
}

// rssKiB reads a process's resident set size from /proc.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	t.Fatal("no VmRSS in /proc status")
	return 0
}

// warnings are the lines of a gateway's log above INFO.
func warnings(log string) string {
	var b strings.Builder
	for line := range strings.Lines(log) {
		if !strings.Contains(line, `"level":"INFO"`) && !strings.Contains(line, `"level":"DEBUG"`) {
			b.WriteString(line)
		}
	}
	return b.String()
}
