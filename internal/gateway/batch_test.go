package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/jobstore"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/redistest"
)

// stallProvider sends the first tokens of an answer, then nothing until the
// call is cancelled, like a model whose stream hangs.
type stallProvider struct {
	tokens   int // sent before the stall; 0 stalls before the first
	canceled chan struct{}
}

func (p *stallProvider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.Stream(ctx, req, func(string) error { return nil })
}

func (p *stallProvider) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	resp := &provider.Response{ModelID: "test-" + req.Model, Usage: provider.Usage{InputTokens: 10}}
	for i := range p.tokens {
		if err := emit(fmt.Sprintf("w%d ", i)); err != nil {
			return resp, err
		}
		resp.Usage.OutputTokens++
	}
	<-ctx.Done()
	if p.canceled != nil {
		select {
		case p.canceled <- struct{}{}:
		default:
		}
	}
	return resp, ctx.Err()
}

// fakeNow is a clock tests move by hand.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeNow) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBatchGateway(t *testing.T, p provider.Provider, now func() time.Time, edit func(*config.Config)) (*Gateway, *httptest.Server) {
	t.Helper()
	cfg := config.Default()
	if edit != nil {
		edit(&cfg)
	}
	g, err := New(cfg, Deps{Providers: both(p), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("admin-secret", nil))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { g.stopBatches() })
	return g, srv
}

func batchBodyOf(n, size int) string {
	msgs := make([]map[string]string, n)
	for i := range msgs {
		msgs[i] = map[string]string{"message": strings.Repeat("a", size), "locale": "en"}
	}
	b, _ := json.Marshal(map[string]any{"messages": msgs})
	return string(b)
}

type batchReply struct {
	status int
	JobID  string `json:"jobId"`
	Status string `json:"status"`
	Total  int    `json:"total"`
	Done   int    `json:"completed"`
	Cancel int    `json:"canceled"`
	Error  struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Results []batchResult `json:"results"`
}

func batchDo(t *testing.T, srv *httptest.Server, method, path, user, body string) batchReply {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r batchReply
	_ = json.NewDecoder(resp.Body).Decode(&r)
	r.status = resp.StatusCode
	return r
}

// TestBatchJobIsOwnersOnly: another caller asking for a job's id gets the
// same 404 as for an id that does not exist.
func TestBatchJobIsOwnersOnly(t *testing.T) {
	_, srv := newBatchGateway(t, &scriptProvider{answer: "ok "}, nil, nil)
	job := batchDo(t, srv, "POST", "/v1/batch", "alice", batchBodyOf(1, 10))
	if job.status != http.StatusAccepted {
		t.Fatalf("submit: %+v", job)
	}
	mine := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", "")
	bobs := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "bob", "")
	none := batchDo(t, srv, "GET", "/v1/batch/b-nosuchjob", "bob", "")
	if mine.status != http.StatusOK || mine.JobID != job.JobID {
		t.Fatalf("owner: %+v", mine)
	}
	if bobs.status != http.StatusNotFound || bobs.Error != none.Error || bobs.JobID != "" {
		t.Fatalf("another caller got %+v; want the same 404 as an unknown id (%+v)", bobs, none)
	}
}

