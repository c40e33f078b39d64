package eventstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/events"
	"golang.org/x/sync/errgroup"
)

// synth generates MangaAssist-shaped traffic: turns of spansPerTurn spans
// (a root, a planner call, sub-agent and tool calls), spread evenly over
// span from start, across users, features, locales, prompt, model and
// graph versions.
type synth struct {
	rng   *rand.Rand
	start time.Time
	step  time.Duration // between turns
	n     int           // turns generated
	users int
}

const spansPerTurn = 14

var (
	synthFeatures = []string{"discovery_recommend", "faq", "order_status", "cross_title_link", "search", "summary", "character_qa", "release_alerts"}
	synthLocales  = []string{"ja-JP", "en-US", "ko-KR", "fr-FR", "zh-TW"}
	synthTiers    = []string{"prime", "free", "staff"}
	synthModels   = []string{"claude-sonnet-4-6", "claude-haiku-4-5", "in-house-7b"}
	synthPrompts  = []string{"planner-prompt-v22", "planner-prompt-v23", "subagent-prompt-v7", "subagent-prompt-v8"}
	synthTools    = []string{"catalog_search", "order_lookup", "embedding"}
	synthGraphs   = []string{"v17.4", "v17.5"}
)

func (g *synth) turn(dst []events.Event) []events.Event {
	n := g.n
	g.n++
	at := g.start.Add(time.Duration(n) * g.step)
	trace := fmt.Sprintf("%016x%016x", g.rng.Uint64(), uint64(n))
	attr := events.Attribution{
		Feature:  synthFeatures[g.rng.IntN(len(synthFeatures))],
		Surface:  "chat",
		Locale:   synthLocales[g.rng.IntN(len(synthLocales))],
		UserTier: synthTiers[g.rng.IntN(len(synthTiers))],
	}
	user := fmt.Sprintf("u%015x", g.rng.IntN(g.users))
	graph := synthGraphs[g.rng.IntN(len(synthGraphs))]
	root := fmt.Sprintf("%016x", g.rng.Uint64())
	for i := 1; i < spansPerTurn; i++ {
		e := events.Event{
			SchemaVersion: 3, TraceID: trace, SpanID: fmt.Sprintf("%016x", g.rng.Uint64()), ParentSpanID: root,
			WorkflowID: trace, UserIDHash: user, SessionID: "s_" + user[:8],
			TSStart: at.Add(time.Duration(i) * time.Millisecond), Name: "model_attempt",
			Node:        events.Node{GraphVersion: graph, NodeID: "Plan", InvocationMode: events.ModeSyncStreaming},
			Attribution: attr, Outcome: events.Outcome{Status: events.StatusOK},
		}
		e.TSEnd, e.DurationMS = e.TSStart.Add(200*time.Millisecond), 200
		if i%3 == 0 {
			e.Name = "tool"
			e.Artifact = events.Artifact{ArtifactKind: events.KindToolCall, ToolID: synthTools[g.rng.IntN(len(synthTools))], ToolVersion: "1.0.0"}
			e.Resource.CostUSD = 0.0007
		} else {
			e.Artifact = events.Artifact{ArtifactKind: events.KindLLMCall, ModelID: synthModels[g.rng.IntN(len(synthModels))],
				PromptVersion: synthPrompts[g.rng.IntN(len(synthPrompts))]}
			e.Resource = events.Resource{TokensIn: 1000 + g.rng.IntN(4000), TokensOut: 50 + g.rng.IntN(400), CostUSD: 0.001 + g.rng.Float64()*0.003}
		}
		dst = append(dst, e)
	}
	r := events.Event{
		SchemaVersion: 3, TraceID: trace, SpanID: root, WorkflowID: trace, UserIDHash: user, SessionID: "s_" + user[:8],
		TSStart: at, TSEnd: at.Add(800 * time.Millisecond), DurationMS: 800, Name: "turn",
		Node:        events.Node{GraphVersion: graph, NodeID: "turn", InvocationMode: events.ModeSyncStreaming},
		Attribution: attr, Outcome: events.Outcome{Status: events.StatusOK},
	}
	if g.rng.IntN(100) == 0 { // the judge samples 1%
		v := g.rng.Float64()
		r.Outcome.EvalScore = &v
	}
	return append(dst, r)
}

