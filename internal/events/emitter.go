package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Sink receives batches of finished events. Write is called from one
// goroutine per sink, never concurrently, with a deadline of
// Config.WriteTimeout. The batch slice is reused after Write returns and
// its events are read-only.
//
// A sink may also implement:
//   - Durable() bool: true for a store that must see every must-persist
//     event exactly once (the event store). It then receives WAL replays at
//     start and must deduplicate on Event.ID.
//   - io.Closer: called once by Emitter.Close after the last Write.
type Sink interface {
	Name() string
	Write(ctx context.Context, batch []Event) error
}

type durabler interface{ Durable() bool }

type item struct {
	ev  *Event
	seq uint64 // WAL sequence number; 0 when not in the WAL
}

// walItem is a must-persist event on its way into the log; written
// receives one value once its record is written to the log file (or the
// write failed).
type walItem struct {
	ev      *Event
	written chan struct{}
}

// walWait is what a must-persist Emit waits with; it is reused (walWaits)
// once its signal was received, so that the hot path allocates neither.
type walWait struct {
	written chan struct{} // capacity 1: the writer never blocks on it
	timer   *time.Timer
}

var walWaits sync.Pool

type sinkRunner struct {
	sink    Sink
	name    string
	durable bool
	q       chan item
	// full wakes the runner waiting out BatchWait once its batch would be
	// whole: room events queued (what its batch lacks while it waits, a
	// whole batch otherwise). While it waits, events are queued without
	// waking it.
	full chan struct{}
	room atomic.Int64

	written, dropped, failed atomic.Uint64
	// acked is the highest WAL seq this durable sink has acknowledged with
	// no gap below it; frozen stops it advancing after a must-persist event
	// was lost for this sink, which then gets it again by replay at the
	// next start.
	acked  atomic.Uint64
	frozen atomic.Bool
}