// TestBatchBounds: jobs are bounded in messages, bytes, per caller and in
// all, each refusal saying what to do.
func TestBatchBounds(t *testing.T) {
	_, srv := newBatchGateway(t, &stallProvider{}, nil, func(c *config.Config) {
		c.Batch.MaxMessages = 5
		c.Batch.MaxBytes = 16 << 10
		c.Batch.MaxJobsPerUser = 2
		c.Batch.MaxJobs = 3
		c.Deadline.Batch = time.Hour // items stay in flight for the test
	})
	withFeature := func(f string) string {
		q, _ := json.Marshal(f)
		return `{"feature":` + string(q) + `,"messages":[{"sessionId":"s","message":"hi"}]}`
	}
	tests := []struct {
		name       string
		user       string
		body       string
		wantStatus int
		wantCode   string
	}{
		// The feature keys every span of the job in the cost roll-ups.
		{"feature with a NUL", "u1", withFeature("a\x00b"), 400, CodeInvalidRequest},
		{"feature too long", "u1", withFeature(strings.Repeat("f", 65)), 400, CodeInvalidRequest},
		{"feature with spaces", "u1", withFeature("my feature"), 400, CodeInvalidRequest},
		{"too many messages", "u1", batchBodyOf(6, 10), 413, CodeTooLarge},
		{"too many bytes", "u1", batchBodyOf(3, 6000), 413, CodeTooLarge},
		{"first job", "u1", withFeature("manga.recommendations-v2"), 202, ""},
		{"second job", "u1", batchBodyOf(1, 10), 202, ""},
		{"third job in flight", "u1", batchBodyOf(1, 10), 429, CodeRateLimited},
		{"another caller", "u2", batchBodyOf(1, 10), 202, ""},
		{"gateway full", "u3", batchBodyOf(1, 10), 429, CodeQueueFull},
	}
	for _, tt := range tests {
		got := batchDo(t, srv, "POST", "/v1/batch", tt.user, tt.body)
		if got.status != tt.wantStatus || got.Error.Code != tt.wantCode {
			t.Fatalf("%s: %d %+v, want %d %s", tt.name, got.status, got.Error, tt.wantStatus, tt.wantCode)
		}
		if got.status != 202 && !strings.ContainsAny(got.Error.Message, "0123456789") {
			t.Fatalf("%s: message %q does not state the limit", tt.name, got.Error.Message)
		}
		if tt.wantCode == CodeInvalidRequest && !strings.Contains(got.Error.Message, "feature must") {
			t.Fatalf("%s: message %q does not name the feature", tt.name, got.Error.Message)
		}
	}
}

// TestBatchResultsExpire: a finished job is readable for batch.resultTtl,
// then gone, and it no longer counts against the store.
func TestBatchResultsExpire(t *testing.T) {
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	_, srv := newBatchGateway(t, &scriptProvider{answer: "ok "}, clock.Now, func(c *config.Config) { c.Batch.MaxJobs, c.Batch.MaxJobsPerUser = 1, 1 })
	job := batchDo(t, srv, "POST", "/v1/batch", "alice", batchBodyOf(2, 10))
	for st := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", ""); st.Status != "done"; st = batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", "") {
		if st.status != http.StatusOK {
			t.Fatalf("GET: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	clock.Advance(59 * time.Minute)
	if st := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", ""); st.status != http.StatusOK || st.Done != 2 {
		t.Fatalf("within the TTL: %+v", st)
	}
	clock.Advance(time.Minute)
	if st := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", ""); st.status != http.StatusNotFound {
		t.Fatalf("after the TTL: %+v", st)
	}
	if next := batchDo(t, srv, "POST", "/v1/batch", "alice", batchBodyOf(1, 10)); next.status != http.StatusAccepted {
		t.Fatalf("the expired job still takes the only slot: %+v", next)
	}
}

// heldFinalSave is a job store whose save of a finished job waits until
// release is closed: the job's final save still on its way.
type heldFinalSave struct {
	*jobstore.Memory
	release chan struct{}
}

func (s heldFinalSave) Put(ctx context.Context, id, owner string, state []byte, ttl time.Duration) error {
	if strings.Contains(string(state), `"finishedAt"`) {
		select {
		case <-s.release:
		case <-ctx.Done():
		}
	}
	return s.Memory.Put(ctx, id, owner, state, ttl)
}

