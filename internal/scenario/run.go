package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fmgate/fmgate/internal/quota"
)

// Bounds of the run's waits.
const (
	turnTimeout    = 45 * time.Second // a turn with no end by then is lost
	drainLoadLimit = 60 * time.Second // in-flight turns after the load stops
	adminTimeout   = 5 * time.Second
	storeWait      = 30 * time.Second // must-persist events reaching the stores
	batchWait      = 45 * time.Second
)

// runner is one scenario's run: the fleet, the load and what was recorded.
type runner struct {
	opts  Options
	def   definition
	fleet *fleet
	start time.Time
	rng   *rand.Rand
	rngMu sync.Mutex

	client *http.Client
	rec    *recorder
	lb     *balancer
	// streaming counts, per instance, turns past their first byte and
	// not yet ended.
	streaming []atomic.Int64

	mu    sync.Mutex
	marks []Mark
	undo  map[string]func(context.Context) error // faults to clear at the end (targets)
}

func runOne(ctx context.Context, opts Options, def definition, dir string) (*Result, error) {
	f, err := startFleet(ctx, opts, dir)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	r := &runner{
		opts: opts, def: def, fleet: f,
		rng:    rand.New(rand.NewPCG(uint64(opts.Seed), 15)),
		client: &http.Client{Timeout: turnTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}},
		rec:    &recorder{},
		undo:   map[string]func(context.Context) error{},
	}
	r.lb = newBalancer(f.instances)
	r.streaming = make([]atomic.Int64, len(f.instances))
	defer r.client.CloseIdleConnections()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.warmUp(runCtx)
	// The probes run on the healthy fleet before the load and the fault:
	// they measure the fleet's shared state, not the fault.
	var probes sync.WaitGroup
	var rl RateProbe
	var sess SessionProbe
	probes.Go(func() { rl = r.rateProbe(runCtx) })
	probes.Go(func() { sess = r.sessionProbe(runCtx) })
	probes.Wait()
	r.rec.reset()
	r.start = time.Now()
	r.rec.start = r.start

	var bg sync.WaitGroup
	smp := &sampler{r: r}
	bg.Go(func() { r.lb.healthLoop(runCtx, r.client) })
	bg.Go(func() { smp.loop(runCtx) })
	prog := newProgress(opts, def.name, r.rec)
	bg.Go(func() { prog.loop(runCtx) })

	var batch BatchOutcome
	batchID, batchInst, batchErr := r.startBatch(runCtx)

	// Faults on their timeline.
	faultErr := make(chan error, 1)
	go func() { faultErr <- r.faults(runCtx) }()

	inflight := r.load(runCtx)
	loadEnd := time.Since(r.start)
	lv := r.liveView(runCtx)
	ferr := <-faultErr
	waitGroup(inflight, drainLoadLimit)

	if batchErr != nil {
		batch = BatchOutcome{Error: batchErr.Error()}
	} else {
		batch = r.waitBatch(runCtx, batchInst, batchID)
	}
	// Put a target back even after Ctrl-C: a bounded context of its own.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 2*adminTimeout)
	r.clearFaults(cctx)
	ccancel()
	persist := r.checkPersisted(runCtx)
	cancel()
	bg.Wait()
	prog.finish()

	res := &Result{
		Name: def.name, About: def.about, Options: opts, PrimaryShare: def.primaryShare,
		Started: r.start, Duration: loadEnd, Instances: len(f.instances),
		Marks: r.marks, Turns: r.rec.all(), Samples: smp.samples,
		RateProbe: rl, SessionProbe: sess, Batch: batch, Persist: persist, Live: lv,
	}
	if ferr != nil {
		res.FaultError = ferr.Error()
	}
	res.Goals = evaluate(res)
	return res, ctx.Err()
}

func waitGroup(wg *sync.WaitGroup, limit time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
	}
}

