package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Batch jobs run many messages through the same pipeline at priority P3, so
// they pause first when quota saturates while live chat keeps flowing.

const (
	maxBatchMessages = 1000
	batchWorkers     = 4
	batchKeep        = time.Hour
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
	ID        string        `json:"jobId"`
	Status    string        `json:"status"` // queued, running, done
	Priority  string        `json:"priority"`
	Total     int           `json:"total"`
	Completed int           `json:"completed"`
	Failed    int           `json:"failed"`
	Created   time.Time     `json:"createdAt"`
	Finished  *time.Time    `json:"finishedAt,omitempty"`
	Results   []batchResult `json:"results"`
}

type batchResult struct {
	Index    int        `json:"index"`
	Status   string     `json:"status"` // pending, done, failed
	Text     string     `json:"text,omitempty"`
	Tier     string     `json:"tier,omitempty"`
	Degraded bool       `json:"degraded,omitempty"`
	CostUSD  float64    `json:"costUsd,omitempty"`
	Error    *errorJSON `json:"error,omitempty"`
}

type batchJobs struct {
	mu   sync.Mutex
	jobs map[string]*batchJob
}

func (b *batchJobs) put(j *batchJob, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.jobs == nil {
		b.jobs = make(map[string]*batchJob)
	}
	for id, old := range b.jobs {
		old.mu.Lock()
		expired := old.Finished != nil && now.Sub(*old.Finished) > batchKeep
		old.mu.Unlock()
		if expired {
			delete(b.jobs, id)
		}
	}
	b.jobs[j.ID] = j
}

func (b *batchJobs) get(id string) *batchJob {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.jobs[id]
}

// serveBatch is POST /v1/batch: it accepts the job and answers 202 with its id.
func (g *Gateway) serveBatch(w http.ResponseWriter, r *http.Request) {
	if !g.Ready() {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown,
			Message: "The gateway is restarting; submit the batch again shortly.", RetryAfter: 5 * time.Second})
		return
	}
	var body batchBody
	limit := int64(g.cfg.Server.MaxMessageBytes+512) * maxBatchMessages
	data, err := readLimited(r, limit)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := decodeStrict(data, &body); err != nil {
		writeError(w, err)
		return
	}
	switch n := len(body.Messages); {
	case n == 0:
		writeError(w, invalid("messages must hold at least one message"))
		return
	case n > maxBatchMessages:
		writeError(w, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
			Message: fmt.Sprintf("a batch holds at most %d messages; got %d", maxBatchMessages, n)})
		return
	}
	caller := &Turn{}
	if err := g.authenticate(r, "", caller); err != nil {
		writeError(w, err)
		return
	}
	job := &batchJob{ID: "b-" + newID(), Status: "queued", Priority: P3.String(), Total: len(body.Messages),
		Created: g.now().UTC(), Results: make([]batchResult, len(body.Messages))}
	for i := range job.Results {
		job.Results[i] = batchResult{Index: i, Status: "pending"}
	}
	g.batches.put(job, g.now())
	accepted := map[string]any{"jobId": job.ID, "status": job.Status, "total": job.Total, "statusUrl": "/v1/batch/" + job.ID}
	go g.runBatch(job, body, caller)
	w.Header().Set("Location", "/v1/batch/"+job.ID)
	writeJSON(w, http.StatusAccepted, accepted)
}

// serveBatchStatus is GET /v1/batch/{id}.
func (g *Gateway) serveBatchStatus(w http.ResponseWriter, r *http.Request) {
	job := g.batches.get(r.PathValue("id"))
	if job == nil {
		writeError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no batch job with that id (jobs are kept for an hour after they finish)"})
		return
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	writeJSON(w, http.StatusOK, job)
}

func (g *Gateway) runBatch(job *batchJob, body batchBody, caller *Turn) {
	job.mu.Lock()
	job.Status = "running"
	job.mu.Unlock()
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(batchWorkers, len(body.Messages)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				g.runBatchItem(job, i, body, caller)
			}
		}()
	}
	for i := range body.Messages {
		work <- i
	}
	close(work)
	wg.Wait()
	job.mu.Lock()
	now := g.now().UTC()
	job.Status, job.Finished = "done", &now
	job.mu.Unlock()
}

func (g *Gateway) runBatchItem(job *batchJob, i int, body batchBody, caller *Turn) {
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
		UserID:    caller.UserID,
		Premium:   caller.Premium,
		Priority:  P3,
	}
	// Batch work is paced by the same rate limits as live chat: a refused
	// item waits as told and tries again, instead of failing the job.
	out := &collector{}
	res, err := g.Run(context.Background(), t, out)
	for tries := 0; tries < 100 && isRateLimited(err); tries++ {
		time.Sleep(asEdgeError(err).RetryAfter)
		out = &collector{}
		res, err = g.Run(context.Background(), t, out)
	}
	job.mu.Lock()
	defer job.mu.Unlock()
	if err != nil {
		e := asEdgeError(err)
		job.Results[i] = batchResult{Index: i, Status: "failed", Error: &errorJSON{Code: e.Code, Message: e.Message, RetryAfterSeconds: e.RetryAfterSeconds()}}
		job.Failed++
		return
	}
	job.Results[i] = batchResult{Index: i, Status: "done", Text: out.text(), Tier: res.Tier, Degraded: res.Degraded, CostUSD: res.CostUSD}
	job.Completed++
}

func isRateLimited(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == CodeRateLimited && e.RetryAfter > 0
}
