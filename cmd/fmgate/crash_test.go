package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// The crash guarantee: kill the gateway with SIGKILL in the middle of load
// and start it again; every must-persist event of every completed turn is
// in the event store exactly once. A turn is completed when its client got
// the whole answer: a POST /v1/chat JSON answer with status 200, read to
// its end before the kill. The must-persist events of a turn are its cost
// and quota records: the "turn" span and one "model_attempt" span per
// upstream call. Other spans (admit, budget, quota, record, …) may be lost
// in a crash and are not checked, except that no span is ever stored twice.
//
// The test runs the real binary through every way a gateway stops and
// starts again:
//
//	run 1  load, SIGKILL mid-load         → the log holds unacknowledged records
//	run 2  replay, check, SIGTERM         → a clean stop leaves an empty log
//	run 3  SIGKILL as soon as it is ready → a crash loop leaves an empty segment
//	run 4  load, SIGKILL mid-load         → records numbered after a clean stop
//	run 5  replay, check all turns of runs 1 and 4, SIGTERM

const (
	crashWorkers = 8
	// crashKillAfter is how many turns complete before each SIGKILL; load
	// keeps running until the process is gone.
	crashKillAfter = 300
	// Generous bounds for a loaded 2-core machine running race-built code.
	crashBuildTimeout = 5 * time.Minute
	crashReadyTimeout = time.Minute
	crashLoadTimeout  = 90 * time.Second
	crashStoreTimeout = 20 * time.Second
	crashStopTimeout  = time.Minute

	crashAdminToken = "crash-test-admin-token"
)

func TestCrashMidLoadKeepsMustPersistEventsExactlyOnce(t *testing.T) {
	bin := buildGateway(t)
	dir := t.TempDir()
	walDir := filepath.Join(dir, "wal")
	storePath := filepath.Join(dir, "events.db")
	cfgPath := filepath.Join(dir, "fmgate.yaml")
	writeCrashConfig(t, cfgPath, walDir, storePath)

	g := startGateway(t, bin, cfgPath, dir, "run1")
	completed := g.loadThenKill(t, crashKillAfter)
	t.Logf("run1: %d turns completed before SIGKILL; %d log segments left", len(completed), len(walSegmentFiles(t, walDir)))

	g = startGateway(t, bin, cfgPath, dir, "run2")
	checkStore(t, g, storePath, completed, "after the first crash")
	g.stop(t)
	if segs := walSegmentFiles(t, walDir); len(segs) != 0 {
		t.Errorf("run2: a clean stop left log segments %v; every record was acknowledged by the store", segs)
	}

	g = startGateway(t, bin, cfgPath, dir, "run3")
	g.kill(t)

	g = startGateway(t, bin, cfgPath, dir, "run4")
	more := g.loadThenKill(t, crashKillAfter)
	t.Logf("run4: %d turns completed before SIGKILL; %d log segments left", len(more), len(walSegmentFiles(t, walDir)))
	completed = append(completed, more...)

	g = startGateway(t, bin, cfgPath, dir, "run5")
	checkStore(t, g, storePath, completed, "after the second crash")
	g.stop(t)
}

