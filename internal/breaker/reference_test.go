package breaker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// refModel is a deliberately plain restatement of the breaker's rules, kept
// apart from machine.go so that the property test compares two readings of
// the specification rather than one reading with itself. It stores every
// outcome and every probe instead of counters and rings.
type refModel struct {
	cfg Config

	state    string // "closed", "open", "half_open"
	epoch    int64
	openedAt time.Time

	outcomes []refOutcome // closed-state outcomes since the breaker last closed

	stage     int
	admitted  int
	succeeded int
	probes    map[int]time.Time // probe id -> deadline, outstanding only
	nextProbe int
}

type refOutcome struct {
	at     time.Time
	failed bool
}

// refPermit identifies a permit in the reference model.
type refPermit struct {
	epoch int64
	probe int // -1 for closed-state calls
	used  bool
}

func newRefModel(cfg Config) *refModel {
	return &refModel{cfg: cfg, state: "closed", probes: map[int]time.Time{}}
}

func (r *refModel) enter(state string) {
	r.state = state
	r.epoch++
	r.outcomes = nil
	r.stage, r.admitted, r.succeeded = 0, 0, 0
	r.probes = map[int]time.Time{}
}

// catchUp applies, in time order, the transitions that happen by themselves.
func (r *refModel) catchUp(now time.Time) {
	for {
		if r.state == "open" {
			halfOpenAt := r.openedAt.Add(r.cfg.OpenTimeout)
			if now.Before(halfOpenAt) {
				return
			}
			r.enter("half_open")
			continue
		}
		if r.state == "half_open" && len(r.probes) > 0 {
			first := time.Time{}
			for _, d := range r.probes {
				if first.IsZero() || d.Before(first) {
					first = d
				}
			}
			if now.Before(first) {
				return
			}
			r.enter("open")
			r.openedAt = first
			continue
		}
		return
	}
}

// inWindow reports whether an outcome at t still counts at now: the window
// moves in steps of Window/20 and covers the 20 most recent steps.
func (r *refModel) inWindow(t, now time.Time) bool {
	width := r.cfg.Window.Microseconds() / 20
	return now.UnixMicro()/width-t.UnixMicro()/width < 20
}

func (r *refModel) counts(now time.Time) (calls, failures int) {
	for _, o := range r.outcomes {
		if r.inWindow(o.at, now) {
			calls++
			if o.failed {
				failures++
			}
		}
	}
	return calls, failures
}

func (r *refModel) allow(now time.Time) (*refPermit, error) {
	r.catchUp(now)
	switch r.state {
	case "closed":
		return &refPermit{epoch: r.epoch, probe: -1}, nil
	case "open":
		return nil, &OpenError{RetryAfter: r.openedAt.Add(r.cfg.OpenTimeout).Sub(now), State: Open}
	}
	if r.admitted == r.cfg.Stages[r.stage] {
		var wait time.Duration
		first := true
		for _, d := range r.probes {
			if w := d.Sub(now); first || w < wait {
				wait, first = w, false
			}
		}
		return nil, &OpenError{RetryAfter: wait, State: HalfOpen}
	}
	r.admitted++
	r.nextProbe++
	r.probes[r.nextProbe] = now.Add(r.cfg.HalfOpenWait)
	return &refPermit{epoch: r.epoch, probe: r.nextProbe}, nil
}

func (r *refModel) done(now time.Time, p *refPermit, success bool) {
	if p.used {
		return
	}
	p.used = true
	r.catchUp(now)
	if p.epoch != r.epoch {
		return
	}
	if r.state == "closed" {
		r.outcomes = append(r.outcomes, refOutcome{at: now, failed: !success})
		calls, failures := r.counts(now)
		rate := float64(failures) / float64(calls)
		if !success && (failures >= r.cfg.FailureThreshold || (calls >= r.cfg.MinCalls && rate >= r.cfg.FailureRate)) {
			r.enter("open")
			r.openedAt = now
		}
		return
	}
	if _, outstanding := r.probes[p.probe]; r.state != "half_open" || !outstanding {
		return
	}
	delete(r.probes, p.probe)
	if !success {
		r.enter("open")
		r.openedAt = now
		return
	}
	r.succeeded++
	if r.succeeded < r.cfg.Stages[r.stage] {
		return
	}
	if r.stage == len(r.cfg.Stages)-1 {
		r.enter("closed")
		return
	}
	next := r.stage + 1
	r.enter("half_open")
	r.stage = next
}

// release gives a probe's place back without a verdict.
func (r *refModel) release(now time.Time, p *refPermit) {
	if p.used {
		return
	}
	p.used = true
	r.catchUp(now)
	if _, outstanding := r.probes[p.probe]; p.epoch != r.epoch || r.state != "half_open" || !outstanding {
		return
	}
	delete(r.probes, p.probe)
	r.admitted--
}

