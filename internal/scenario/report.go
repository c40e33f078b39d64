package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// writeReport writes report.md and report.html for results into dir.
func writeReport(dir string, opts Options, results []*Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(markdown(opts, results)), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.html"), []byte(htmlReport(opts, results)), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if len(results) == 1 {
		return writeTurns(filepath.Join(dir, "turns.jsonl"), results[0].Turns)
	}
	return nil
}

// writeTurns writes every turn's record, one JSON line each, for a closer
// look than the report's.
func writeTurns(path string, turns []TurnRecord) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, t := range turns {
		_ = enc.Encode(struct {
			StartMs, FirstByteMs, EndMs int64
			TurnRecord
		}{t.Start.Milliseconds(), t.FirstByte.Milliseconds(), t.End.Milliseconds(), t})
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func passed(r *Result) bool {
	return !slices.ContainsFunc(r.Goals, func(g Goal) bool { return g.Verdict == Fail })
}

func fleetLine(opts Options, r *Result) string {
	if len(opts.Targets) > 0 {
		return fmt.Sprintf("%d target instances (%s)", r.Instances, strings.Join(opts.Targets, ", "))
	}
	return fmt.Sprintf("%d instances started by the scenario, sharing a Redis it started (key prefix per run)", r.Instances)
}

func markdown(opts Options, results []*Result) string {
	var b strings.Builder
	b.WriteString("# fmgate scenario report\n\n")
	if len(results) > 0 {
		fmt.Fprintf(&b, "Run %s · %s · load %.0f turns/s for %v per scenario · simulator pace ×%g\n\n",
			results[0].Started.UTC().Format("2006-01-02 15:04 MST"), fleetLine(opts, results[0]), opts.Rate, opts.Duration, opts.Pace)
	}
	if len(results) > 1 {
		b.WriteString("| scenario | result | goals missed |\n|---|---|---|\n")
		for _, r := range results {
			var missed []string
			for _, g := range r.Goals {
				if g.Verdict == Fail {
					missed = append(missed, g.Name)
				}
			}
			res := "pass"
			if !passed(r) {
				res = "**FAIL**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Name, res, strings.Join(missed, ", "))
		}
		b.WriteString("\n")
	}
	for _, r := range results {
		s := r.Summarize()
		fmt.Fprintf(&b, "## %s\n\n%s\n\n", r.Name, r.About)
		b.WriteString("| goal | target | measured | verdict |\n|---|---|---|---|\n")
		for _, g := range r.Goals {
			v := string(g.Verdict)
			if g.Verdict == Fail {
				v = "**FAIL**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Target, mdEscape(g.Measured), v)
		}
		b.WriteString("\nFault timeline:\n\n")
		for _, m := range r.Marks {
			fmt.Fprintf(&b, "- %5.1f s — %s\n", m.At.Seconds(), m.Label)
		}
		fmt.Fprintf(&b, "\nLoad: %d turns (%s), %d answered; tiers %s; latency p50/p95/p99 %v / %v / %v; time to first byte p50/p95/p99 %v / %v / %v; %d rerouted by the balancer; %.0f provider throttles.\n",
			s.Sent, mapLine(s.Channels), s.Answered, mapLine(s.Tiers),
			s.Total.P50.Round(time.Millisecond), s.Total.P95.Round(time.Millisecond), s.Total.P99.Round(time.Millisecond),
			s.TTFB.P50.Round(time.Millisecond), s.TTFB.P95.Round(time.Millisecond), s.TTFB.P99.Round(time.Millisecond),
			s.Rerouted, s.ProviderThrottles)
		if len(s.Codes) > 0 {
			fmt.Fprintf(&b, "Error codes: %s.\n", mapLine(s.Codes))
		}
		bt := r.Batch
		if bt.Error != "" {
			fmt.Fprintf(&b, "Batch job: %s.\n", bt.Error)
		} else {
			fmt.Fprintf(&b, "Batch job (P3, instance %d): %s, %d of %d completed, %d failed.\n", bt.Instance, bt.Status, bt.Completed, bt.Total, bt.Failed)
		}
		if len(r.RateProbe.Outcomes) > 0 {
			fmt.Fprintf(&b, "Rate-limit probe: %d sent, outcomes %s.\n", r.RateProbe.Sent, mapLine(r.RateProbe.Outcomes))
		}
		b.WriteString(liveLine(r.Live) + "\n")
		for _, e := range r.SessionProbe.Examples {
			fmt.Fprintf(&b, "- session probe: %s\n", e)
		}
		if len(r.Persist.Missing) > 0 {
			fmt.Fprintf(&b, "- traces missing from the event stores (first %d): %s\n", len(r.Persist.Missing), strings.Join(r.Persist.Missing, ", "))
		}
		b.WriteString("\n")
	}
	b.WriteString("Charts: report.html (self-contained).\n")
	return b.String()
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func mapLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[k]))
	}
	return strings.Join(parts, ", ")
}

