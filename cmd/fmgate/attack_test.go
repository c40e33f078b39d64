package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
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

// Limits of the attack run's gateway (attackConfig), from which the test
// derives every deadline it checks.
const (
	attackBodyTimeout = 3 * time.Second
	attackIdle        = 2 * time.Second
	attackMaxDuration = 15 * time.Second
	attackFirstByte   = 3 * time.Second
	attackDrain       = 10 * time.Second
	// attackTurnLimit is the longest a chat turn may take from request to
	// its last byte: the first-byte budget, then the whole answer.
	attackTurnLimit = attackFirstByte + attackMaxDuration + 2*time.Second
	// attackRSSLimit bounds the gateway's resident memory through the run.
	attackRSSLimit = 768 << 20
)

// TestAttack runs the attacks of a hostile client against a running gateway
// binary, all at once: slow-loris bodies, fuzzed JSON bodies and WebSocket
// frames, WebSocket clients that never read, 1,000 idle WebSockets, batch
// abuse from many callers, and models that stall mid-answer. It asserts no
// panic, no 5xx on a chat turn, no turn older than its deadline, the memory
// bounded, and a clean exit on SIGTERM within the drain timeout.
//
// It is opt-in (a few minutes on two cores):
//
//	FMGATE_ATTACK=1 go test -run TestAttack -v -timeout 20m ./cmd/fmgate
func TestAttack(t *testing.T) {
	if os.Getenv("FMGATE_ATTACK") == "" {
		t.Skip("set FMGATE_ATTACK=1 to run the attack run")
	}
	bin := buildGateway(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "fmgate.yaml")
	writeAttackConfig(t, cfgPath, dir)
	g := startGateway(t, bin, cfgPath, dir, "attack")
	a := &attack{t: t, base: g.url, pid: g.cmd.Process.Pid, stats: map[string]*atomic.Int64{}}
	a.stat("rss_mib_at_start").Store(rssOf(a.pid) >> 20)
	stopRSS := a.watchRSS()

	// Half the run with healthy models, half with models that stall.
	var wg sync.WaitGroup
	run := func(name string, f func()) {
		wg.Go(func() {
			start := time.Now()
			f()
			t.Logf("%-22s done in %v", name, time.Since(start).Round(time.Millisecond))
		})
	}
	run("chat turns", func() { a.chatTurns(300) })
	run("slow-loris bodies", func() { a.slowBodies(50) })
	run("fuzzed bodies", func() { a.fuzzBodies(1500) })
	run("fuzzed frames", func() { a.fuzzFrames(600) })
	run("non-reading sockets", func() { a.nonReaders(20) })
	run("idle WebSockets", func() { a.idleSockets(1000) })
	run("batch abuse", func() { a.batchAbuse(30) })
	time.Sleep(5 * time.Second)
	a.adminPut("/admin/sim/sonnet", `{"stallAfterTokens":20}`)
	a.adminPut("/admin/sim/haiku", `{"stallAfterTokens":20}`)
	run("turns on stalled models", func() { a.chatTurns(100) })
	wg.Wait()
	maxRSS := stopRSS()

	stopStart := time.Now()
	g.stop(t)
	stopTook := time.Since(stopStart)
	logs := readFile(g.stderr)

	t.Logf("figures: %s", a.figures())
	t.Logf("max RSS %d MiB; SIGTERM to exit %v", maxRSS>>20, stopTook.Round(time.Millisecond))
	if strings.Contains(logs, "panic") || strings.Contains(logs, "goroutine ") {
		t.Errorf("the gateway panicked:\n%s", tail(logs, 4000))
	}
	if n := a.stat("chat_5xx").Load(); n > 0 {
		t.Errorf("%d chat turns answered 5xx", n)
	}
	if n := a.stat("late").Load(); n > 0 {
		t.Errorf("%d turns or requests outlived their deadline", n)
	}
	if maxRSS > attackRSSLimit {
		t.Errorf("RSS reached %d MiB, over %d MiB", maxRSS>>20, attackRSSLimit>>20)
	}
	if stopTook > attackDrain+5*time.Second {
		t.Errorf("SIGTERM took %v to exit, over the drain timeout %v", stopTook, attackDrain)
	}
}