// BenchmarkIngest writes batches of 1000 spans into a file database and
// reports spans/s. Run: go test -run=^$ -bench=Ingest -benchmem ./internal/eventstore
func BenchmarkIngest(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "events.db"))
	g := &synth{rng: rand.New(rand.NewPCG(1, 2)), start: t0, step: 10 * time.Millisecond, users: 50000}
	ctx := context.Background()
	const batch = 1000
	var buf []events.Event
	// Pre-generate so the benchmark measures the store, not fmt.Sprintf.
	var batches [][]events.Event
	for range 64 {
		buf = buf[:0]
		for len(buf) < batch {
			buf = g.turn(buf)
		}
		batches = append(batches, append([]events.Event(nil), buf[:batch]...))
	}
	b.ResetTimer()
	spans := 0
	for i := 0; i < b.N; i++ {
		bt := batches[i%len(batches)]
		if i >= len(batches) {
			// Fresh ids each round so every span is a real insert.
			for j := range bt {
				bt[j].SpanID = fmt.Sprintf("%016x", uint64(i)<<20|uint64(j))
			}
		}
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
		spans += len(bt)
	}
	// The roll-ups and turns of the last batches are part of the work.
	if err := s.sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(spans)/b.Elapsed().Seconds(), "spans/s")
}

// BenchmarkIngestFresh is BenchmarkIngest with every round new turns
// later in time, as live traffic is (BenchmarkIngest keeps adding spans to
// the same 4600 turns). Run:
// go test -run=^$ -bench=IngestFresh -benchtime=400x -benchmem ./internal/eventstore
func BenchmarkIngestFresh(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "events.db"))
	g := &synth{rng: rand.New(rand.NewPCG(1, 2)), start: t0, step: 10 * time.Millisecond, users: 50000}
	ctx := context.Background()
	const batch, rounds = 1000, 64
	var all []events.Event
	for len(all) < batch*rounds {
		all = g.turn(all)
	}
	all = all[:batch*rounds]
	period := time.Duration(g.n) * g.step
	traces := make([]string, len(all))
	for i := range all {
		traces[i] = all[i].TraceID
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bt := all[(i%rounds)*batch : (i%rounds+1)*batch]
		if round := i / rounds; round > 0 && i%rounds == 0 {
			b.StopTimer()
			for j := range all {
				all[j].TraceID = fmt.Sprintf("%08x", round) + traces[j][8:]
				all[j].WorkflowID = all[j].TraceID
				all[j].TSStart = all[j].TSStart.Add(period)
				all[j].TSEnd = all[j].TSEnd.Add(period)
			}
			b.StartTimer()
		}
		if err := s.Write(ctx, bt); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "spans/s")
}

