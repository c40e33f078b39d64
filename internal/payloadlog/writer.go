package payloadlog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a payload was lost, for fmgate_payload_log_dropped_total.
const (
	// DropQueueFull: the queue was full when the turn handed it over.
	DropQueueFull = "queue_full"
	// DropWriteFailed: its batch failed twice, or outlasted WriteTimeout.
	DropWriteFailed = "write_failed"
	// DropShutdown: the gateway stopped before it was written.
	DropShutdown = "shutdown"
)

// writeBatch is the most payloads written in one transaction.
const writeBatch = 64

// Writer writes payloads off the turn's path: Keep queues one without
// waiting, and one goroutine writes what is queued in batches, each under
// a deadline, tried twice. Every payload it takes is written or counted
// as dropped by reason.
type Writer struct {
	log     *Log
	timeout time.Duration
	logger  *slog.Logger
	now     func() time.Time

	mu     sync.RWMutex // guards closed against Keep's send
	closed bool
	q      chan Record

	ctx    context.Context // cancelled when Close gives up waiting
	cancel context.CancelFunc
	done   chan struct{}

	written, full, failed, shutdown atomic.Uint64
	pending                         atomic.Int64 // taken, not yet written or dropped
	lastWarn                        atomic.Int64 // unix nanos of the last failure logged
	failuresSinceWarn               atomic.Uint64
}

// NewWriter starts the writer of l with a queue of queue payloads and
// batches bounded by timeout. logger (nil: none) hears of failed writes,
// at most one line every ten seconds.
func NewWriter(l *Log, queue int, timeout time.Duration, logger *slog.Logger) *Writer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{log: l, timeout: timeout, logger: logger, now: time.Now, q: make(chan Record, queue), done: make(chan struct{})}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	go w.run()
	return w
}

// Keep queues r and reports whether it was taken; it never waits.
func (w *Writer) Keep(r Record) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.shutdown.Add(1)
		return false
	}
	select {
	case w.q <- r:
		w.pending.Add(1)
		return true
	default:
		w.full.Add(1)
		return false
	}
}

func (w *Writer) run() {
	defer close(w.done)
	batch := make([]Record, 0, writeBatch)
	for r := range w.q {
		batch = append(batch[:0], r)
	more:
		for len(batch) < writeBatch {
			select {
			case r, ok := <-w.q:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		w.write(batch)
		w.pending.Add(-int64(len(batch)))
	}
}

// write stores a batch, trying twice; a batch that cannot be written is
// counted as dropped.
func (w *Writer) write(batch []Record) {
	var err error
	for attempt := range 2 {
		if w.ctx.Err() != nil {
			w.shutdown.Add(uint64(len(batch)))
			return
		}
		if attempt > 0 {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-w.ctx.Done():
			}
		}
		ctx, cancel := context.WithTimeout(w.ctx, w.timeout)
		err = w.log.Put(ctx, batch)
		cancel()
		if err == nil {
			w.written.Add(uint64(len(batch)))
			return
		}
	}
	if w.ctx.Err() != nil {
		w.shutdown.Add(uint64(len(batch)))
		return
	}
	w.failed.Add(uint64(len(batch)))
	n := w.failuresSinceWarn.Add(uint64(len(batch)))
	now := w.now().UnixNano()
	if last := w.lastWarn.Load(); now-last >= int64(10*time.Second) && w.lastWarn.CompareAndSwap(last, now) {
		w.failuresSinceWarn.Store(0)
		w.logger.Warn("payload log: payloads not written (counted in fmgate_payload_log_dropped_total)", "payloads", n, "err", err)
	}
}

// Close stops taking payloads and writes those queued, until ctx ends;
// those still queued then are counted as dropped (shutdown).
func (w *Writer) Close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.q)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
	}
	w.cancel() // the write in progress ends; the rest are counted
	<-w.done
	return ctx.Err()
}

// Stats are a writer's counts since it started.
type Stats struct {
	// Written payloads; Queued waiting or being written.
	Written uint64 `json:"written"`
	Queued  int64  `json:"queued"`
	// Dropped by reason (DropQueueFull, DropWriteFailed, DropShutdown).
	Dropped map[string]uint64 `json:"dropped"`
}

// Stats returns the writer's counts.
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Queued: w.pending.Load(), Dropped: map[string]uint64{
		DropQueueFull: w.full.Load(), DropWriteFailed: w.failed.Load(), DropShutdown: w.shutdown.Load()}}
}