func writeAttackConfig(t *testing.T, path, dir string) {
	t.Helper()
	cfg := fmt.Sprintf(`server:
  adminToken: %s
  drainTimeout: %s
  bodyTimeout: %s
deadline: {firstByte: %s, attempt: 2s, minAttempt: 300ms, idle: %s}
stream: {maxDuration: %s}
sim:
  models:
    sonnet: {modelId: anthropic.claude-3-sonnet-20240229-v1:0, ttftMs: 50, tokensPerSecond: 200}
    haiku: {modelId: anthropic.claude-3-haiku-20240307-v1:0, ttftMs: 30, tokensPerSecond: 300}
events:
  wal: {dir: %q}
eventStore: {path: %q}
`, crashAdminToken, attackDrain, attackBodyTimeout, attackFirstByte, attackIdle, attackMaxDuration,
		filepath.Join(dir, "wal"), filepath.Join(dir, "events.db"))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

type attack struct {
	t     *testing.T
	base  string
	pid   int
	mu    sync.Mutex
	stats map[string]*atomic.Int64
}

func (a *attack) stat(name string) *atomic.Int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stats[name] == nil {
		a.stats[name] = &atomic.Int64{}
	}
	return a.stats[name]
}

func (a *attack) figures() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	for _, k := range sortedKeys(a.stats) {
		fmt.Fprintf(&b, "%s=%d ", k, a.stats[k].Load())
	}
	return b.String()
}

func sortedKeys(m map[string]*atomic.Int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// watchRSS samples the gateway's resident memory until the returned
// function is called, which returns the highest sample.
func (a *attack) watchRSS() func() int64 {
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss := rssOf(a.pid); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 { close(done); return peak.Load() }
}

func rssOf(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (a *attack) adminPut(path, body string) {
	req, _ := http.NewRequest(http.MethodPut, a.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+crashAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Errorf("PUT %s: %v", path, err)
		return
	}
	resp.Body.Close()
}

// post sends one JSON POST and returns its status (0 when the connection
// failed) and how long it took.
func (a *attack) post(client *http.Client, path, user string, body []byte) (int, time.Duration) {
	req, _ := http.NewRequest(http.MethodPost, a.base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(start)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}

// chatTurns runs n turns over JSON, SSE and the WebSocket, 10 at a time,
// each from its own user, checking status and duration.
func (a *attack) chatTurns(n int) {
	client := &http.Client{Timeout: 2 * attackTurnLimit}
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			user := fmt.Sprintf("chat-%d-%d", time.Now().UnixNano()%1e6, i)
			msg := `{"sessionId":"s","message":"Recommend a long fantasy manga series and explain why","locale":"en"`
			var status int
			var took time.Duration
			switch i % 3 {
			case 0:
				status, took = a.post(client, "/v1/chat", user, []byte(msg+`}`))
			case 1:
				status, took = a.post(client, "/v1/chat", user, []byte(msg+`,"stream":true}`))
			default:
				status, took = a.wsTurn(user)
			}
			if status == 299 {
				a.stat("chat_ws_error_frame").Add(1)
			} else {
				a.stat(fmt.Sprintf("chat_%dxx", status/100)).Add(1)
			}
			if status == 0 {
				a.t.Logf("chat turn %d (%s): no answer after %v", i, []string{"json", "sse", "ws"}[i%3], took.Round(time.Millisecond))
			}
			if took > attackTurnLimit {
				a.stat("late").Add(1)
			}
		})
	}
	wg.Wait()
}