// series is one line of a chart: y per second.
type series struct {
	name  string
	color string
	ys    []float64 // NaN: no value
}

var palette = []string{"#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"}

var tierColors = map[string]string{"sonnet": "#2563eb", "haiku": "#16a34a", "cache": "#d97706", "faq": "#7c3aed", "graceful": "#dc2626"}

// seconds is the number of one-second buckets a result's charts span.
func (r *Result) seconds() int {
	end := r.Duration
	for _, t := range r.Turns {
		end = max(end, t.End)
	}
	return int(end.Seconds()) + 1
}

func nanSeries(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// latencySeries is p50/p95/p99 time to first byte and p99 total latency
// of the turns that ended in each second, in seconds.
func latencySeries(r *Result, n int) []series {
	ttfb := make([][]time.Duration, n)
	total := make([][]time.Duration, n)
	for _, t := range r.Turns {
		if t.Probe || t.Outcome != outAnswered {
			continue
		}
		i := min(n-1, int(t.End.Seconds()))
		total[i] = append(total[i], t.End-t.Start)
		if t.Channel != chanJSON && t.FirstByte > 0 {
			ttfb[i] = append(ttfb[i], t.FirstByte-t.Start)
		}
	}
	p50, p95, p99, tot := nanSeries(n), nanSeries(n), nanSeries(n), nanSeries(n)
	for i := range n {
		if len(ttfb[i]) > 0 {
			p := percentiles(ttfb[i])
			p50[i], p95[i], p99[i] = p.P50.Seconds(), p.P95.Seconds(), p.P99.Seconds()
		}
		if len(total[i]) > 0 {
			tot[i] = percentiles(total[i]).P99.Seconds()
		}
	}
	return []series{{"TTFB p50", "#16a34a", p50}, {"TTFB p95", "#d97706", p95}, {"TTFB p99", "#dc2626", p99}, {"total p99", "#6b7280", tot}}
}

func tierSeries(r *Result, n int) []series {
	counts := map[string][]float64{}
	for _, t := range r.Turns {
		if t.Probe || t.Outcome != outAnswered {
			continue
		}
		if counts[t.Tier] == nil {
			counts[t.Tier] = make([]float64, n)
		}
		counts[t.Tier][min(n-1, int(t.End.Seconds()))]++
	}
	order := []string{"sonnet", "haiku", "cache", "faq", "graceful"}
	for k := range counts {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	var out []series
	for i, k := range order {
		if counts[k] == nil {
			continue
		}
		c, ok := tierColors[k]
		if !ok {
			c = palette[i%len(palette)]
		}
		out = append(out, series{k, c, counts[k]})
	}
	return out
}

func errorSeries(r *Result, n int) []series {
	refused, failed, throttles := make([]float64, n), make([]float64, n), make([]float64, n)
	for _, t := range r.Turns {
		if t.Probe {
			continue
		}
		i := min(n-1, int(t.End.Seconds()))
		switch t.Outcome {
		case outRefused:
			refused[i]++
		case outError, outCut, outLost, outNoTarget:
			failed[i]++
		}
	}
	for _, s := range r.Samples {
		if i := int(s.At.Seconds()); i < n {
			throttles[i] += s.ProviderThrottles
		}
	}
	return []series{{"429s to clients", "#d97706", refused}, {"errors (frames, cuts, lost)", "#dc2626", failed}, {"provider throttles", "#7c3aed", throttles}}
}

func sampleSeries(r *Result, n int, pick func(Sample) map[string]float64) []series {
	byName := map[string][]float64{}
	for _, s := range r.Samples {
		i := int(s.At.Seconds())
		if i >= n {
			continue
		}
		for k, v := range pick(s) {
			if byName[k] == nil {
				byName[k] = nanSeries(n)
			}
			byName[k][i] = v
		}
	}
	names := make([]string, 0, len(byName))
	for k := range byName {
		names = append(names, k)
	}
	slices.Sort(names)
	var out []series
	for i, k := range names {
		c, ok := tierColors[k]
		if !ok {
			c = palette[i%len(palette)]
		}
		out = append(out, series{k, c, byName[k]})
	}
	return out
}

func amplificationSeries(r *Result, n int) []series {
	ys := nanSeries(n)
	for _, s := range r.Samples {
		if i := int(s.At.Seconds()); i < n && s.Turns > 0 {
			ys[i] = s.Attempts / s.Turns
		}
	}
	return []series{{"attempts per turn", "#2563eb", ys}}
}

// svgChart draws series over n seconds, with the fault marks; stacked
// draws bars stacked per second instead of lines.
func svgChart(title, unit string, n int, ss []series, marks []Mark, stacked bool, yMax float64) string {
	const W, H, L, R, T, B = 1160, 220, 56, 16, 28, 26
	pw, ph := float64(W-L-R), float64(H-T-B)
	top := yMax
	if top == 0 {
		for i := range n {
			sum := 0.0
			for _, s := range ss {
				v := s.ys[i]
				if math.IsNaN(v) {
					continue
				}
				if stacked {
					sum += v
				} else {
					top = max(top, v)
				}
			}
			top = max(top, sum)
		}
		top = niceCeil(top)
	}
	if top <= 0 {
		top = 1
	}
	x := func(i float64) float64 { return L + pw*i/float64(max(1, n)) }
	y := func(v float64) float64 { return T + ph - ph*math.Min(v, top)/top }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %d %d" width="100%%" xmlns="http://www.w3.org/2000/svg" font-family="system-ui,sans-serif" font-size="11">`, W, H)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13" font-weight="600">%s</text>`, L, html.EscapeString(title))
	for k := 0; k <= 4; k++ {
		v := top * float64(k) / 4
		yy := y(v)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e7eb"/>`, L, W-R, yy, yy)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#6b7280">%s</text>`, L-6, yy+4, fmtNum(v)+unit)
	}
	step := max(1, niceStep(n))
	for i := 0; i <= n; i += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#6b7280">%ds</text>`, x(float64(i)), H-8, i)
	}
	bw := pw / float64(max(1, n))
	if stacked {
		for i := range n {
			base := 0.0
			for _, s := range ss {
				v := s.ys[i]
				if math.IsNaN(v) || v == 0 {
					continue
				}
				y0, y1 := y(base), y(base+v)
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`, x(float64(i))+0.5, y1, math.Max(bw-1, 0.5), y0-y1, s.color)
				base += v
			}
		}
	} else {
		for _, s := range ss {
			var path strings.Builder
			pen := false
			for i, v := range s.ys {
				if math.IsNaN(v) {
					pen = false
					continue
				}
				cmd := "L"
				if !pen {
					cmd = "M"
				}
				fmt.Fprintf(&path, "%s%.1f,%.1f ", cmd, x(float64(i)+0.5), y(v))
				pen = true
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`, path.String(), s.color)
		}
	}
	for _, m := range marks {
		xx := x(m.At.Seconds())
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#111827" stroke-dasharray="4 3"/>`, xx, xx, T, H-B)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#111827" font-size="10"><title>%s</title>⚑ %s</text>`, xx+3, T+10, html.EscapeString(m.Label), html.EscapeString(shorten(m.Label, 28)))
	}
	lx := float64(L) + 7.2*float64(len([]rune(title))) + 24
	for _, s := range ss {
		fmt.Fprintf(&b, `<rect x="%.0f" y="7" width="10" height="10" fill="%s"/><text x="%.0f" y="16">%s</text>`, lx, s.color, lx+14, html.EscapeString(s.name))
		lx += 24 + 7*float64(len(s.name))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func niceStep(n int) int {
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if n/s <= 12 {
			return s
		}
	}
	return 600
}

func fmtNum(v float64) string {
	switch {
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v < 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

const css = `body{font-family:system-ui,-apple-system,sans-serif;margin:24px auto;max-width:1200px;color:#111827;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:36px;border-top:1px solid #e5e7eb;padding-top:18px}
table{border-collapse:collapse;margin:10px 0;font-size:13px}td,th{border:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f9fafb}.pass{color:#15803d;font-weight:600}.FAIL{color:#b91c1c;font-weight:700}.na{color:#6b7280}
.chart{margin:6px 0 14px}.muted{color:#6b7280;font-size:13px}ul{font-size:13px}`

func htmlReport(opts Options, results []*Result) string {
	var b strings.Builder
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>fmgate scenario report</title><style>` + css + `</style></head><body>`)
	b.WriteString(`<h1>fmgate scenario report</h1>`)
	if len(results) > 0 {
		fmt.Fprintf(&b, `<p class="muted">Run %s · %s · load %.0f turns/s for %v per scenario · simulator pace ×%g</p>`,
			html.EscapeString(results[0].Started.UTC().Format("2006-01-02 15:04 MST")), html.EscapeString(fleetLine(opts, results[0])), opts.Rate, opts.Duration, opts.Pace)
	}
	// The pass/fail table: one row per goal, one column per scenario.
	if len(results) > 0 {
		b.WriteString(`<table><tr><th>goal</th>`)
		for _, r := range results {
			fmt.Fprintf(&b, `<th><a href="#%s">%s</a></th>`, r.Name, r.Name)
		}
		b.WriteString(`</tr>`)
		var names []string
		for _, r := range results {
			for _, g := range r.Goals {
				if !slices.Contains(names, g.Name) {
					names = append(names, g.Name)
				}
			}
		}
		for _, n := range names {
			fmt.Fprintf(&b, `<tr><td>%s</td>`, html.EscapeString(n))
			for _, r := range results {
				i := slices.IndexFunc(r.Goals, func(g Goal) bool { return g.Name == n })
				if i < 0 {
					b.WriteString(`<td class="na">–</td>`)
					continue
				}
				g := r.Goals[i]
				fmt.Fprintf(&b, `<td class="%s" title="%s">%s</td>`, verdictClass(g.Verdict), html.EscapeString(g.Measured), g.Verdict)
			}
			b.WriteString(`</tr>`)
		}
		b.WriteString(`</table>`)
	}
	for _, r := range results {
		s := r.Summarize()
		n := r.seconds()
		fmt.Fprintf(&b, `<h2 id="%s">%s</h2><p>%s</p>`, r.Name, r.Name, html.EscapeString(r.About))
		b.WriteString(`<table><tr><th>goal</th><th>target</th><th>measured</th><th>verdict</th></tr>`)
		for _, g := range r.Goals {
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%s</td><td class="%s">%s</td></tr>`,
				html.EscapeString(g.Name), html.EscapeString(g.Target), html.EscapeString(g.Measured), verdictClass(g.Verdict), g.Verdict)
		}
		b.WriteString(`</table><p class="muted">Fault timeline: `)
		for i, m := range r.Marks {
			if i > 0 {
				b.WriteString(" · ")
			}
			fmt.Fprintf(&b, "%.1f s %s", m.At.Seconds(), html.EscapeString(m.Label))
		}
		fmt.Fprintf(&b, `</p><p class="muted">%d turns (%s), %d answered; tiers %s; %d rerouted by the balancer; batch: %s</p>`,
			s.Sent, html.EscapeString(mapLine(s.Channels)), s.Answered, html.EscapeString(mapLine(s.Tiers)), s.Rerouted, html.EscapeString(batchLine(r.Batch)))
		fmt.Fprintf(&b, `<p class="muted">%s</p>`, html.EscapeString(liveLine(r.Live)))
		charts := []string{
			svgChart("Latency of answered turns (by second they ended)", "s", n, latencySeries(r, n), r.Marks, false, 0),
			svgChart("Tier mix: answers per second by the tier that served", "", n, tierSeries(r, n), r.Marks, true, 0),
			svgChart("Errors and 429s per second", "", n, errorSeries(r, n), r.Marks, false, 0),
			svgChart("Quota saturation (TPM, fleet-wide)", "", n, sampleSeries(r, n, func(s Sample) map[string]float64 { return s.Saturation }), r.Marks, false, 1),
			svgChart("Breaker states (0 closed, 1 half open, 2 open)", "", n, sampleSeries(r, n, func(s Sample) map[string]float64 {
				m := map[string]float64{}
				for k, v := range s.Breakers {
					m[k] = float64(v)
				}
				return m
			}), r.Marks, false, 2),
			svgChart("Upstream attempts per turn", "×", n, amplificationSeries(r, n), r.Marks, false, 0),
		}
		for _, c := range charts {
			b.WriteString(`<div class="chart">` + c + `</div>`)
		}
	}
	b.WriteString(`</body></html>`)
	return b.String()
}

func verdictClass(v Verdict) string {
	if v == NA {
		return "na"
	}
	return string(v)
}

func batchLine(bt BatchOutcome) string {
	if bt.Error != "" {
		return bt.Error
	}
	return fmt.Sprintf("%s, %d of %d completed, %d failed", bt.Status, bt.Completed, bt.Total, bt.Failed)
}

// liveLine says what the live feed showed at the end of the load.
func liveLine(v LiveView) string {
	if v.Error != "" {
		return "Live view: " + v.Error + "."
	}
	var parts []string
	for _, in := range v.Instances {
		parts = append(parts, fmt.Sprintf("%s %.1f turns/s, %d errors", in.ID, in.TurnsPerSecond, in.Errors))
	}
	line := fmt.Sprintf("Live view of instance 0 at the end of the load (last minute): %.1f turns/s, %d errors", v.TurnsPerSecond, v.Errors)
	if len(parts) > 0 {
		line += fmt.Sprintf(" over %d instances (%s)", len(v.Instances), strings.Join(parts, "; "))
	}
	if v.FleetError != "" {
		line += "; fleet view failed: " + v.FleetError
	}
	return line + "."
}