// TestExpiredJobIsGoneBeforeItsFinalSave: once batch.resultTtl has passed,
// the instance that ran a job answers 404 for it even while its final
// state is not saved yet, instead of reading the store's earlier state as
// a job whose instance died (shown canceled).
func TestExpiredJobIsGoneBeforeItsFinalSave(t *testing.T) {
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	store := heldFinalSave{jobstore.NewMemory(10, clock.Now), make(chan struct{})}
	cfg := config.Default()
	g, err := New(cfg, Deps{Providers: both(&scriptProvider{answer: "ok "}), Now: clock.Now, Jobs: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("admin-secret", nil))
	t.Cleanup(srv.Close)
	t.Cleanup(g.stopBatches)
	t.Cleanup(func() { close(store.release) }) // first: the held save ends
	job := batchDo(t, srv, "POST", "/v1/batch", "alice", batchBodyOf(2, 10))
	for st := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", ""); st.Status != "done"; st = batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", "") {
		if st.status != http.StatusOK {
			t.Fatalf("GET: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	clock.Advance(cfg.Batch.ResultTTL)
	if st := batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", ""); st.status != http.StatusNotFound {
		t.Fatalf("after the TTL, the final save held: %+v", st)
	}
}

// TestDrainCancelsBatchWork: SIGTERM's drain does not wait for batch work:
// items in flight are cancelled upstream, the rest are never started, and
// the job says which items were canceled.
func TestDrainCancelsBatchWork(t *testing.T) {
	p := &stallProvider{canceled: make(chan struct{}, 1)}
	g, srv := newBatchGateway(t, p, nil, func(c *config.Config) { c.Deadline.Batch = time.Hour })
	job := batchDo(t, srv, "POST", "/v1/batch", "alice", batchBodyOf(10, 10))
	<-waitRunning(t, srv, job.JobID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Drain(ctx); err != nil {
		t.Fatalf("Drain waited for batch work: %v", err)
	}
	var st batchReply
	for st = batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", ""); st.Status == "running"; st = batchDo(t, srv, "GET", "/v1/batch/"+job.JobID, "alice", "") {
		time.Sleep(5 * time.Millisecond)
	}
	if st.Status != "canceled" || st.Cancel != 10 {
		t.Fatalf("job after drain: status %q, %d canceled; want canceled, 10", st.Status, st.Cancel)
	}
	for _, r := range st.Results {
		if r.Status != "canceled" || r.Error == nil || r.Error.Code != CodeShuttingDown {
			t.Fatalf("item %+v, want canceled with shutting_down", r)
		}
	}
}

// waitRunning closes its channel once the job's first items are upstream.
func waitRunning(t *testing.T, srv *httptest.Server, id string) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{})
	for st := batchDo(t, srv, "GET", "/v1/batch/"+id, "alice", ""); st.Status != "running"; st = batchDo(t, srv, "GET", "/v1/batch/"+id, "alice", "") {
		time.Sleep(5 * time.Millisecond)
	}
	close(ch)
	return ch
}

// TestBatchJobAnswersFromAnyInstance: two instances sharing a job store, as
// a fleet shares Redis. A job one instance runs is read from the other,
// for its owner only; its state after the runner's drain is there too; and
// a job whose runner stopped saving it (killed) shows canceled, saying so.
func TestBatchJobAnswersFromAnyInstance(t *testing.T) {
	stores := map[string]func(t *testing.T) JobStore{
		"memory": func(*testing.T) JobStore { return jobstore.NewMemory(64, nil) },
		"redis": func(t *testing.T) JobStore {
			client, prefix := redistest.Client(t)
			return jobstore.NewRedis(client, prefix+"batch:")
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			instance := func() (*Gateway, *httptest.Server) {
				cfg := config.Default()
				cfg.Deadline.Batch = time.Hour // items stay in flight until the drain
				g, err := New(cfg, Deps{Providers: both(&stallProvider{}), Jobs: store})
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(g.Handler("admin-secret", nil))
				t.Cleanup(srv.Close)
				t.Cleanup(g.stopBatches)
				return g, srv
			}
			a, srvA := instance()
			_, srvB := instance()

			job := batchDo(t, srvA, "POST", "/v1/batch", "alice", batchBodyOf(10, 10))
			if job.status != http.StatusAccepted {
				t.Fatalf("submit: %+v", job)
			}
			pollB := func(want string) batchReply {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					st := batchDo(t, srvB, "GET", "/v1/batch/"+job.JobID, "alice", "")
					if st.status == http.StatusOK && st.Status == want {
						return st
					}
					if time.Now().After(deadline) {
						t.Fatalf("the other instance shows %d %+v, want status %q", st.status, st, want)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			st := pollB("running")
			if st.Total != 10 || len(st.Results) != 10 {
				t.Fatalf("the other instance's view: %+v", st)
			}
			if bobs := batchDo(t, srvB, "GET", "/v1/batch/"+job.JobID, "bob", ""); bobs.status != http.StatusNotFound {
				t.Fatalf("another caller read the job from the other instance: %+v", bobs)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := a.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			// The drain waited for the job's last save: no polling needed.
			st = batchDo(t, srvB, "GET", "/v1/batch/"+job.JobID, "alice", "")
			if st.Status != "canceled" || st.Cancel != 10 {
				t.Fatalf("after the runner's drain the other instance shows %q, %d canceled; want canceled, 10", st.Status, st.Cancel)
			}

			// A runner killed mid-job leaves a running state nobody renews.
			dead := &batchJob{owner: "alice", ID: "b-dead", Status: "running", Total: 2, Completed: 1,
				Updated: time.Now().Add(-jobStale - time.Second),
				Results: []batchResult{{Index: 0, Status: "done", Text: "ok"}, {Index: 1, Status: "pending"}}}
			state, _ := json.Marshal(dead)
			if err := store.Put(context.Background(), dead.ID, dead.owner, state, time.Minute); err != nil {
				t.Fatal(err)
			}
			st = batchDo(t, srvB, "GET", "/v1/batch/b-dead", "alice", "")
			if st.Status != "canceled" || st.Done != 1 || st.Cancel != 1 || st.Results[1].Error == nil ||
				!strings.Contains(st.Results[1].Error.Message, "stopped") {
				t.Fatalf("a job whose runner died: %+v", st)
			}
		})
	}
}

// gaugeProvider answers after a pause and records the most calls it had
// in flight at once.
type gaugeProvider struct {
	mu        sync.Mutex
	now, most int
	calls     int
}

func (p *gaugeProvider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.Stream(ctx, req, func(string) error { return nil })
}

func (p *gaugeProvider) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	p.mu.Lock()
	p.now++
	p.calls++
	p.most = max(p.most, p.now)
	p.mu.Unlock()
	defer func() { p.mu.Lock(); p.now--; p.mu.Unlock() }()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(20 * time.Millisecond):
	}
	_ = emit("ok ")
	return &provider.Response{ModelID: "test-" + req.Model, Text: "ok ", Usage: provider.Usage{InputTokens: 5, OutputTokens: 1}}, nil
}

