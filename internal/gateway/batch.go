package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/jobstore"
)

// Batch jobs run many messages through the same pipeline at priority P3, so
// they pause first when quota saturates while live chat keeps flowing. Jobs
// are bounded (config.Batch): messages and bytes per job, jobs per caller and
// in all; a job belongs to its caller, and is dropped ResultTTL after it
// ends. On drain, batch work stops at once: items not answered yet are
// marked canceled, and the caller submits them again.
//
// The instance that accepts a job runs it and saves its state to the job
// store (JobStore) as it goes: at most every jobSaveEvery while items end,
// at least every jobHeartbeat while it runs, and when it ends. Any instance
// answers the job's status from the store, and a job whose state stopped
// being saved while it ran (its instance was killed) is shown canceled.

const (
	jobSaveEvery = time.Second
	jobHeartbeat = 5 * time.Second
	// jobStale is how long a running job's state may go unsaved before
	// readers take its instance for dead.
	jobStale = 3 * jobHeartbeat
	// jobStoreTimeout bounds one save or load.
	jobStoreTimeout = 2 * time.Second
	// finalSaveWait is the longest wait between tries of a job's final
	// save (1s, 2s, 4s: three tries after the first).
	finalSaveWait = 4 * time.Second
)

// batchWorkers is how many messages of one job are answered at once, and
// batchTurns how many batch turns run at once over all jobs: a quarter of
// the fleet's Redis pool (64), so that batch work never starves live chat
// of shared state, however many jobs are queued.
const (
	batchWorkers = 4
	batchTurns   = 16
)

type batchBody struct {
	Messages []batchItemBody `json:"messages"`
	Feature  string          `json:"feature"`
}

type batchItemBody struct {
	SessionID string `json:"sessionId"`
	Message   string `json:"message"`
	Locale    string `json:"locale"`
}

// batchJob is the state of one job, served by GET /v1/batch/{id}.
type batchJob struct {
	mu        sync.Mutex
	owner     string
	ID        string        `json:"jobId"`
	Status    string        `json:"status"` // queued, running, done, canceled
	Priority  string        `json:"priority"`
	Total     int           `json:"total"`
	Completed int           `json:"completed"`
	Failed    int           `json:"failed"`
	Canceled  int           `json:"canceled"`
	Created   time.Time     `json:"createdAt"`
	Updated   time.Time     `json:"updatedAt"`
	Finished  *time.Time    `json:"finishedAt,omitempty"`
	Results   []batchResult `json:"results"`

	dirty bool // changed since the last save
}

type batchResult struct {
	Index    int        `json:"index"`
	Status   string     `json:"status"` // pending, done, failed, canceled
	Text     string     `json:"text,omitempty"`
	Tier     string     `json:"tier,omitempty"`
	Degraded bool       `json:"degraded,omitempty"`
	CostUSD  float64    `json:"costUsd,omitempty"`
	Error    *errorJSON `json:"error,omitempty"`
}

func (j *batchJob) finished() *time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.Finished
}

// batchJobs holds the jobs this instance runs, the store their state is
// saved to, and the context their turns run under, which Drain cancels.
type batchJobs struct {
	cfg     config.Batch
	store   JobStore
	now     func() time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup // runBatch, until its job's last save
	turns   chan struct{}  // a place per batch turn running, batchTurns in all

	mu   sync.Mutex
	jobs map[string]*batchJob
}

