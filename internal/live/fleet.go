package live

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Fleet shares the live windows of a fleet's instances, so that every
// instance's snapshot shows the whole fleet. Each instance publishes its
// own window every Interval with a time to live; an instance that stops
// publishing drops out of the view when its window expires.
type Fleet interface {
	// Publish stores w (w.Instance is the key) for ttl.
	Publish(ctx context.Context, w Window, ttl time.Duration) error
	// Windows returns every instance's window that has not expired.
	Windows(ctx context.Context) ([]Window, error)
}

// Window is one instance's live window in a mergeable form: counters and
// histograms, never percentiles (percentiles of parts cannot be merged; the
// histograms can, exactly as the buckets of one window are).
type Window struct {
	Instance string    `json:"instance"`
	At       time.Time `json:"at"`
	Seconds  int       `json:"seconds"`
	Turns    int64     `json:"turns"`
	Failed   int64     `json:"failed"`
	// Errs counts failed turns by error code, Tiers turns by serving tier,
	// Tokens model tokens by model.
	Errs   map[string]int64 `json:"errs"`
	Tiers  map[string]int64 `json:"tiers"`
	Tokens map[string]int64 `json:"tokens"`
	Cost   float64          `json:"cost"`
	Lat    Hist             `json:"lat"`
	TTFT   Hist             `json:"ttft"`
}

// Hist is a latency histogram on the wire: the non-empty buckets of the
// window's log-linear histogram as [index, count] pairs.
type Hist struct {
	Buckets [][2]uint32 `json:"b,omitempty"`
	N       uint32      `json:"n"`
	Min     int64       `json:"min"`
	Max     int64       `json:"max"`
}

func (h *hist) wire() Hist {
	w := Hist{N: h.n, Min: h.min, Max: h.max}
	for i, c := range h.counts {
		if c > 0 {
			w.Buckets = append(w.Buckets, [2]uint32{uint32(i), c})
		}
	}
	return w
}

// mergeWire adds a wire histogram; bucket indexes out of range (a peer
// with another layout) are counted in the last bucket.
func (h *hist) mergeWire(w Hist) {
	var o hist
	for _, b := range w.Buckets {
		i := min(int(b[0]), histBuckets-1)
		o.counts[i] += b[1]
		o.n += b[1]
	}
	if o.n == 0 {
		return
	}
	o.min, o.max = w.Min, w.Max
	h.merge(&o)
}

// InstanceFigures is one instance's line of the fleet breakdown.
type InstanceFigures struct {
	ID             string    `json:"id"`
	LastSeen       time.Time `json:"lastSeen"`
	Turns          int64     `json:"turns"`
	TurnsPerSecond float64   `json:"turnsPerSecond"`
	Errors         int64     `json:"errors"`
}

// SetFleet makes the snapshots fleet-wide: every Interval the aggregator
// publishes its window under instance (kept for 3 × Interval, at least 3
// s) and each snapshot merges the windows of every instance still
// publishing, with a per-instance breakdown. Call it before Run. Without a
// fleet (the embedded default) snapshots are this instance's alone.
func (a *Aggregator) SetFleet(f Fleet, instance string) {
	a.fleet, a.instance = f, instance
}

// fleetTTL is how long a published window stays visible.
func (a *Aggregator) fleetTTL() time.Duration { return max(3*a.cfg.Interval, 3*time.Second) }

// localWindow is this instance's window in its mergeable form.
func (a *Aggregator) localWindow(now time.Time) Window {
	c := a.collect(now)
	w := Window{Instance: a.instance, At: now.UTC(), Seconds: int(a.windowSec), Turns: c.turns, Failed: c.failed,
		Errs: c.errs, Tiers: c.tiers, Tokens: c.tokens, Cost: c.cost, Lat: c.lat.wire(), TTFT: c.ttft.wire()}
	return w
}

// fleetFigures replaces the span figures of s with the fleet's: the
// windows of every live instance merged (this one's as of now), and the
// per-instance breakdown.
func (a *Aggregator) fleetFigures(ctx context.Context, now time.Time, s *Snapshot) error {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Interval/2)
	defer cancel()
	own := a.localWindow(now)
	ws, err := a.fleet.Windows(ctx)
	if err != nil {
		s.Instances = []InstanceFigures{instanceLine(own)}
		return fmt.Errorf("fleet: %w", err)
	}
	c := newCollected()
	seen := false
	var lines []InstanceFigures
	for _, w := range ws {
		if w.Instance == a.instance {
			seen = true
			w = own // fresher than what was published
		} else if now.Sub(w.At) > a.fleetTTL() {
			continue // gone silent; its key outlived its last word
		}
		c.add(w)
		lines = append(lines, instanceLine(w))
	}
	if !seen {
		c.add(own)
		lines = append(lines, instanceLine(own))
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].ID < lines[j].ID })
	a.figures(s, c)
	s.Instances = lines
	return nil
}

func instanceLine(w Window) InstanceFigures {
	errs, _, _, _ := splitRefusals(w.Failed, w.Errs)
	l := InstanceFigures{ID: w.Instance, LastSeen: w.At, Turns: w.Turns, Errors: errs}
	if w.Seconds > 0 {
		l.TurnsPerSecond = round(float64(w.Turns)/float64(w.Seconds), 2)
	}
	return l
}

// publish stores this instance's window for the others.
func (a *Aggregator) publish(ctx context.Context) {
	if a.fleet == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Interval/2)
	defer cancel()
	if err := a.fleet.Publish(ctx, a.localWindow(a.now()), a.fleetTTL()); err != nil {
		a.fleetErrors.Add(1)
	}
}

// MemoryFleet is a Fleet in one process: aggregators sharing it see each
// other (tests, or several gateways in one process). Safe for concurrent
// use.
type MemoryFleet struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]memoryEntry
}

type memoryEntry struct {
	w       Window
	expires time.Time
}

// NewMemoryFleet returns an empty MemoryFleet; now may be nil (time.Now).
func NewMemoryFleet(now func() time.Time) *MemoryFleet {
	if now == nil {
		now = time.Now
	}
	return &MemoryFleet{now: now, m: map[string]memoryEntry{}}
}

// Publish implements Fleet.
func (f *MemoryFleet) Publish(_ context.Context, w Window, ttl time.Duration) error {
	if w.Instance == "" {
		return errors.New("live: fleet: window without an instance id")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[w.Instance] = memoryEntry{w: w, expires: f.now().Add(ttl)}
	return nil
}

// Windows implements Fleet.
func (f *MemoryFleet) Windows(_ context.Context) ([]Window, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	out := make([]Window, 0, len(f.m))
	for id, e := range f.m {
		if !now.Before(e.expires) {
			delete(f.m, id)
			continue
		}
		out = append(out, e.w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}
