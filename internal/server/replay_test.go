package server

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/eventstore"
)

// TestRecordedRunSameViewsWholeOrPacked: a run of the gateway — sampled
// turns, unsampled ones, and fallbacks during an outage — is recorded from
// the NATS stream (which receives every span) and replayed into two event
// stores: one storing every span whole, one as the gateway stores them
// (an unsampled turn's spans packed into its turn span's row). Every view
// the cost, quality and capacity pages read gives the same figures from
// both, and from the gateway's own store.
func TestRecordedRunSameViewsWholeOrPacked(t *testing.T) {
	stream, subject := natsStream(t)
	cfg := quickConfig()
	cfg.Events.Sinks.NATS.URL, cfg.Events.Sinks.NATS.Stream, cfg.Events.Sinks.NATS.Subject = "nats://127.0.0.1:4222", stream, subject
	cfg.EventStore.Path = filepath.Join(t.TempDir(), "gateway.db")
	sc := newScenario(t, cfg)
	start := time.Now().Add(-time.Minute)
	sc.run(120, 8, "Recommend a fantasy manga")
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)
	sc.run(30, 4, "おすすめの少年漫画は？")
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":false}`)
	sc.run(60, 8, "When does the next volume of One Piece come out?")
	sc.s.Close()
	end := time.Now().Add(time.Minute)

	recorded := readStream(t, stream)
	out := 0
	for _, e := range recorded {
		if e.Name == "turn" && e.SampledOut {
			out++
		}
	}
	if out == 0 || out == countTurns(recorded) {
		t.Fatalf("%d of %d turns sampled out; the run should have both kinds", out, countTurns(recorded))
	}
	whole := make([]events.Event, len(recorded))
	for i, e := range recorded {
		e.SampledOut = false
		whole[i] = e
	}
	open := func(name string, path string, batch []events.Event) *eventstore.Store {
		c := eventstore.DefaultConfig()
		c.Path = path
		s, err := eventstore.Open(context.Background(), c, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if batch != nil {
			for i := 0; i < len(batch); i += 200 {
				if err := s.Write(context.Background(), batch[i:min(i+200, len(batch))]); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
		return s
	}
	dir := t.TempDir()
	stores := map[string]*eventstore.Store{
		"packed":  open("packed", filepath.Join(dir, "packed.db"), recorded),
		"gateway": open("gateway", cfg.EventStore.Path, nil),
	}
	ref := open("whole", filepath.Join(dir, "whole.db"), whole)

	views := storeViews(start, end)
	views["compare models"] = func(s *eventstore.Store) (any, error) {
		return s.Compare(context.Background(), eventstore.ByModel, cfg.Models[0].ModelID, cfg.Models[1].ModelID, start, end)
	}
	for name, v := range views {
		want, err := v(ref)
		if err != nil {
			t.Fatalf("%s from the whole store: %v", name, err)
		}
		for store, s := range stores {
			got, err := v(s)
			if err != nil {
				t.Fatalf("%s from the %s store: %v", name, store, err)
			}
			if !sameFigures(toTree(t, got), toTree(t, want)) {
				gj, _ := json.Marshal(got)
				wj, _ := json.Marshal(want)
				t.Errorf("%s differs in the %s store:\n got %s\nwant %s", name, store, gj, wj)
			}
		}
	}
	t.Logf("%d spans of %d turns recorded (%d sampled out); %d views compared", len(recorded), countTurns(recorded), out, len(views))
}

// storeViews are the queries behind the cost, quality and capacity views,
// over [from, to).
func storeViews(from, to time.Time) map[string]func(*eventstore.Store) (any, error) {
	ctx := context.Background()
	views := map[string]func(*eventstore.Store) (any, error){
		"series": func(s *eventstore.Store) (any, error) {
			return s.Series(ctx, eventstore.Query{From: from, To: to}, time.Minute)
		},
		"versions": func(s *eventstore.Store) (any, error) { return s.Versions(ctx, from, to) },
		"eval":     func(s *eventstore.Store) (any, error) { return s.Eval(ctx, eventstore.Query{From: from, To: to}) },
		"topUsers": func(s *eventstore.Store) (any, error) { return s.TopUsers(ctx, from, to, 10) },
		"anomalies": func(s *eventstore.Store) (any, error) {
			return s.AnomalousTurns(ctx, from, to)
		},
		"rising": func(s *eventstore.Store) (any, error) { return s.RisingFeatures(ctx, from, to, 2) },
	}
	for _, by := range []string{eventstore.ByTotal, eventstore.ByFeature, eventstore.ByUser, eventstore.ByModel,
		eventstore.ByPrompt, eventstore.ByGraph, eventstore.ByTool, eventstore.ByLocale, eventstore.BySurface, eventstore.ByTier} {
		views["cost by "+by] = func(s *eventstore.Store) (any, error) {
			return s.Cost(ctx, eventstore.Query{By: by, From: from, To: to, Limit: 1000})
		}
	}
	views["cost by turn"] = func(s *eventstore.Store) (any, error) {
		return s.Cost(ctx, eventstore.Query{By: eventstore.ByTurn, From: from, To: to, Limit: 1000})
	}
	return views
}

// readStream reads every span the stream holds.
func readStream(t *testing.T, stream string) []events.Event {
	t.Helper()
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var out []events.Event
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if h := m.Headers().Get(events.SpansHeader); h != "" {
				want, err := strconv.Atoi(h)
				if err != nil {
					t.Fatal(err)
				}
				if out, err = events.DecodePacked(out, m.Data(), want); err != nil {
					t.Fatal(err)
				}
				continue
			}
			e, err := events.Decode(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
	}
}

func countTurns(spans []events.Event) int {
	n := 0
	for _, e := range spans {
		if e.Name == "turn" {
			n++
		}
	}
	return n
}

// toTree is v as JSON decodes it: maps, slices, strings and float64s.
func toTree(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameFigures reports whether a and b are equal, numbers to a part in a
// billion: sums of floats added in another order differ in the last bits.
func sameFigures(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok || len(a) != len(bm) {
			return false
		}
		for k, v := range a {
			if !sameFigures(v, bm[k]) {
				return false
			}
		}
		return true
	case []any:
		bs, ok := b.([]any)
		if !ok || len(a) != len(bs) {
			return false
		}
		for i := range a {
			if !sameFigures(a[i], bs[i]) {
				return false
			}
		}
		return true
	case float64:
		bf, ok := b.(float64)
		return ok && math.Abs(a-bf) <= 1e-9*max(1, math.Abs(a), math.Abs(bf))
	}
	return reflect.DeepEqual(a, b)
}
