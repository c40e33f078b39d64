package metrics

import (
	"context"
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/fmgate/fmgate/internal/events"
)

var t0 = time.Date(2026, 4, 29, 14, 2, 13, 0, time.UTC)

// testModels are the configured names and ids of the MangaAssist profile.
var testModels = []string{"sonnet", "haiku", "claude-sonnet-4-6", "claude-haiku-4-5"}

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newTest(t testing.TB, opts Options) (*Metrics, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: t0}
	if opts.Models == nil {
		opts.Models = testModels
	}
	if opts.Now == nil {
		opts.Now = clk.now
	}
	if opts.StateTimeout == 0 {
		// Ample, so that a loaded machine never turns a read into a timeout;
		// the tests of timeouts set their own.
		opts.StateTimeout = time.Minute
	}
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, clk
}

type spanOpt func(*events.Event)

// mk builds a finished span named name: trace "t1", span id "s-"+name,
// starting at t0 and lasting 0 unless opts say otherwise.
func mk(name string, opts ...spanOpt) events.Event {
	e := events.Event{
		SchemaVersion: events.SchemaVersion,
		TraceID:       "t1",
		SpanID:        "s-" + name,
		Name:          name,
		TSStart:       t0,
		TSEnd:         t0,
		Outcome:       events.Outcome{Status: events.StatusOK},
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func at(start time.Time, d time.Duration) spanOpt {
	return func(e *events.Event) {
		e.TSStart, e.TSEnd, e.DurationMS = start, start.Add(d), d.Milliseconds()
	}
}

func node(id string) spanOpt { return func(e *events.Event) { e.Node.NodeID = id } }

func ids(trace, span, parent string) spanOpt {
	return func(e *events.Event) { e.TraceID, e.SpanID, e.ParentSpanID = trace, span, parent }
}

func surface(s string) spanOpt { return func(e *events.Event) { e.Attribution.Surface = s } }
func model(id string) spanOpt  { return func(e *events.Event) { e.Artifact.ModelID = id } }
func code(c string) spanOpt    { return func(e *events.Event) { e.Outcome.ErrorCode = c } }
func fb(tier string) spanOpt   { return func(e *events.Event) { e.Outcome.FallbackUsed = tier } }
func cost(usd float64) spanOpt { return func(e *events.Event) { e.Resource.CostUSD = usd } }

func status(s events.Status) spanOpt { return func(e *events.Event) { e.Outcome.Status = s } }

func tokens(in, out int) spanOpt {
	return func(e *events.Event) { e.Resource.TokensIn, e.Resource.TokensOut = in, out }
}

func write(t testing.TB, m *Metrics, batch ...events.Event) {
	t.Helper()
	if err := m.Write(context.Background(), batch); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// gather returns the registry's families by name.
func gather(t testing.TB, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(fams))
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// series finds the series of family name whose labels are exactly kv
// (name, value pairs); nil when absent.
func series(fams map[string]*dto.MetricFamily, name string, kv ...string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		want[kv[i]] = kv[i+1]
	}
next:
	for _, mt := range f.GetMetric() {
		if len(mt.GetLabel()) != len(want) {
			continue
		}
		for _, l := range mt.GetLabel() {
			if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
				continue next
			}
		}
		return mt
	}
	return nil
}

// value is a series' counter or gauge value, or a histogram's sample
// count; -1 when the series is absent.
func value(fams map[string]*dto.MetricFamily, name string, kv ...string) float64 {
	mt := series(fams, name, kv...)
	switch {
	case mt == nil:
		return -1
	case mt.Counter != nil:
		return mt.GetCounter().GetValue()
	case mt.Gauge != nil:
		return mt.GetGauge().GetValue()
	case mt.Histogram != nil:
		return float64(mt.GetHistogram().GetSampleCount())
	}
	return -1
}

// bucket is the cumulative count of a histogram series at upper bound le.
func bucket(fams map[string]*dto.MetricFamily, le float64, name string, kv ...string) float64 {
	mt := series(fams, name, kv...)
	if mt == nil || mt.Histogram == nil {
		return -1
	}
	for _, b := range mt.GetHistogram().GetBucket() {
		if b.GetUpperBound() == le {
			return float64(b.GetCumulativeCount())
		}
	}
	return -1
}

func fmtLabels(kv ...string) string { return fmt.Sprint(kv) }

// want is one expected series value (-1 for "absent").
type want struct {
	name string
	kv   []string
	v    float64
}

func check(t *testing.T, fams map[string]*dto.MetricFamily, ws []want) {
	t.Helper()
	for _, w := range ws {
		got := value(fams, w.name, w.kv...)
		if diff := got - w.v; diff > 1e-12 || diff < -1e-12 {
			t.Errorf("%s%s = %v, want %v", w.name, fmtLabels(w.kv...), got, w.v)
		}
	}
}