func newBatchJobs(cfg config.Batch, store JobStore, now func() time.Time) *batchJobs {
	if now == nil {
		now = time.Now
	}
	if store == nil {
		store = jobstore.NewMemory(cfg.MaxJobs, now)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &batchJobs{cfg: cfg, store: store, now: now, ctx: ctx, cancel: cancel, jobs: make(map[string]*batchJob),
		turns: make(chan struct{}, batchTurns)}
}

// save writes j's state to the store, to be kept ResultTTL after it ends
// (and, while it runs, until readers would take it for dead anyway).
func (b *batchJobs) save(j *batchJob) error {
	j.mu.Lock()
	j.Updated = b.now().UTC()
	j.dirty = false
	ttl := b.cfg.ResultTTL + jobStale
	if j.Finished != nil {
		ttl = b.cfg.ResultTTL
	}
	state, err := json.Marshal(j)
	j.mu.Unlock()
	if err != nil {
		return fmt.Errorf("batch: encoding job %s: %w", j.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobStoreTimeout)
	defer cancel()
	return b.store.Put(ctx, j.ID, j.owner, state, ttl)
}

// load reads owner's job id from the store: a job another instance runs,
// or ran before it restarted.
func (b *batchJobs) load(ctx context.Context, id, owner string) (*batchJob, error) {
	ctx, cancel := context.WithTimeout(ctx, jobStoreTimeout)
	defer cancel()
	state, ok, err := b.store.Get(ctx, id, owner)
	if err != nil || !ok {
		return nil, err
	}
	j := &batchJob{owner: owner}
	if err := json.Unmarshal(state, j); err != nil {
		return nil, fmt.Errorf("batch: decoding job %s: %w", id, err)
	}
	if j.Finished == nil && b.now().Sub(j.Updated) > jobStale {
		j.interrupted()
	}
	return j, nil
}

// interrupted marks a job whose instance stopped saving it while it ran:
// its unanswered items will not be answered.
func (j *batchJob) interrupted() {
	for i := range j.Results {
		if r := &j.Results[i]; r.Status == "pending" {
			*r = batchResult{Index: i, Status: "canceled", Error: &errorJSON{Code: CodeShuttingDown,
				Message: "The gateway instance running this job stopped before this message was answered; submit it again."}}
			j.Canceled++
		}
	}
	j.Status, j.Finished = "canceled", &j.Updated
}

// put admits j, or refuses it when its owner or the gateway holds too many
// jobs. Expired jobs are dropped first; when the store is full, the oldest
// finished job makes room.
func (b *batchJobs) put(j *batchJob, now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var oldest *batchJob
	mine := 0
	for id, old := range b.jobs {
		end := old.finished()
		switch {
		case end != nil && now.Sub(*end) >= b.cfg.ResultTTL:
			delete(b.jobs, id)
			continue
		case end == nil && old.owner == j.owner:
			mine++
		case end != nil && (oldest == nil || end.Before(*oldest.finished())):
			oldest = old
		}
	}
	if mine >= b.cfg.MaxJobsPerUser {
		return &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited, RetryAfter: 10 * time.Second,
			Message: fmt.Sprintf("You have %d batch jobs queued or running (the limit is %d); submit more when one has finished.", mine, b.cfg.MaxJobsPerUser)}
	}
	if len(b.jobs) >= b.cfg.MaxJobs {
		if oldest == nil {
			return &Error{Status: http.StatusTooManyRequests, Code: CodeQueueFull, RetryAfter: 30 * time.Second,
				Message: fmt.Sprintf("The gateway already holds %d batch jobs; submit again when some have finished.", b.cfg.MaxJobs)}
		}
		delete(b.jobs, oldest.ID)
	}
	b.jobs[j.ID] = j
	return nil
}

// drop forgets a job that was never started.
func (b *batchJobs) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.jobs, id)
}

// get returns owner's job id, nil when this instance does not hold it or
// it is another caller's (the two are not told apart). expired says the
// instance held it and its ResultTTL is over: it is gone, whatever the
// store still has (its final state's save may not have landed yet).
func (b *batchJobs) get(id, owner string, now time.Time) (j *batchJob, expired bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j = b.jobs[id]
	if j == nil || j.owner != owner {
		return nil, false
	}
	if end := j.finished(); end != nil && now.Sub(*end) >= b.cfg.ResultTTL {
		delete(b.jobs, id)
		return nil, true
	}
	return j, false
}