// However many jobs are queued, batch turns run batchTurns at a time over
// all of them, so live chat keeps its share of shared state.
func TestBatchTurnsAreBoundedOverAllJobs(t *testing.T) {
	p := &gaugeProvider{}
	_, srv := newBatchGateway(t, p, nil, nil)
	const jobs, items = 12, 8 // 12 jobs × 4 workers would be 48 turns at once
	ids := make([]string, jobs)
	for j := range jobs {
		r := batchDo(t, srv, http.MethodPost, "/v1/batch", fmt.Sprintf("batch-%d", j), batchBodyOf(items, 10))
		if r.status != http.StatusAccepted {
			t.Fatalf("job %d: %d %+v", j, r.status, r.Error)
		}
		ids[j] = r.JobID
	}
	deadline := time.Now().Add(30 * time.Second)
	for j, id := range ids {
		for {
			r := batchDo(t, srv, http.MethodGet, "/v1/batch/"+id, fmt.Sprintf("batch-%d", j), "")
			if r.Status == "done" {
				if r.Done != items {
					t.Fatalf("job %d: %+v", j, r)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %d not done: %+v", j, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.most > batchTurns || p.most < batchTurns/2 || p.calls != jobs*items {
		t.Fatalf("%d calls, at most %d at once; want %d calls, never more than %d at once (and the bound in use)", p.calls, p.most, jobs*items, batchTurns)
	}
}

// flakyJobs fails every save of a finished job until it has failed
// failFinal times, as a store that is briefly away would.
type flakyJobs struct {
	JobStore
	mu        sync.Mutex
	failFinal int
	failed    int
}

func (f *flakyJobs) Put(ctx context.Context, id, owner string, state []byte, ttl time.Duration) error {
	f.mu.Lock()
	if strings.Contains(string(state), `"finishedAt"`) && f.failed < f.failFinal {
		f.failed++
		f.mu.Unlock()
		return errors.New("store away")
	}
	f.mu.Unlock()
	return f.JobStore.Put(ctx, id, owner, state, ttl)
}

// A job's final state is what every instance shows for its results'
// lifetime: a save that fails is tried again rather than leaving the job
// to look canceled.
func TestBatchFinalStateIsSavedAgainAfterAFailure(t *testing.T) {
	jobs := &flakyJobs{JobStore: jobstore.NewMemory(8, time.Now), failFinal: 1}
	g, err := New(config.Default(), Deps{Providers: both(&scriptProvider{answer: "ok "}), Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler("admin-secret", nil))
	t.Cleanup(srv.Close)
	r := batchDo(t, srv, http.MethodPost, "/v1/batch", "saver", batchBodyOf(2, 10))
	if r.status != http.StatusAccepted {
		t.Fatalf("submit: %d %+v", r.status, r.Error)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, ok, err := jobs.JobStore.Get(context.Background(), r.JobID, "saver")
		if err == nil && ok && strings.Contains(string(state), `"status":"done"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stored state after a failed final save: %s (ok %v, err %v)", state, ok, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	jobs.mu.Lock()
	defer jobs.mu.Unlock()
	if jobs.failed != 1 {
		t.Fatalf("%d final saves failed; the test meant one", jobs.failed)
	}
}
