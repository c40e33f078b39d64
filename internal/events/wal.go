package events

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// The WAL is a directory of append-only JSONL segments
// ("wal-<first seq>.jsonl", one {"seq":N,"event":{…}} per line) and
// "acks.json", the highest sequence number each durable sink has
// acknowledged. A sequence number is acknowledged only when every lower one
// reached that sink too, so replaying everything above it is enough.
//
// Sequence numbers only grow, across restarts too: a clean stop deletes
// every segment, so the next number is also derived from the
// acknowledgements — numbering again from 1 would put new records at or
// below an acknowledgement, and a replay would skip them. The log only ever
// appends to a segment it created itself: a segment left by a crash is
// read, replayed and eventually deleted, never reopened, so a record is
// never glued onto a torn last line.

const (
	walPrefix = "wal-"
	walSuffix = ".jsonl"
	acksFile  = "acks.json"
)

type walSegment struct {
	path string
	last uint64 // highest seq in the segment; 0 when empty
}

type walRecord struct {
	seq uint64
	ev  Event
}

type wal struct {
	dir      string
	segBytes int64

	closed []walSegment // older segments, oldest first
	f      *os.File
	w      *bufio.Writer
	active walSegment
	size   int64
	next   uint64 // next sequence number to assign

	acks      map[string]uint64
	acksDirty bool
	acksAt    time.Time // when the acknowledgements were last persisted
	// retire, when set, takes a rotated segment's file to fsync and close
	// it; nil does both in rotate.
	retire func(*os.File)
	buf    []byte

	lock *os.File // held while the log is open (lockDir)
}

// openWAL reads every segment in dir, returns the records found (a torn
// last line from a crash is skipped), deletes segments without a single
// whole record, and starts a fresh active segment.
func openWAL(dir string, segBytes int64) (w *wal, recs []walRecord, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, fmt.Errorf("events: wal: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil && lock != nil {
			lock.Close()
		}
	}()
	w = &wal{dir: dir, segBytes: segBytes, next: 1, acks: map[string]uint64{}, lock: lock}
	if b, err := os.ReadFile(filepath.Join(dir, acksFile)); err == nil {
		if err := json.Unmarshal(b, &w.acks); err != nil {
			return nil, nil, fmt.Errorf("events: wal: %s: %w", acksFile, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("events: wal: %w", err)
	}
	for _, a := range w.acks {
		w.next = max(w.next, a+1)
	}
	names, err := filepath.Glob(filepath.Join(dir, walPrefix+"*"+walSuffix))
	if err != nil {
		return nil, nil, fmt.Errorf("events: wal: %w", err)
	}
	slices.Sort(names) // zero-padded sequence numbers sort numerically
	for _, name := range names {
		seg, rs, err := readSegment(name)
		if err != nil {
			return nil, nil, err
		}
		if len(rs) == 0 {
			// Created just before a crash, or holding only a torn record:
			// nothing to replay, and its name may be the next segment's.
			if err := os.Remove(name); err != nil {
				return nil, nil, fmt.Errorf("events: wal: %w", err)
			}
			continue
		}
		recs = append(recs, rs...)
		w.closed = append(w.closed, seg)
		if seg.last >= w.next {
			w.next = seg.last + 1
		}
	}
	if err := w.rotate(); err != nil {
		return nil, nil, err
	}
	return w, recs, nil
}

func readSegment(name string) (walSegment, []walRecord, error) {
	f, err := os.Open(name)
	if err != nil {
		return walSegment{}, nil, fmt.Errorf("events: wal: %w", err)
	}
	defer f.Close()
	seg := walSegment{path: name}
	var recs []walRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var line struct {
			Seq   uint64          `json:"seq"`
			Event json.RawMessage `json:"event"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Seq == 0 {
			continue // torn write at a crash
		}
		ev, err := Decode(line.Event)
		if err != nil {
			continue
		}
		recs = append(recs, walRecord{seq: line.Seq, ev: ev})
		seg.last = max(seg.last, line.Seq)
	}
	if err := sc.Err(); err != nil {
		return walSegment{}, nil, fmt.Errorf("events: wal: read %s: %w", name, err)
	}
	return seg, recs, nil
}

// rotate closes the active segment (if any) and opens a new one.
func (w *wal) rotate() error {
	if w.f != nil {
		if w.retire != nil {
			// The segment's records go to the operating system now; its
			// fsync and close happen off the writer, which turns wait on.
			if err := w.write(); err != nil {
				return err
			}
			w.retire(w.f)
		} else {
			if err := w.sync(); err != nil {
				return err
			}
			if err := w.f.Close(); err != nil {
				return fmt.Errorf("events: wal: %w", err)
			}
		}
		w.closed = append(w.closed, w.active)
	}
	path := filepath.Join(w.dir, fmt.Sprintf("%s%020d%s", walPrefix, w.next, walSuffix))
	// O_EXCL: every segment on disk holds only numbers below w.next, so the
	// name is new; appending to an old file would be a bug.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("events: wal: %w", err)
	}
	w.f, w.w, w.size = f, bufio.NewWriterSize(f, 64<<10), 0
	w.active = walSegment{path: path}
	return nil
}

// append buffers one record and returns its sequence number. It is durable
// only after sync.
func (w *wal) append(e *Event) (uint64, error) {
	seq := w.next
	b := append(w.buf[:0], `{"seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"event":`...)
	b = AppendJSON(b, e)
	b = append(b, "}\n"...)
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return 0, fmt.Errorf("events: wal: %w", err)
	}
	w.next++
	w.size += int64(len(b))
	w.active.last = seq
	return seq, nil
}

// write hands everything appended so far to the operating system: from
// then on it survives the process being killed, though not yet a power
// loss (see sync).
func (w *wal) write() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("events: wal: %w", err)
	}
	return nil
}