// buildGateway builds cmd/fmgate into a temporary directory, with the race
// detector when this test binary has it.
func buildGateway(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("cannot build the gateway binary: no go command in PATH: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "fmgate")
	args := []string{"build", "-o", bin}
	if raceEnabled() {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), crashBuildTimeout)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, goTool, append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Skipf("cannot build the gateway binary (go %s .): %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// writeCrashConfig writes a profile that answers fast and never refuses:
// the simulator streams at once, quota ceilings are out of reach, deadlines
// leave room for a loaded machine, and small log segments make the log
// rotate and compact during the run. Hybrid retrieval is off: its question
// embedding is an attempt of its own, and each turn's roll-up is checked
// against the tokens its answer billed.
func writeCrashConfig(t *testing.T, path, walDir, storePath string) {
	t.Helper()
	cfg := fmt.Sprintf(`server:
  adminToken: %s
  drainTimeout: 10s
deadline: {firstByte: 30s, attempt: 20s, minAttempt: 300ms}
sim:
  models:
    sonnet: {modelId: anthropic.claude-3-sonnet-20240229-v1:0, ttftMs: 1, tokensPerSecond: 0}
    haiku: {modelId: anthropic.claude-3-haiku-20240307-v1:0, ttftMs: 1, tokensPerSecond: 0}
quota:
  models:
    sonnet: {tpm: 1000000000, rpm: 1000000000}
    haiku: {tpm: 1000000000, rpm: 1000000000}
events:
  wal: {dir: %q, segmentBytes: 32768}
eventStore: {path: %q}
catalog: {hybrid: false}
`, crashAdminToken, walDir, storePath)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// gatewayProc is one run of the binary.
type gatewayProc struct {
	name    string
	url     string
	cmd     *exec.Cmd
	stderr  string // path of the captured standard error
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// startGateway starts the binary on a free port and waits for /readyz. The
// config file is the same for every run; only -addr differs, so that a port
// taken by someone else in between cannot fail the test.
func startGateway(t *testing.T, bin, cfgPath, dir, name string) *gatewayProc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		g := launchGateway(t, bin, cfgPath, dir, fmt.Sprintf("%s.%d", name, attempt), freeAddr(t))
		g.name = name
		start := time.Now()
		err := g.waitReady()
		if err == nil {
			t.Logf("%s: ready in %v", name, time.Since(start).Round(time.Millisecond))
			return g
		}
		g.killQuietly()
		logs := readFile(g.stderr)
		if attempt < 3 && strings.Contains(logs, "address already in use") {
			continue
		}
		t.Fatalf("%s: %v\nstderr:\n%s", name, err, tail(logs, 4000))
	}
}

func launchGateway(t *testing.T, bin, cfgPath, dir, logName, addr string) *gatewayProc {
	t.Helper()
	stdout, err := os.Create(filepath.Join(dir, logName+".stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(dir, logName+".stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-config", cfgPath, "-addr", addr, "-log-level", "warn")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "FMGATE_ADMIN_TOKEN="+crashAdminToken)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	g := &gatewayProc{url: "http://" + addr, cmd: cmd, stderr: stderr.Name(), exited: make(chan struct{})}
	go func() {
		g.waitErr = cmd.Wait()
		stdout.Close()
		stderr.Close()
		close(g.exited)
	}()
	t.Cleanup(func() {
		g.killQuietly()
		logs := readFile(g.stderr)
		switch {
		case strings.Contains(logs, "WARNING: DATA RACE"):
			t.Errorf("%s: the race detector reported a race in the gateway:\n%s", logName, tail(logs, 8000))
		case t.Failed() && logs != "":
			t.Logf("%s: stderr:\n%s", logName, tail(logs, 4000))
		}
	})
	return g
}

func (g *gatewayProc) waitReady() error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(crashReadyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(g.url + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-g.exited:
			return fmt.Errorf("exited before it was ready: %v", g.waitErr)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last: %v)", crashReadyTimeout, err)
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (g *gatewayProc) kill(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("%s: SIGKILL: %v", g.name, err)
	}
	<-g.exited
}

// stop sends SIGTERM and expects a clean exit.
func (g *gatewayProc) stop(t *testing.T) {
	t.Helper()
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", g.name, err)
	}
	select {
	case <-g.exited:
	case <-time.After(crashStopTimeout):
		t.Fatalf("%s: still running %v after SIGTERM", g.name, crashStopTimeout)
	}
	if g.waitErr != nil {
		t.Errorf("%s: exit after SIGTERM: %v\nstderr:\n%s", g.name, g.waitErr, tail(readFile(g.stderr), 4000))
	}
}

func (g *gatewayProc) killQuietly() {
	select {
	case <-g.exited:
	default:
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

// answer is what the test keeps of a completed turn: the fields of the POST
// /v1/chat answer that say which spans the store must hold.
type answer struct {
	RequestID string `json:"requestId"`
	Tier      string `json:"tier"`
	Usage     struct {
		Input  int64 `json:"input"`
		Output int64 `json:"output"`
	} `json:"usage"`
	TraceID string `json:"traceId"`
}

// loadThenKill runs crashWorkers clients in a loop of POST /v1/chat, kills
// the process with SIGKILL once killAfter turns have completed — with the
// clients still sending — and returns every turn whose whole answer reached
// its client.
func (g *gatewayProc) loadThenKill(t *testing.T, killAfter int) []answer {
	t.Helper()
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: crashWorkers, DisableCompression: true},
	}
	defer client.CloseIdleConnections()
	var (
		mu        sync.Mutex
		completed []answer
		count     atomic.Int64
		killed    atomic.Bool
		failed    atomic.Int64 // before the kill: refusals and errors
		cut       atomic.Int64 // by the kill
		lastErr   atomic.Value
		stop      = make(chan struct{})
		reached   = make(chan struct{})
		once      sync.Once
		wg        sync.WaitGroup
	)
	for w := range crashWorkers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a, err := chat(client, g.url, fmt.Sprintf("%s-w%d-%d", g.name, w, i), i)
				if err != nil {
					if killed.Load() {
						cut.Add(1)
					} else {
						failed.Add(1)
						lastErr.Store(err.Error())
					}
					continue
				}
				mu.Lock()
				completed = append(completed, a)
				mu.Unlock()
				if count.Add(1) >= int64(killAfter) {
					once.Do(func() { close(reached) })
				}
			}
		})
	}
	start := time.Now()
	select {
	case <-reached:
	case <-g.exited:
		close(stop)
		wg.Wait()
		t.Fatalf("%s: exited under load after %d turns: %v\nstderr:\n%s", g.name, count.Load(), g.waitErr, tail(readFile(g.stderr), 4000))
	case <-time.After(crashLoadTimeout):
		close(stop)
		g.killQuietly()
		wg.Wait()
		t.Fatalf("%s: only %d turns completed in %v (%d failed requests, last: %v)", g.name, count.Load(), crashLoadTimeout, failed.Load(), lastErr.Load())
	}
	killed.Store(true)
	g.kill(t)
	close(stop)
	wg.Wait()
	tiers := map[string]int{}
	for _, a := range completed {
		tiers[a.Tier]++
	}
	t.Logf("%s: %d turns/s over %v, answered by %v; %d requests failed before the kill (last: %v), %d cut by it",
		g.name, int(float64(count.Load())/time.Since(start).Seconds()), time.Since(start).Round(time.Millisecond), tiers, failed.Load(), lastErr.Load(), cut.Load())
	if len(completed) < killAfter {
		t.Fatalf("%s: %d completed turns, want >= %d", g.name, len(completed), killAfter)
	}
	return completed
}