// Emitter fans finished events out to sinks in the background. Emit never
// fails and never waits for a sink: when a sink falls behind, its queue
// fills and further events are dropped for that sink only, and counted.
// With a WAL, Emit of a must-persist event waits until the event is in the
// log (see Emit).
type Emitter struct {
	cfg   Config
	log   *slog.Logger
	sinks []*sinkRunner

	wal      *wal // nil when Config.WAL.Dir is empty
	walq     chan walItem
	walExit  chan struct{} // closed when runWAL returns
	walErrs  atomic.Uint64
	walOver  atomic.Uint64
	walLate  atomic.Uint64
	walAppnd atomic.Uint64
	walSegs  atomic.Int64

	emitted   atomic.Uint64
	closed    atomic.Bool
	walDone   chan struct{}
	sinkDone  chan struct{}
	walWG     sync.WaitGroup
	sinkWG    sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New validates cfg, opens the WAL (when configured), replays the records
// not yet acknowledged by each durable sink, and starts the dispatcher.
// ctx bounds only the replay. log may be nil.
func New(ctx context.Context, cfg Config, sinks []Sink, log *slog.Logger) (*Emitter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("events: config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Emitter{
		cfg:      cfg,
		log:      log,
		walDone:  make(chan struct{}),
		sinkDone: make(chan struct{}),
	}
	seen := map[string]bool{}
	for _, s := range sinks {
		if seen[s.Name()] {
			return nil, fmt.Errorf("events: two sinks named %q", s.Name())
		}
		seen[s.Name()] = true
		r := &sinkRunner{sink: s, name: s.Name(), q: make(chan item, cfg.BufferSize), full: make(chan struct{}, 1)}
		r.room.Store(int64(cfg.BatchSize))
		if d, ok := s.(durabler); ok && d.Durable() {
			r.durable = true
		}
		e.sinks = append(e.sinks, r)
	}
	if cfg.WAL.Dir != "" {
		w, recs, err := openWAL(cfg.WAL.Dir, cfg.WAL.SegmentBytes)
		if err != nil {
			return nil, err
		}
		e.wal = w
		e.walq = make(chan walItem, cfg.BufferSize)
		e.walExit = make(chan struct{})
		e.replay(ctx, recs)
		if err := w.compact(e.minAck(), time.Time{}); err != nil {
			log.Warn("events: wal compaction", "err", err)
		}
		e.walSegs.Store(int64(w.segmentCount()))
		e.walWG.Add(1)
		go e.runWAL()
	}
	for _, r := range e.sinks {
		e.sinkWG.Add(1)
		go e.runSink(r)
	}
	return e, nil
}

// replay hands each durable sink the WAL records above its ack, in order.
func (e *Emitter) replay(ctx context.Context, recs []walRecord) {
	for _, r := range e.sinks {
		if !r.durable {
			continue
		}
		from := e.wal.acks[r.name]
		r.acked.Store(from)
		var batch []Event
		var last uint64
		flush := func() bool {
			if len(batch) == 0 {
				return true
			}
			wctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
			err := r.sink.Write(wctx, batch)
			cancel()
			if err != nil {
				e.log.Warn("events: wal replay failed; will retry at next start", "sink", r.name, "err", err)
				r.failed.Add(1)
				r.frozen.Store(true)
				return false
			}
			r.written.Add(uint64(len(batch)))
			r.acked.Store(last)
			e.wal.setAck(r.name, last)
			batch = batch[:0]
			return true
		}
		ok := true
		for _, rec := range recs {
			if rec.seq <= from {
				continue
			}
			batch = append(batch, rec.ev)
			last = rec.seq
			if len(batch) >= e.cfg.BatchSize {
				if ok = flush(); !ok {
					break
				}
			}
		}
		if ok {
			flush()
		}
		// New records get numbers above everything on disk; acknowledging
		// them must not skip a record another segment still holds.
		if ok && r.acked.Load() < e.wal.next-1 {
			r.acked.Store(e.wal.next - 1)
			e.wal.setAck(r.name, e.wal.next-1)
		}
	}
}

// minAck is the lowest acknowledgement among durable sinks: everything at
// or below it may be deleted. With no durable sink the WAL only bridges a
// crash between append and hand-off, so every written record counts.
func (e *Emitter) minAck() uint64 {
	m := e.wal.next - 1
	for _, r := range e.sinks {
		if r.durable {
			m = min(m, r.acked.Load())
		}
	}
	return m
}

// Emit queues ev for every sink. Emit after Close is a no-op.
//
// A must-persist event (cost and quota records) goes to the WAL first when
// one is configured, and Emit returns only once its record is written to
// the log file: whatever the caller does next — answering the client —
// happens after the record would survive the process being killed. The
// fsync against a power loss follows within WALConfig.FsyncInterval, shared
// by every record written since. Concurrent callers share one write. Emit waits at most Config.WriteTimeout; past it, or when
// the log's intake queue stays full, the event is delivered without the
// guarantee and counted (WALStats.Late, WALStats.Overflow). Any other event
// is queued and Emit returns at once.
func (e *Emitter) Emit(ev Event) { e.emit(&ev) }

// emit is Emit of an event nothing writes any more.
func (e *Emitter) emit(p *Event) {
	if e == nil || e.closed.Load() {
		return
	}
	e.emitted.Add(1)
	if p.MustPersist && e.wal != nil {
		if e.persist(p) {
			return
		}
		// The log cannot keep up; delivering without it beats losing
		// the event outright.
		e.walOver.Add(1)
	}
	e.fanout(p, 0)
}

// persist hands p to the WAL writer and waits, at most WriteTimeout in
// all, until its record is in the log file. It reports false when p never made it
// into the log (queue full, or the log closed first); the caller then
// delivers p without it.
func (e *Emitter) persist(p *Event) bool {
	w, _ := walWaits.Get().(*walWait)
	if w == nil {
		w = &walWait{written: make(chan struct{}, 1), timer: time.NewTimer(e.cfg.WriteTimeout)}
	} else {
		w.timer.Reset(e.cfg.WriteTimeout)
	}
	// reuse returns w to the pool, only when no signal can still come for
	// it: a late one would reach the next Emit.
	reuse := func() {
		w.timer.Stop()
		walWaits.Put(w)
	}
	select {
	case e.walq <- walItem{ev: p, written: w.written}:
	case <-w.timer.C:
		reuse() // never queued
		return false
	case <-e.walExit:
		reuse()
		return false
	}
	select {
	case <-w.written:
		reuse()
	case <-w.timer.C:
		e.walLate.Add(1) // its signal may still come: w is not reused
	case <-e.walExit:
		// Close raced with this Emit: the writer may have stopped before
		// taking p from the queue.
		select {
		case <-w.written:
			reuse()
		default:
			w.timer.Stop()
			return false
		}
	}
	return true
}

func (e *Emitter) fanout(p *Event, seq uint64) {
	for _, r := range e.sinks {
		select {
		case r.q <- item{ev: p, seq: seq}:
			if int64(len(r.q)) >= r.room.Load() {
				select {
				case r.full <- struct{}{}:
				default: // already woken
				}
			}
		default:
			r.dropped.Add(1)
			if seq != 0 && r.durable {
				r.frozen.Store(true)
			}
		}
	}
}

// runWAL writes must-persist events to the log as they come (group commit:
// everything waiting when a write starts shares its fsync), releases their
// Emit calls, then hands them to the sinks with their sequence numbers.
// Every FsyncInterval it persists the sinks' acknowledgements and deletes
// acknowledged segments.
func (e *Emitter) runWAL() {
	defer e.walWG.Done()
	defer close(e.walExit)
	t := time.NewTicker(e.cfg.WAL.FsyncInterval)
	defer t.Stop()
	pending := make([]walItem, 0, e.cfg.WAL.Batch)
	seqs := make([]uint64, 0, e.cfg.WAL.Batch)
	// Records are written to the file before their Emit returns, so a
	// killed process loses none; the fsync that guards them against a power
	// loss runs every FsyncInterval, for all records written since, on a
	// goroutine of its own: a turn waiting for its record to be written
	// never waits for a disk flush too.
	syncFailed := func(err error) {
		e.walErrs.Add(1)
		e.log.Error("events: wal fsync failed", "err", err)
	}
	// The syncer fsyncs the active segment when asked (syncs) and fsyncs
	// and closes each segment rotated away (retired): a rotation's fsync,
	// which can take a slow disk hundreds of milliseconds, never holds up
	// the writes turns wait on. A full retired queue (a disk that far
	// behind) makes the rotation wait.
	syncs := make(chan *os.File, 1)
	retired := make(chan *os.File, 4)
	var syncer sync.WaitGroup
	syncer.Go(func() {
		syncs, retired := syncs, retired
		for syncs != nil || retired != nil {
			select {
			case f, ok := <-syncs:
				if !ok {
					syncs = nil
					continue
				}
				// A segment rotated away meanwhile may be closed already:
				// its own fsync came first.
				if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
					syncFailed(err)
				}
			case f, ok := <-retired:
				if !ok {
					retired = nil
					continue
				}
				if err := f.Sync(); err != nil {
					syncFailed(err)
				}
				if err := f.Close(); err != nil {
					syncFailed(err)
				}
			}
		}
	})
	defer syncer.Wait()
	e.wal.retire = func(f *os.File) { retired <- f }
	defer func() {
		e.wal.retire = nil
		close(syncs)
		close(retired)
	}()
	unsynced := false
	fsync := func() {
		if !unsynced {
			return
		}
		select {
		case syncs <- e.wal.f:
			unsynced = false
		default: // the last fsync is still running: the next tick retries
		}
	}
	flush := func() {
		if len(pending) == 0 {
			return
		}
		seqs = seqs[:0]
		var err error
		for _, it := range pending {
			seq, aerr := e.wal.append(it.ev)
			err = cmp.Or(err, aerr)
			seqs = append(seqs, seq)
		}
		if err == nil {
			err = e.wal.write()
		}
		if err != nil {
			e.walErrs.Add(1)
			e.log.Error("events: wal write failed; must-persist events delivered without it", "err", err)
			clear(seqs) // not on disk: nothing to acknowledge
		} else {
			e.walAppnd.Add(uint64(len(pending)))
			unsynced = true
		}
		for _, it := range pending {
			it.written <- struct{}{}
		}
		for i, it := range pending {
			e.fanout(it.ev, seqs[i])
		}
		clear(pending)
		pending = pending[:0]
	}
	// gather adds what else is waiting, up to a batch, to the next write.
	gather := func() {
		for len(pending) < e.cfg.WAL.Batch {
			select {
			case it := <-e.walq:
				pending = append(pending, it)
			default:
				return
			}
		}
	}
	compact := func() {
		for _, r := range e.sinks {
			if r.durable {
				e.wal.setAck(r.name, r.acked.Load())
			}
		}
		if err := e.wal.compact(e.minAck(), time.Now()); err != nil {
			e.log.Warn("events: wal compaction", "err", err)
		}
		e.walSegs.Store(int64(e.wal.segmentCount()))
	}
	for {
		select {
		case it := <-e.walq:
			pending = append(pending, it)
			gather()
			flush()
		case <-t.C:
			fsync()
			compact()
		case <-e.walDone:
			for {
				gather()
				if len(pending) == 0 {
					if unsynced {
						if err := e.wal.sync(); err != nil {
							syncFailed(err)
						}
					}
					return
				}
				flush()
			}
		}
	}
}