// wsTurn sends one message on a new WebSocket and reads to done or error,
// returning 200 for done, 299 for an error frame (a refusal, or a stalled
// model's stream cut), 500 for an internal error frame, or the status of a
// refused upgrade.
func (a *attack) wsTurn(user string) (int, time.Duration) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*attackTurnLimit)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.base, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"X-User-Id": {user}}})
	if err != nil {
		if resp != nil {
			return resp.StatusCode, time.Since(start) // the upgrade was refused, e.g. 429 by the connect limit
		}
		return 0, time.Since(start)
	}
	defer c.CloseNow()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"action":"sendMessage","requestId":"r","sessionId":"s","message":"Recommend a long fantasy manga series","locale":"en"}`))
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return 0, time.Since(start)
		}
		var f struct{ Type, Code string }
		_ = json.Unmarshal(data, &f)
		switch {
		case f.Type == "done":
			return 200, time.Since(start)
		case f.Type == "error" && f.Code == "internal":
			return 500, time.Since(start)
		case f.Type == "error":
			return 299, time.Since(start) // an error frame: a refusal or a stream ended by a stalled model, not a server fault
		}
	}
}

// slowBodies sends n bodies at one byte every two seconds and checks that
// the gateway cuts each within its body deadline.
func (a *attack) slowBodies(n int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			conn, err := net.Dial("tcp", strings.TrimPrefix(a.base, "http://"))
			if err != nil {
				a.stat("slow_dial_failed").Add(1)
				return
			}
			defer conn.Close()
			body := `{"sessionId":"s","message":"hello","locale":"en"}`
			start := time.Now()
			fmt.Fprintf(conn, "POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-User-Id: slow-%d\r\nContent-Length: %d\r\n\r\n", i, len(body))
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for j := 0; j < len(body); j++ {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Second):
					}
					if _, err := conn.Write([]byte{body[j]}); err != nil {
						return
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(4 * attackBodyTimeout))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			took := time.Since(start)
			switch {
			case err != nil:
				a.stat("slow_never_cut").Add(1)
				a.stat("late").Add(1)
			case resp.StatusCode == http.StatusRequestTimeout && took < attackBodyTimeout+2*time.Second:
				a.stat("slow_cut_408").Add(1)
			default:
				a.stat(fmt.Sprintf("slow_other_%d", resp.StatusCode)).Add(1)
				if took >= attackBodyTimeout+2*time.Second {
					a.stat("late").Add(1)
				}
			}
		})
	}
	wg.Wait()
}

// fuzzBodies posts n mutations of valid chat and batch bodies.
func (a *attack) fuzzBodies(n int) {
	client := &http.Client{Timeout: 2 * attackTurnLimit}
	rng := rand.New(rand.NewPCG(1, 2))
	seeds := []string{
		`{"sessionId":"s","message":"hello","locale":"en"}`,
		`{"sessionId":"s","message":"こんにちは","locale":"ja","stream":true}`,
		`{"messages":[{"message":"hi","locale":"en"}],"feature":"f"}`,
	}
	for i := range n {
		body := mutate(rng, []byte(seeds[i%len(seeds)]))
		path := "/v1/chat"
		if i%len(seeds) == 2 {
			path = "/v1/batch"
		}
		status, took := a.post(client, path, fmt.Sprintf("fuzz-%d", i%50), body)
		a.stat(fmt.Sprintf("fuzz_%dxx", status/100)).Add(1)
		if status >= 500 {
			a.stat("chat_5xx").Add(1)
			a.t.Logf("fuzzed body %q answered %d", body, status)
		}
		if took > attackTurnLimit {
			a.stat("late").Add(1)
		}
	}
}

// mutate flips, inserts, deletes or duplicates bytes of b, or swaps a
// value for another JSON type.
func mutate(rng *rand.Rand, b []byte) []byte {
	out := append([]byte(nil), b...)
	for range 1 + rng.IntN(4) {
		if len(out) == 0 {
			out = append(out, '{')
		}
		i := rng.IntN(len(out))
		switch rng.IntN(6) {
		case 0:
			out[i] = byte(rng.IntN(256))
		case 1:
			out = append(out[:i], out[i+1:]...)
		case 2:
			out = append(out[:i], append([]byte{byte(rng.IntN(256))}, out[i:]...)...)
		case 3:
			out = bytes.Replace(out, []byte(`"hello"`), []byte([]string{`null`, `5`, `[]`, `{}`, `true`, `"` + strings.Repeat("x", 9000) + `"`}[rng.IntN(6)]), 1)
		case 4:
			out = out[:i]
		case 5:
			out = append(out, out...)
		}
	}
	return out
}

// fuzzFrames sends n mutated frames over a few WebSockets; every reply must
// be a frame of the contract and the connections must stay open.
func (a *attack) fuzzFrames(n int) {
	rng := rand.New(rand.NewPCG(3, 4))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for conn := range 4 {
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.base, "http")+"/ws", &websocket.DialOptions{
			HTTPHeader: http.Header{"X-User-Id": {fmt.Sprint("frames-", conn)}}})
		if err != nil {
			a.stat("frames_dial_failed").Add(1)
			continue
		}
		go func() { // read and classify every reply until the socket closes
			for {
				_, data, err := c.Read(ctx)
				if err != nil {
					return
				}
				var f struct{ Type, Code string }
				if json.Unmarshal(data, &f) != nil || f.Type == "" {
					a.stat("frames_bad_reply").Add(1)
				}
				if f.Code == "internal" {
					a.stat("chat_5xx").Add(1)
				}
			}
		}()
		for i := range n / 4 {
			seed := fmt.Sprintf(`{"action":"sendMessage","requestId":"r%d","sessionId":"s","message":"hello","locale":"en"}`, i)
			frame := mutate(rng, []byte(seed))
			if rng.IntN(50) == 0 {
				frame = bytes.Repeat([]byte("a"), 200<<10) // over the frame limit
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Write(wctx, websocket.MessageText, frame)
			wcancel()
			if err != nil {
				a.stat("frames_conn_lost").Add(1)
				a.t.Logf("fuzzed frames: write %d on connection %d: %v", i, conn, err)
				break
			}
			a.stat("frames_sent").Add(1)
		}
		pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
		if err := c.Ping(pctx); err != nil {
			a.stat("frames_conn_lost").Add(1)
			a.t.Logf("fuzzed frames: ping on connection %d: %v", conn, err)
		}
		pcancel()
		c.CloseNow()
	}
}

// nonReaders ask for long answers and never read them: the gateway must
// cut them as slow clients rather than hold their answers without bound.
func (a *attack) nonReaders(n int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*attackTurnLimit)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.base, "http")+"/ws", &websocket.DialOptions{
				HTTPHeader: http.Header{"X-User-Id": {fmt.Sprint("mute-", i)}}})
			if err != nil {
				return
			}
			defer c.CloseNow()
			for j := range 4 {
				_ = c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"action":"sendMessage","requestId":"r%d","sessionId":"s","message":"Tell me everything about every manga series you know","locale":"en"}`, j)))
			}
			time.Sleep(attackMaxDuration / 2)
			a.stat("nonreaders").Add(1)
		})
	}
	wg.Wait()
}