// warmUp sends two turns to every instance, one after the other, before
// the clock starts, as a load balancer's slow start would: connection pools
// to Redis are open and the simulator's tokenizer is loaded when the
// measured load begins. (Cold instances hit all at once answer their first
// calls slowly enough to time out and open the primary's breaker.)
func (r *runner) warmUp(ctx context.Context) {
	r.start = time.Now()
	var wg sync.WaitGroup
	for _, in := range r.fleet.instances {
		wg.Go(func() {
			for i := range 2 {
				u := user{id: fmt.Sprintf("warm-up-%d-%d", in.id, i), locale: "en", tier: "standard", priority: "P0"}
				_ = r.chatOnce(ctx, in, u, "warm-up", "hello")
			}
		})
	}
	waitGroup(&wg, 2*turnTimeout)
}

// faults runs the scenario's steps at their times.
func (r *runner) faults(ctx context.Context) error {
	for _, s := range r.def.steps {
		at := time.Duration(s.at * float64(r.opts.Duration))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(r.start.Add(at))):
		}
		if s.label != "" {
			r.mark(s.label)
		}
		if err := s.do(ctx, r); err != nil {
			r.mark("fault failed: " + err.Error())
			return err
		}
	}
	return nil
}

// mark adds an entry to the fault timeline.
func (r *runner) mark(label string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks = append(r.marks, Mark{At: time.Since(r.start), Label: label})
	r.rec.note(label)
}

func (r *runner) since() time.Duration { return time.Since(r.start) }

func (r *runner) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *runner) float() float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Float64()
}

// admin sends one admin API call to in.
func (r *runner) admin(ctx context.Context, in *instance, method, path, body string) ([]byte, int, error) {
	return r.request(ctx, in, method, path, body, func(h http.Header) { h.Set("Authorization", "Bearer "+r.opts.AdminToken) })
}

// request sends one call to in, with headers set by auth.
func (r *runner) request(ctx context.Context, in *instance, method, path, body string, auth func(http.Header)) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = bytes.NewReader([]byte(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, in.url+path, rd)
	if err != nil {
		return nil, 0, err
	}
	auth(req.Header)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("instance %d: %s %s: %w", in.id, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return data, resp.StatusCode, err
}

// simAll patches the simulator of model on every instance (each runs its
// own simulated provider). A target's previous settings are put back at the
// end.
func (r *runner) simAll(ctx context.Context, model, patch string) error {
	for _, in := range r.fleet.instances {
		if len(r.opts.Targets) > 0 {
			key := fmt.Sprintf("sim/%d/%s", in.id, model)
			r.mu.Lock()
			_, saved := r.undo[key]
			r.mu.Unlock()
			if !saved {
				prev, status, err := r.admin(ctx, in, http.MethodGet, "/admin/sim/"+model, "")
				if err == nil && status == http.StatusOK {
					r.mu.Lock()
					r.undo[key] = func(ctx context.Context) error {
						_, _, err := r.admin(ctx, in, http.MethodPut, "/admin/sim/"+model, string(prev))
						return err
					}
					r.mu.Unlock()
				}
			}
		}
		body, status, err := r.admin(ctx, in, http.MethodPut, "/admin/sim/"+model, patch)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("instance %d: PUT /admin/sim/%s: status %d: %s", in.id, model, status, body)
		}
	}
	return nil
}