var crashMessages = []struct{ locale, text string }{
	{"ja", "おすすめの少年漫画を教えてください"},
	{"en", "Can you recommend a fantasy manga with a strong heroine?"},
	{"ja", "ワンピースの最新刊はいつ発売ですか？"},
	{"en", "What is a good manga for someone who liked Attack on Titan?"},
}

// chat sends one turn, each with a new user, session and request id so
// that no per-user limit or session budget refuses it; every other turn is
// streamed (SSE). It returns the answer only when the whole body (for a
// stream, its done frame) arrived with status 200.
func chat(client *http.Client, base, id string, i int) (answer, error) {
	m := crashMessages[i%len(crashMessages)]
	streamed := i%2 == 1
	body, _ := json.Marshal(map[string]any{
		"message": m.text, "locale": m.locale,
		"userId": "u-" + id, "sessionId": "s-" + id, "requestId": "r-" + id, "stream": streamed,
	})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat", bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "u-"+id)
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return answer{}, fmt.Errorf("status %d: %s", resp.StatusCode, tail(string(data), 300))
	}
	var a answer
	if streamed {
		a, err = doneFrame(data)
		if err != nil {
			return answer{}, err
		}
	} else if err := json.Unmarshal(data, &a); err != nil {
		return answer{}, fmt.Errorf("answer %q: %w", tail(string(data), 300), err)
	}
	if len(a.TraceID) != 32 || a.RequestID != "r-"+id {
		return answer{}, fmt.Errorf("answer without its trace id or request id: %s", tail(string(data), 300))
	}
	return a, nil
}

// doneFrame finds the done frame of an SSE answer and returns it as an
// answer.
func doneFrame(data []byte) (answer, error) {
	for _, line := range strings.Split(string(data), "\n") {
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var f struct {
			Type      string `json:"type"`
			RequestID string `json:"requestId"`
			Tier      string `json:"tier"`
			TraceID   string `json:"traceId"`
			Tokens    struct {
				Input  int64 `json:"input"`
				Output int64 `json:"output"`
			} `json:"tokens"`
		}
		if json.Unmarshal([]byte(payload), &f) != nil || f.Type != "done" {
			continue
		}
		a := answer{RequestID: f.RequestID, Tier: f.Tier, TraceID: f.TraceID}
		a.Usage.Input, a.Usage.Output = f.Tokens.Input, f.Tokens.Output
		return a, nil
	}
	return answer{}, fmt.Errorf("stream ended without a done frame: %s", tail(string(data), 300))
}

// rollupRow is a turn's row of GET /admin/cost?by=turn, the per-turn
// roll-up that the cost views read: the sums over the trace's stored spans.
type rollupRow struct {
	Key       string `json:"key"` // the trace id
	Turns     int64  `json:"turns"`
	Spans     int64  `json:"spans"`
	TokensIn  int64  `json:"tokensIn"`
	TokensOut int64  `json:"tokensOut"`
}

