package scenario

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Result is one scenario's run.
type Result struct {
	Name, About string
	Options     Options
	Started     time.Time
	Duration    time.Duration
	// PrimaryShare is the scenario's goal for the primary's share of the
	// answers during its fault (0: none).
	PrimaryShare float64
	Instances    int
	Marks        []Mark
	Turns        []TurnRecord
	Samples      []Sample

	RateProbe    RateProbe
	SessionProbe SessionProbe
	Batch        BatchOutcome
	Persist      Persistence
	FaultError   string
	// Live is instance 0's live snapshot (GET /admin/live/snapshot) at the
	// end of the load: in fleet mode, the whole fleet's figures.
	Live LiveView

	Goals []Goal
}

// Mark is one entry of the fault timeline.
type Mark struct {
	At    time.Duration
	Label string
}

// Verdict of a goal.
type Verdict string

// Verdicts.
const (
	Pass Verdict = "pass"
	Fail Verdict = "FAIL"
	NA   Verdict = "n/a"
)

// Goal is one line of the pass/fail table.
type Goal struct {
	Name, Target, Measured string
	Verdict                Verdict
}

// Goals' thresholds.
const (
	goalAnswered      = 0.99
	goalAmplification = 1.10
	goalRateAccuracy  = 0.01
)

// Summary is the load's figures.
type Summary struct {
	Sent, Answered, Refused, Errors, Cut, Lost, NoTarget, ServerErrors int
	// Killed is the turns in flight on an instance the scenario stopped
	// (they end cut or in error, never lost).
	Killed   int
	Rerouted int
	Tiers    map[string]int
	Channels map[string]int
	// TTFB is the time to first byte of P0 (interactive) streamed turns;
	// LaterTTFB that of P1 and P2 turns, which wait for quota by design.
	TTFB, LaterTTFB      Percentiles
	Total                Percentiles
	Attempts, ModelTurns float64
	// Retries is the attempts that repeated a call to the same model;
	// Amplification is the attempts per first attempt.
	Retries, Amplification float64
	ProviderThrottles      float64
	Codes                  map[string]int
}

// Percentiles of a latency.
type Percentiles struct{ P50, P95, P99, Max time.Duration }

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Percentiles{at(0.50), at(0.95), at(0.99), d[len(d)-1]}
}

// Summarize computes the load's figures.
func (r *Result) Summarize() Summary {
	s := Summary{Tiers: map[string]int{}, Channels: map[string]int{}, Codes: map[string]int{}}
	var ttfb, later, total []time.Duration
	for _, t := range r.Turns {
		if t.Probe {
			continue
		}
		s.Sent++
		s.Channels[t.Channel]++
		s.Rerouted += t.Rerouted
		if t.Code != "" {
			s.Codes[t.Code]++
		}
		if t.Status >= 500 {
			s.ServerErrors++
		}
		switch t.Outcome {
		case outAnswered:
			s.Answered++
			s.Tiers[t.Tier]++
			total = append(total, t.End-t.Start)
		case outRefused:
			s.Refused++
		case outError:
			s.Errors++
			if t.Status < 500 {
				s.ServerErrors++ // an error frame: the gateway failed the turn
			}
		case outCut:
			s.Cut++
		case outLost:
			s.Lost++
		case outNoTarget:
			s.NoTarget++
		}
		if r.stoppedUnder(t) && (t.Outcome == outCut || t.Outcome == outError) {
			s.Killed++
		}
		if t.FirstByte > 0 && t.Channel != chanJSON {
			if t.Priority == "P0" {
				ttfb = append(ttfb, t.FirstByte-t.Start)
			} else {
				later = append(later, t.FirstByte-t.Start)
			}
		}
	}
	s.TTFB, s.LaterTTFB, s.Total = percentiles(ttfb), percentiles(later), percentiles(total)
	var throttles float64
	for _, sm := range r.Samples {
		s.Attempts += sm.Attempts
		s.Retries += sm.Retries
		s.ModelTurns += sm.Turns
		throttles += sm.ProviderThrottles
	}
	s.ProviderThrottles = throttles
	if first := s.Attempts - s.Retries; first > 0 {
		s.Amplification = s.Attempts / first
	}
	return s
}