// cutTPM sets model's quota ceiling (shared by the fleet in Redis, so every
// instance is told in case one runs in memory) and the simulated provider's
// own ceiling to share of the configured TPM; share 1 restores both.
func (r *runner) cutTPM(ctx context.Context, model string, share float64) error {
	if share >= 1 {
		for _, in := range r.fleet.instances {
			if _, _, err := r.admin(ctx, in, http.MethodPut, "/admin/quota/"+model, `{}`); err != nil {
				return err
			}
		}
		return r.simAll(ctx, model, `{"tpmCeiling":0}`)
	}
	body, status, err := r.admin(ctx, r.fleet.instances[0], http.MethodGet, "/admin/quota", "")
	if err != nil {
		return err
	}
	// The ledger reports its limits after the safety margin; the ceiling
	// PUT takes is the provider's, before it.
	var q map[string]struct {
		TPMLimit int `json:"TPMLimit"`
		RPMLimit int `json:"RPMLimit"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &q) != nil || q[model].TPMLimit == 0 {
		return fmt.Errorf("GET /admin/quota: status %d: cannot read %s's limit: %s", status, model, body)
	}
	margin := quota.DefaultConfig().SafetyMargin
	tpm := max(1, int(math.Round(float64(q[model].TPMLimit)/margin*share)))
	rpm := int(math.Round(float64(q[model].RPMLimit) / margin))
	for _, in := range r.fleet.instances {
		b, st, err := r.admin(ctx, in, http.MethodPut, "/admin/quota/"+model, fmt.Sprintf(`{"tpm":%d,"rpm":%d}`, tpm, rpm))
		if err != nil {
			return err
		}
		if st != http.StatusOK {
			return fmt.Errorf("instance %d: PUT /admin/quota/%s: status %d: %s", in.id, model, st, b)
		}
		r.mu.Lock()
		r.undo["quota/"+model+fmt.Sprint(in.id)] = func(ctx context.Context) error {
			_, _, err := r.admin(ctx, in, http.MethodPut, "/admin/quota/"+model, `{}`)
			return err
		}
		r.mu.Unlock()
	}
	// The provider enforces the same ceiling; each instance's simulator sees
	// only its share of the fleet's traffic.
	return r.simAll(ctx, model, fmt.Sprintf(`{"tpmCeiling":%d}`, max(1, tpm/len(r.fleet.instances))))
}

// clearFaults puts back what a run changed on targets it does not own.
func (r *runner) clearFaults(ctx context.Context) {
	if len(r.opts.Targets) == 0 {
		return
	}
	r.mu.Lock()
	undo := r.undo
	r.undo = map[string]func(context.Context) error{}
	r.mu.Unlock()
	for _, f := range undo {
		_ = f(ctx)
	}
}

// waitStreaming waits, at most limit, until instance i has a turn
// streaming.
func (r *runner) waitStreaming(i int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for r.streaming[i].Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// kill signals instance i and waits for it to exit; the balancer stops
// sending it turns.
func (r *runner) kill(i int, sig syscall.Signal) error {
	in := r.fleet.instances[i]
	if sig == syscall.SIGTERM {
		// As a load balancer would see /readyz turn 503 first.
		r.lb.setUp(i, false)
	}
	err := r.fleet.signal(in, sig)
	r.lb.setUp(i, false)
	return err
}

// startInstance starts instance i again and waits until it is ready.
func (r *runner) startInstance(ctx context.Context, i int) error {
	if err := r.fleet.restart(ctx, r.fleet.instances[i]); err != nil {
		return err
	}
	r.lb.setUp(i, true)
	return nil
}

// balancer spreads turns over the instances that are up, as a load
// balancer with health checks on /readyz does.
type balancer struct {
	instances []*instance
	up        []atomic.Bool
	next      atomic.Uint64
}

func newBalancer(in []*instance) *balancer {
	b := &balancer{instances: in, up: make([]atomic.Bool, len(in))}
	for i := range b.up {
		b.up[i].Store(true)
	}
	return b
}

func (b *balancer) setUp(i int, up bool) { b.up[i].Store(up) }

// pick returns the next instance that is up and not in tried, or nil.
func (b *balancer) pick(tried map[int]bool) *instance {
	n := len(b.instances)
	start := int(b.next.Add(1))
	for k := range n {
		i := (start + k) % n
		if b.up[i].Load() && !tried[i] {
			return b.instances[i]
		}
	}
	return nil
}

// healthLoop polls every instance's /readyz every 250 ms.
func (b *balancer) healthLoop(ctx context.Context, client *http.Client) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i, in := range b.instances {
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			req, _ := http.NewRequestWithContext(cctx, http.MethodGet, in.url+"/readyz", nil)
			resp, err := client.Do(req)
			up := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
			cancel()
			b.up[i].Store(up)
		}
	}
}
