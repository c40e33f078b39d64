// Package storetest is the conformance suite of the event stores: every
// implementation of eventstore.Views that stores spans (the embedded SQLite
// store, the PostgreSQL store) must answer the same questions about the
// same spans with the same figures. The expected figures are computed here
// from the spans themselves, by brute force, with the rules the views
// document.
package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// Backend is a store under test.
type Backend interface {
	eventstore.Views
	// Write stores a batch, skipping spans already stored.
	Write(ctx context.Context, batch []events.Event) error
}

// T0 is the start of the suite's spans (a whole hour).
var T0 = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

// Dataset returns n turns' spans, deterministic for seed. Turns start about
// every 37 seconds from T0 (some an hour before); every span of a turn
// shares its feature, graph version and attribution, and starts at its own
// millisecond.
func Dataset(seed uint64, n int) []events.Event { return DatasetEvery(seed, n, 37*time.Second) }

// DatasetEvery is Dataset with turns starting every (about) every: 86ms is
// MangaAssist's 1M turns a day.
func DatasetEvery(seed uint64, n int, every time.Duration) []events.Event {
	return DatasetUsers(seed, n, every, 5)
}

// UserHash is the user_id_hash of user k of a dataset with more than five
// users.
func UserHash(k int) string { return fmt.Sprintf("%016x", uint64(k)*0x9e3779b97f4a7c15+1) }

// DatasetUsers is DatasetEvery with users users (five: fixed hashes; more:
// UserHash(0..users-1)), each turn's user drawn at random.
func DatasetUsers(seed uint64, n int, every time.Duration, users int) []events.Event {
	r := rand.New(rand.NewPCG(seed, 1))
	hashes := []string{"a1b2c3d4e5f60718", "0f1e2d3c4b5a6978", "deadbeefcafe0001", "1111222233334444", "9999888877776666"}
	if users > len(hashes) {
		hashes = make([]string, users)
		for k := range hashes {
			hashes[k] = UserHash(k)
		}
	}
	return dataset(r, seed, n, every, hashes)
}

func dataset(r *rand.Rand, seed uint64, n int, every time.Duration, users []string) []events.Event {
	features := []string{"chat", "recommend", "order_status"}
	var out []events.Event
	for i := range n {
		start := T0.Add(time.Duration(i)*every + time.Duration(r.IntN(900))*time.Millisecond)
		if i%17 == 0 {
			start = start.Add(-time.Hour)
		}
		trace := fmt.Sprintf("%016x%016x", seed, uint64(i)*7919+1)
		attr := events.Attribution{Feature: features[r.IntN(len(features))], Surface: []string{"web", "app"}[r.IntN(2)],
			Locale: []string{"ja", "en"}[r.IntN(2)], UserTier: []string{"free", "premium"}[r.IntN(2)]}
		graph := []string{"g1", "g2"}[r.IntN(2)]
		user := users[r.IntN(len(users))]
		span := func(k int, name string, offset, dur time.Duration) events.Event {
			e := events.Event{SchemaVersion: 3, TraceID: trace, SpanID: fmt.Sprintf("%08x%08x", uint32(i), uint32(k)),
				WorkflowID: trace, SessionID: "s-" + user[:4], UserIDHash: user, Name: name,
				TSStart: start.Add(offset), DurationMS: dur.Milliseconds(), Attribution: attr}
			e.TSEnd = e.TSStart.Add(dur)
			e.Node = events.Node{GraphVersion: graph, NodeID: name, InvocationMode: events.ModeSyncStreaming}
			e.Artifact.ArtifactKind = events.KindInternal
			e.Outcome.Status = events.StatusOK
			e.Resource.CapabilityFlagsActive = []string{}
			return e
		}
		total := time.Duration(200+r.IntN(3000)) * time.Millisecond
		root := span(0, "turn", 0, total)
		if r.IntN(4) == 0 {
			v := float64(r.IntN(100)) / 100
			root.Outcome.EvalScore = &v
		}
		if i%11 == 0 {
			root.MustPersist = true
		}
		spans := []events.Event{span(1, "admit", time.Millisecond, 2*time.Millisecond)}
		k := 2
		prompt := []string{"p1", "p2"}[r.IntN(2)]
		attempt := func(model string, fail bool) {
			e := span(k, "model_attempt", time.Duration(3+k)*time.Millisecond, time.Duration(100+r.IntN(900))*time.Millisecond)
			k++
			e.Artifact.ArtifactKind = events.KindLLMCall
			e.Artifact.ModelID, e.Artifact.PromptVersion = model, prompt
			e.Resource.TokensIn, e.Resource.TokensOut = 100+r.IntN(900), 20+r.IntN(400)
			e.Resource.CostUSD = float64(e.Resource.TokensIn)*3e-6 + float64(e.Resource.TokensOut)*15e-6
			if fail {
				e.Outcome.Status, e.Outcome.ErrorCode = events.StatusFailed, "throttled"
				e.Resource.TokensOut, e.Resource.CostUSD = 0, 0
			}
			spans = append(spans, e)
		}
		switch r.IntN(5) {
		case 0:
			attempt("sonnet-v1", true)
			attempt("haiku-v1", false)
			root.Outcome.FallbackUsed = "haiku"
			root.Outcome.Status = events.StatusFallback
		case 1:
			attempt("haiku-v1", false)
		default:
			attempt("sonnet-v1", false)
		}
		if r.IntN(3) == 0 {
			e := span(k, "tool", time.Duration(3+k)*time.Millisecond, 40*time.Millisecond)
			k++
			e.Artifact.ArtifactKind, e.Artifact.ToolID, e.Artifact.ToolVersion = events.KindToolCall, "catalog", "t1"
			e.Resource.CostUSD = 0.0001 * float64(1+r.IntN(1000)) // no two alike: ties would make the order at a limit arbitrary
			spans = append(spans, e)
		}
		if attr.Feature == "order_status" {
			// A lookup whose cost climbs over the day (a rising feature).
			e := span(k, "lookup", time.Duration(3+k)*time.Millisecond, 20*time.Millisecond)
			k++
			e.Resource.CostUSD = 0.05 * (1 + float64(i)/float64(n))
			spans = append(spans, e)
		}
		if i%97 == 50 {
			// A runaway tool loop: an anomalous turn.
			e := span(k, "tool", time.Duration(3+k)*time.Millisecond, 4*time.Second)
			k++
			e.Artifact.ArtifactKind, e.Artifact.ToolID, e.Artifact.ToolVersion = events.KindToolCall, "catalog", "t1"
			e.Resource.CostUSD = 3.5
			spans = append(spans, e)
		}
		rec := span(k, "record", total-time.Millisecond, time.Millisecond)
		rec.Resource.CostUSD = 0.00045
		rec.MustPersist = true
		out = append(out, root)
		out = append(out, spans...)
		out = append(out, rec)
	}
	return out
}