// BenchmarkDrillDown10M builds a file database of 10 million spans (about
// 714k turns over 24 h) and times each view of the cost dashboards, over
// the whole day and, as the dashboards ask, over 24 hours to the
// millisecond. Opt in with FMGATE_BENCH_10M=1; FMGATE_BENCH_DB=path keeps
// (and reuses) the database between runs (keep it outside the repository);
// FMGATE_BENCH_SPANS=n builds n spans instead. -v prints the build rate and
// the file's size. Run:
//
//	FMGATE_BENCH_10M=1 FMGATE_BENCH_DB=/tmp/events-10m.db go test -run=^$ -bench=DrillDown10M -benchtime=5x -timeout=60m -v ./internal/eventstore
func BenchmarkDrillDown10M(b *testing.B) {
	if os.Getenv("FMGATE_BENCH_10M") != "1" {
		b.Skip("set FMGATE_BENCH_10M=1 to build and query 10 million spans")
	}
	path := os.Getenv("FMGATE_BENCH_DB")
	if path == "" {
		path = filepath.Join(b.TempDir(), "events.db")
	}
	s := openTest(b, path)
	ctx := context.Background()
	total := 10_000_000
	if n, err := strconv.Atoi(os.Getenv("FMGATE_BENCH_SPANS")); err == nil && n > 0 {
		total = n // a smaller build, for machines where 10M takes too long
	}
	var have int64
	if err := s.r.QueryRow(`SELECT COUNT(*) FROM events`).Scan(&have); err != nil {
		b.Fatal(err)
	}
	defer func() { b.Logf("database holds %d spans", have) }()
	g := &synth{rng: rand.New(rand.NewPCG(7, 8)), start: t0, users: 50000}
	g.step = 24 * time.Hour / (10_000_000 / spansPerTurn) // the 10M pace, whatever total is
	if int(have) < total-spansPerTurn {
		g.n = int(have) / spansPerTurn
		began := time.Now()
		var buf []events.Event
		for written := int(have); written < total; {
			buf = buf[:0]
			for len(buf) < 1000 {
				buf = g.turn(buf)
			}
			if err := s.Write(ctx, buf); err != nil {
				b.Fatal(err)
			}
			written += len(buf)
		}
		if err := s.sync(ctx); err != nil {
			b.Fatal(err)
		}
		took := time.Since(began)
		built := total - int(have)
		have = int64(total)
		b.Logf("built %d spans in %v (%.0f spans/s, including generation)", built, took.Round(time.Second), float64(built)/took.Seconds())
	}
	from, to := t0, t0.Add(24*time.Hour)
	ufrom := from.Add(90*time.Second + 123*time.Millisecond)
	uto := ufrom.Add(24 * time.Hour)
	if err := s.sync(ctx); err != nil {
		b.Fatal(err)
	}
	var size int64
	for _, suffix := range []string{"", "-wal"} {
		if fi, err := os.Stat(path + suffix); err == nil {
			size += fi.Size()
		}
	}
	b.Logf("database file %.0f MB (%.0f bytes per span)", float64(size)/1e6, float64(size)/float64(have))
	// Pick a real user and trace to drill into.
	var user, trace string
	if err := s.r.QueryRow(`SELECT t.user_id_hash, i.trace_id FROM `+turnFrom+` WHERE t.feature = ? LIMIT 1 OFFSET 1000`, synthFeatures[0]).Scan(&user, &trace); err != nil {
		b.Fatal(err)
	}
	views := []struct {
		name string
		run  func() error
	}{
		{"total", func() error { _, err := s.Cost(ctx, Query{From: from, To: to}); return err }},
		{"per_feature", func() error { _, err := s.Cost(ctx, Query{By: ByFeature, From: from, To: to}); return err }},
		{"per_feature_unaligned", func() error {
			_, err := s.Cost(ctx, Query{By: ByFeature, From: from.Add(90 * time.Second), To: to.Add(-30 * time.Second)})
			return err
		}},
		{"per_user_in_feature", func() error {
			_, err := s.Cost(ctx, Query{By: ByUser, Feature: synthFeatures[0], From: from, To: to})
			return err
		}},
		{"per_turn_of_user", func() error { _, err := s.Cost(ctx, Query{By: ByTurn, User: user, From: from, To: to}); return err }},
		{"per_node_of_turn", func() error { _, err := s.Cost(ctx, Query{By: ByNode, Trace: trace}); return err }},
		{"versions_combined_by_locale", func() error {
			_, err := s.Cost(ctx, Query{By: ByLocale, GraphVersion: "v17.4", PromptVersion: "planner-prompt-v23", ModelID: "claude-sonnet-4-6", From: from, To: to})
			return err
		}},
		{"per_user_model_filter_1h", func() error {
			_, err := s.Cost(ctx, Query{By: ByUser, ModelID: "claude-sonnet-4-6", From: from, To: from.Add(time.Hour)})
			return err
		}},
		{"top_users", func() error { _, err := s.TopUsers(ctx, from, to, 100); return err }},
		{"anomalous_turns", func() error { _, err := s.AnomalousTurns(ctx, from, to); return err }},
		{"rising_features", func() error { _, err := s.RisingFeatures(ctx, from, to, 4); return err }},
		{"eval_versions_combined", func() error {
			_, err := s.Eval(ctx, Query{By: ByPrompt, GraphVersion: "v17.4", ModelID: "claude-sonnet-4-6", From: from, To: to})
			return err
		}},
		// As the dashboard asks: the last 24 hours to the millisecond.
		{"total_unaligned", func() error { _, err := s.Cost(ctx, Query{From: ufrom, To: uto}); return err }},
		{"per_locale_unaligned", func() error { _, err := s.Cost(ctx, Query{By: ByLocale, From: ufrom, To: uto}); return err }},
		{"per_tier_model_filter_unaligned", func() error {
			_, err := s.Cost(ctx, Query{By: ByTier, ModelID: "claude-sonnet-4-6", From: ufrom, To: uto})
			return err
		}},
		{"per_user_in_feature_unaligned", func() error {
			_, err := s.Cost(ctx, Query{By: ByUser, Feature: synthFeatures[0], From: ufrom, To: uto})
			return err
		}},
		{"per_user_in_feature_model_filter", func() error {
			_, err := s.Cost(ctx, Query{By: ByUser, Feature: synthFeatures[0], ModelID: "claude-sonnet-4-6", From: ufrom, To: uto})
			return err
		}},
		{"per_turn_of_user_unaligned", func() error {
			_, err := s.Cost(ctx, Query{By: ByTurn, User: user, Feature: synthFeatures[0], From: ufrom, To: uto})
			return err
		}},
		{"top_users_unaligned", func() error { _, err := s.TopUsers(ctx, ufrom, uto, 100); return err }},
		{"anomalous_turns_unaligned", func() error { _, err := s.AnomalousTurns(ctx, ufrom, uto); return err }},
		{"rising_features_unaligned", func() error { _, err := s.RisingFeatures(ctx, ufrom, uto, 4); return err }},
		{"series_default_step", func() error { _, err := s.Series(ctx, Query{From: ufrom, To: uto}, 0); return err }},
		{"series_model_filter_1m_step_1h", func() error {
			_, err := s.Series(ctx, Query{ModelID: "claude-haiku-4-5", From: ufrom, To: ufrom.Add(time.Hour)}, time.Minute)
			return err
		}},
		{"compare_prompts", func() error {
			_, err := s.Compare(ctx, ByPrompt, "planner-prompt-v22", "planner-prompt-v23", ufrom, uto)
			return err
		}},
		{"compare_graphs", func() error { _, err := s.Compare(ctx, ByGraph, "v17.4", "v17.5", ufrom, uto); return err }},
		{"versions", func() error { _, err := s.Versions(ctx, ufrom, uto); return err }},
		{"trace", func() error { _, err := s.Trace(ctx, trace); return err }},
		// Everything the cost dashboard asks for when it opens, at once,
		// as the page sends it.
		{"cost_view_at_once", func() error {
			var g errgroup.Group
			for _, by := range []string{ByTotal, ByFeature, ByTier, ByLocale, ByModel} {
				g.Go(func() error { _, err := s.Cost(ctx, Query{By: by, From: ufrom, To: uto}); return err })
			}
			g.Go(func() error { _, err := s.Series(ctx, Query{From: ufrom, To: uto}, 0); return err })
			g.Go(func() error { _, err := s.TopUsers(ctx, ufrom, uto, 100); return err })
			g.Go(func() error { _, err := s.AnomalousTurns(ctx, ufrom, uto); return err })
			g.Go(func() error { _, err := s.RisingFeatures(ctx, ufrom, uto, 4); return err })
			return g.Wait()
		}},
	}
	for _, v := range views {
		b.Run(v.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := v.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteSmallBatches writes fresh turns in batches of n spans, as
// the emitter hands them over at a live gateway's pace, and reports the
// CPU cost per span: each Write is a transaction, so small batches pay its
// commit per few spans. Run:
// go test -run=^$ -bench=WriteSmallBatches -benchmem ./internal/eventstore
func BenchmarkWriteSmallBatches(b *testing.B) {
	for _, n := range []int{7, 70, 700} {
		b.Run(fmt.Sprintf("spans=%d", n), func(b *testing.B) {
			s := openTest(b, filepath.Join(b.TempDir(), "events.db"))
			g := &synth{rng: rand.New(rand.NewPCG(1, 2)), start: t0, step: time.Millisecond, users: 5000}
			ctx := context.Background()
			var all []events.Event
			for len(all) < n*(b.N+1) {
				all = g.turn(all)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if err := s.Write(ctx, all[i*n:(i+1)*n]); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*n)/1e3, "cpu-µs/span")
		})
	}
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteSplitTurns writes turns the way concurrent turns reach the
// store: each turn's spans in one write and its turn span, which carries
// the sampling decision (95% sampled out), in the next. Written directly,
// the store keeps the earlier spans whole and rewrites them as tallies
// once the decision arrives; held for the decision (events.HoldForDecision,
// how the gateway feeds its embedded store), they arrive with it and are
// stored as tallies at once.
func BenchmarkWriteSplitTurns(b *testing.B) {
	const perWrite = 70
	for _, held := range []bool{false, true} {
		b.Run(fmt.Sprintf("held=%v", held), func(b *testing.B) {
			s := openTest(b, filepath.Join(b.TempDir(), "events.db"))
			var sink events.Sink = s
			if held {
				sink = events.NewTailSampler(s, events.HoldForDecision, events.DefaultConfig().Sampling, nil)
			}
			g := &synth{rng: rand.New(rand.NewPCG(1, 2)), start: t0, step: time.Millisecond, users: 5000}
			// Each turn's children, then the turn span of the turn before.
			var all []events.Event
			var lastTurn *events.Event
			for len(all) < perWrite*(b.N+1) {
				turn := g.turn(nil)
				root := turn[len(turn)-1]
				root.SampledOut = g.rng.IntN(100) < 95
				all = append(all, turn[:len(turn)-1]...)
				if lastTurn != nil {
					all = append(all, *lastTurn)
				}
				lastTurn = &root
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if err := sink.Write(ctx, all[i*perWrite:(i+1)*perWrite]); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.sync(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N*perWrite)/1e3, "cpu-µs/span")
		})
	}
}

// gatewayTurn appends turn n as a gateway at the defaults emits it, in the
// order its spans end: four steps, the model call (a must-persist cost
// record), the turn span (sampled out unless sampled) and the record step
// (must-persist, after the turn span). One user, one model, one prompt
// and one graph version, as in bench/latency.sh's traffic.
func gatewayTurn(dst []events.Event, n int, at time.Time, sampled bool) []events.Event {
	trace := fmt.Sprintf("%016x%016x", uint64(n)*0x9e3779b97f4a7c15, uint64(n))
	root := fmt.Sprintf("%016x", uint64(n)<<8|1)
	attr := events.Attribution{Feature: "chat", Surface: "openai", Locale: "en-US", UserTier: "standard"}
	span := func(i int, name string, kind events.ArtifactKind) events.Event {
		e := events.Event{
			SchemaVersion: 3, TraceID: trace, SpanID: fmt.Sprintf("%016x", uint64(n)<<8|uint64(i)), ParentSpanID: root,
			WorkflowID: trace, UserIDHash: "u0123456789abcdef", SessionID: "s0123456789abcdef",
			TSStart: at.Add(time.Duration(i) * 50 * time.Microsecond), Name: name,
			Node:        events.Node{GraphVersion: "v1", NodeID: name, InvocationMode: events.ModeSyncStreaming},
			Attribution: attr, Artifact: events.Artifact{ArtifactKind: kind}, Outcome: events.Outcome{Status: events.StatusOK},
		}
		e.TSEnd = e.TSStart.Add(100 * time.Microsecond)
		return e
	}
	for i, name := range []string{"validate", "identify", "admit", "plan"} {
		dst = append(dst, span(i+2, name, events.KindInternal))
	}
	call := span(6, "model_attempt", events.KindLLMCall)
	call.MustPersist = true
	call.Artifact.ModelID, call.Artifact.PromptVersion = "gpt-x", "mangaassist-system@d38ea2dbaf1a"
	call.Resource = events.Resource{TokensIn: 12, TokensOut: 20, CostUSD: 0.000336}
	turn := span(1, "turn", events.KindInternal)
	turn.SpanID, turn.ParentSpanID = root, ""
	turn.TSStart, turn.TSEnd, turn.DurationMS = at, at.Add(time.Millisecond), 1
	turn.Sampled, turn.SampledOut = sampled, !sampled
	record := span(8, "record", events.KindInternal)
	record.MustPersist = true
	return append(dst, call, turn, record)
}

// BenchmarkWriteGatewayTurns feeds the embedded store a gateway's turns at
// 1,000 turns/s as its sink does: through the tail sampler holding spans
// for their turn's decision (5% of turns sampled), 20 turns a write (the
// emitter's 20 ms batchWait), materialized every 250 turns (250 ms). It
// reports the store's CPU per turn. Run:
// go test -run '^$' -bench WriteGatewayTurns -benchtime 3000x ./internal/eventstore
func BenchmarkWriteGatewayTurns(b *testing.B) {
	const perWrite = 20
	cfg := DefaultConfig()
	cfg.Path = filepath.Join(b.TempDir(), "events.db")
	cfg.Retention = 0
	cfg.MaterializeSpans = 250 * 7
	s, err := Open(context.Background(), cfg, func() time.Time { return t0.Add(time.Hour) })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	sink := events.NewTailSampler(s, events.HoldForDecision, events.DefaultConfig().Sampling, nil)
	writes := (b.N + perWrite - 1) / perWrite
	batches := make([][]events.Event, writes)
	for w := range batches {
		for i := range perWrite {
			n := w*perWrite + i
			batches[w] = gatewayTurn(batches[w], n, t0.Add(time.Duration(n)*time.Millisecond), n%20 == 0)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for _, batch := range batches {
		if err := sink.Write(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.sync(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(writes*perWrite)/1e3, "cpu-µs/turn")
}