// serveBatch is POST /v1/batch: it accepts the job and answers 202 with its id.
func (g *Gateway) serveBatch(w http.ResponseWriter, r *http.Request) {
	caller := &Turn{Route: "batch", Surface: "batch", Priority: P3}
	refuse := func(err error) { writeError(w, g.Refuse(r.Context(), caller, err)) }
	if !g.Ready() {
		refuse(&Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown,
			Message: "The gateway is restarting; submit the batch again shortly.", RetryAfter: 5 * time.Second})
		return
	}
	if err := g.authenticate(r, "", caller); err != nil {
		refuse(err)
		return
	}
	limits := g.Config().Batch
	data, err := readLimited(r, int64(limits.MaxBytes))
	if e := asEdgeError(err); err != nil && e.Status == http.StatusRequestEntityTooLarge {
		refuse(&Error{Status: e.Status, Code: e.Code,
			Message: fmt.Sprintf("a batch body is at most %d bytes; split the job", limits.MaxBytes)})
		return
	} else if err != nil {
		refuse(err)
		return
	}
	var body batchBody
	if err := decodeStrict(data, &body); err != nil {
		refuse(err)
		return
	}
	if err := validFeature(body.Feature); err != nil {
		refuse(err)
		return
	}
	switch n := len(body.Messages); {
	case n == 0:
		refuse(invalid("messages must hold at least one message"))
		return
	case n > limits.MaxMessages:
		refuse(&Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: fmt.Sprintf("a batch holds at most %d messages; got %d — split the job", limits.MaxMessages, n)})
		return
	}
	job := &batchJob{owner: caller.UserID, ID: "b-" + newID(), Status: "queued", Priority: P3.String(), Total: len(body.Messages),
		Created: g.now().UTC(), Results: make([]batchResult, len(body.Messages))}
	for i := range job.Results {
		job.Results[i] = batchResult{Index: i, Status: "pending"}
	}
	if err := g.batches.put(job, g.now()); err != nil {
		refuse(err)
		return
	}
	if err := g.batches.save(job); err != nil {
		// The job runs here all the same; this instance answers its status.
		g.log.Warn("batch job state not saved", "job", job.ID, "err", err)
	}
	accepted := map[string]any{"jobId": job.ID, "status": job.Status, "total": job.Total, "statusUrl": "/v1/batch/" + job.ID}
	if err := g.startBatch(job, body, caller); err != nil {
		g.batches.drop(job.ID)
		refuse(err)
		return
	}
	w.Header().Set("Location", "/v1/batch/"+job.ID)
	writeJSON(w, http.StatusAccepted, accepted)
}

// maxFeatureBytes bounds a caller's feature name: it keys the cost
// roll-ups and the dashboards' drill-down in every event store.
const maxFeatureBytes = 64

// validFeature checks a caller's feature name (empty is the default,
// "chat"): a short name of letters, digits and . _ : / -, since it becomes
// a dimension of every span of the job.
func validFeature(f string) error {
	ok := len(f) <= maxFeatureBytes
	for i := 0; ok && i < len(f); i++ {
		c := f[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/-", c) >= 0
	}
	if !ok {
		return invalid("feature must be at most %d letters, digits and . _ : / - (e.g. \"recommendations\")", maxFeatureBytes)
	}
	return nil
}

// serveBatchStatus is GET /v1/batch/{id}, for the job's owner only: from
// this instance's memory while it runs the job, else from the job store.
func (g *Gateway) serveBatchStatus(w http.ResponseWriter, r *http.Request) {
	caller := &Turn{}
	if err := g.authenticate(r, "", caller); err != nil {
		writeError(w, err)
		return
	}
	id := r.PathValue("id")
	job, expired := g.batches.get(id, caller.UserID, g.now())
	if job != nil {
		job.mu.Lock()
		defer job.mu.Unlock()
		writeJSON(w, http.StatusOK, job)
		return
	}
	var err error
	if !expired {
		job, err = g.batches.load(r.Context(), id, caller.UserID)
	}
	switch {
	case err != nil:
		g.log.Warn("batch status unreadable", "job", id, "err", err)
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: 5 * time.Second, Err: err,
			Message: "The batch job store cannot be reached right now; ask for the job's status again shortly."})
	case job == nil:
		writeError(w, &Error{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("You have no batch job with that id (jobs are kept for %s after they finish).", g.Config().Batch.ResultTTL)})
	default:
		writeJSON(w, http.StatusOK, job)
	}
}

// startBatch runs job unless the gateway is draining; Drain waits for it.
func (g *Gateway) startBatch(job *batchJob, body batchBody, caller *Turn) error {
	g.turnsMu.RLock()
	defer g.turnsMu.RUnlock()
	if g.draining.Load() {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown,
			Message: "The gateway is restarting; submit the batch again shortly.", RetryAfter: 5 * time.Second}
	}
	g.batches.running.Add(1)
	go g.runBatch(g.batches.ctx, job, body, caller)
	return nil
}