// view is the part of a snapshot the model predicts.
func (r *refModel) view(now time.Time) string {
	r.catchUp(now)
	calls, failures := 0, 0
	stage, inFlight, admitted, succeeded := 0, 0, 0, 0
	var retry time.Duration
	switch r.state {
	case "closed":
		calls, failures = r.counts(now)
	case "open":
		retry = r.openedAt.Add(r.cfg.OpenTimeout).Sub(now)
	case "half_open":
		stage, inFlight, admitted, succeeded = r.stage, len(r.probes), r.admitted, r.succeeded
		if admitted == r.cfg.Stages[stage] {
			_, err := r.allow(now)
			var oe *OpenError
			if errors.As(err, &oe) {
				retry = oe.RetryAfter
			}
		}
	}
	return fmt.Sprintf("%s gen=%d calls=%d fails=%d stage=%d adm=%d ok=%d inflight=%d retry=%s opened=%d",
		r.state, r.epoch, calls, failures, stage, admitted, succeeded, inFlight, retry, r.openedAt.UnixMicro())
}

func viewOf(s Snapshot) string {
	var opened int64
	if !s.OpenedAt.IsZero() {
		opened = s.OpenedAt.UnixMicro()
	} else {
		opened = time.Time{}.UnixMicro()
	}
	return fmt.Sprintf("%s gen=%d calls=%d fails=%d stage=%d adm=%d ok=%d inflight=%d retry=%s opened=%d",
		s.State, s.Generation, s.Calls, s.Failures, s.Stage, s.Admitted, s.Succeeded, s.InFlight, s.RetryAfter, opened)
}

// TestMemoryMatchesReferenceModel drives the memory breaker and the
// reference model with the same random calls, outcomes and time steps and
// requires identical decisions and state traces.
func TestMemoryMatchesReferenceModel(t *testing.T) {
	stageChoices := [][]int{{1}, {2}, {1, 3}, {1, 3, 10}, {2, 1, 2}}
	seeds := uint64(200)
	if os.Getenv("FMGATE_LONG") != "" {
		seeds = 20_000
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := Config{
			FailureThreshold: 1 + rng.IntN(6),
			FailureRate:      []float64{0.2, 0.5, 0.75, 1}[rng.IntN(4)],
			MinCalls:         1 + rng.IntN(6),
			Window:           time.Second,
			OpenTimeout:      time.Duration(100+rng.IntN(400)) * time.Millisecond,
			Stages:           stageChoices[rng.IntN(len(stageChoices))],
			HalfOpenWait:     time.Duration(50+rng.IntN(300)) * time.Millisecond,
		}
		clock := newFakeClock()
		b := NewMemory("m", cfg, clock.Now)
		ref := newRefModel(cfg)
		type pair struct {
			p Permit
			r *refPermit
		}
		var permits []pair
		var trace []string
		for step := range 400 {
			var op string
			switch k := rng.IntN(10); {
			case k < 4:
				p, err := b.Allow(context.Background())
				rp, rerr := ref.allow(clock.Now())
				op = fmt.Sprintf("allow err=%v", err)
				var got, want *OpenError
				errors.As(err, &got)
				errors.As(rerr, &want)
				switch {
				case (err == nil) != (rerr == nil):
					t.Fatalf("seed %d step %d: Allow = %v, reference %v\ntrace:\n%v", seed, step, err, rerr, trace)
				case err != nil && (got.State != want.State || got.RetryAfter != want.RetryAfter):
					t.Fatalf("seed %d step %d: Allow = %+v, reference %+v\ntrace:\n%v", seed, step, got, want, trace)
				case err == nil:
					permits = append(permits, pair{p, rp})
				}
			case k < 5 && len(permits) > 0:
				i := rng.IntN(len(permits))
				op = fmt.Sprintf("release #%d", i)
				permits[i].p.Release(context.Background())
				ref.release(clock.Now(), permits[i].r)
			case k < 8 && len(permits) > 0:
				i := rng.IntN(len(permits))
				success := rng.IntN(3) > 0
				op = fmt.Sprintf("done #%d success=%v", i, success)
				permits[i].p.Done(context.Background(), success)
				ref.done(clock.Now(), permits[i].r, success)
			default:
				d := time.Duration(rng.IntN(300_000)) * time.Microsecond
				op = "advance " + d.String()
				clock.Advance(d)
			}
			s, _ := b.Snapshot(context.Background())
			got, want := viewOf(s), ref.view(clock.Now())
			trace = append(trace, op+" -> "+got)
			if got != want {
				t.Fatalf("seed %d step %d after %s:\n got  %s\n want %s\ncfg %+v\ntrace:\n%v", seed, step, op, got, want, cfg, trace)
			}
		}
	}
}