func (e *Emitter) runSink(r *sinkRunner) {
	defer e.sinkWG.Done()
	batch := make([]Event, 0, e.cfg.BatchSize)
	var maxSeq uint64
	take := func(it item) {
		batch = append(batch, *it.ev)
		maxSeq = max(maxSeq, it.seq)
	}
	flush := func() {
		e.write(r, batch, maxSeq)
		clear(batch)
		batch, maxSeq = batch[:0], 0
	}
	// gather takes what is queued, then waits BatchWait at most for more,
	// up to a full batch; it reports false once Close began. It waits on
	// its timer alone, not on the queue: an event arriving meanwhile is
	// queued without waking the runner (which cost a goroutine wake per
	// event and sink), and a batch that would be whole wakes it early
	// (full).
	var timer *time.Timer
	drain := func() {
		for len(batch) < e.cfg.BatchSize {
			select {
			case it := <-r.q:
				take(it)
			default:
				return
			}
		}
	}
	gather := func() bool {
		drain()
		if e.cfg.BatchWait <= 0 || len(batch) >= e.cfg.BatchSize {
			return true
		}
		if timer == nil {
			timer = time.NewTimer(e.cfg.BatchWait)
		} else {
			timer.Reset(e.cfg.BatchWait)
		}
		defer timer.Stop()
		need := e.cfg.BatchSize - len(batch)
		r.room.Store(int64(need))
		defer r.room.Store(int64(e.cfg.BatchSize))
	wait:
		for len(r.q) < need {
			select {
			case <-r.full:
				// A wake meant for an earlier wait (its room) is ignored
				// by the loop's test.
			case <-timer.C:
				break wait
			case <-e.sinkDone:
				return false
			}
		}
		drain()
		return true
	}
	for {
		select {
		case it := <-r.q:
			take(it)
			if gather() {
				flush()
				continue
			}
		case <-e.sinkDone:
		}
		// Closing: write everything still queued, then stop.
		for {
			select {
			case it := <-r.q:
				take(it)
				if len(batch) < e.cfg.BatchSize {
					continue
				}
			default:
			}
			if len(batch) == 0 {
				return
			}
			flush()
		}
	}
}