// stoppedUnder says t was on an instance when the scenario signalled it:
// it started before the signal (or within the second the process took to
// go), and ended after it, within a few seconds. Its outcome says whether
// the stop cut it.
func (r *Result) stoppedUnder(t TurnRecord) bool {
	for _, m := range r.Marks {
		if t.Start <= m.At+time.Second && t.End >= m.At && t.End <= m.At+5*time.Second &&
			(m.Label == fmt.Sprintf("SIGKILL instance %d", t.Instance) || m.Label == fmt.Sprintf("SIGTERM instance %d", t.Instance)) {
			return true
		}
	}
	return false
}

func pct(a, b int) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(a)/float64(b))
}

func verdict(ok bool) Verdict {
	if ok {
		return Pass
	}
	return Fail
}

// evaluate checks the run against the goals.
func evaluate(r *Result) []Goal {
	s := r.Summarize()
	var g []Goal
	// Answered: every turn but those the scenario's own kill cut, and
	// refusals of the callers' limits, gets an answer.
	eligible := s.Sent - s.Killed
	g = append(g, Goal{"answered", "≥ 99% of turns not cut by a kill",
		fmt.Sprintf("%s (%d of %d; %d refused, %d errors, %d cut by the kill, %d cut otherwise, %d lost, %d unplaced)",
			pct(s.Answered, eligible), s.Answered, eligible, s.Refused, s.Errors, s.Killed, s.Cut-min(s.Cut, s.Killed), s.Lost, s.NoTarget),
		verdict(eligible > 0 && float64(s.Answered) >= goalAnswered*float64(eligible))})
	g = append(g, Goal{"no 5xx", "0 5xx responses or error frames", fmt.Sprint(s.ServerErrors), verdict(s.ServerErrors == 0)})
	g = append(g, Goal{"p99 time to first byte", "≤ " + r.Options.TTFBGoal.String() + " (P0 chat over WebSocket and SSE)",
		fmt.Sprintf("%v (p50 %v, p95 %v; P1/P2 turns, which may wait for quota: p99 %v)", s.TTFB.P99.Round(time.Millisecond),
			s.TTFB.P50.Round(time.Millisecond), s.TTFB.P95.Round(time.Millisecond), s.LaterTTFB.P99.Round(time.Millisecond)),
		verdict(s.TTFB.P99 > 0 && s.TTFB.P99 <= r.Options.TTFBGoal)})
	if s.Attempts > 0 {
		g = append(g, Goal{"retry amplification", fmt.Sprintf("≤ %.2f× upstream attempts per first attempt at a model", goalAmplification),
			fmt.Sprintf("%.3f× (%.0f attempts, %.0f of them retries; %.2f attempts per turn over %.0f turns)",
				s.Amplification, s.Attempts, s.Retries, s.Attempts/max(1, s.ModelTurns), s.ModelTurns),
			verdict(s.Amplification <= goalAmplification)})
	} else {
		g = append(g, Goal{"retry amplification", fmt.Sprintf("≤ %.2f×", goalAmplification), "no turn counted in /metrics", NA})
	}
	rp := r.RateProbe
	switch {
	case rp.Skipped != "":
		g = append(g, Goal{"fleet rate-limit accuracy", "±1% across instances", rp.Skipped, NA})
	default:
		tol := max(goalRateAccuracy*rp.Expected, 1) // a count is exact to one turn
		g = append(g, Goal{"fleet rate-limit accuracy", "±1% across instances (at least ±1 turn)",
			fmt.Sprintf("%d admitted, %.1f expected (burst %d + %d/min over %v): %.2f%% off; by instance %v",
				rp.Admitted, rp.Expected, probeBurst, probePerMinute, rp.Elapsed.Round(time.Millisecond), 100*rp.Error, rp.ByInstance),
			verdict(rp.Sent > 0 && abs(float64(rp.Admitted)-rp.Expected) <= tol)})
	}
	g = append(g, Goal{"no turn lost", "0 accepted turns ending in silence (a kill ends them in a visible error)",
		fmt.Sprintf("%d lost; %d in flight on a stopped instance ended in a visible error", s.Lost, s.Killed), verdict(s.Lost == 0)})
	p := r.Persist
	if p.Skipped != "" {
		g = append(g, Goal{"no must-persist event lost", "every answered turn's turn span stored", p.Skipped, NA})
	} else {
		g = append(g, Goal{"no must-persist event lost", "every answered turn's turn span stored",
			fmt.Sprintf("%d of %d answered turns in the event stores", p.Found, p.Answered), verdict(p.Found == p.Answered)})
	}
	sp := r.SessionProbe
	if sp.Skipped != "" {
		g = append(g, Goal{"sessions continue across instances", "the history follows the user", sp.Skipped, NA})
	} else {
		g = append(g, Goal{"sessions continue across instances", "every conversation's history reaches the next instance",
			fmt.Sprintf("%d of %d conversations continued%s", sp.Continued, sp.Pairs, firstExample(sp.Examples)), verdict(sp.Pairs > 0 && sp.Continued == sp.Pairs)})
	}
	if r.PrimaryShare > 0 {
		g = append(g, primaryShareGoal(r))
	}
	if r.FaultError != "" {
		g = append(g, Goal{"fault injected", "every step of the scenario ran", r.FaultError, Fail})
	}
	return g
}

