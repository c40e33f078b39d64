package canary

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Prompts is the prompt in force (version A).
type Prompts interface {
	Active() (text, version string)
}

// Hasher is the keyed hash the gateway gives user and session ids.
type Hasher interface {
	Hash(id string) string
}

// maxSteps bounds the kept history of share changes.
const maxSteps = 100

// Controller routes sessions between A and B and keeps the verdict. It is
// safe for concurrent use.
type Controller struct {
	cfg     Config
	base    Prompts
	bText   string
	bVer    string
	hash    Hasher
	compare Compare
	now     func() time.Time
	log     *slog.Logger
	// OnStep, when set, is told of every change of the share (to emit an
	// event).
	OnStep func(ctx context.Context, s Step)

	st state
}

// New returns a controller for B's prompt text, labelled version bVersion.
// compare may be nil (no event store: the verdict is "not comparable").
func New(cfg Config, base Prompts, bText, bVersion string, hash Hasher, compare Compare, now func() time.Time, log *slog.Logger) *Controller {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, base: base, bText: bText, bVer: bVersion, hash: hash, compare: compare, now: now, log: log}
	c.st.percent = cfg.Percent
	return c
}

// Active is version A, for callers that know no session.
func (c *Controller) Active() (text, version string) { return c.base.Active() }

// ForSession is the prompt owner's session gets: B for the sessions whose
// bucket falls in the canary's share, A for the others.
func (c *Controller) ForSession(owner, session string) (text, version string) {
	c.st.mu.Lock()
	p := c.st.percent
	c.st.mu.Unlock()
	if p > 0 && InB(Bucket(c.hash.Hash(owner+"\x00"+session)), p) {
		return c.bText, c.bVer
	}
	return c.base.Active()
}

// Percent is the share of sessions on B now.
func (c *Controller) Percent() float64 {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.percent
}

// SetPercent changes B's share, recording the step.
func (c *Controller) SetPercent(ctx context.Context, p float64, reason, verdict string) {
	c.st.mu.Lock()
	from := c.st.percent
	c.st.percent = p
	s := Step{At: c.now().UTC(), From: from, To: p, Reason: reason, Verdict: verdict}
	c.st.steps = append(c.st.steps, s)
	if over := len(c.st.steps) - maxSteps; over > 0 {
		c.st.steps = c.st.steps[over:]
	}
	c.st.mu.Unlock()
	c.log.Warn("canary share changed", "prompt_b", c.bVer, "from", from, "to", p, "reason", reason)
	if c.OnStep != nil {
		c.OnStep(ctx, s)
	}
}

// Last is the latest verdict, nil before the first.
func (c *Controller) Last() *Verdict {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.last
}

// Versions are the prompt versions compared: A in force, B the candidate.
func (c *Controller) Versions() (a, b string) {
	_, a = c.base.Active()
	return a, c.bVer
}

// Evaluate computes the verdict over the window and, with automatic action
// on, ramps B up on a pass and rolls it back on a fail.
func (c *Controller) Evaluate(ctx context.Context) (Verdict, error) {
	a, b := c.Versions()
	to := c.now()
	from := to.Add(-c.cfg.Window)
	var v Verdict
	if c.compare == nil {
		v = Verdict{Status: StatusNotComparable, Reasons: []string{"the event store is off (eventStore.path): nothing to compare"}, Checks: []Check{}}
		v.A.Version, v.B.Version = a, b
	} else {
		rep, err := c.compare(ctx, a, b, from, to)
		if err != nil {
			return Verdict{}, fmt.Errorf("canary: compare: %w", err)
		}
		v = Decide(rep, c.cfg.MinTurns, c.cfg.Thresholds)
	}
	c.st.mu.Lock()
	c.st.last = &v
	p := c.st.percent
	c.st.mu.Unlock()
	if !c.cfg.Auto.Enabled || p == 0 {
		return v, nil
	}
	switch v.Status {
	case StatusFail:
		c.SetPercent(ctx, 0, "rolled back: "+joinReasons(v.Reasons), v.Status)
	case StatusPass:
		if next := nextStep(c.cfg.Auto.Steps, p); next != p {
			c.SetPercent(ctx, next, "ramped: B within every threshold of A", v.Status)
		}
	}
	return v, nil
}

func joinReasons(rs []string) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += "; "
		}
		out += r
	}
	return out
}

// Run evaluates every Auto.Interval until ctx ends.
func (c *Controller) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Auto.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ectx, cancel := context.WithTimeout(ctx, c.cfg.Auto.Interval)
		if _, err := c.Evaluate(ectx); err != nil {
			c.log.Warn("canary verdict failed", "err", err)
		}
		cancel()
	}
}

// Status is GET /admin/canary.
type Status struct {
	A       string   `json:"a"`
	B       string   `json:"b"`
	Percent float64  `json:"percent"`
	Auto    bool     `json:"auto"`
	Verdict *Verdict `json:"verdict"`
	Steps   []Step   `json:"steps"`
}

// Handler serves GET /admin/canary (the verdict computed now) and PUT
// /admin/canary {"percent": N} (change B's share by hand). Mount it behind
// the admin token.
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/canary", func(w http.ResponseWriter, r *http.Request) {
		v, err := c.Evaluate(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, errBody("unavailable", "The verdict could not be computed: "+err.Error()))
			return
		}
		writeJSON(w, http.StatusOK, c.status(&v))
	})
	mux.HandleFunc("PUT /admin/canary", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Percent *float64 `json:"percent"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Percent == nil || *body.Percent < 0 || *body.Percent > 100 {
			writeJSON(w, http.StatusBadRequest, errBody("invalid_request", `Send {"percent": N} with N in 0..100.`))
			return
		}
		c.SetPercent(r.Context(), *body.Percent, "set by an operator", "")
		writeJSON(w, http.StatusOK, c.status(c.Last()))
	})
	return mux
}

func (c *Controller) status(v *Verdict) Status {
	a, b := c.Versions()
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	steps := append([]Step{}, c.st.steps...)
	return Status{A: a, B: b, Percent: c.st.percent, Auto: c.cfg.Auto.Enabled, Verdict: v, Steps: steps}
}

func errBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