// runBatch answers a job's messages, batchWorkers at a time, until they
// are all answered or ctx (the gateway's batch context) ends, saving the
// job's state as it goes and once more at its end.
func (g *Gateway) runBatch(ctx context.Context, job *batchJob, body batchBody, caller *Turn) {
	defer g.batches.running.Done()
	job.mu.Lock()
	job.Status, job.dirty = "running", true
	job.mu.Unlock()
	stopSaving := g.saveWhileRunning(job)
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(batchWorkers, len(body.Messages)) {
		wg.Go(func() {
			for i := range work {
				g.runBatchItem(ctx, job, i, body, caller)
			}
		})
	}
	for i := range body.Messages {
		work <- i
	}
	close(work)
	wg.Wait()
	stopSaving()
	job.mu.Lock()
	now := g.now().UTC()
	job.Status, job.Finished = "done", &now
	if job.Canceled > 0 {
		job.Status = "canceled"
	}
	job.mu.Unlock()
	// The final state is what every instance shows for the job's results'
	// lifetime: a failed save is tried again, a few times, before the job
	// is left to look canceled elsewhere.
	var err error
	for wait := time.Second; ; wait *= 2 {
		if err = g.batches.save(job); err == nil || wait > finalSaveWait {
			break
		}
		time.Sleep(wait)
	}
	if err != nil {
		g.log.Warn("batch job's final state not saved; other instances will show it canceled", "job", job.ID, "err", err)
	}
}

// saveWhileRunning saves job every jobSaveEvery while it changes, and every
// jobHeartbeat regardless, until the returned stop is called.
func (g *Gateway) saveWhileRunning(job *batchJob) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(jobSaveEvery)
		defer tick.Stop()
		last := g.now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			job.mu.Lock()
			due := job.dirty || g.now().Sub(last) >= jobHeartbeat
			job.mu.Unlock()
			if !due {
				continue
			}
			last = g.now()
			if err := g.batches.save(job); err != nil {
				g.log.Warn("batch job state not saved", "job", job.ID, "err", err)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (g *Gateway) runBatchItem(ctx context.Context, job *batchJob, i int, body batchBody, caller *Turn) {
	m := body.Messages[i]
	session := m.SessionID
	if session == "" {
		session = fmt.Sprintf("%s-%d", job.ID, i)
	}
	t := &Turn{
		RequestID: fmt.Sprintf("%s-%d", job.ID, i),
		SessionID: session,
		Message:   m.Message,
		Locale:    m.Locale,
		Route:     "batch",
		Surface:   "batch",
		Feature:   body.Feature,
		Priority:  P3,
	}
	t.SetCaller(caller)
	// Batch work is paced by the same rate limits as live chat: a refused
	// item waits as told and tries again, instead of failing the job.
	var (
		out *collector
		res *Result
		err error
	)
	for tries := 0; tries < 100; tries++ {
		if ctx.Err() != nil {
			break
		}
		out = &collector{}
		res, err = g.runBatchTurn(ctx, t, out)
		if !isRateLimited(err) {
			break
		}
		wait := time.NewTimer(asEdgeError(err).RetryAfter)
		select {
		case <-ctx.Done():
		case <-wait.C:
		}
		wait.Stop()
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	job.dirty = true
	switch {
	case res == nil && ctx.Err() != nil:
		job.Results[i] = batchResult{Index: i, Status: "canceled", Error: &errorJSON{Code: CodeShuttingDown,
			Message: "The gateway shut down before this message was answered; submit it again."}}
		job.Canceled++
	case err != nil:
		e := asEdgeError(err)
		job.Results[i] = batchResult{Index: i, Status: "failed", Error: &errorJSON{Code: e.Code, Message: e.Message, RetryAfterSeconds: e.RetryAfterSeconds()}}
		job.Failed++
	default:
		job.Results[i] = batchResult{Index: i, Status: "done", Text: out.text(), Tier: res.Tier, Degraded: res.Degraded, CostUSD: res.CostUSD}
		job.Completed++
	}
}

// runBatchTurn runs t once one of the batch turns' places is free; a turn
// whose job is cancelled while it waits ends as the turn would.
func (g *Gateway) runBatchTurn(ctx context.Context, t *Turn, out *collector) (*Result, error) {
	select {
	case g.batches.turns <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-g.batches.turns }()
	return g.Run(ctx, t, out)
}

// stopBatches cancels every batch turn; items not answered yet end canceled.
func (g *Gateway) stopBatches() { g.batches.cancel() }

func isRateLimited(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeRateLimited && e.RetryAfter > 0
}
