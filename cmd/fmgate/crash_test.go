package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	checkStore(t, storePath, completed, "after the first crash")
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
	checkStore(t, storePath, completed, "after the second crash")
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
// rotate and compact during the run.
func writeCrashConfig(t *testing.T, path, walDir, storePath string) {
	t.Helper()
	cfg := fmt.Sprintf(`server:
  adminToken: crash-test-admin-token
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
`, walDir, storePath)
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
// that no per-user limit or session budget refuses it. It returns the
// answer only when the whole body arrived with status 200.
func chat(client *http.Client, base, id string, i int) (answer, error) {
	m := crashMessages[i%len(crashMessages)]
	body, _ := json.Marshal(map[string]string{
		"message": m.text, "locale": m.locale,
		"userId": "u-" + id, "sessionId": "s-" + id, "requestId": "r-" + id,
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
	if err := json.Unmarshal(data, &a); err != nil {
		return answer{}, fmt.Errorf("answer %q: %w", tail(string(data), 300), err)
	}
	if len(a.TraceID) != 32 || a.RequestID != "r-"+id {
		return answer{}, fmt.Errorf("answer without its trace id or request id: %s", tail(string(data), 300))
	}
	return a, nil
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

// traceRecord is what the store holds of one trace.
type traceRecord struct {
	turns    []string // span ids of "turn" spans, one per stored row
	attempts []attemptRow
	// rows and distinct count every span of the trace; rollupSpans and the
	// token sums come from the per-trace roll-up the dashboards read.
	rows, distinct               int
	tokensIn, tokensOut          int64
	rollupSpans                  sql.NullInt64
	rollupTokensIn, rollupTokOut sql.NullInt64
	turnMustPersist              bool
}

type attemptRow struct {
	spanID, node        string
	mustPersist         bool
	tokensIn, tokensOut int64
}

// readStore reads every trace of the store: its must-persist spans, its
// span counts and its roll-up.
func readStore(db *sql.DB) (map[string]*traceRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), crashStoreTimeout)
	defer cancel()
	recs := map[string]*traceRecord{}
	get := func(id string) *traceRecord {
		r := recs[id]
		if r == nil {
			r = &traceRecord{}
			recs[id] = r
		}
		return r
	}
	rows, err := db.QueryContext(ctx, `SELECT trace_id, span_id, name, node_id, must_persist, tokens_in, tokens_out
		FROM events WHERE name IN ('turn', 'model_attempt')`)
	if err != nil {
		return nil, fmt.Errorf("read spans: %w", err)
	}
	for rows.Next() {
		var (
			trace, span, name, node string
			mp                      bool
			in, out                 int64
		)
		if err := rows.Scan(&trace, &span, &name, &node, &mp, &in, &out); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read spans: %w", err)
		}
		r := get(trace)
		if name == "turn" {
			r.turns = append(r.turns, span)
			r.turnMustPersist = mp
		} else {
			r.attempts = append(r.attempts, attemptRow{spanID: span, node: node, mustPersist: mp, tokensIn: in, tokensOut: out})
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("read spans: %w", err)
	}
	// One statement, so the spans and the roll-up come from one snapshot.
	rows, err = db.QueryContext(ctx, `SELECT e.trace_id, COUNT(*), COUNT(DISTINCT e.span_id),
			SUM(e.tokens_in), SUM(e.tokens_out), MAX(t.spans), MAX(t.tokens_in), MAX(t.tokens_out)
		FROM events e LEFT JOIN turns t ON t.trace_id = e.trace_id
		GROUP BY e.trace_id`)
	if err != nil {
		return nil, fmt.Errorf("read traces: %w", err)
	}
	for rows.Next() {
		var id string
		var x traceRecord
		if err := rows.Scan(&id, &x.rows, &x.distinct, &x.tokensIn, &x.tokensOut, &x.rollupSpans, &x.rollupTokensIn, &x.rollupTokOut); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read traces: %w", err)
		}
		r := get(id)
		r.rows, r.distinct, r.tokensIn, r.tokensOut = x.rows, x.distinct, x.tokensIn, x.tokensOut
		r.rollupSpans, r.rollupTokensIn, r.rollupTokOut = x.rollupSpans, x.rollupTokensIn, x.rollupTokOut
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("read traces: %w", err)
	}
	return recs, nil
}

// missing lists the completed turns whose must-persist spans are not (all)
// in recs yet: no turn span, or — for an answer a model gave — no attempt
// of that model with the answer's tokens.
func missing(recs map[string]*traceRecord, completed []answer) []string {
	var out []string
	for _, a := range completed {
		r := recs[a.TraceID]
		if r == nil || len(r.turns) == 0 {
			out = append(out, a.TraceID+" (turn)")
			continue
		}
		if a.Usage.Input+a.Usage.Output == 0 {
			continue
		}
		var in, outTok int64
		for _, at := range r.attempts {
			if at.node == a.Tier {
				in, outTok = in+at.tokensIn, outTok+at.tokensOut
			}
		}
		if in < a.Usage.Input || outTok < a.Usage.Output {
			out = append(out, a.TraceID+" (model_attempt)")
		}
	}
	return out
}

// checkStore waits until the store holds the must-persist spans of every
// completed turn (the replay may still be running), then checks that each
// is there exactly once and that nothing in the store is duplicated.
func checkStore(t *testing.T, storePath string, completed []answer, when string) {
	t.Helper()
	db := openStoreReadOnly(t, storePath)
	defer db.Close()
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
	var (
		recs map[string]*traceRecord
		lost []string
		err  error
	)
	for {
		recs, err = readStore(db)
		if err == nil {
			if lost = missing(recs, completed); len(lost) == 0 {
				break
			}
		}
		if time.Since(start) > crashStoreTimeout {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling a file another process writes
	}
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if len(lost) > 0 {
		t.Errorf("%s: %d of %d completed turns lost must-persist spans, e.g. %v", when, len(lost), len(completed), lost[:min(len(lost), 10)])
	}

	modelTurns, attempts := 0, 0
	for _, a := range completed {
		r := recs[a.TraceID]
		if r == nil {
			continue // reported as lost
		}
		if len(r.turns) > 1 {
			errorf("trace %s has %d turn spans, want 1", a.TraceID, len(r.turns))
		}
		if len(r.turns) == 1 && !r.turnMustPersist {
			errorf("trace %s: turn span stored without must_persist", a.TraceID)
		}
		var in, out int64
		seen := map[string]bool{}
		for _, at := range r.attempts {
			if seen[at.spanID] {
				errorf("trace %s: model_attempt span %s stored twice", a.TraceID, at.spanID)
			}
			seen[at.spanID] = true
			if !at.mustPersist {
				errorf("trace %s: model_attempt span %s stored without must_persist", a.TraceID, at.spanID)
			}
			if at.node == a.Tier {
				in, out = in+at.tokensIn, out+at.tokensOut
			}
		}
		attempts += len(r.attempts)
		if a.Usage.Input+a.Usage.Output > 0 {
			modelTurns++
			// The answer bills every attempt of the model that served it:
			// more tokens on those spans means an attempt counted twice.
			if in != a.Usage.Input || out != a.Usage.Output {
				errorf("trace %s: %s attempts hold %d in / %d out tokens, the answer billed %d / %d",
					a.TraceID, a.Tier, in, out, a.Usage.Input, a.Usage.Output)
			}
		}
		if r.rows != r.distinct {
			errorf("trace %s: %d span rows but %d distinct span ids", a.TraceID, r.rows, r.distinct)
		}
		// The roll-up must count each stored span once: a replayed span
		// folded in again would double the turn's cost.
		if !r.rollupSpans.Valid {
			errorf("trace %s has spans but no row in the per-turn roll-up", a.TraceID)
		} else if r.rollupSpans.Int64 != int64(r.rows) || r.rollupTokensIn.Int64 != r.tokensIn || r.rollupTokOut.Int64 != r.tokensOut {
			errorf("trace %s: roll-up has %d spans, %d/%d tokens; the spans are %d, %d/%d tokens",
				a.TraceID, r.rollupSpans.Int64, r.rollupTokensIn.Int64, r.rollupTokOut.Int64, r.rows, r.tokensIn, r.tokensOut)
		}
	}

	// No span of any trace — completed or cut by the kill — is stored twice.
	var dups []string
	for id, r := range recs {
		if r.rows != r.distinct {
			dups = append(dups, id)
		}
	}
	slices.Sort(dups)
	if len(dups) > 0 {
		t.Errorf("%s: %d traces hold a span more than once, e.g. %v", when, len(dups), dups[:min(len(dups), 10)])
	}
	if modelTurns == 0 {
		t.Errorf("%s: no completed turn was answered by a model; the check of model_attempt spans proved nothing", when)
	}
	t.Logf("%s: %d completed turns (%d answered by a model) checked against %d stored traces, %d model_attempt spans, in %v",
		when, len(completed), modelTurns, len(recs), attempts, time.Since(start).Round(time.Millisecond))
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
