package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// Percentiles are read from the full sorted sample by nearest rank: the
// p-th percentile is the smallest value with at least p% of the sample at
// or below it.
type Percentiles struct {
	N                        int
	P50, P90, P99, P999, Max time.Duration
}

// Summarize sorts a copy of sample and reads its percentiles.
func Summarize(sample []time.Duration) Percentiles {
	s := slices.Clone(sample)
	slices.Sort(s)
	p := Percentiles{N: len(s)}
	if len(s) == 0 {
		return p
	}
	p.P50, p.P90, p.P99, p.P999 = rank(s, 50), rank(s, 90), rank(s, 99), rank(s, 99.9)
	p.Max = s[len(s)-1]
	return p
}

// rank is the nearest-rank percentile of a sorted, non-empty sample.
func rank(sorted []time.Duration, pct float64) time.Duration {
	// The epsilon keeps 99.9% of 1,000 at rank 999: in floating point it
	// comes out a hair above.
	i := int(math.Ceil(pct/100*float64(len(sorted))-1e-9)) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Report prints res for people, then one "RESULT" line of key=value pairs
// (milliseconds) for scripts. label names the run in the RESULT line.
func Report(w io.Writer, label string, res *Result) {
	total, ttfb := Summarize(res.Total), Summarize(res.TTFB)
	achieved := 0.0
	if res.Elapsed > 0 {
		achieved = float64(res.Measured()) / res.Elapsed.Seconds()
	}
	fmt.Fprintf(w, "%s: scheduled %d, sent %d, overflow %d, late %d, ok %d, excluded %d, non2xx %d, errors %d, warm-up %d, achieved %.1f req/s over %s\n",
		label, res.Scheduled, res.Sent, res.Overflow, res.Late, total.N, res.Excluded, res.Non2xx, res.Errors, res.Warmup,
		achieved, res.Elapsed.Round(time.Millisecond))
	for _, row := range []struct {
		name string
		p    Percentiles
	}{{"total", total}, {"ttfb", ttfb}} {
		fmt.Fprintf(w, "  %-5s ms  p50 %8.3f  p90 %8.3f  p99 %8.3f  p99.9 %8.3f  max %8.3f\n",
			row.name, ms(row.p.P50), ms(row.p.P90), ms(row.p.P99), ms(row.p.P999), ms(row.p.Max))
	}
	for _, e := range res.FirstErrors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
	fmt.Fprintf(w, "RESULT label=%s ok=%d excluded=%d non2xx=%d errors=%d overflow=%d late=%d rate=%.1f"+
		" p50=%.3f p90=%.3f p99=%.3f p999=%.3f max=%.3f"+
		" ttfb_p50=%.3f ttfb_p90=%.3f ttfb_p99=%.3f ttfb_p999=%.3f ttfb_max=%.3f\n",
		label, total.N, res.Excluded, res.Non2xx, res.Errors, res.Overflow, res.Late, achieved,
		ms(total.P50), ms(total.P90), ms(total.P99), ms(total.P999), ms(total.Max),
		ms(ttfb.P50), ms(ttfb.P90), ms(ttfb.P99), ms(ttfb.P999), ms(ttfb.Max))
}