// Sample returns a copy of data as a gateway with trace sampling emits it:
// the turn span of every turn that is neither head-sampled (one trace in
// every) nor failed, fallen back, errored or at least slow long is marked
// events.Event.SampledOut.
func Sample(data []events.Event, every int, slow time.Duration) []events.Event {
	out := slices.Clone(data)
	n := 0
	for i := range out {
		e := &out[i]
		if e.Name != "turn" {
			continue
		}
		d := *e
		d.Sampled = n%every == 0
		n++
		e.SampledOut = !events.TailSampled(&d, slow)
	}
	return out
}

// PromptCache returns a copy of data in which model attempts read and
// wrote the vendor's prompt cache, as their input tokens decide (so that
// the rest of the dataset stays as it was): three in four read part of
// their input, some of those and others wrote part of it, and a quarter
// did neither. The money saved is at $3 per million plain input tokens,
// a tenth of that for reads and 1.25 times it for writes, so that a span
// that only wrote saved a negative amount.
func PromptCache(data []events.Event) []events.Event {
	const plain, read, write = 3e-6, 0.3e-6, 3.75e-6
	out := slices.Clone(data)
	for i := range out {
		r := &out[i].Resource
		if out[i].Name != "model_attempt" || r.TokensIn == 0 {
			continue
		}
		switch r.TokensIn % 4 {
		case 0:
			r.TokensCacheRead = r.TokensIn * 3 / 4
		case 1:
			r.TokensCacheRead, r.TokensCacheWrite = r.TokensIn/2, r.TokensIn/4
		case 2:
			r.TokensCacheWrite = r.TokensIn / 2
		}
		r.CacheSavedUSD = float64(r.TokensCacheRead)*(plain-read) - float64(r.TokensCacheWrite)*(write-plain)
	}
	return out
}

// Run runs the suite; open returns an empty store. The same spans are
// written to two stores, whole and as a gateway sampling traces emits them
// (Sample): every view of both must give the figures of the whole spans,
// while the sampled store keeps fewer spans whole.
func Run(t *testing.T, open func(t *testing.T) Backend) {
	data := PromptCache(Dataset(7, 240))
	sampled := Sample(data, 20, 3*time.Second)
	whole, thin := open(t), open(t)
	load(t, whole, data)
	load(t, thin, sampled)
	t.Run("Whole", func(t *testing.T) { run(t, whole, data) })
	t.Run("Sampled", func(t *testing.T) { run(t, thin, sampled) })
	t.Run("ForgetUser", func(t *testing.T) { forgetUser(t, open(t), data) })
	t.Run("KeyAudit", func(t *testing.T) { keyAudit(t, open(t), data) })
	t.Run("SampledKeepsFewerSpans", func(t *testing.T) {
		ref := newReference(sampled)
		count := func(s Backend) (n int) {
			for trace := range ref.turns {
				rep, err := s.Trace(context.Background(), trace)
				if err != nil {
					t.Fatal(err)
				}
				n += len(rep.Spans)
			}
			return n
		}
		kept := 0
		for i := range sampled {
			if ref.keptWhole(&sampled[i]) {
				kept++
			}
		}
		w, s := count(whole), count(thin)
		if w != len(data) || s != kept || s >= w {
			t.Fatalf("trace views show %d spans whole and %d sampled; want %d and %d", w, s, len(data), kept)
		}
		t.Logf("%d of %d spans kept whole", s, w)
	})
}