// primary is the profile's primary tier, as the turns name it.
const primary = "sonnet"

// primaryShareGoal measures the share of the answers the primary gave
// between the fault's first two marks (the fault on, the fault off).
func primaryShareGoal(r *Result) Goal {
	name := "primary carries its share"
	want := fmt.Sprintf("≥ %.0f%% of the turns answered during the fault answered by %s", 100*r.PrimaryShare, primary)
	if len(r.Marks) < 2 {
		return Goal{name, want, "the fault's marks are missing", NA}
	}
	from, to := r.Marks[0].At, r.Marks[1].At
	var answered, byPrimary int
	for _, t := range r.Turns {
		if t.Probe || t.Outcome != outAnswered || t.Start < from || t.End > to {
			continue
		}
		answered++
		if t.Tier == primary {
			byPrimary++
		}
	}
	if answered == 0 {
		return Goal{name, want, "no turn answered during the fault", NA}
	}
	measured := fmt.Sprintf("%s (%d of %d)", pct(byPrimary, answered), byPrimary, answered)
	if float64(byPrimary) >= r.PrimaryShare*float64(answered) {
		return Goal{name, want, measured, Pass}
	}
	// A share below the goal fails only when the turns are enough to tell
	// it from the goal: a primary answering at exactly the goal's rate
	// would answer this few of them less than once in twenty runs.
	if p := binomialAtMost(byPrimary, answered, r.PrimaryShare); p >= shareSignificance {
		return Goal{name, want, fmt.Sprintf("%s: within chance of %.0f%% (a primary at that rate answers this few %.0f%% of the time)",
			measured, 100*r.PrimaryShare, 100*p), Pass}
	}
	return Goal{name, want, measured, Fail}
}

// shareSignificance is the chance below which a share under its goal is
// taken for a missed goal rather than the luck of a small sample.
const shareSignificance = 0.05

// binomialAtMost is the chance of at most k successes in n trials of
// chance p each.
func binomialAtMost(k, n int, p float64) float64 {
	if k >= n || p <= 0 {
		return 1
	}
	if p >= 1 {
		return 0
	}
	// Each term C(n,i) p^i (1-p)^(n-i) in logarithms: (1-p)^n alone is
	// below the smallest float64 for a few thousand turns.
	lgn, _ := math.Lgamma(float64(n + 1))
	lp, lq := math.Log(p), math.Log1p(-p)
	sum := 0.0
	for i := 0; i <= k; i++ {
		lgi, _ := math.Lgamma(float64(i + 1))
		lgr, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lgn - lgi - lgr + float64(i)*lp + float64(n-i)*lq)
	}
	return min(sum, 1)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// firstExample is ": " and the first of examples, or "".
func firstExample(examples []string) string {
	if len(examples) == 0 {
		return ""
	}
	return ": " + examples[0]
}