// idleSockets opens n WebSockets, holds them while a turn is answered, and
// closes them.
func (a *attack) idleSockets(n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conns := make([]*websocket.Conn, 0, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 50)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for try := 0; try < 20; try++ {
				c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.base, "http")+"/ws", &websocket.DialOptions{
					HTTPHeader: http.Header{"X-User-Id": {fmt.Sprint("idle-", i)}}})
				if err == nil {
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond) // refused by the connect rate limit: try again
			}
			a.stat("idle_dial_failed").Add(1)
		})
	}
	wg.Wait()
	a.stat("idle_open").Store(int64(len(conns)))
	a.stat("rss_mib_with_idle_sockets").Store(rssOf(a.pid) >> 20)
	status, _ := a.wsTurn("beside-idle")
	for try := 0; status == http.StatusTooManyRequests && try < 20; try++ {
		time.Sleep(100 * time.Millisecond) // the connect rate limit refilling after 1,000 connects
		status, _ = a.wsTurn("beside-idle")
	}
	if status == 0 || status >= 500 {
		a.stat("idle_turn_failed").Add(1)
		a.t.Logf("the turn beside the idle sockets: %d", status)
	}
	time.Sleep(5 * time.Second)
	for _, c := range conns {
		c.CloseNow()
	}
}

// batchAbuse has users callers each submit as many of the largest jobs as
// they can; the gateway must refuse the excess with 413/429.
func (a *attack) batchAbuse(users int) {
	client := &http.Client{Timeout: 30 * time.Second}
	msgs := make([]map[string]string, 1000)
	for i := range msgs {
		msgs[i] = map[string]string{"message": strings.Repeat("漫", 2700), "locale": "ja"} // ~8 KB each
	}
	huge, _ := json.Marshal(map[string]any{"messages": msgs})
	large, _ := json.Marshal(map[string]any{"messages": msgs[:120]}) // just under 1 MiB
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() {
			user := fmt.Sprint("batch-", u)
			status, _ := a.post(client, "/v1/batch", user, huge)
			a.stat(fmt.Sprintf("batch_huge_%d", status)).Add(1)
			for range 4 {
				status, _ := a.post(client, "/v1/batch", user, large)
				a.stat(fmt.Sprintf("batch_large_%d", status)).Add(1)
				if status >= 500 {
					a.stat("chat_5xx").Add(1)
				}
			}
		})
	}
	wg.Wait()
}