// load writes data to s as spans arrive: shuffled (a turn span before or
// after its steps), in batches, and some twice (a redelivery).
func load(t *testing.T, s Backend, data []events.Event) {
	ctx := context.Background()
	shuffled := slices.Clone(data)
	r := rand.New(rand.NewPCG(3, 4))
	r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for i := 0; i < len(shuffled); i += 97 {
		if err := s.Write(ctx, shuffled[i:min(i+97, len(shuffled))]); err != nil {
			t.Fatal(err)
		}
	}
	replay := append(slices.Clone(shuffled[100:400]), shuffled[100:150]...)
	if err := s.Write(ctx, replay); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, s Backend, data []events.Event) {
	ctx := context.Background()
	ref := newReference(data)

	from, to := T0.Add(90*time.Second+123*time.Millisecond), T0.Add(2*time.Hour+17*time.Minute+5*time.Millisecond)
	wide := [2]time.Time{T0.Add(-2 * time.Hour), T0.Add(4 * time.Hour)}
	someTrace := data[len(data)/2].TraceID
	someUser := data[len(data)/3].UserIDHash
	// A trace sampled out, when there is one, is shown per span too.
	outTrace := someTrace
	for _, e := range data {
		if e.SampledOut {
			outTrace = e.TraceID
			break
		}
	}
	queries := []eventstore.Query{
		{By: eventstore.ByTotal, From: wide[0], To: wide[1]},
		{By: eventstore.ByTotal, From: from, To: to},
		{By: eventstore.ByTotal, From: T0, To: T0.Add(time.Hour)},
		{By: eventstore.ByTotal, From: T0.Add(10 * time.Second), To: T0.Add(50 * time.Second)},
		{By: eventstore.ByFeature, From: from, To: to},
		{By: eventstore.ByModel, From: from, To: to, Feature: "chat"},
		{By: eventstore.ByPrompt, From: from, To: to, GraphVersion: "g2"},
		{By: eventstore.ByGraph, From: wide[0], To: wide[1], ModelID: "haiku-v1"},
		{By: eventstore.ByTool, From: from, To: to},
		{By: eventstore.ByLocale, From: from, To: to},
		{By: eventstore.BySurface, From: from, To: to, PromptVersion: "p1"},
		{By: eventstore.ByTier, From: from, To: to},
		{By: eventstore.ByUser, From: from, To: to},
		{By: eventstore.ByUser, From: from, To: to, Limit: 2},
		{By: eventstore.ByUser, From: from, To: to, Feature: "recommend", GraphVersion: "g1"},
		{By: eventstore.ByUser, From: from, To: to, Feature: "chat"},
		{By: eventstore.ByUser, From: wide[0], To: wide[1], Feature: "recommend", Limit: 3},
		{By: eventstore.ByUser, From: T0.Add(-34 * time.Hour), To: T0.Add(38 * time.Hour), Feature: "order_status"},
		// Most of a day, whose first hours hold spans outside the range.
		{By: eventstore.ByUser, From: T0.Add(50 * time.Minute), To: T0.Add(14*time.Hour + 30*time.Minute), Feature: "chat"},
		{By: eventstore.ByUser, From: T0.Add(50 * time.Minute), To: T0.Add(14*time.Hour + 30*time.Minute)},
		{By: eventstore.ByUser, From: T0.Add(-20 * time.Hour), To: T0.Add(30 * time.Hour), Feature: "recommend"},
		{By: eventstore.ByTurn, From: from, To: to, Limit: 5},
		{By: eventstore.ByTurn, From: from, To: to, User: someUser, Limit: 1000},
		{By: eventstore.ByUser, From: wide[0], To: wide[1], ModelID: "sonnet-v1"},
		{By: eventstore.ByTurn, From: wide[0], To: wide[1], ToolID: "catalog", Limit: 7},
		{By: eventstore.ByFeature, From: from, To: to, User: someUser},
		{By: eventstore.ByModel, From: from, To: to, Trace: someTrace},
		{By: eventstore.ByNode, Trace: someTrace},
		{By: eventstore.ByNode, Trace: someTrace, ModelID: "sonnet-v1"},
		{By: eventstore.ByNode, Trace: outTrace},
		{By: eventstore.ByTool, Trace: outTrace},
	}
	for _, q := range queries {
		t.Run(fmt.Sprintf("%s%+v", q.By, describe(q)), func(t *testing.T) {
			got, err := s.Cost(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.cost(q)
			compareReports(t, got, want)
		})
	}
	t.Run("PromptCache", func(t *testing.T) { promptCache(ctx, t, s, ref, from, to, wide) })
	t.Run("TopUsers", func(t *testing.T) {
		got, err := s.TopUsers(ctx, from, to, 3)
		if err != nil {
			t.Fatal(err)
		}
		compareReports(t, got, ref.cost(eventstore.Query{By: eventstore.ByUser, From: from, To: to, Limit: 3}))
	})
	// A trace view shows every span of a sampled turn, and of a turn that
	// was not its turn span and must-persist records.
	t.Run("Trace", func(t *testing.T) {
		for _, trace := range []string{someTrace, outTrace} {
			got, err := s.Trace(ctx, trace)
			if err != nil {
				t.Fatal(err)
			}
			var want []events.Event
			for _, e := range data {
				if e.TraceID == trace && ref.keptWhole(&e) {
					want = append(want, e)
				}
			}
			slices.SortFunc(want, func(a, b events.Event) int { return a.TSStart.Compare(b.TSStart) })
			if len(got.Spans) != len(want) {
				t.Fatalf("trace %s has %d spans, want %d", trace, len(got.Spans), len(want))
			}
			for i := range want {
				g, w := events.Encode(&got.Spans[i]), events.Encode(&want[i])
				if string(g) != string(w) {
					t.Errorf("span %d:\n got %s\nwant %s", i, g, w)
				}
			}
		}
	})
	for _, c := range []struct {
		q    eventstore.Query
		step time.Duration
	}{
		{eventstore.Query{From: from, To: to}, time.Minute},
		{eventstore.Query{From: from, To: to, ModelID: "haiku-v1"}, 5 * time.Minute},
		{eventstore.Query{From: wide[0], To: wide[1], Feature: "chat"}, time.Hour},
		{eventstore.Query{From: from, To: to}, 0},
	} {
		t.Run(fmt.Sprintf("Series%v%s", c.step, describe(c.q)), func(t *testing.T) {
			got, err := s.Series(ctx, c.q, c.step)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.series(t, c.q, c.step)
			if got.StepSeconds != want.StepSeconds || len(got.Points) != len(want.Points) {
				t.Fatalf("step %d s, %d points; want %d s, %d points", got.StepSeconds, len(got.Points), want.StepSeconds, len(want.Points))
			}
			for i, w := range want.Points {
				g := got.Points[i]
				if !g.T.Equal(w.T) || g.Turns != w.Turns || g.Spans != w.Spans || g.Errors != w.Errors || g.Fallbacks != w.Fallbacks ||
					g.TokensIn != w.TokensIn || g.TokensOut != w.TokensOut || !near(g.CostUSD, w.CostUSD) || !near(g.AvgLatencyMS, w.AvgLatencyMS) {
					t.Errorf("point %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
		})
	}
	t.Run("Versions", func(t *testing.T) {
		got, err := s.Versions(ctx, from, to)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.versions(from, to)
		for i, pair := range [][2][]eventstore.VersionSeen{{got.Graph, want.Graph}, {got.Prompt, want.Prompt}, {got.Model, want.Model}, {got.Tool, want.Tool}} {
			if fmt.Sprint(pair[0]) != fmt.Sprint(pair[1]) {
				t.Errorf("dimension %d:\n got %v\nwant %v", i, pair[0], pair[1])
			}
		}
	})
	t.Run("AnomalousTurns", func(t *testing.T) {
		got, err := s.AnomalousTurns(ctx, wide[0], wide[1])
		if err != nil {
			t.Fatal(err)
		}
		want := ref.anomalies(wide[0], wide[1])
		if got.Turns != want.Turns || !nearish(got.MedianUSD, want.MedianUSD) || !nearish(got.StdDevUSD, want.StdDevUSD) {
			t.Fatalf("turns %d median %v σ %v; want %d, %v, %v", got.Turns, got.MedianUSD, got.StdDevUSD, want.Turns, want.MedianUSD, want.StdDevUSD)
		}
		if len(want.Rows) == 0 {
			t.Fatal("the dataset has no anomalous turn")
		}
		compareReports(t, eventstore.CostReport{Rows: got.Rows}, eventstore.CostReport{Rows: want.Rows})
	})
	t.Run("RisingFeatures", func(t *testing.T) {
		got, err := s.RisingFeatures(ctx, T0, T0.Add(150*time.Minute), 2)
		if err != nil {
			t.Fatal(err)
		}
		want := ref.rising(T0, T0.Add(150*time.Minute), 2)
		if len(want) == 0 {
			t.Fatal("the dataset has no rising feature")
		}
		if len(got) != len(want) {
			t.Fatalf("rising %v, want %v", got, want)
		}
		for i := range want {
			if got[i].Feature != want[i].Feature || !near(got[i].Rise, want[i].Rise) {
				t.Errorf("rising %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	})
	t.Run("Compare", func(t *testing.T) {
		got, err := s.Compare(ctx, eventstore.ByModel, "sonnet-v1", "haiku-v1", from, to)
		if err != nil {
			t.Fatal(err)
		}
		for i, side := range []eventstore.CompareSide{got.A, got.B} {
			want := ref.compareSide(side.Version, from, to)
			if side.Turns != want.Turns || side.Errors != want.Errors || side.Fallbacks != want.Fallbacks ||
				!near(side.CostUSD, want.CostUSD) || side.LatencyP50MS != want.LatencyP50MS || side.LatencyP99MS != want.LatencyP99MS ||
				side.EvalCount != want.EvalCount || !near(side.EvalMean, want.EvalMean) {
				t.Errorf("side %d:\n got %+v\nwant %+v", i, side, want)
			}
		}
	})
	for _, q := range []eventstore.Query{
		{By: eventstore.ByTotal, From: wide[0], To: wide[1]},
		{By: eventstore.ByFeature, From: from, To: to},
		{By: eventstore.ByModel, From: wide[0], To: wide[1]},
		{By: eventstore.ByGraph, From: wide[0], To: wide[1], PromptVersion: "p2", ModelID: "sonnet-v1"},
	} {
		t.Run("Eval"+q.By+describe(q), func(t *testing.T) {
			got, err := s.Eval(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.eval(q)
			same := func(a, b eventstore.EvalRow) bool {
				return a.Key == b.Key && a.Turns == b.Turns && near(a.AvgScore, b.AvgScore) && a.MinScore == b.MinScore && a.MaxScore == b.MaxScore
			}
			ok := same(got.Total, want.Total) && len(got.Rows) == len(want.Rows)
			for i := range want.Rows {
				ok = ok && same(got.Rows[i], want.Rows[i])
			}
			if !ok {
				t.Errorf("eval:\n got %+v %+v\nwant %+v %+v", got.Total, got.Rows, want.Total, want.Rows)
			}
		})
	}
	t.Run("SetEvalScore", func(t *testing.T) {
		if err := s.SetEvalScore(ctx, someTrace, 0.25); err != nil {
			t.Fatal(err)
		}
		got, err := s.Eval(ctx, eventstore.Query{Trace: someTrace, From: wide[0], To: wide[1]})
		if err != nil || got.Total.Turns != 1 || got.Total.AvgScore != 0.25 {
			t.Fatalf("eval of the scored trace = %+v (%v), want one turn scored 0.25", got.Total, err)
		}
		tr, err := s.Trace(ctx, someTrace)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tr.Spans {
			if e.Name == "turn" && (e.Outcome.EvalScore == nil || *e.Outcome.EvalScore != 0.25) {
				t.Fatalf("root span after SetEvalScore: %+v", e.Outcome)
			}
		}
		if err := s.SetEvalScore(ctx, "00000000000000000000000000000001", 0.5); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("SetEvalScore of an unknown trace = %v, want ErrNotFound", err)
		}
	})
	t.Run("UnknownTrace", func(t *testing.T) {
		if _, err := s.Trace(ctx, "00000000000000000000000000000001"); !errors.Is(err, eventstore.ErrNotFound) {
			t.Fatalf("Trace of an unknown id = %v, want ErrNotFound", err)
		}
		if _, err := s.Trace(ctx, "nope"); !errors.Is(err, eventstore.ErrInvalid) {
			t.Fatalf("Trace of a malformed id = %v, want ErrInvalid", err)
		}
	})
	t.Run("BadQuery", func(t *testing.T) {
		if _, err := s.Cost(ctx, eventstore.Query{By: "colour"}); !errors.Is(err, eventstore.ErrInvalid) {
			t.Fatalf("Cost by an unknown grouping = %v, want ErrInvalid", err)
		}
	})
	// Last: it adds spans far from the dataset's.
	t.Run("TurnMovesToAnEarlierHour", func(t *testing.T) { turnMoves(ctx, t, s) })
}

// promptCache checks the prompt cache's figures of the cost views that
// group by model and by prompt version, and of the total: the tokens read
// and written and the money saved are the spans' sums, and the read ratio
// is the tokens read over the input tokens. The ranges cover whole days,
// hours and minutes of the roll-ups and partial minutes read from the
// spans.
func promptCache(ctx context.Context, t *testing.T, s Backend, ref *reference, from, to time.Time, wide [2]time.Time) {
	for _, q := range []eventstore.Query{
		{By: eventstore.ByModel, From: wide[0], To: wide[1]},
		{By: eventstore.ByModel, From: from, To: to},
		{By: eventstore.ByPrompt, From: wide[0], To: wide[1]},
		{By: eventstore.ByPrompt, From: from, To: to, ModelID: "sonnet-v1"},
		{By: eventstore.ByTotal, From: from, To: to},
	} {
		t.Run(q.By+describe(q), func(t *testing.T) {
			got, err := s.Cost(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want := ref.cost(q)
			compareReports(t, got, want)
			// The dataset must exercise the figures: reads and writes in
			// every model and prompt version of the spans.
			if q.By == eventstore.ByTotal {
				return
			}
			for _, r := range got.Rows {
				if r.Key == "" {
					continue
				}
				if r.CacheReadTokens == 0 || r.CacheWriteTokens == 0 || r.CacheReadRatio <= 0 || r.CacheReadRatio >= 1 {
					t.Errorf("%s: %d read, %d written, ratio %v; the dataset reads and writes the cache in every group",
						r.Key, r.CacheReadTokens, r.CacheWriteTokens, r.CacheReadRatio)
				}
				if want := float64(r.CacheReadTokens) / float64(r.TokensIn); r.CacheReadRatio != want {
					t.Errorf("%s: read ratio %v, want %d / %d = %v", r.Key, r.CacheReadRatio, r.CacheReadTokens, r.TokensIn, want)
				}
			}
		})
	}
	// Per user and per turn, the views leave them out, whichever path
	// answers (the turns, or the spans of the turns selected).
	for _, q := range []eventstore.Query{
		{By: eventstore.ByUser, From: wide[0], To: wide[1]},
		{By: eventstore.ByUser, From: wide[0], To: wide[1], ModelID: "sonnet-v1"},
		{By: eventstore.ByTurn, From: wide[0], To: wide[1], ModelID: "sonnet-v1", PromptVersion: "p1", Limit: 5},
	} {
		got, err := s.Cost(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range append(got.Rows, got.Total) {
			if r.CacheReadTokens != 0 || r.CacheWriteTokens != 0 || r.CacheSavedUSD != 0 || r.CacheReadRatio != 0 {
				t.Errorf("%s%s row %q carries cache figures: %+v", q.By, describe(q), r.Key, r)
			}
		}
	}
}

// turnMoves checks a feature's users when a turn's root, delivered after
// one of its spans, moves the turn's start into the previous hour: the
// turn counts, whole, in the hour it now starts in, and no longer in the
// one it seemed to start in.
func turnMoves(ctx context.Context, t *testing.T, s Backend) {
	hour := T0.Add(30 * time.Hour)
	const trace, user = "00000000000000ab00000000000000cd", "feedfacefeedface"
	span := func(id, name string, at time.Time, cost float64) events.Event {
		e := events.Event{SchemaVersion: 3, TraceID: trace, SpanID: id, WorkflowID: trace, SessionID: "s-move",
			UserIDHash: user, Name: name, TSStart: at, TSEnd: at.Add(time.Millisecond), DurationMS: 1,
			Attribution: events.Attribution{Feature: "moving"}}
		e.Node = events.Node{GraphVersion: "g1", NodeID: name, InvocationMode: events.ModeSyncStreaming}
		e.Artifact.ArtifactKind = events.KindInternal
		e.Outcome.Status = events.StatusOK
		e.Resource.CostUSD = cost
		e.Resource.CapabilityFlagsActive = []string{}
		return e
	}
	users := func(from, to time.Time) eventstore.CostReport {
		t.Helper()
		rep, err := s.Cost(ctx, eventstore.Query{By: eventstore.ByUser, Feature: "moving", From: from, To: to})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if err := s.Write(ctx, []events.Event{span("00000000000000a1", "model_attempt", hour.Add(500*time.Millisecond), 0.25)}); err != nil {
		t.Fatal(err)
	}
	if got := users(hour, hour.Add(time.Hour)); len(got.Rows) != 1 || got.Rows[0].Key != user || !near(got.Rows[0].CostUSD, 0.25) {
		t.Fatalf("before the root: %+v", got.Rows)
	}
	if err := s.Write(ctx, []events.Event{span("00000000000000a0", "turn", hour.Add(-100*time.Millisecond), 0.5)}); err != nil {
		t.Fatal(err)
	}
	if got := users(hour, hour.Add(time.Hour)); len(got.Rows) != 0 || got.Total.Spans != 0 {
		t.Errorf("the turn now starts in the previous hour, yet the next hour has %+v (total %+v)", got.Rows, got.Total)
	}
	for _, r := range [][2]time.Time{{hour.Add(-time.Hour), hour}, {hour.Add(-30 * time.Hour), hour.Add(30 * time.Hour)}} {
		got := users(r[0], r[1])
		if len(got.Rows) != 1 || got.Rows[0].Turns != 1 || got.Rows[0].Spans != 2 || !near(got.Rows[0].CostUSD, 0.75) {
			t.Errorf("%v – %v: %+v, want the whole turn: 2 spans, $0.75", r[0], r[1], got.Rows)
		}
	}
}

func describe(q eventstore.Query) string {
	s := fmt.Sprintf("[%s,%s)", q.From.Sub(T0), q.To.Sub(T0))
	for _, f := range []struct{ k, v string }{{"graph", q.GraphVersion}, {"prompt", q.PromptVersion}, {"model", q.ModelID},
		{"tool", q.ToolID}, {"feature", q.Feature}, {"user", q.User}, {"trace", q.Trace}} {
		if f.v != "" {
			s += " " + f.k + "=" + f.v
		}
	}
	if q.Limit > 0 {
		s += fmt.Sprintf(" limit=%d", q.Limit)
	}
	return s
}

// nearish allows the rounding of statistics computed another way.
func nearish(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1e-9, math.Abs(a), math.Abs(b)) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(a), math.Abs(b)) }

func compareRow(t *testing.T, what string, got, want eventstore.CostRow) {
	t.Helper()
	if got.Key != want.Key || got.Turns != want.Turns || got.Spans != want.Spans || got.TokensIn != want.TokensIn ||
		got.TokensOut != want.TokensOut || got.Errors != want.Errors || got.Fallbacks != want.Fallbacks ||
		!near(got.CostUSD, want.CostUSD) || !near(got.AvgLatencyMS, want.AvgLatencyMS) || !near(got.CostPerTurn, want.CostPerTurn) ||
		got.CacheReadTokens != want.CacheReadTokens || got.CacheWriteTokens != want.CacheWriteTokens ||
		!near(got.CacheSavedUSD, want.CacheSavedUSD) || !near(got.CacheReadRatio, want.CacheReadRatio) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
	if want.Turn != nil {
		g, w := got.Turn, want.Turn
		if g == nil || g.TraceID != w.TraceID || g.RootSpanID != w.RootSpanID || g.UserIDHash != w.UserIDHash ||
			g.Feature != w.Feature || g.GraphVersion != w.GraphVersion || g.Locale != w.Locale || !g.Start.Equal(w.Start) ||
			g.DurationMS != w.DurationMS || (g.EvalScore == nil) != (w.EvalScore == nil) || (w.EvalScore != nil && *g.EvalScore != *w.EvalScore) {
			t.Errorf("%s turn:\n got %+v\nwant %+v", what, g, w)
		}
	}
	if want.Span != nil {
		g, w := got.Span, want.Span
		if g == nil || g.SpanID != w.SpanID || g.ParentSpanID != w.ParentSpanID || g.Name != w.Name || g.ModelID != w.ModelID ||
			g.Status != w.Status || !g.Start.Equal(w.Start) || g.DurationMS != w.DurationMS {
			t.Errorf("%s span:\n got %+v\nwant %+v", what, got.Span, want.Span)
		}
	}
}

func compareReports(t *testing.T, got, want eventstore.CostReport) {
	t.Helper()
	compareRow(t, "total", got.Total, want.Total)
	if len(got.Rows) != len(want.Rows) {
		t.Fatalf("%d rows %v, want %d %v", len(got.Rows), keys(got.Rows), len(want.Rows), keys(want.Rows))
	}
	for i := range want.Rows {
		compareRow(t, fmt.Sprintf("row %d", i), got.Rows[i], want.Rows[i])
	}
}

func keys(rows []eventstore.CostRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Key
	}
	return out
}

// reference answers cost queries by brute force.
type reference struct {
	spans []events.Event
	turns map[string]*turn
}

// keptWhole reports whether a store keeps e whole: unless its turn was
// sampled out, and then only its turn span and must-persist records.
func (r *reference) keptWhole(e *events.Event) bool {
	return !r.turns[e.TraceID].sampledOut || e.Name == "turn" || e.MustPersist
}

type turn struct {
	sampledOut                         bool
	trace                              string
	start                              time.Time
	user, feature, graph, locale, root string
	duration                           int64
	eval                               *float64
	spans                              []events.Event
}

func newReference(data []events.Event) *reference {
	r := &reference{spans: data, turns: map[string]*turn{}}
	for _, e := range data {
		t := r.turns[e.TraceID]
		if t == nil {
			t = &turn{trace: e.TraceID, start: e.TSStart}
			r.turns[e.TraceID] = t
		}
		if e.TSStart.Before(t.start) {
			t.start = e.TSStart
		}
		t.user, t.feature, t.graph, t.locale = e.UserIDHash, e.Attribution.Feature, e.Node.GraphVersion, e.Attribution.Locale
		if e.Name == "turn" {
			t.root, t.duration, t.eval = e.SpanID, e.DurationMS, e.Outcome.EvalScore
			t.sampledOut = e.SampledOut
		}
		t.spans = append(t.spans, e)
	}
	return r
}

type sum struct {
	row     eventstore.CostRow
	latency int64
}

func (s *sum) add(e *events.Event) {
	s.row.Spans++
	if e.Name == "turn" {
		s.row.Turns++
	}
	s.row.TokensIn += int64(e.Resource.TokensIn)
	s.row.TokensOut += int64(e.Resource.TokensOut)
	s.row.CostUSD += e.Resource.CostUSD
	s.row.CacheReadTokens += int64(e.Resource.TokensCacheRead)
	s.row.CacheWriteTokens += int64(e.Resource.TokensCacheWrite)
	s.row.CacheSavedUSD += e.Resource.CacheSavedUSD
	if e.Outcome.Status == events.StatusFailed {
		s.row.Errors++
	}
	if e.Outcome.Status == events.StatusFallback || e.Outcome.FallbackUsed != "" {
		s.row.Fallbacks++
	}
	s.latency += e.DurationMS
}

func (s *sum) done(key string) eventstore.CostRow {
	r := s.row
	r.Key = key
	if r.Spans > 0 {
		r.AvgLatencyMS = float64(s.latency) / float64(r.Spans)
	}
	if r.Turns > 0 {
		r.CostPerTurn = r.CostUSD / float64(r.Turns)
	}
	if r.TokensIn > 0 {
		r.CacheReadRatio = float64(r.CacheReadTokens) / float64(r.TokensIn)
	}
	return r
}

// noCache zeroes the prompt cache's figures, which per-user and per-turn
// views leave out.
func noCache(r *eventstore.CostRow) {
	r.CacheReadTokens, r.CacheWriteTokens, r.CacheSavedUSD, r.CacheReadRatio = 0, 0, 0, 0
}

func spanKey(e *events.Event, by string) string {
	switch by {
	case eventstore.ByFeature:
		return e.Attribution.Feature
	case eventstore.ByModel:
		return e.Artifact.ModelID
	case eventstore.ByPrompt:
		return e.Artifact.PromptVersion
	case eventstore.ByGraph:
		return e.Node.GraphVersion
	case eventstore.ByTool:
		return e.Artifact.ToolID
	case eventstore.ByLocale:
		return e.Attribution.Locale
	case eventstore.BySurface:
		return e.Attribution.Surface
	case eventstore.ByTier:
		return e.Attribution.UserTier
	case eventstore.ByUser:
		return e.UserIDHash
	case eventstore.ByTurn:
		return e.TraceID
	}
	return ""
}

func matches(e *events.Event, q *eventstore.Query) bool {
	return (q.GraphVersion == "" || q.GraphVersion == e.Node.GraphVersion) &&
		(q.PromptVersion == "" || q.PromptVersion == e.Artifact.PromptVersion) &&
		(q.ModelID == "" || q.ModelID == e.Artifact.ModelID) &&
		(q.ToolID == "" || q.ToolID == e.Artifact.ToolID) &&
		(q.Feature == "" || q.Feature == e.Attribution.Feature) &&
		(q.User == "" || q.User == e.UserIDHash)
}

func (r *reference) cost(q eventstore.Query) eventstore.CostReport {
	if q.Limit == 0 {
		q.Limit = eventstore.DefaultLimit
	}
	groups := map[string]*sum{}
	var total sum
	add := func(k string, e *events.Event) {
		g := groups[k]
		if g == nil {
			g = &sum{}
			groups[k] = g
		}
		g.add(e)
		total.add(e)
	}
	inRange := func(ts time.Time) bool { return !ts.Before(q.From) && ts.Before(q.To) }
	spanFilters := q.PromptVersion != "" || q.ModelID != "" || q.ToolID != ""
	var rows []eventstore.CostRow
	switch {
	case q.By == eventstore.ByNode:
		t := r.turns[q.Trace]
		sp := slices.Clone(t.spans)
		slices.SortFunc(sp, func(a, b events.Event) int { return a.TSStart.Compare(b.TSStart) })
		for i := range sp {
			if matches(&sp[i], &q) {
				e := sp[i]
				if !r.keptWhole(&e) {
					// A tally: the span's figures without its ids.
					e.SpanID, e.ParentSpanID = "", ""
				}
				rows = append(rows, eventstore.NodeRow(&e, e.TSStart.UnixMilli()))
				total.add(&sp[i])
			}
		}
		return eventstore.CostReport{Total: total.done(""), Rows: rows}
	case (q.By == eventstore.ByUser || q.By == eventstore.ByTurn) && !spanFilters && q.Trace == "":
		for _, t := range r.turns {
			if !inRange(t.start) || (q.User != "" && t.user != q.User) || (q.Feature != "" && t.feature != q.Feature) ||
				(q.GraphVersion != "" && t.graph != q.GraphVersion) {
				continue
			}
			k := t.trace
			if q.By == eventstore.ByUser {
				k = t.user
			}
			for i := range t.spans {
				add(k, &t.spans[i])
			}
		}
	case q.By == eventstore.ByUser || q.By == eventstore.ByTurn || q.User != "" || q.Trace != "":
		for _, t := range r.turns {
			if q.Trace != "" && t.trace != q.Trace || q.Trace == "" && (!inRange(t.start) || q.User != "" && t.user != q.User) {
				continue
			}
			for i := range t.spans {
				if matches(&t.spans[i], &q) {
					add(spanKey(&t.spans[i], q.By), &t.spans[i])
				}
			}
		}
	default:
		for i := range r.spans {
			if e := &r.spans[i]; inRange(e.TSStart) && matches(e, &q) {
				add(spanKey(e, q.By), e)
			}
		}
	}
	for k, g := range groups {
		rows = append(rows, g.done(k))
	}
	slices.SortFunc(rows, func(a, b eventstore.CostRow) int {
		return cmp.Or(cmp.Compare(b.CostUSD, a.CostUSD), cmp.Compare(a.Key, b.Key))
	})
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
	}
	if q.By == eventstore.ByTurn {
		for i := range rows {
			t := r.turns[rows[i].Key]
			rows[i].Turn = &eventstore.TurnInfo{TraceID: t.trace, RootSpanID: t.root, UserIDHash: t.user, Feature: t.feature,
				GraphVersion: t.graph, Locale: t.locale, Start: t.start.UTC(), DurationMS: t.duration, EvalScore: t.eval}
		}
	}
	tot := total.done("")
	if q.By == eventstore.ByUser || q.By == eventstore.ByTurn {
		noCache(&tot)
		for i := range rows {
			noCache(&rows[i])
		}
	}
	return eventstore.CostReport{Total: tot, Rows: rows}
}

func (r *reference) series(t *testing.T, q eventstore.Query, step time.Duration) eventstore.SeriesReport {
	q.By = eventstore.ByTotal
	if err := eventstore.Normalize(&q, q.To); err != nil {
		t.Fatal(err)
	}
	rep, err := eventstore.NewSeries(q, step)
	if err != nil {
		t.Fatal(err)
	}
	sums := make([]sum, len(rep.Points))
	stepMS := rep.StepSeconds * 1000
	origin := rep.Points[0].T.UnixMilli()
	for i := range r.spans {
		e := &r.spans[i]
		if e.TSStart.Before(q.From) || !e.TSStart.Before(q.To) || !matches(e, &q) {
			continue
		}
		sums[(e.TSStart.UnixMilli()-origin)/stepMS].add(e)
	}
	for i := range sums {
		row := sums[i].done("")
		p := &rep.Points[i]
		p.Turns, p.Spans, p.Errors, p.Fallbacks = row.Turns, row.Spans, row.Errors, row.Fallbacks
		p.TokensIn, p.TokensOut, p.CostUSD, p.AvgLatencyMS = row.TokensIn, row.TokensOut, row.CostUSD, row.AvgLatencyMS
	}
	return rep
}

func (r *reference) versions(from, to time.Time) eventstore.VersionsReport {
	seen := [4]map[string]*eventstore.VersionSeen{{}, {}, {}, {}}
	for _, e := range r.spans {
		if e.TSStart.Before(from) || !e.TSStart.Before(to) {
			continue
		}
		for i, v := range []string{e.Node.GraphVersion, e.Artifact.PromptVersion, e.Artifact.ModelID, e.Artifact.ToolID} {
			if v == "" {
				continue
			}
			vs := seen[i][v]
			if vs == nil {
				vs = &eventstore.VersionSeen{Version: v, FirstSeen: e.TSStart.UTC(), LastSeen: e.TSStart.UTC()}
				seen[i][v] = vs
			}
			vs.Spans++
			if e.TSStart.Before(vs.FirstSeen) {
				vs.FirstSeen = e.TSStart.UTC()
			}
			if e.TSStart.After(vs.LastSeen) {
				vs.LastSeen = e.TSStart.UTC()
			}
		}
	}
	var rep eventstore.VersionsReport
	for i, out := range []*[]eventstore.VersionSeen{&rep.Graph, &rep.Prompt, &rep.Model, &rep.Tool} {
		*out = []eventstore.VersionSeen{}
		for _, v := range seen[i] {
			*out = append(*out, *v)
		}
		slices.SortFunc(*out, func(a, b eventstore.VersionSeen) int {
			return cmp.Or(b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Version, b.Version))
		})
	}
	return rep
}

func (t *turn) cost() float64 {
	c := 0.0
	for _, e := range t.spans {
		c += e.Resource.CostUSD
	}
	return c
}

func (r *reference) turnsIn(from, to time.Time) []*turn {
	var out []*turn
	for _, t := range r.turns {
		if !t.start.Before(from) && t.start.Before(to) {
			out = append(out, t)
		}
	}
	return out
}

func (r *reference) anomalies(from, to time.Time) eventstore.AnomalyReport {
	turns := r.turnsIn(from, to)
	costs := make([]float64, len(turns))
	var total, sq float64
	for i, t := range turns {
		costs[i] = t.cost()
		total += costs[i]
		sq += costs[i] * costs[i]
	}
	slices.Sort(costs)
	n := len(costs)
	median := costs[n/2]
	if n%2 == 0 {
		median = (costs[n/2-1] + costs[n/2]) / 2
	}
	mean := total / float64(n)
	rep := eventstore.AnomalyReport{Turns: int64(n), MedianUSD: median, StdDevUSD: math.Sqrt(max(0, sq/float64(n)-mean*mean))}
	rep.ThresholdUSD = rep.MedianUSD + eventstore.AnomalySigmas*rep.StdDevUSD
	var rows []eventstore.CostRow
	for _, t := range turns {
		if t.cost() > rep.ThresholdUSD {
			q := eventstore.Query{By: eventstore.ByTurn, Trace: t.trace, Limit: 1}
			rows = append(rows, r.cost(q).Rows...)
		}
	}
	slices.SortFunc(rows, func(a, b eventstore.CostRow) int {
		return cmp.Or(cmp.Compare(b.CostUSD, a.CostUSD), cmp.Compare(a.Key, b.Key))
	})
	rep.Rows = rows
	return rep
}

func (r *reference) rising(from, to time.Time, periods int) []eventstore.RisingFeature {
	step := to.Sub(from) / time.Duration(periods)
	series := map[string][]eventstore.PeriodCost{}
	var order []string
	for i := range periods {
		rep := r.cost(eventstore.Query{By: eventstore.ByFeature, From: from.Add(time.Duration(i) * step), To: from.Add(time.Duration(i+1) * step)})
		for _, row := range rep.Rows {
			if series[row.Key] == nil {
				series[row.Key] = make([]eventstore.PeriodCost, periods)
				order = append(order, row.Key)
			}
			series[row.Key][i] = eventstore.PeriodCost{Start: from.Add(time.Duration(i) * step).UTC(), Turns: row.Turns, CostUSD: row.CostUSD, CostPerTurn: row.CostPerTurn}
		}
	}
	var out []eventstore.RisingFeature
	for _, f := range order {
		if rise, ok := eventstore.Rising(series[f]); ok {
			out = append(out, eventstore.RisingFeature{Feature: f, Rise: rise, Periods: series[f]})
		}
	}
	slices.SortStableFunc(out, func(a, b eventstore.RisingFeature) int { return cmp.Compare(b.Rise, a.Rise) })
	return out
}

func (t *turn) carries(model, prompt, tool string) bool {
	ok := [3]bool{model == "", prompt == "", tool == ""}
	for _, e := range t.spans {
		ok[0] = ok[0] || e.Artifact.ModelID == model
		ok[1] = ok[1] || e.Artifact.PromptVersion == prompt
		ok[2] = ok[2] || e.Artifact.ToolID == tool
	}
	return ok[0] && ok[1] && ok[2]
}

func (t *turn) rootStatus() events.Status {
	for _, e := range t.spans {
		if e.Name == "turn" {
			return e.Outcome.Status
		}
	}
	return ""
}

func (r *reference) compareSide(model string, from, to time.Time) eventstore.CompareSide {
	side := eventstore.CompareSide{Version: model}
	var durations []int64
	var evalSum float64
	for _, t := range r.turnsIn(from, to) {
		if t.root == "" || !t.carries(model, "", "") {
			continue
		}
		side.Turns++
		side.CostUSD += t.cost()
		durations = append(durations, t.duration)
		switch t.rootStatus() {
		case events.StatusFailed:
			side.Errors++
		case events.StatusFallback:
			side.Fallbacks++
		}
		if t.eval != nil {
			side.EvalCount++
			evalSum += *t.eval
		}
	}
	side.Finish(durations, evalSum)
	return side
}

func (r *reference) eval(q eventstore.Query) eventstore.EvalReport {
	if q.Limit == 0 {
		q.Limit = eventstore.DefaultLimit
	}
	type acc struct {
		n             int64
		sum, min, max float64
	}
	add := func(a *acc, v float64) {
		if a.n == 0 || v < a.min {
			a.min = v
		}
		if a.n == 0 || v > a.max {
			a.max = v
		}
		a.n++
		a.sum += v
	}
	row := func(k string, a *acc) eventstore.EvalRow {
		r := eventstore.EvalRow{Key: k, Turns: a.n, MinScore: a.min, MaxScore: a.max}
		if a.n > 0 {
			r.AvgScore = a.sum / float64(a.n)
		}
		return r
	}
	var total acc
	groups := map[string]*acc{}
	for _, t := range r.turnsIn(q.From, q.To) {
		if t.eval == nil || (q.GraphVersion != "" && t.graph != q.GraphVersion) || (q.Feature != "" && t.feature != q.Feature) ||
			!t.carries(q.ModelID, q.PromptVersion, q.ToolID) {
			continue
		}
		add(&total, *t.eval)
		keys := map[string]bool{}
		for _, e := range t.spans {
			switch q.By {
			case eventstore.ByTotal:
				keys[""] = true
			case eventstore.ByFeature:
				keys[t.feature] = true
			case eventstore.ByGraph:
				keys[t.graph] = true
			case eventstore.ByModel:
				if e.Artifact.ModelID != "" {
					keys[e.Artifact.ModelID] = true
				}
			}
		}
		for k := range keys {
			if groups[k] == nil {
				groups[k] = &acc{}
			}
			add(groups[k], *t.eval)
		}
	}
	rep := eventstore.EvalReport{Total: row("", &total), Rows: []eventstore.EvalRow{}}
	for k, a := range groups {
		rep.Rows = append(rep.Rows, row(k, a))
	}
	slices.SortFunc(rep.Rows, func(a, b eventstore.EvalRow) int {
		return cmp.Or(cmp.Compare(b.Turns, a.Turns), cmp.Compare(a.Key, b.Key))
	})
	if len(rep.Rows) > q.Limit {
		rep.Rows = rep.Rows[:q.Limit]
	}
	return rep
}

// forgetUser: a user's spans, once forgotten, carry a pseudonym instead of
// their user id hash and session ids, and no excerpt; every view then
// gives the figures of the spans as if the pseudonym had always been
// theirs — nothing is lost, nothing names them.
func forgetUser(t *testing.T, s Backend, data []events.Event) {
	ctx := context.Background()
	f, ok := s.(eventstore.Forgetter)
	if !ok {
		t.Fatalf("%T does not forget users", s)
	}
	data = slices.Clone(data)
	user := data[len(data)/3].UserIDHash
	var theirs int64
	var trace string
	for i := range data {
		if data[i].UserIDHash == user {
			data[i].PromptExcerpt = "what they asked"
			theirs++
			trace = data[i].TraceID
		}
	}
	load(t, s, data)
	pseudonym := eventstore.NewPseudonym()
	n, err := f.ForgetUser(ctx, user, pseudonym)
	if err != nil {
		t.Fatal(err)
	}
	if n != theirs {
		t.Errorf("ForgetUser changed %d spans; the user has %d", n, theirs)
	}
	forgotten := slices.Clone(data)
	for i := range forgotten {
		if forgotten[i].UserIDHash == user {
			forgotten[i].UserIDHash, forgotten[i].SessionID, forgotten[i].PromptExcerpt = pseudonym, pseudonym, ""
		}
	}
	rep, err := s.Trace(ctx, trace)
	if err != nil || len(rep.Spans) == 0 {
		t.Fatalf("Trace of a forgotten user's turn: %v, %v", rep, err)
	}
	for _, e := range rep.Spans {
		if e.UserIDHash != pseudonym || e.SessionID != pseudonym || e.PromptExcerpt != "" {
			t.Fatalf("a forgotten user's span: user %q session %q excerpt %q", e.UserIDHash, e.SessionID, e.PromptExcerpt)
		}
	}
	users, err := s.Cost(ctx, eventstore.Query{By: eventstore.ByUser, From: T0.Add(-2 * time.Hour), To: T0.Add(4 * time.Hour), User: user})
	if err != nil {
		t.Fatal(err)
	}
	if len(users.Rows) != 0 || users.Total.Spans != 0 {
		t.Fatalf("the forgotten user still has %d rows, %d spans", len(users.Rows), users.Total.Spans)
	}
	if n, err := f.ForgetUser(ctx, user, eventstore.NewPseudonym()); err != nil || n != 0 {
		t.Fatalf("forgetting them again changed %d spans (%v)", n, err)
	}
	run(t, s, forgotten)
}

// keyAudit: a key's audit spans are found by its session among every
// other span (turns of the same session id, other keys' changes), newest
// first, each once however often it was delivered, bounded by the limit.
func keyAudit(t *testing.T, s Backend, data []events.Event) {
	ctx := context.Background()
	a, ok := s.(eventstore.KeyAuditor)
	if !ok {
		t.Fatalf("%T does not read the key audit trail", s)
	}
	change := func(i int, session, action string) events.Event {
		at := T0.Add(time.Duration(i) * time.Minute)
		return events.Event{SchemaVersion: 3, TraceID: fmt.Sprintf("%016x%016x", 0xa0d17, i+1), SpanID: fmt.Sprintf("%016x", i+1),
			SessionID: session, Name: eventstore.KeyAuditSpan, MustPersist: true, TSStart: at, TSEnd: at.Add(time.Millisecond),
			PromptExcerpt: fmt.Sprintf("%s by %q", action, "admin token"),
			Node:          events.Node{InvocationMode: events.ModeSyncStreaming},
			Artifact:      events.Artifact{ArtifactKind: events.KindInternal},
			Resource:      events.Resource{CapabilityFlagsActive: []string{}},
			Outcome:       events.Outcome{Status: events.StatusOK, ErrorCode: "key_" + action},
			Attribution:   events.Attribution{Feature: eventstore.KeyAdminFeature, Surface: "admin"}}
	}
	mine, theirs := "5e55109a0000aaaa", "5e55109a0000bbbb"
	var audit []events.Event
	for i, action := range []string{"created", "updated", "updated", "rotated", "revoked"} {
		audit = append(audit, change(2*i, mine, action))
		if i < 2 {
			audit = append(audit, change(2*i+1, theirs, action))
		}
	}
	// A turn of a session with the same id is no change to a key.
	turns := slices.Clone(data[:40])
	for i := range turns {
		turns[i].SessionID = mine
	}
	for _, batch := range [][]events.Event{turns, audit, audit[:3]} { // the last delivered again
		if err := s.Write(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}

	actions := func(es []events.Event) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.Outcome.ErrorCode
			if e.Name != eventstore.KeyAuditSpan || e.SessionID != mine && e.SessionID != theirs || e.PromptExcerpt == "" {
				t.Fatalf("KeyAudit returned %+v", e)
			}
		}
		return out
	}
	got, err := a.KeyAudit(ctx, mine, 100)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"key_revoked", "key_rotated", "key_updated", "key_updated", "key_created"}; !slices.Equal(actions(got), want) {
		t.Fatalf("the key's trail %v, want %v (newest first)", actions(got), want)
	}
	for i := 1; i < len(got); i++ {
		if !got[i].TSStart.Before(got[i-1].TSStart) {
			t.Fatalf("change %d at %s is not older than the one before, at %s", i, got[i].TSStart, got[i-1].TSStart)
		}
	}
	if !got[0].TSStart.Equal(audit[len(audit)-1].TSStart) || got[0].PromptExcerpt != `revoked by "admin token"` {
		t.Fatalf("the newest change: %s %q", got[0].TSStart, got[0].PromptExcerpt)
	}
	if got, err := a.KeyAudit(ctx, mine, 2); err != nil || !slices.Equal(actions(got), []string{"key_revoked", "key_rotated"}) {
		t.Fatalf("limit 2: %v, %v", actions(got), err)
	}
	if got, err := a.KeyAudit(ctx, theirs, 100); err != nil || !slices.Equal(actions(got), []string{"key_updated", "key_created"}) {
		t.Fatalf("the other key's trail: %v, %v", actions(got), err)
	}
	if got, err := a.KeyAudit(ctx, "5e55109a0000cccc", 100); err != nil || len(got) != 0 {
		t.Fatalf("a key without changes: %v, %v", got, err)
	}
	for _, bad := range []struct {
		session string
		limit   int
	}{{mine, 0}, {mine, eventstore.MaxLimit + 1}, {"", 10}} {
		if _, err := a.KeyAudit(ctx, bad.session, bad.limit); !errors.Is(err, eventstore.ErrInvalid) {
			t.Errorf("KeyAudit(%q, %d): %v, want ErrInvalid", bad.session, bad.limit, err)
		}
	}
}
