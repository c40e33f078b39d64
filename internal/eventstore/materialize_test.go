package eventstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

// fakeClock is a settable clock, safe for the store's loops to read.
type fakeClock struct{ ns atomic.Int64 }

func newClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func openCfg(t testing.TB, cfg Config, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testConfig(path string) Config {
	cfg := DefaultConfig()
	cfg.Path = path
	cfg.Retention = 0
	return cfg
}

// crash closes the store's database as a killed process would: the sums
// not yet materialized are lost.
func crash(s *Store) {
	s.stop()
	<-s.done
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.closeDBs()
}

func meta(t *testing.T, s *Store, key string) int64 {
	t.Helper()
	var v int64
	if err := s.w.QueryRow(`SELECT value FROM meta WHERE key = ?`, key).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestRecoverAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	cfg := testConfig(path)
	cfg.MaterializeSpans = 7
	clock := newClock(t0.Add(time.Hour))
	s := openCfg(t, cfg, clock.now)
	write(t, s, dataset[:2]...) // 6 spans: below the threshold
	write(t, s, dataset[2:]...) // 6 more: materialized with this batch
	write(t, s, canary[0])      // 2 spans left pending
	if got := meta(t, s, "materialized"); got != 12 {
		t.Fatalf("materialized up to span %d, want 12", got)
	}
	crash(s)

	s = openCfg(t, cfg, clock.now)
	if got := meta(t, s, "materialized"); got != 14 {
		t.Errorf("after recovery materialized up to %d, want 14", got)
	}
	ctx := context.Background()
	rep, err := s.Cost(ctx, Query{By: ByTurn, From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Spans != 14 || rep.Total.Turns != 6 || !near(rep.Total.CostUSD, 0.036) || len(rep.Rows) != 6 {
		t.Fatalf("after recovery: %+v, %d rows; want 14 spans, 6 turns, $0.036", rep.Total, len(rep.Rows))
	}
	cmp, err := s.Compare(ctx, ByPrompt, "p1", "planner-prompt-v23", t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if cmp.A.Turns != 1 || cmp.A.EvalCount != 1 || cmp.B.Turns != 2 {
		t.Errorf("compare after recovery: %+v / %+v", cmp.A, cmp.B)
	}
	// Replaying what the crash may have lost stores nothing twice.
	write(t, s, dataset...)
	write(t, s, canary[0])
	rep, err = s.Cost(ctx, Query{From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Spans != 14 || !near(rep.Total.CostUSD, 0.036) {
		t.Errorf("after replay: %+v", rep.Total)
	}
}

func TestMaterializeThresholds(t *testing.T) {
	cfg := testConfig(":memory:")
	cfg.MaterializeSpans = 10
	cfg.MaterializeInterval = 5 * time.Second
	clock := newClock(t0)
	s := openCfg(t, cfg, clock.now)
	steps := []struct {
		name    string
		advance time.Duration
		turns   []turnSpec
		want    int64
	}{
		{"below both", 0, dataset[:1], 0},
		{"still below", 4 * time.Second, dataset[1:2], 0},
		{"interval reached", 2 * time.Second, dataset[2:3], 8},
		{"count not reached again", 0, dataset[3:4], 8},
		{"count reached", 0, canary[:4], 8 + 2 + 8},
		{"a new pending span", 0, dataset[4:], 18},
	}
	for _, st := range steps {
		clock.advance(st.advance)
		write(t, s, st.turns...)
		if got := meta(t, s, "materialized"); got != st.want {
			t.Errorf("%s: materialized up to %d, want %d", st.name, got, st.want)
		}
	}
	// A view writes the rest first.
	rep, err := s.Cost(context.Background(), Query{From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got := meta(t, s, "materialized"); got != 20 || rep.Total.Spans != 20 {
		t.Errorf("after a view: materialized %d, %d spans; want 20", got, rep.Total.Spans)
	}
}

func TestMaterializeWithoutWrites(t *testing.T) {
	cfg := testConfig(filepath.Join(t.TempDir(), "events.db"))
	cfg.MaterializeInterval = time.Millisecond
	clock := newClock(t0)
	s := openCfg(t, cfg, clock.now)
	write(t, s, dataset[0])
	clock.advance(time.Second)
	// The loop's ticker is real time; the clock says the sums are due.
	deadline := time.Now().Add(10 * time.Second)
	for meta(t, s, "materialized") != 3 {
		if time.Now().After(deadline) {
			t.Fatal("pending sums not written by the loop")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTurnAcrossMaterializations(t *testing.T) {
	cfg := testConfig(":memory:")
	cfg.MaterializeSpans = 1
	s := openCfg(t, cfg, func() time.Time { return t0.Add(time.Hour) })
	ctx := context.Background()
	spans := canary[4].build() // two children, then the root, which starts first
	for i := range spans {
		if err := s.Write(ctx, spans[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Cost(ctx, Query{By: ByTurn, From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 {
		t.Fatalf("rows = %+v, want one turn", rep.Rows)
	}
	r := rep.Rows[0]
	if r.Key != traceID(104) || r.Spans != 3 || r.Turns != 1 || !near(r.CostUSD, 0.005) || r.Turn.RootSpanID != spanID(104, 0) ||
		!r.Turn.Start.Equal(t0.Add(4*time.Second)) || r.Turn.DurationMS != 400 {
		t.Errorf("turn = %+v %+v", r, r.Turn)
	}
	// Each version row moved with the turn's start: counted once.
	for _, v := range []struct{ dim, a, b string }{{ByPrompt, "p1", "p2"}, {ByModel, "sonnet", "haiku"}} {
		cmp, err := s.Compare(ctx, v.dim, v.a, v.b, t0, t0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if cmp.A.Turns != 1 || cmp.B.Turns != 1 || cmp.A.LatencyP50MS != 400 || !near(cmp.A.CostUSD, 0.005) {
			t.Errorf("compare %s = %+v / %+v", v.dim, cmp.A, cmp.B)
		}
	}
	if n, err := versionEntries(s); err != nil || n != 5 {
		t.Errorf("version entries = %d (%v), want 5 (g2, p1, p2, sonnet, haiku)", n, err)
	}
}

// versionEntries counts the turns' version entries: in chunks and in
// turn_versions rows.
func versionEntries(s *Store) (int, error) {
	var n int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM turn_versions`).Scan(&n); err != nil {
		return 0, err
	}
	starts, err := chunkStarts(s)
	return n + len(starts), err
}

// chunkStarts lists the start of the turn of every entry of the version
// chunks.
func chunkStarts(s *Store) ([]int64, error) {
	var out []int64
	err := eachChunkEntry(context.Background(), s.r, func(_, ts, _ int64, _ []byte) error {
		out = append(out, ts)
		return nil
	})
	return out, err
}

// TestPruneTrimsChunks: a prune within a minute drops the entries of the
// turns started before it from that minute's chunks and keeps the others.
func TestPruneTrimsChunks(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ctx := context.Background()
	if err := s.sync(ctx); err != nil {
		t.Fatal(err)
	}
	b := t0.Add(1500 * time.Millisecond).UnixMilli() // after turns 0 and 1, before turn 2
	before, err := chunkStarts(s)
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, ts := range before {
		if ts >= b {
			kept++
		}
	}
	if kept == len(before) || kept == 0 {
		t.Fatalf("%d of %d entries start after the prune: the test needs both", kept, len(before))
	}
	if err := s.Prune(ctx, time.UnixMilli(b)); err != nil {
		t.Fatal(err)
	}
	after, err := chunkStarts(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range after {
		if ts < b {
			t.Errorf("an entry of a turn started at %d is left after pruning before %d", ts, b)
		}
	}
	if len(after) != kept {
		t.Errorf("%d entries left, want %d", len(after), kept)
	}
	cmp, err := s.Compare(ctx, "prompt", "planner-prompt-v24", "faq-v1", t0.Add(-time.Hour), t0.Add(time.Hour))
	if err != nil || cmp.A.Turns != 1 || cmp.B.Turns != 2 {
		t.Errorf("compare after prune = %+v / %+v (%v), want turn 2 / turns 3 and 4", cmp.A, cmp.B, err)
	}
}

func TestLateSpanBeyondWindow(t *testing.T) {
	cfg := testConfig(":memory:")
	cfg.MaterializeSpans = 1
	cfg.TurnWindow = time.Minute
	s := openCfg(t, cfg, func() time.Time { return t0.Add(24 * time.Hour) })
	ctx := context.Background()
	late := dataset[0].build()
	write(t, s, dataset[1:]...)
	// Traffic an hour later moves the known window on.
	write(t, s, turnSpec{n: 50, user: "zed", feature: "faq", graph: "v17.4", at: time.Hour,
		spans: []span{{name: "answer", model: "haiku", prompt: "faq-v1", cost: 0.1}}})
	// Turn 0's tool span arrives last, and its root is lost: the turn is
	// found by a search.
	if err := s.Write(ctx, late[1:2]); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, late[0:1]); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Cost(ctx, Query{By: ByTurn, Trace: traceID(0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Spans != 2 || !near(rep.Rows[0].CostUSD, 0.005) {
		t.Errorf("turn 0 = %+v, want one row of 2 spans, $0.005", rep.Rows)
	}
	tr, err := s.Trace(ctx, traceID(0))
	if err != nil || len(tr.Spans) != 2 {
		t.Errorf("trace of turn 0: %d spans, %v", len(tr.Spans), err)
	}
}

// TestLateEarlierPartBeyondWindow: a turn's later span is stored first;
// its earlier spans (the root among them, in the minute before) arrive
// once the known window has moved on. The search finds the stored part
// after them, and the turn stays one row.
func TestLateEarlierPartBeyondWindow(t *testing.T) {
	cfg := testConfig(":memory:")
	cfg.MaterializeSpans = 1
	cfg.TurnWindow = time.Minute
	s := openCfg(t, cfg, func() time.Time { return t0.Add(24 * time.Hour) })
	ctx := context.Background()
	turn := turnSpec{n: 0, user: "alice", feature: "recommend", graph: "v17.4", at: 59 * time.Second, spans: []span{
		{name: "plan", model: "sonnet", prompt: "planner-prompt-v23", cost: 0.004},
		{name: "tool", tool: "search", cost: 0.001}}}.build()
	turn[1].TSStart = turn[1].TSStart.Add(2 * time.Second) // the tool span starts in the next minute
	if err := s.Write(ctx, turn[1:2]); err != nil {
		t.Fatal(err)
	}
	write(t, s, turnSpec{n: 50, user: "zed", feature: "faq", graph: "v17.4", at: time.Hour,
		spans: []span{{name: "answer", model: "haiku", prompt: "faq-v1", cost: 0.1}}})
	if err := s.Write(ctx, []events.Event{turn[0], turn[2]}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Cost(ctx, Query{By: ByTurn, From: t0, To: t0.Add(10 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Spans != 3 || rep.Rows[0].Turns != 1 || !near(rep.Rows[0].CostUSD, 0.005) {
		t.Errorf("turns = %+v, want one row of 3 spans, $0.005", rep.Rows)
	}
	an, err := s.AnomalousTurns(ctx, t0, t0.Add(10*time.Minute))
	if err != nil || an.Turns != 1 {
		t.Errorf("anomaly statistics over %d turns (%v), want 1", an.Turns, err)
	}
	cmp, err := s.Compare(ctx, "model", "sonnet", "haiku", t0, t0.Add(10*time.Minute))
	if err != nil || cmp.A.Turns != 1 || !near(cmp.A.CostUSD, 0.005) {
		t.Errorf("compare sonnet = %+v (%v), want one turn of $0.005", cmp.A, err)
	}
}

func TestReplayMixedBatch(t *testing.T) {
	s := openTest(t, ":memory:")
	ctx := context.Background()
	write(t, s, dataset[0])
	old, fresh := dataset[0].build(), dataset[1].build()
	// Stored and new spans in one statement, and one new span twice.
	batch := []events.Event{old[0], fresh[0], old[1], fresh[1], fresh[1], old[2], fresh[2]}
	if err := s.Write(ctx, batch); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Cost(ctx, Query{By: ByTurn, From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	got := keyed(rep.Rows)
	if rep.Total.Spans != 6 || got[traceID(0)].Spans != 3 || got[traceID(1)].Spans != 3 || !near(got[traceID(1)].CostUSD, 0.008) {
		t.Errorf("total %+v, turns %+v", rep.Total, rep.Rows)
	}
	var n int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM events`).Scan(&n); err != nil || n != 6 {
		t.Errorf("stored spans = %d (%v), want 6", n, err)
	}
}

// TestViewsMatchSpans checks the roll-up plans (levels, edges, filters)
// against sums taken directly over the spans written, on random ranges.
func TestViewsMatchSpans(t *testing.T) {
	// A file: views that read every turn do it in parts at once.
	s := openTest(t, filepath.Join(t.TempDir(), "events.db"))
	ctx := context.Background()
	g := &synth{rng: rand.New(rand.NewPCG(3, 4)), start: t0.Add(-13*time.Hour - 7*time.Second), step: 157 * time.Second, users: 40}
	var all []events.Event
	for range 1200 { // 52 hours
		all = g.turn(all)
	}
	for i := range all {
		all[i].Resource.TokensOut += i % 7
		if i%11 == 0 {
			all[i].Outcome.Status = events.StatusFailed
		}
		if i%13 == 0 {
			all[i].Outcome.FallbackUsed = "haiku"
		}
	}
	if err := s.Write(ctx, all); err != nil {
		t.Fatal(err)
	}
	lo, hi := all[0].TSStart, all[len(all)-1].TSStart
	span := hi.Sub(lo)
	rng := rand.New(rand.NewPCG(5, 6))
	randTime := func() time.Time {
		d := time.Duration(rng.Int64N(int64(span + 2*time.Hour)))
		t := lo.Add(-time.Hour + d)
		switch rng.IntN(4) {
		case 0:
			return t.Truncate(time.Hour)
		case 1:
			return t.Truncate(time.Minute)
		}
		return t.Truncate(time.Millisecond)
	}
	brute := func(q Query, key func(*events.Event) string) map[string]*agg {
		out := map[string]*agg{}
		for i := range all {
			e := &all[i]
			if e.TSStart.Before(q.From) || !e.TSStart.Before(q.To) || !spanMatches(e, &q) {
				continue
			}
			k := key(e)
			if out[k] == nil {
				out[k] = &agg{}
			}
			out[k].addSpan(e, e.TSStart.UnixMilli())
		}
		return out
	}
	same := func(a *agg, r CostRow) bool {
		want := a.row(r.Key)
		return r.Spans == want.Spans && r.Turns == want.Turns && r.TokensIn == want.TokensIn && r.TokensOut == want.TokensOut &&
			r.Errors == want.Errors && r.Fallbacks == want.Fallbacks && math.Abs(r.CostUSD-want.CostUSD) < 1e-9 &&
			math.Abs(r.AvgLatencyMS-want.AvgLatencyMS) < 1e-9
	}
	bys := []string{ByTotal, ByFeature, ByLocale, ByModel, ByPrompt, ByTool, ByTier, ByGraph}
	for i := range 60 {
		from, to := randTime(), randTime()
		if !from.Before(to) {
			from, to = to, from.Add(time.Millisecond)
		}
		q := Query{By: bys[i%len(bys)], From: from, To: to, Limit: MaxLimit}
		switch i % 5 {
		case 1:
			q.ModelID = synthModels[i%len(synthModels)]
		case 2:
			q.Feature, q.GraphVersion = synthFeatures[i%len(synthFeatures)], synthGraphs[i%2]
		case 3:
			q.PromptVersion, q.ToolID = synthPrompts[i%len(synthPrompts)], ""
		}
		name := fmt.Sprintf("%d by %s %s..%s", i, q.By, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
		rep, err := s.Cost(ctx, q)
		if err != nil {
			t.Fatal(name, err)
		}
		want := brute(q, func(e *events.Event) string {
			if q.By == ByTotal {
				return ""
			}
			return spanKey(e, q.By)
		})
		if len(rep.Rows) != len(want) {
			t.Errorf("%s: %d rows, want %d", name, len(rep.Rows), len(want))
		}
		for _, r := range rep.Rows {
			if w := want[r.Key]; w == nil || !same(w, r) {
				t.Errorf("%s: %q = %+v, want %+v", name, r.Key, r, w)
			}
		}

		// The same range as a series, with a step dividing a day or not.
		steps := []time.Duration{time.Minute, 7 * time.Minute, 10 * time.Minute, time.Hour, 90 * time.Minute, 24 * time.Hour}
		step := steps[i%len(steps)]
		sq := Query{From: from, To: to, ModelID: q.ModelID, Feature: q.Feature, GraphVersion: q.GraphVersion, PromptVersion: q.PromptVersion}
		if n := seriesPoints(from.UnixMilli(), to.UnixMilli(), step.Milliseconds()); n > MaxSeriesPoints {
			continue
		}
		ser, err := s.Series(ctx, sq, step)
		if err != nil {
			t.Fatal(name, err)
		}
		origin := floorTo(from.UnixMilli(), step.Milliseconds())
		wantPts := brute(sq, func(e *events.Event) string {
			return fmt.Sprint((e.TSStart.UnixMilli() - origin) / step.Milliseconds())
		})
		for j, p := range ser.Points {
			w := wantPts[fmt.Sprint(j)]
			if w == nil {
				w = &agg{}
			}
			r := CostRow{Spans: p.Spans, Turns: p.Turns, TokensIn: p.TokensIn, TokensOut: p.TokensOut, Errors: p.Errors,
				Fallbacks: p.Fallbacks, CostUSD: p.CostUSD, AvgLatencyMS: p.AvgLatencyMS}
			if !same(w, r) {
				t.Errorf("%s step %v point %d (%v) = %+v, want %+v", name, step, j, p.T, p, w.row(""))
			}
		}
	}

	// Per user, from the turns (whole turns that started in range) and
	// from the per-turn version sums (a model filter).
	turnStart := map[string]time.Time{}
	for i := range all {
		if st, ok := turnStart[all[i].TraceID]; !ok || all[i].TSStart.Before(st) {
			turnStart[all[i].TraceID] = all[i].TSStart
		}
	}
	for i := range 12 {
		from, to := randTime(), randTime()
		if !from.Before(to) {
			from, to = to, from.Add(time.Millisecond)
		}
		q := Query{By: ByUser, From: from, To: to, Limit: MaxLimit}
		if i%2 == 1 {
			q.ModelID = synthModels[i%len(synthModels)]
		}
		if i%3 == 2 {
			q.Feature = synthFeatures[i%len(synthFeatures)]
		}
		want := map[string]*agg{}
		for j := range all {
			e := &all[j]
			st := turnStart[e.TraceID]
			if st.Before(from) || !st.Before(to) || (q.ModelID != "" && e.Artifact.ModelID != q.ModelID) ||
				(q.Feature != "" && e.Attribution.Feature != q.Feature) {
				continue
			}
			if want[e.UserIDHash] == nil {
				want[e.UserIDHash] = &agg{}
			}
			want[e.UserIDHash].addSpan(e, e.TSStart.UnixMilli())
		}
		rep, err := s.Cost(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("by user, model %q, feature %q, %s..%s", q.ModelID, q.Feature, from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
		if len(rep.Rows) != len(want) {
			t.Errorf("%s: %d users, want %d", name, len(rep.Rows), len(want))
		}
		for _, r := range rep.Rows {
			if w := want[r.Key]; w == nil || !same(w, r) {
				t.Errorf("%s: %q = %+v, want %+v", name, r.Key, r, w)
			}
		}
	}

	// Versions over a random range.
	from, to := randTime(), randTime()
	if to.Before(from) {
		from, to = to, from
	}
	vr, err := s.Versions(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		list []VersionSeen
		by   string
	}{{vr.Graph, ByGraph}, {vr.Prompt, ByPrompt}, {vr.Model, ByModel}, {vr.Tool, ByTool}} {
		want := brute(Query{From: from, To: to}, func(e *events.Event) string { return spanKey(e, d.by) })
		delete(want, "")
		if len(d.list) != len(want) {
			t.Errorf("versions by %s: %+v, want %d", d.by, d.list, len(want))
		}
		for _, v := range d.list {
			w := want[v.Version]
			if w == nil || v.Spans != w.spans || v.FirstSeen.UnixMilli() != w.first || v.LastSeen.UnixMilli() != w.last {
				t.Errorf("versions by %s: %+v, want %+v", d.by, v, w)
			}
		}
		if !slices.IsSortedFunc(d.list, func(a, b VersionSeen) int { return b.LastSeen.Compare(a.LastSeen) }) {
			t.Errorf("versions by %s not most recent first", d.by)
		}
	}
}

// TestWritesOfShrinkingBatches checks that what one write leaves in the
// buffers kept for the next is never counted again: a large batch, then
// smaller ones (one replaying part of the first), each turn's figures
// are those of its spans.
func TestWritesOfShrinkingBatches(t *testing.T) {
	s := openTest(t, ":memory:")
	ctx := context.Background()
	g := &synth{rng: rand.New(rand.NewPCG(3, 4)), start: t0, step: time.Second, users: 10}
	var all []events.Event
	for range 6 {
		all = g.turn(all)
	}
	batches := [][]events.Event{all[:3*spansPerTurn], all[3*spansPerTurn : 4*spansPerTurn], all[spansPerTurn-2 : spansPerTurn+1], all[4*spansPerTurn:]}
	for _, b := range batches {
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]CostRow{}
	for i := range all {
		e := &all[i]
		r := want[e.TraceID]
		r.Spans++
		r.CostUSD += e.Resource.CostUSD
		r.TokensIn += int64(e.Resource.TokensIn)
		want[e.TraceID] = r
	}
	rep, err := s.Cost(ctx, Query{By: ByTurn, From: t0, To: t0.Add(time.Hour), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := keyed(rep.Rows)
	if len(got) != len(want) || rep.Total.Spans != int64(len(all)) {
		t.Fatalf("%d turns, %d spans; want %d turns, %d spans", len(got), rep.Total.Spans, len(want), len(all))
	}
	for trace, w := range want {
		g := got[trace]
		if g.Spans != w.Spans || g.TokensIn != w.TokensIn || math.Abs(g.CostUSD-w.CostUSD) > 1e-9 {
			t.Errorf("turn %s: %d spans, %d tokens in, $%g; want %d, %d, $%g", trace, g.Spans, g.TokensIn, g.CostUSD, w.Spans, w.TokensIn, w.CostUSD)
		}
	}
}

// TestPacerPausesLongWritesOnly: a write runs its statements without a
// pause until it has run pauseEvery; then it pauses and counts again from
// the pause.
func TestPacerPausesLongWritesOnly(t *testing.T) {
	clock := time.Unix(1000, 0)
	p := pacer{now: func() time.Time { return clock }}
	p.start()
	clock = clock.Add(pauseEvery - time.Microsecond)
	p.statement()
	if !p.since.Equal(time.Unix(1000, 0)) {
		t.Fatal("a write that ran less than pauseEvery paused")
	}
	clock = clock.Add(time.Microsecond)
	p.statement()
	if !p.since.Equal(clock) {
		t.Fatal("a write that ran pauseEvery did not pause")
	}
	clock = clock.Add(pauseEvery - time.Microsecond)
	p.statement()
	if p.since.Equal(clock) {
		t.Fatal("the pause did not start the count again")
	}
}
