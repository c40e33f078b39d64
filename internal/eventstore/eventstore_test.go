package eventstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
)

var t0 = time.Date(2026, 4, 29, 14, 0, 0, 0, time.UTC)

func openTest(t testing.TB, path string) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Path = path
	cfg.Retention = 0
	s, err := Open(context.Background(), cfg, func() time.Time { return t0.Add(time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// span describes one child span of a scripted turn.
type span struct {
	name, model, prompt, tool string
	cost                      float64
	failed                    bool
}

type turnSpec struct {
	n       int // distinguishes trace ids
	user    string
	feature string
	graph   string
	at      time.Duration // offset from t0
	spans   []span
	// The root span's outcome and duration; zero values: ok, 10 ms.
	rootStatus events.Status
	rootMS     int64
	eval       *float64
}

func traceID(n int) string   { return fmt.Sprintf("%032x", n+1) }
func spanID(n, i int) string { return fmt.Sprintf("%08x%08x", n+1, i+1) }

// build returns the turn's events: its children, then the root "turn" span
// (which ends last), every one charged to the same user and feature.
func (ts turnSpec) build() []events.Event {
	start := t0.Add(ts.at)
	mk := func(i int, name string) events.Event {
		e := events.Event{
			SchemaVersion: 3, TraceID: traceID(ts.n), SpanID: spanID(ts.n, i), UserIDHash: ts.user,
			TSStart: start.Add(time.Duration(i) * time.Millisecond), Name: name,
			Attribution: events.Attribution{Feature: ts.feature, Surface: "chat", Locale: "ja-JP", UserTier: "prime"},
			Node:        events.Node{GraphVersion: ts.graph, NodeID: name},
			Outcome:     events.Outcome{Status: events.StatusOK},
		}
		e.TSEnd = e.TSStart.Add(10 * time.Millisecond)
		e.DurationMS = 10
		return e
	}
	var out []events.Event
	for i, sp := range ts.spans {
		e := mk(i+1, sp.name)
		e.ParentSpanID = spanID(ts.n, 0)
		e.Artifact = events.Artifact{ModelID: sp.model, PromptVersion: sp.prompt, ToolID: sp.tool}
		e.Resource.CostUSD = sp.cost
		e.Resource.TokensIn, e.Resource.TokensOut = 100, 10
		if sp.failed {
			e.Outcome.Status = events.StatusFailed
		}
		out = append(out, e)
	}
	root := mk(0, "turn")
	if ts.rootStatus != "" {
		root.Outcome.Status = ts.rootStatus
	}
	if ts.rootMS > 0 {
		root.DurationMS = ts.rootMS
		root.TSEnd = root.TSStart.Add(time.Duration(ts.rootMS) * time.Millisecond)
	}
	root.Outcome.EvalScore = ts.eval
	return append(out, root)
}

func write(t testing.TB, s *Store, turns ...turnSpec) {
	t.Helper()
	var all []events.Event
	for _, ts := range turns {
		all = append(all, ts.build()...)
	}
	if err := s.Write(context.Background(), all); err != nil {
		t.Fatal(err)
	}
}

// dataset is small enough to sum by hand:
//
//	turn 0 alice recommend v17.4: planner sonnet p23 0.004, search tool 0.001  = 0.005
//	turn 1 alice recommend v17.4: planner sonnet p23 0.006, failed haiku 0.002 = 0.008
//	turn 2 bob   recommend v17.5: planner sonnet p24 0.010                      = 0.010
//	turn 3 bob   faq       v17.4: answer  haiku  f1  0.001                      = 0.001
//	turn 4 carol faq       v17.4: answer  haiku  f1  0.002 (61 s later)         = 0.002
var dataset = []turnSpec{
	{n: 0, user: "alice", feature: "recommend", graph: "v17.4", spans: []span{
		{name: "plan", model: "sonnet", prompt: "planner-prompt-v23", cost: 0.004},
		{name: "tool", tool: "search", cost: 0.001}}},
	{n: 1, user: "alice", feature: "recommend", graph: "v17.4", at: time.Second, spans: []span{
		{name: "plan", model: "sonnet", prompt: "planner-prompt-v23", cost: 0.006},
		{name: "plan", model: "haiku", prompt: "planner-prompt-v23", cost: 0.002, failed: true}}},
	{n: 2, user: "bob", feature: "recommend", graph: "v17.5", at: 2 * time.Second, spans: []span{
		{name: "plan", model: "sonnet", prompt: "planner-prompt-v24", cost: 0.010}}},
	{n: 3, user: "bob", feature: "faq", graph: "v17.4", at: 3 * time.Second, spans: []span{
		{name: "answer", model: "haiku", prompt: "faq-v1", cost: 0.001}}},
	{n: 4, user: "carol", feature: "faq", graph: "v17.4", at: 61 * time.Second, spans: []span{
		{name: "answer", model: "haiku", prompt: "faq-v1", cost: 0.002}}},
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

func keyed(rows []CostRow) map[string]CostRow {
	m := map[string]CostRow{}
	for _, r := range rows {
		m[r.Key] = r
	}
	return m
}

func TestReplayStoredOnce(t *testing.T) {
	for _, path := range []string{":memory:", filepath.Join(t.TempDir(), "events.db")} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			s := openTest(t, path)
			write(t, s, dataset...)
			write(t, s, dataset...) // the emitter replays its WAL after a crash
			write(t, s, dataset[0]) // and a partial replay
			rep, err := s.Cost(context.Background(), Query{From: t0, To: t0.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := s.r.QueryRow(`SELECT COUNT(*) FROM events`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 12 || rep.Total.Spans != 12 || rep.Total.Turns != 5 || !near(rep.Total.CostUSD, 0.026) {
				t.Fatalf("rows %d, total %+v; want 12 spans, 5 turns, $0.026", n, rep.Total)
			}
			turns, err := s.Cost(context.Background(), Query{By: ByTurn, From: t0, To: t0.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if got := keyed(turns.Rows)[traceID(0)]; !near(got.CostUSD, 0.005) || got.Spans != 3 {
				t.Fatalf("turn 0 after replay = %+v, want $0.005 over 3 spans", got)
			}
		})
	}
}

func TestDrillDown(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ctx := context.Background()
	from, to := t0, t0.Add(time.Hour)
	tests := []struct {
		name  string
		give  Query
		total float64
		want  map[string]float64
	}{
		{"total", Query{}, 0.026, map[string]float64{"": 0.026}},
		{"per feature", Query{By: ByFeature}, 0.026, map[string]float64{"recommend": 0.023, "faq": 0.003}},
		{"per user in feature", Query{By: ByUser, Feature: "recommend"}, 0.023,
			map[string]float64{"alice": 0.013, "bob": 0.010}},
		{"per turn of user", Query{By: ByTurn, User: "alice"}, 0.013,
			map[string]float64{traceID(0): 0.005, traceID(1): 0.008}},
		{"per node of turn", Query{By: ByNode, Trace: traceID(1)}, 0.008,
			map[string]float64{spanID(1, 0): 0, spanID(1, 1): 0.006, spanID(1, 2): 0.002}},
		{"per model", Query{By: ByModel}, 0.026, map[string]float64{"sonnet": 0.020, "haiku": 0.005, "": 0.001}},
		{"per tool", Query{By: ByTool, Feature: "recommend"}, 0.023, map[string]float64{"search": 0.001, "": 0.022}},
		{"per user, model filter (span cost only)", Query{By: ByUser, ModelID: "haiku"}, 0.005,
			map[string]float64{"alice": 0.002, "bob": 0.001, "carol": 0.002}},
		{"per user, model and prompt filters (spans read)", Query{By: ByUser, ModelID: "sonnet", PromptVersion: "planner-prompt-v23"}, 0.010,
			map[string]float64{"alice": 0.010}},
		{"per turn, tool filter, one user", Query{By: ByTurn, ToolID: "search", User: "alice"}, 0.001,
			map[string]float64{traceID(0): 0.001}},
		{"per feature for one user", Query{By: ByFeature, User: "bob"}, 0.011,
			map[string]float64{"recommend": 0.010, "faq": 0.001}},
		{"per turn with prompt filter", Query{By: ByTurn, PromptVersion: "planner-prompt-v23"}, 0.012,
			map[string]float64{traceID(0): 0.004, traceID(1): 0.008}},
		{"versions combined", Query{By: ByFeature, GraphVersion: "v17.4", PromptVersion: "planner-prompt-v23", ModelID: "sonnet"},
			0.010, map[string]float64{"recommend": 0.010}},
		{"range inside one minute uses spans only", Query{By: ByUser, From: t0.Add(500 * time.Millisecond), To: t0.Add(2500 * time.Millisecond)},
			0.018, map[string]float64{"alice": 0.008, "bob": 0.010}},
		{"range ending mid-minute", Query{By: ByFeature, To: t0.Add(61*time.Second + 500*time.Millisecond)}, 0.026,
			map[string]float64{"recommend": 0.023, "faq": 0.003}},
		{"range starting mid-minute", Query{By: ByFeature, From: t0.Add(1500 * time.Millisecond)}, 0.013,
			map[string]float64{"recommend": 0.010, "faq": 0.003}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.give
			if q.From.IsZero() {
				q.From = from
			}
			if q.To.IsZero() {
				q.To = to
			}
			rep, err := s.Cost(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if !near(rep.Total.CostUSD, tt.total) {
				t.Errorf("total = %v, want %v", rep.Total.CostUSD, tt.total)
			}
			got := keyed(rep.Rows)
			if len(got) != len(tt.want) {
				t.Errorf("rows = %v, want keys of %v", rep.Rows, tt.want)
			}
			for k, v := range tt.want {
				if r, ok := got[k]; !ok || !near(r.CostUSD, v) {
					t.Errorf("%q = %+v, want $%v", k, r, v)
				}
			}
			for i := 1; q.By != ByNode && i < len(rep.Rows); i++ {
				if rep.Rows[i].CostUSD > rep.Rows[i-1].CostUSD {
					t.Errorf("rows not most expensive first: %v", rep.Rows)
				}
			}
		})
	}
}

func TestDrillDownDetails(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ctx := context.Background()
	feat, err := s.Cost(ctx, Query{By: ByFeature, From: t0, To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	rec := keyed(feat.Rows)["recommend"]
	if rec.Turns != 3 || rec.Spans != 8 || rec.Errors != 1 || !near(rec.CostPerTurn, 0.023/3) {
		t.Errorf("recommend = %+v, want 3 turns, 8 spans, 1 error", rec)
	}
	turn, err := s.Cost(ctx, Query{By: ByTurn, Trace: traceID(1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(turn.Rows) != 1 || turn.Rows[0].Turn == nil || turn.Rows[0].Turn.RootSpanID != spanID(1, 0) ||
		turn.Rows[0].Turn.UserIDHash != "alice" || turn.Rows[0].Errors != 1 {
		t.Errorf("turn 1 = %+v", turn.Rows)
	}
	nodes, err := s.Cost(ctx, Query{By: ByNode, Trace: traceID(0)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range nodes.Rows {
		names = append(names, r.Span.Name)
	}
	if fmt.Sprint(names) != "[turn plan tool]" {
		t.Errorf("nodes of turn 0 in start order = %v", names)
	}
	limited, err := s.Cost(ctx, Query{By: ByTurn, From: t0, To: t0.Add(time.Hour), Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(limited.Rows) != 2 || limited.Rows[0].Key != traceID(2) || !near(limited.Total.CostUSD, 0.026) {
		t.Errorf("limit 2: rows %d first %s total %v; want 2, the $0.010 turn, total over all", len(limited.Rows), limited.Rows[0].Key, limited.Total.CostUSD)
	}
}

func TestQueryValidation(t *testing.T) {
	s := openTest(t, ":memory:")
	tests := []struct {
		name string
		give Query
	}{
		{"unknown by", Query{By: "colour"}},
		{"node without trace", Query{By: ByNode}},
		{"from after to", Query{From: t0, To: t0.Add(-time.Second)}},
		{"limit too large", Query{Limit: MaxLimit + 1}},
		{"negative limit", Query{Limit: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := s.Cost(context.Background(), tt.give); !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestTopUsers(t *testing.T) {
	for _, path := range []string{":memory:", filepath.Join(t.TempDir(), "events.db")} {
		t.Run(filepath.Base(path), func(t *testing.T) { testTopUsers(t, path) })
	}
}

func testTopUsers(t *testing.T, path string) {
	s := openTest(t, path)
	var turns []turnSpec
	// user i spends i × $0.001 over i%7+1 turns, a second apart: a file
	// database reads the minutes in parts at once.
	for u := 1; u <= 120; u++ {
		for k := 0; k < u%7+1; k++ {
			turns = append(turns, turnSpec{n: len(turns), user: fmt.Sprintf("u%03d", u), feature: "recommend",
				at:    time.Duration(len(turns)) * time.Second,
				spans: []span{{name: "plan", model: "sonnet", cost: float64(u) * 0.001 / float64(u%7+1)}}})
		}
	}
	write(t, s, turns...)
	rep, err := s.TopUsers(context.Background(), t0, t0.Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Turns != int64(len(turns)) || !near(math.Round(rep.Total.CostUSD*1e9)/1e9, 7.26) {
		t.Errorf("total = %+v, want %d turns, $7.26", rep.Total, len(turns))
	}
	if len(rep.Rows) != 100 {
		t.Fatalf("got %d users, want the top 100", len(rep.Rows))
	}
	if rep.Rows[0].Key != "u120" || !near(rep.Rows[0].CostUSD, 0.120) || rep.Rows[99].Key != "u021" {
		t.Errorf("first %+v last %+v; want u120 $0.12 … u021", rep.Rows[0], rep.Rows[99])
	}
	if rep.Rows[0].Turns != int64(120%7+1) {
		t.Errorf("u120 turns = %d, want %d", rep.Rows[0].Turns, 120%7+1)
	}
}

func TestAnomalousTurns(t *testing.T) {
	s := openTest(t, ":memory:")
	var turns []turnSpec
	for i := range 500 {
		turns = append(turns, turnSpec{n: i, user: "u", feature: "recommend", at: time.Duration(i) * time.Millisecond,
			spans: []span{{name: "plan", model: "sonnet", cost: 0.018 + float64(i%10)*0.0002}}})
	}
	// A runaway tool loop: one turn 100× the median.
	loop := turnSpec{n: 500, user: "v", feature: "recommend", at: time.Second}
	for range 100 {
		loop.spans = append(loop.spans, span{name: "tool", tool: "search", cost: 0.0189})
	}
	write(t, s, append(turns, loop)...)
	rep, err := s.AnomalousTurns(context.Background(), t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Turns != 501 || !near(rep.MedianUSD, 0.019) {
		t.Errorf("turns %d median %v, want 501, 0.019", rep.Turns, rep.MedianUSD)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Key != traceID(500) {
		t.Fatalf("anomalies = %+v, want only the looping turn", rep.Rows)
	}
	if !near(rep.ThresholdUSD, rep.MedianUSD+5*rep.StdDevUSD) || rep.ThresholdUSD > 1.89 {
		t.Errorf("threshold %v", rep.ThresholdUSD)
	}
}

func TestRisingFeatures(t *testing.T) {
	s := openTest(t, ":memory:")
	var turns []turnSpec
	add := func(feature string, period, uses int, cost float64) {
		for k := range uses {
			turns = append(turns, turnSpec{n: len(turns), user: "u", feature: feature,
				at:    time.Duration(period)*time.Hour + time.Duration(k)*time.Second,
				spans: []span{{name: "plan", model: "sonnet", cost: cost}}})
		}
	}
	for p := range 4 {
		add("regressed", p, 10, 0.01*(1+0.2*float64(p))) // $/use +20% per period, same usage
		add("growing", p, 10*(p+1), 0.01*(1+0.2*float64(p)))
		add("steady", p, 10, 0.01)
		add("noisy", p, 10, []float64{0.01, 0.012, 0.011, 0.013}[p])
	}
	write(t, s, turns...)
	got, err := s.RisingFeatures(context.Background(), t0, t0.Add(4*time.Hour), 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Feature != "regressed" || !near(math.Round(got[0].Rise*1000)/1000, 0.6) {
		t.Fatalf("rising = %+v, want only regressed, +60%%", got)
	}
	if len(got[0].Periods) != 4 || got[0].Periods[3].Turns != 10 {
		t.Errorf("periods = %+v", got[0].Periods)
	}
	if _, err := s.RisingFeatures(context.Background(), t0, t0.Add(time.Hour), 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("1 period: err = %v, want ErrInvalid", err)
	}
}

func TestEval(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ctx := context.Background()
	scores := map[string]float64{traceID(0): 0.9, traceID(1): 0.7, traceID(2): 0.4}
	for id, v := range scores {
		if err := s.SetEvalScore(ctx, id, v); err != nil {
			t.Fatal(err)
		}
	}
	// A root span id names its turn too.
	if err := s.SetEvalScore(ctx, spanID(3, 0), 1.0); err != nil {
		t.Fatal(err)
	}
	// A child span gets its own score without touching the turn's.
	if err := s.SetEvalScore(ctx, traceID(4)+spanID(4, 1), 0.1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{traceID(99), spanID(0, 1), traceID(0) + spanID(0, 9)} {
		if err := s.SetEvalScore(ctx, id, 1); !errors.Is(err, ErrNotFound) {
			t.Errorf("SetEvalScore(%s) = %v, want ErrNotFound", id, err)
		}
	}
	if err := s.SetEvalScore(ctx, "abc", 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("malformed id: %v", err)
	}
	if err := s.SetEvalScore(ctx, traceID(0), math.NaN()); !errors.Is(err, ErrInvalid) {
		t.Errorf("NaN score: %v", err)
	}
	r := Query{From: t0, To: t0.Add(time.Hour)}
	tests := []struct {
		name string
		give Query
		want map[string][2]float64 // key → turns, average
	}{
		{"graph + prompt + model in one query",
			Query{GraphVersion: "v17.4", PromptVersion: "planner-prompt-v23", ModelID: "sonnet"},
			map[string][2]float64{"": {2, 0.8}}},
		{"by prompt", Query{By: ByPrompt},
			map[string][2]float64{"planner-prompt-v23": {2, 0.8}, "planner-prompt-v24": {1, 0.4}, "faq-v1": {1, 1.0}}},
		{"by graph, haiku only", Query{By: ByGraph, ModelID: "haiku"},
			map[string][2]float64{"v17.4": {2, 0.85}}},
		{"by model", Query{By: ByModel},
			map[string][2]float64{"sonnet": {3, (0.9 + 0.7 + 0.4) / 3}, "haiku": {2, 0.85}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := tt.give
			q.From, q.To = r.From, r.To
			rep, err := s.Eval(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Rows) != len(tt.want) {
				t.Errorf("rows = %+v, want %v", rep.Rows, tt.want)
			}
			for _, row := range rep.Rows {
				w, ok := tt.want[row.Key]
				if !ok || float64(row.Turns) != w[0] || !near(row.AvgScore, w[1]) {
					t.Errorf("%q = %+v, want %v", row.Key, row, w)
				}
			}
		})
	}
	nodes, err := s.Cost(ctx, Query{By: ByNode, Trace: traceID(4)})
	if err != nil {
		t.Fatal(err)
	}
	if sc := nodes.Rows[1].Span.EvalScore; sc == nil || *sc != 0.1 || nodes.Rows[0].Span.EvalScore != nil {
		t.Errorf("span scores of turn 4 = %v, %v", nodes.Rows[0].Span.EvalScore, sc)
	}
}

func TestPrune(t *testing.T) {
	s := openTest(t, ":memory:")
	write(t, s, dataset...)
	ctx := context.Background()
	if err := s.Prune(ctx, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, by := range []string{ByTotal, ByTurn} {
		rep, err := s.Cost(ctx, Query{By: by, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if !near(rep.Total.CostUSD, 0.002) || rep.Total.Turns != 1 {
			t.Errorf("by %s after prune: %+v, want only turn 4 ($0.002)", by, rep.Total)
		}
	}
	var n int
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM events`).Scan(&n); err != nil || n != 2 {
		t.Errorf("spans left = %d (%v), want 2", n, err)
	}
}

func TestRetention(t *testing.T) {
	now := t0.Add(40 * 24 * time.Hour)
	cfg := DefaultConfig()
	cfg.Path = ":memory:"
	s, err := Open(context.Background(), cfg, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := dataset[0]
	recent := dataset[1]
	recent.at = 39 * 24 * time.Hour
	write(t, s, old, recent)
	rep, err := s.Cost(context.Background(), Query{From: t0.Add(-time.Hour), To: now})
	if err != nil {
		t.Fatal(err)
	}
	if !near(rep.Total.CostUSD, 0.008) {
		t.Errorf("total = %v, want only the turn inside 30 days ($0.008)", rep.Total.CostUSD)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := Config{Retention: -1, Batch: maxBatch + 1}
	err := bad.Validate()
	for _, want := range []string{"path: must not be empty", "retention: must be >= 0", "batch: must be in 1..100000", "retentionInterval: must be > 0"} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestOpenOtherLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.db")
	ctx := context.Background()
	// A file of an earlier layout: same table names, other columns, no
	// user_version.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE events (id INTEGER PRIMARY KEY, trace_id TEXT NOT NULL, span_id TEXT NOT NULL, cost_usd REAL NOT NULL)`,
		`CREATE UNIQUE INDEX events_trace_span ON events(trace_id, span_id)`,
		`CREATE TABLE turns (trace_id TEXT PRIMARY KEY, ts_start INTEGER NOT NULL, cost_usd REAL NOT NULL) WITHOUT ROWID`,
		`INSERT INTO events VALUES (1, 'x', 'y', 9.99)`,
		`INSERT INTO turns VALUES ('x', 0, 9.99)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s := openTest(t, path)
	write(t, s, dataset...)
	rep, err := s.Cost(ctx, Query{By: ByTurn, From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 5 || !near(rep.Total.CostUSD, 0.026) {
		t.Fatalf("after recreating: %d turns, $%v; want the 5 new turns, $0.026", len(rep.Rows), rep.Total.CostUSD)
	}
	s.Close()

	// Reopening a file of the current layout keeps its data.
	s = openTest(t, path)
	rep, err = s.Cost(ctx, Query{From: t0.Add(-time.Hour), To: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total.Spans != 12 || !near(rep.Total.CostUSD, 0.026) {
		t.Errorf("reopened: %+v, want 12 spans, $0.026", rep.Total)
	}
}

func TestMedian(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 4, 5, 10, 101, 1000, 4096} {
		for _, distinct := range []int{1, 2, 7, 1 << 30} {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = float64(rng.IntN(distinct)) / 1000
			}
			sorted := slices.Sorted(slices.Values(xs))
			want := sorted[n/2]
			if n%2 == 0 {
				want = (sorted[n/2-1] + sorted[n/2]) / 2
			}
			if got := median(xs); got != want {
				t.Fatalf("n %d, %d distinct: median %v, want %v", n, distinct, got, want)
			}
			if got := slices.Sorted(slices.Values(xs)); !slices.Equal(got, sorted) {
				t.Fatalf("n %d: median changed the values, not only their order", n)
			}
		}
	}
}
