package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Bounds of every wait on a process.
const (
	readyTimeout = 60 * time.Second
	stopTimeout  = 30 * time.Second
	drainTimeout = 10 * time.Second
)

// instance is one gateway of the fleet: a subprocess started by the
// scenario, or a target URL it only drives.
type instance struct {
	id   int
	url  string // http://127.0.0.1:PORT
	addr string // 127.0.0.1:PORT
	dir  string // its working directory (config, WAL, event store, logs); "" for a target

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// fleet is the gateways under test and, when the scenario started it, the
// Redis they share.
type fleet struct {
	opts      Options
	instances []*instance
	redis     *redisProc
	prefix    string
	started   bool // the scenario owns the processes
}

// startFleet starts a Redis of its own and opts.Instances gateways, or
// wraps opts.Targets. On error everything started is stopped.
func startFleet(ctx context.Context, opts Options, dir string) (_ *fleet, err error) {
	f := &fleet{opts: opts, prefix: fmt.Sprintf("fmgate-scenario-%d:", time.Now().UnixNano())}
	if len(opts.Targets) > 0 {
		for i, u := range opts.Targets {
			u = strings.TrimRight(u, "/")
			if err := loopbackOnly(u); err != nil {
				return nil, err
			}
			f.instances = append(f.instances, &instance{id: i, url: u, addr: strings.TrimPrefix(u, "http://")})
		}
		return f, nil
	}
	f.started = true
	defer func() {
		if err != nil {
			f.stop()
		}
	}()
	if f.redis, err = startRedis(ctx, opts.RedisServer, filepath.Join(dir, "redis")); err != nil {
		return nil, err
	}
	for i := range opts.Instances {
		in := &instance{id: i, dir: filepath.Join(dir, fmt.Sprintf("instance-%d", i))}
		if err := os.MkdirAll(in.dir, 0o755); err != nil {
			return nil, fmt.Errorf("instance %d: %w", i, err)
		}
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		in.addr, in.url = addr, "http://"+addr
		if err := os.WriteFile(filepath.Join(in.dir, "fmgate.yaml"), []byte(instanceConfig(opts, in, f.redis.addr, f.prefix)), 0o600); err != nil {
			return nil, fmt.Errorf("instance %d: write config: %w", i, err)
		}
		f.instances = append(f.instances, in)
	}
	// Start them all, then wait for all: start-up (the tokenizer, the event
	// store) runs in parallel.
	for _, in := range f.instances {
		if err := f.launch(in); err != nil {
			return nil, err
		}
	}
	for _, in := range f.instances {
		if err := f.waitReady(ctx, in); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// loopbackOnly refuses a target that is not on a loopback address: a game
// day injects faults, which must never reach a shared gateway by mistake.
func loopbackOnly(u string) error {
	host := strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host = host[:i]
	}
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	if h == "localhost" {
		return nil
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("target %s: only loopback targets (127.0.0.1, ::1, localhost) are allowed", u)
}

// instanceConfig is the YAML of one gateway: the shared Redis and prefix,
// the simulator's pace, limits a probe can measure, quota ceilings sized
// for the load, and its own WAL, event store and JSONL trail.
//
// The ceilings hold the whole load on either model (a reservation is its
// estimated input plus the 1,024-token answer cap, held a minute): with
// the defaults (Sonnet 400k TPM) 20 turns/s fill Sonnet's window within
// half a minute, and every scenario would measure the quota instead of its
// own fault. tpm-cut still cuts Sonnet's to a tenth.
func instanceConfig(opts Options, in *instance, redisAddr, prefix string) string {
	pace := opts.Pace
	if pace <= 0 {
		pace = 1
	}
	ttft := func(ms float64) int { return max(1, int(ms/pace)) }
	tps := func(v float64) int { return int(v * pace) }
	redisTimeout, session := "", ""
	if opts.RedisTimeout > 0 {
		redisTimeout = fmt.Sprintf("  redisTimeout: %s\n", opts.RedisTimeout)
		session = fmt.Sprintf("session:\n  redisTimeout: %s\n", opts.RedisTimeout)
	}
	var keys strings.Builder
	for _, u := range users(opts.users()) {
		if u.key == "" {
			continue
		}
		fmt.Fprintf(&keys, "    %s: {userId: %s, tier: %s, priority: %s}\n", u.key, u.id, u.tier, u.priority)
	}
	return fmt.Sprintf(`server:
  addr: %s
  adminToken: %s
  drainTimeout: %s
fleet:
  redis: %s
  keyPrefix: %q
  size: %d
auth:
  trustUserHeader: true
  keys:
%ssim:
  models:
    sonnet: {ttftMs: %d, tokensPerSecond: %d}
    haiku: {ttftMs: %d, tokensPerSecond: %d}
rateLimit:
%s  user:
    perSecond: {rate: 1000, per: 1s, burst: 1000}
    perMinute: {rate: %d, per: 1m, burst: %d}
    perHour: {rate: 1000000, per: 1h}
    perDay: {rate: 10000000, per: 24h}
events:
  wal: {dir: %q}
  sinks:
    jsonl: {path: %q}
eventStore: {path: %q}
prompt: {reloadInterval: 0s}
# Full-text retrieval only: the catalog's embedding at start finishes at a
# different moment on each instance, and a turn's context must not change
# with it, since the session probe compares two turns' input tokens.
catalog: {hybrid: false}
quota:
  models:
    sonnet: {tpm: %[19]d, rpm: %[20]d}
    haiku: {tpm: %[19]d, rpm: %[20]d}
%[18]s`, in.addr, opts.AdminToken, drainTimeout, redisAddr, prefix, max(1, opts.Instances), keys.String(),
		ttft(600), tps(60), ttft(250), tps(120), redisTimeout,
		probePerMinute, probeBurst,
		filepath.Join(in.dir, "wal"), filepath.Join(in.dir, "events.jsonl"), filepath.Join(in.dir, "events.db"), session,
		loadTPM(opts.Rate), loadRPM(opts.Rate))
}

// loadTPM and loadRPM are ceilings that hold rate turns a second on one
// model, with room to spare: 2,500 tokens a turn over the 85% safety margin.
func loadTPM(rate float64) int { return int(math.Ceil(max(rate, 1) * 60 * 2500 / 0.85)) }
func loadRPM(rate float64) int { return int(math.Ceil(max(rate, 1) * 60 * 2 / 0.85)) }

// launch starts in's process (again, after a stop).
func (f *fleet) launch(in *instance) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.starts++
	logf, err := os.Create(filepath.Join(in.dir, fmt.Sprintf("run-%d.log", in.starts)))
	if err != nil {
		return fmt.Errorf("instance %d: %w", in.id, err)
	}
	args := append(append([]string{}, f.opts.ExecArgs...), "serve", "-config", filepath.Join(in.dir, "fmgate.yaml"), "-log-level", "warn")
	cmd := exec.Command(f.opts.Executable, args...)
	cmd.Dir = in.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), f.opts.Env...)
	cmd.SysProcAttr = childAttr(syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("instance %d: start %s: %w", in.id, f.opts.Executable, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	in.cmd, in.exited = cmd, exited
	return nil
}

// waitReady polls /readyz until 200, the process exits, or readyTimeout.
func (f *fleet) waitReady(ctx context.Context, in *instance) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	in.mu.Lock()
	exited := in.exited
	in.mu.Unlock()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("instance %d exited during start-up; see %s", in.id, in.dir)
		case <-ctx.Done():
			return fmt.Errorf("instance %d not ready after %v: %w", in.id, readyTimeout, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig to in's process and, for SIGTERM and SIGKILL, waits for
// it to exit (bounded; SIGKILL after stopTimeout).
func (f *fleet) signal(in *instance, sig syscall.Signal) error {
	in.mu.Lock()
	cmd, exited := in.cmd, in.exited
	in.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("instance %d was not started by the scenario", in.id)
	}
	select {
	case <-exited:
		return nil
	default:
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("instance %d: %v: %w", in.id, sig, err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("instance %d did not stop within %v of %v; killed", in.id, stopTimeout, sig)
	}
}

// restart starts in again on the same address, config and data.
func (f *fleet) restart(ctx context.Context, in *instance) error {
	if err := f.launch(in); err != nil {
		return err
	}
	return f.waitReady(ctx, in)
}

// stop ends every process the scenario started: gateways with SIGTERM (a
// clean stop flushes their events), then Redis.
func (f *fleet) stop() {
	if !f.started {
		return
	}
	var wg sync.WaitGroup
	for _, in := range f.instances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.signal(in, syscall.SIGTERM)
		}()
	}
	wg.Wait()
	if f.redis != nil {
		f.redis.stop()
	}
}

// freeAddr is a free loopback port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// redisProc is a redis-server the scenario started on a free loopback
// port, never the machine's own.
type redisProc struct {
	bin, dir, addr string
	mu             sync.Mutex
	cmd            *exec.Cmd
	exited         chan struct{}
}

func startRedis(ctx context.Context, bin, dir string) (*redisProc, error) {
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("the scenario starts a Redis of its own and needs redis-server in PATH (apt-get install redis-server): %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r := &redisProc{bin: bin, dir: dir, addr: addr}
	return r, r.start(ctx)
}

func (r *redisProc) start(ctx context.Context) error {
	_, port, _ := net.SplitHostPort(r.addr)
	cmd := exec.Command(r.bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", r.dir, "--protected-mode", "yes")
	logf, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr(syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.addr, 200*time.Millisecond)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			if strings.HasPrefix(string(buf[:n]), "+PONG") {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited at start; see %s", filepath.Join(r.dir, "redis.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not answering after 10s", r.addr)
		}
	}
}

// stop kills the Redis (a crash, as the fault means) and waits for it.
func (r *redisProc) stop() {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(stopTimeout):
	}
}