func (w *wal) sync() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("events: wal: %w", err)
	}
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("events: wal: fsync: %w", err)
	}
	return nil
}

// setAck records that sink acknowledged everything up to seq.
func (w *wal) setAck(sink string, seq uint64) {
	if seq > w.acks[sink] {
		w.acks[sink] = seq
		w.acksDirty = true
	}
}

// ackEvery is how often the acknowledgements are persisted while the log
// runs: a crash replays at most this much of what the sinks already had
// (they take a replayed record as the same record), and the log is spared
// a file written and renamed at every fsync.
const ackEvery = time.Second

// compact persists the acks (at most every ackEvery, and always before a
// segment is deleted or the log closes) and deletes segments every durable
// sink has acknowledged; minAck is the lowest ack among them. The active
// segment is rotated once it exceeds segBytes. now is the time, or zero to
// persist the acks whatever their age.
func (w *wal) compact(minAck uint64, now time.Time) error {
	var errs []error
	deletes := slices.ContainsFunc(w.closed, func(s walSegment) bool { return s.last <= minAck })
	if w.acksDirty && (now.IsZero() || deletes || now.Sub(w.acksAt) >= ackEvery) {
		if err := w.writeAcks(); err != nil {
			errs = append(errs, err)
			deletes = false // keep the segments the persisted acks do not cover
		} else {
			w.acksDirty, w.acksAt = false, now
		}
	}
	if w.f != nil && w.size >= w.segBytes {
		if err := w.rotate(); err != nil {
			errs = append(errs, err)
		}
	}
	kept := w.closed[:0]
	for _, s := range w.closed {
		if deletes && s.last <= minAck {
			if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("events: wal: %w", err))
				kept = append(kept, s)
			}
			continue
		}
		kept = append(kept, s)
	}
	w.closed = kept
	return errors.Join(errs...)
}

func (w *wal) writeAcks() error {
	b, err := json.Marshal(w.acks)
	if err != nil {
		return fmt.Errorf("events: wal: %w", err)
	}
	tmp := filepath.Join(w.dir, acksFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o640); err != nil {
		return fmt.Errorf("events: wal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(w.dir, acksFile)); err != nil {
		return fmt.Errorf("events: wal: %w", err)
	}
	return nil
}

// close syncs and closes the active segment, deleting it when everything in
// it is acknowledged so a clean shutdown leaves an empty log.
func (w *wal) close(minAck uint64) error {
	defer w.unlock()
	err := w.sync()
	if cerr := w.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("events: wal: %w", cerr)
	}
	w.f = nil
	w.closed = append(w.closed, w.active)
	if err != nil {
		return err
	}
	return w.compact(minAck, time.Time{})
}

// unlock releases the log's directory for another process.
func (w *wal) unlock() {
	if w.lock != nil {
		_ = w.lock.Close()
		w.lock = nil
	}
}

// segmentCount is the number of segment files the log holds.
func (w *wal) segmentCount() int {
	n := len(w.closed)
	if w.f != nil {
		n++
	}
	return n
}