// turnRollups reads the per-turn roll-up of every turn of the last hour
// through the admin API, keyed by trace id.
func (g *gatewayProc) turnRollups() (map[string]rollupRow, error) {
	from, to := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	q := url.Values{"by": {"turn"}, "limit": {"10000"},
		"from": {from.UTC().Format(time.RFC3339)}, "to": {to.UTC().Format(time.RFC3339)}}
	req, err := http.NewRequest(http.MethodGet, g.url+"/admin/cost?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+crashAdminToken)
	client := &http.Client{Timeout: crashStoreTimeout}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /admin/cost?by=turn: status %d: %s", resp.StatusCode, tail(string(data), 300))
	}
	var rep struct {
		Rows []rollupRow `json:"rows"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, fmt.Errorf("GET /admin/cost?by=turn: %w", err)
	}
	rows := make(map[string]rollupRow, len(rep.Rows))
	for _, r := range rep.Rows {
		if _, dup := rows[r.Key]; dup {
			return nil, fmt.Errorf("GET /admin/cost?by=turn: trace %s has two rows", r.Key)
		}
		rows[r.Key] = r
	}
	return rows, nil
}

// crashFirstTier is the first model of the route: every attempt of a turn
// it answered was of this model and is billed in the answer.
const crashFirstTier = "sonnet"

// rollupProblem says what is wrong with a completed turn's roll-up row, or
// "" when it holds the turn span once and the attempts the answer billed,
// once.
func rollupProblem(a answer, r rollupRow, ok bool) string {
	switch {
	case !ok:
		return "no row: the turn is not in the store"
	case r.Turns != 1:
		return fmt.Sprintf("%d turn spans, want 1", r.Turns)
	case a.Tier == crashFirstTier && (r.TokensIn != a.Usage.Input || r.TokensOut != a.Usage.Output),
		r.TokensIn < a.Usage.Input || r.TokensOut < a.Usage.Output:
		return fmt.Sprintf("%d in / %d out tokens, the %s answer billed %d / %d",
			r.TokensIn, r.TokensOut, a.Tier, a.Usage.Input, a.Usage.Output)
	}
	return ""
}

// checkStore checks the store after a restart: every completed turn's
// must-persist spans are there exactly once — in the per-turn roll-up the
// cost views read, and in the raw spans of the SQLite file, read-only —
// and no span of any trace, completed or cut by the kill, is stored twice.
func checkStore(t *testing.T, g *gatewayProc, storePath string, completed []answer, when string) {
	t.Helper()
	start := time.Now()
	// A systematic fault would repeat for every turn: report the first few.
	failures := 0
	errorf := func(format string, args ...any) {
		t.Helper()
		if failures++; failures <= 20 {
			t.Errorf(when+": "+format, args...)
		}
	}
	defer func() {
		if failures > 20 {
			t.Errorf("%s: %d more failures", when, failures-20)
		}
	}()

	// The roll-up may be brought up to date in the background: poll.
	var rollups map[string]rollupRow
	for {
		var err error
		if rollups, err = g.turnRollups(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		bad := 0
		for _, a := range completed {
			r, ok := rollups[a.TraceID]
			if rollupProblem(a, r, ok) != "" {
				bad++
			}
		}
		if bad == 0 || time.Since(start) > crashStoreTimeout {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, a := range completed {
		r, ok := rollups[a.TraceID]
		if p := rollupProblem(a, r, ok); p != "" {
			errorf("trace %s (%s answer): per-turn roll-up: %s", a.TraceID, a.Tier, p)
		}
	}

	db := openStoreReadOnly(t, storePath)
	defer db.Close()
	layout := storeLayout(t, db)
	var rows, dups int64
	if err := db.QueryRow(`SELECT (SELECT COUNT(*) FROM events),
		(SELECT COUNT(*) FROM (SELECT 1 FROM events GROUP BY `+layout.key+` HAVING COUNT(*) > 1))`).Scan(&rows, &dups); err != nil {
		t.Fatalf("%s: count duplicate spans: %v", when, err)
	}
	if dups > 0 {
		t.Errorf("%s: %d spans are stored more than once (same %s)", when, dups, layout.key)
	}
	if !layout.columns {
		t.Logf("%s: spans are stored as records; their fields were checked through the roll-up", when)
	} else {
		checkRawSpans(t, db, completed, rollups, errorf)
	}
	t.Logf("%s: %d completed turns checked against %d stored spans in %v",
		when, len(completed), rows, time.Since(start).Round(time.Millisecond))
}

// layout is how the store keys spans: by trace_id and span_id columns
// (every field a column), or by their hashes th and sh (a span is a
// record).
type layout struct {
	key     string
	columns bool
}

func storeLayout(t *testing.T, db *sql.DB) layout {
	t.Helper()
	cols := map[string]bool{}
	rs, err := db.Query(`SELECT name FROM pragma_table_info('events')`)
	if err != nil {
		t.Fatalf("read the store's layout: %v", err)
	}
	for rs.Next() {
		var c string
		if err := rs.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols[c] = true
	}
	if err := errors.Join(rs.Err(), rs.Close()); err != nil {
		t.Fatal(err)
	}
	switch {
	case cols["trace_id"] && cols["span_id"] && cols["name"]:
		return layout{key: "trace_id, span_id", columns: true}
	case cols["th"] && cols["sh"]:
		return layout{key: "th, sh"}
	}
	t.Fatalf("the events table has neither trace_id/span_id nor th/sh: %v", slices.Sorted(maps.Keys(cols)))
	return layout{}
}

// checkRawSpans checks, span by span in a column layout, that each
// completed turn has one must-persist turn span, must-persist attempts
// whose tokens are what the answer billed, and a roll-up that sums its
// spans once.
func checkRawSpans(t *testing.T, db *sql.DB, completed []answer, rollups map[string]rollupRow, errorf func(string, ...any)) {
	t.Helper()
	type trace struct {
		turns, turnsMustPersist       int
		attempts, attemptsMustPersist int
		tierIn, tierOut               int64
		spans, tokensIn, tokensOut    int64
	}
	traces := map[string]*trace{}
	for _, a := range completed {
		traces[a.TraceID] = &trace{}
	}
	rs, err := db.Query(`SELECT trace_id, name, node_id, must_persist, tokens_in, tokens_out FROM events`)
	if err != nil {
		t.Fatalf("read spans: %v", err)
	}
	tiers := map[string]string{}
	for _, a := range completed {
		tiers[a.TraceID] = a.Tier
	}
	for rs.Next() {
		var (
			id, name, node string
			mp             bool
			in, out        int64
		)
		if err := rs.Scan(&id, &name, &node, &mp, &in, &out); err != nil {
			t.Fatalf("read spans: %v", err)
		}
		tr := traces[id]
		if tr == nil {
			continue // a turn the kill cut
		}
		tr.spans, tr.tokensIn, tr.tokensOut = tr.spans+1, tr.tokensIn+in, tr.tokensOut+out
		switch name {
		case "turn":
			tr.turns++
			if mp {
				tr.turnsMustPersist++
			}
		case "model_attempt":
			tr.attempts++
			if mp {
				tr.attemptsMustPersist++
			}
			if node == tiers[id] {
				tr.tierIn, tr.tierOut = tr.tierIn+in, tr.tierOut+out
			}
		}
	}
	if err := errors.Join(rs.Err(), rs.Close()); err != nil {
		t.Fatalf("read spans: %v", err)
	}
	for _, a := range completed {
		tr := traces[a.TraceID]
		switch {
		case tr.turns != 1 || tr.turnsMustPersist != 1:
			errorf("trace %s: %d turn spans (%d must-persist), want 1", a.TraceID, tr.turns, tr.turnsMustPersist)
		case a.Usage.Input+a.Usage.Output > 0 && tr.attempts == 0:
			errorf("trace %s: no model_attempt span for a %s answer", a.TraceID, a.Tier)
		case tr.attemptsMustPersist != tr.attempts:
			errorf("trace %s: %d of %d model_attempt spans stored without must_persist", a.TraceID, tr.attempts-tr.attemptsMustPersist, tr.attempts)
		case tr.tierIn != a.Usage.Input || tr.tierOut != a.Usage.Output:
			// The answer bills every attempt of the model that served it.
			errorf("trace %s: %s attempts hold %d in / %d out tokens, the answer billed %d / %d",
				a.TraceID, a.Tier, tr.tierIn, tr.tierOut, a.Usage.Input, a.Usage.Output)
		}
		if r, ok := rollups[a.TraceID]; ok && (r.Spans != tr.spans || r.TokensIn != tr.tokensIn || r.TokensOut != tr.tokensOut) {
			errorf("trace %s: roll-up has %d spans, %d/%d tokens; the stored spans are %d, %d/%d tokens",
				a.TraceID, r.Spans, r.TokensIn, r.TokensOut, tr.spans, tr.tokensIn, tr.tokensOut)
		}
	}
}

// openStoreReadOnly opens the event store's SQLite file read-only, next to
// the gateway that writes it.
func openStoreReadOnly(t *testing.T, path string) *sql.DB {
	t.Helper()
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func walSegmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wal-*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