// write hands one batch to a sink. A failure is counted and logged, never
// returned to a turn; durable sinks get a few retries first because the
// batch may hold cost records.
func (e *Emitter) write(r *sinkRunner, batch []Event, maxSeq uint64) {
	attempts := 1
	if r.durable {
		attempts = 3
	}
	var err error
	for i := range attempts {
		if i > 0 {
			select {
			case <-time.After(time.Duration(i) * 100 * time.Millisecond):
			case <-e.sinkDone:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.WriteTimeout)
		err = r.sink.Write(ctx, batch)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		r.failed.Add(1)
		r.dropped.Add(uint64(len(batch)))
		if maxSeq != 0 {
			r.frozen.Store(true)
		}
		e.log.Warn("events: sink write failed", "sink", r.name, "events", len(batch), "err", err)
		return
	}
	r.written.Add(uint64(len(batch)))
	if maxSeq != 0 && r.durable && !r.frozen.Load() {
		r.acked.Store(maxSeq)
	}
}

// Stats is a snapshot of the Emitter's counters.
type Stats struct {
	// Emitted counts events accepted by Emit.
	Emitted uint64
	WAL     WALStats
	// Sinks is keyed by Sink.Name.
	Sinks map[string]SinkStats
}

// WALStats counts the write-ahead log's work.
type WALStats struct {
	Appended uint64 // records written to the log
	Errors   uint64 // failed write or fsync batches
	Overflow uint64 // must-persist events sent past a full WAL queue
	// Late counts must-persist Emits that returned after WriteTimeout,
	// before their record was on disk.
	Late     uint64
	Segments int // segment files on disk
}

// SinkStats counts one sink's work.
type SinkStats struct {
	Written uint64 // events accepted by Write
	Dropped uint64 // events lost: queue full or Write failed
	Failed  uint64 // failed Write calls
	Queued  int    // events waiting now
	Durable bool
	// Behind is true for a durable sink that lost a must-persist event; it
	// gets it back by replay at the next start.
	Behind bool
}

// Stats returns the current counters.
func (e *Emitter) Stats() Stats {
	s := Stats{
		Emitted: e.emitted.Load(),
		WAL: WALStats{
			Appended: e.walAppnd.Load(),
			Errors:   e.walErrs.Load(),
			Overflow: e.walOver.Load(),
			Late:     e.walLate.Load(),
			Segments: int(e.walSegs.Load()),
		},
		Sinks: make(map[string]SinkStats, len(e.sinks)),
	}
	for _, r := range e.sinks {
		s.Sinks[r.name] = SinkStats{
			Written: r.written.Load(),
			Dropped: r.dropped.Load(),
			Failed:  r.failed.Load(),
			Queued:  len(r.q),
			Durable: r.durable,
			Behind:  r.frozen.Load(),
		}
	}
	return s
}

// Close stops accepting events, writes the WAL and drains every sink queue,
// then closes the sinks. It returns ctx's error if draining outlasts ctx
// (the drain then finishes in the background).
func (e *Emitter) Close(ctx context.Context) error {
	return e.shutdown(ctx, true)
}

// shutdown with ack=false leaves the acknowledgements and WAL files as a
// crash would, which tests use to exercise replay.
func (e *Emitter) shutdown(ctx context.Context, ack bool) error {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		close(e.walDone)
		done := make(chan struct{})
		go func() {
			e.walWG.Wait()
			close(e.sinkDone)
			e.sinkWG.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-ctx.Done():
			e.closeErr = fmt.Errorf("events: close: %w", ctx.Err())
			return
		}
		var errs []error
		if e.wal != nil {
			if ack {
				for _, r := range e.sinks {
					if r.durable {
						e.wal.setAck(r.name, r.acked.Load())
					}
				}
				errs = append(errs, e.wal.close(e.minAck()))
			} else {
				// As a crash leaves it: nothing acknowledged, and, like a
				// dead process, no lock held.
				errs = append(errs, e.wal.sync(), e.wal.f.Close())
				e.wal.unlock()
			}
		}
		for _, r := range e.sinks {
			if c, ok := r.sink.(io.Closer); ok {
				if err := c.Close(); err != nil {
					errs = append(errs, fmt.Errorf("events: close sink %s: %w", r.name, err))
				}
			}
		}
		e.closeErr = errors.Join(errs...)
	})
	return e.closeErr
}
