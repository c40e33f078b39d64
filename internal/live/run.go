package live

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// historyEntry is one snapshot of the history, with its JSON encoding so
// that every subscriber gets the same bytes without re-encoding.
type historyEntry struct {
	snap Snapshot
	enc  []byte
}

// historyRing keeps the last len(buf) snapshots.
type historyRing struct {
	buf   []historyEntry
	first int // index of the oldest entry
	n     int
}

func newHistoryRing(n int) historyRing { return historyRing{buf: make([]historyEntry, n)} }

func (h *historyRing) push(e historyEntry) {
	if h.n < len(h.buf) {
		h.buf[(h.first+h.n)%len(h.buf)] = e
		h.n++
		return
	}
	h.buf[h.first] = e
	h.first = (h.first + 1) % len(h.buf)
}

// each calls f on every entry, oldest first.
func (h *historyRing) each(f func(*historyEntry)) {
	for i := range h.n {
		f(&h.buf[(h.first+i)%len(h.buf)])
	}
}

// History returns the kept snapshots, oldest first (at most
// History/Interval of them).
func (a *Aggregator) History() []Snapshot {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	out := make([]Snapshot, 0, a.history.n)
	a.history.each(func(e *historyEntry) { out = append(out, e.snap) })
	return out
}

// subscriberBuffer is how many snapshots a subscriber may fall behind
// before frames are dropped for it.
const subscriberBuffer = 8

type subscriber struct {
	frames chan []byte
}

var (
	errOverloaded = errors.New("live: too many subscribers")
	errStopped    = errors.New("live: stopped")
)

// subscribe registers a subscriber and returns the encoded history at that
// moment: every later snapshot reaches the subscriber's channel, none is in
// both.
func (a *Aggregator) subscribe() (*subscriber, [][]byte, error) {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	if a.stopped {
		return nil, nil, errStopped
	}
	if len(a.subs) >= a.cfg.MaxSubscribers {
		return nil, nil, errOverloaded
	}
	s := &subscriber{frames: make(chan []byte, subscriberBuffer)}
	a.subs[s] = struct{}{}
	hist := make([][]byte, 0, a.history.n)
	a.history.each(func(e *historyEntry) { hist = append(hist, e.enc) })
	return s, hist, nil
}

func (a *Aggregator) unsubscribe(s *subscriber) {
	a.hmu.Lock()
	delete(a.subs, s)
	a.hmu.Unlock()
}

// Run computes a snapshot at once and then every Interval, appends it to
// the history and sends it to every subscriber; a subscriber still behind
// on earlier frames misses it (counted in Stats) rather than holding up the
// loop. Run returns nil when ctx is done; open streams then end. It may be
// called once.
func (a *Aggregator) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("live: Run called twice")
	}
	defer a.stop()
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		a.step(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *Aggregator) stop() {
	a.hmu.Lock()
	a.stopped = true
	a.hmu.Unlock()
	close(a.done)
}

// step is one tick of Run.
func (a *Aggregator) step(ctx context.Context) {
	a.publish(ctx)
	s := a.Snapshot(ctx)
	if ctx.Err() != nil { // stopping: the state read was cut short
		return
	}
	enc, err := json.Marshal(s)
	if err != nil { // cannot happen: add keeps every float finite
		return
	}
	a.hmu.Lock()
	defer a.hmu.Unlock()
	a.history.push(historyEntry{snap: s, enc: enc})
	for sub := range a.subs {
		select {
		case sub.frames <- enc:
		default:
			a.dropped.Add(1)
		}
	}
}
