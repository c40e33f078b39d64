package scenario

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress is the live display: a progress bar on a terminal, a plain line
// every plainEvery otherwise.
type progress struct {
	opts  Options
	name  string
	rec   *recorder
	bar   *progressbar.ProgressBar
	out   io.Writer
	start time.Time
	shown int // fault marks already printed
}

const plainEvery = 5 * time.Second

func newProgress(opts Options, name string, rec *recorder) *progress {
	p := &progress{opts: opts, name: name, rec: rec, out: opts.Progress, start: time.Now()}
	if p.out != nil && opts.Terminal {
		p.bar = progressbar.NewOptions64(int64(opts.Duration.Seconds()),
			progressbar.OptionSetWriter(p.out),
			progressbar.OptionSetDescription(name),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("s"),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionShowDescriptionAtLineEnd(),
		)
	}
	return p
}

// status is the figures of the last few seconds: elapsed/total, turns/s,
// errors, tier mix.
func (p *progress) status(window time.Duration) string {
	turns := p.rec.all()
	now := time.Since(p.rec.start)
	var recent, errs int
	tiers := map[string]int{}
	for _, t := range turns {
		if t.Probe {
			continue
		}
		if t.Outcome != outAnswered && t.Outcome != outRefused {
			errs++
		}
		if t.End >= now-window {
			recent++
			if t.Tier != "" {
				tiers[t.Tier]++
			}
		}
	}
	names := make([]string, 0, len(tiers))
	for k := range tiers {
		names = append(names, k)
	}
	sort.Strings(names)
	var mix []string
	for _, k := range names {
		mix = append(mix, fmt.Sprintf("%s %d%%", k, tiers[k]*100/max(1, recent)))
	}
	el := min(now, p.opts.Duration).Round(time.Second)
	return fmt.Sprintf("%s %v/%v  %.1f turns/s  errors %d  tiers: %s", p.name, el, p.opts.Duration,
		float64(recent)/window.Seconds(), errs, strings.Join(mix, ", "))
}

func (p *progress) loop(ctx context.Context) {
	if p.out == nil {
		return
	}
	every := time.Second
	if p.bar == nil {
		every = min(plainEvery, max(time.Second, p.opts.Duration/4))
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.printMarks()
		if p.bar != nil {
			p.bar.Describe(p.status(3 * time.Second))
			_ = p.bar.Set64(min(int64(time.Since(p.start).Seconds()), int64(p.opts.Duration.Seconds())))
			continue
		}
		fmt.Fprintln(p.out, p.status(every))
	}
}

// printMarks prints the fault timeline's new entries on lines of their own.
func (p *progress) printMarks() {
	p.rec.mu.Lock()
	notes := append([]Mark(nil), p.rec.notes[p.shown:]...)
	p.shown = len(p.rec.notes)
	p.rec.mu.Unlock()
	if len(notes) == 0 {
		return
	}
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	for _, n := range notes {
		fmt.Fprintf(p.out, "%s %.1fs  ⚑ %s\n", p.name, n.At.Seconds(), n.Label)
	}
}

func (p *progress) finish() {
	if p.out == nil {
		return
	}
	p.printMarks()
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.out)
	}
	fmt.Fprintf(p.out, "%s: load finished after %v\n", p.name, time.Since(p.start).Round(time.Second))
}
