package server

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/events"
)

// TestCatalogHybrid: with an embedding tier the catalog's items are embedded
// at start, in calls costed under feature catalog-index, and each turn's
// question is embedded as a call of the turn: its attempt is a
// model_attempt span under the turn, with its tokens and cost.
// With the embedding tier down, or too slow for the step's share, the turn is still answered from the catalog,
// by full text alone, not degraded, and no other embedding tier (whose
// vectors would not compare) is asked.
func TestCatalogHybrid(t *testing.T) {
	cfg := withCatalog(quickConfig())
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Rate = 1 // every span of every turn, the retrieve span too
	es := newEmbedScenario(t, cfg)

	v := es.s.catalogSvc.Vectors()
	if v == nil || v.Len() != es.s.Catalog.Len() || v.Tier != "titan-embed" || v.ModelID != titanID {
		t.Fatalf("catalog vectors %+v: want every item embedded by titan-embed (%s)", v, titanID)
	}
	titan := es.embeds["titan-embed"]
	built := titan.calls.Load()

	ja := es.chat("reader-ja", "ワンピースの最新刊は？", "ja")
	if ja.Status != 200 || !strings.Contains(ja.Text, "110巻") || ja.Degraded {
		t.Fatalf("ja answer %+v: want the catalog's volume 110, not degraded", ja)
	}
	if n := titan.calls.Load() - built; n != 1 {
		t.Fatalf("titan-embed got %d calls for the turn; want 1 (the question)", n)
	}

	adminPut(t, es.srv, "/admin/sim/titan-embed", `{"outage":true}`)
	en := es.chat("reader-en", "What is the latest One Piece volume?", "en")
	if en.Status != 200 || !strings.Contains(en.Text, "Vol. 110") || en.Degraded {
		t.Fatalf("en answer with the embedding tier down %+v: want the catalog's Vol. 110 from full text, not degraded", en)
	}
	adminPut(t, es.srv, "/admin/sim/titan-embed", `{"outage":false,"latencyMs":60000}`)
	late := es.chat("reader-late", "ワンピースの最新刊は？", "ja")
	if late.Status != 200 || !strings.Contains(late.Text, "110巻") || late.Degraded {
		t.Fatalf("ja answer with the embedding tier late %+v: want the catalog's volume 110 from full text, not degraded", late)
	}
	if n := es.embeds["cohere-embed"].calls.Load(); n != 0 {
		t.Errorf("cohere-embed got %d calls; want none: its vectors are not the catalog's", n)
	}
	es.s.Close() // flush the emitter

	byID := map[string]events.Event{}
	spans := readSpans(t, path)
	for _, e := range spans {
		byID[e.SpanID] = e
	}
	// under reports whether e descends from its trace's turn span through
	// the retrieve span.
	under := func(e events.Event) bool {
		sawRetrieve := false
		for p, ok := byID[e.ParentSpanID]; ok; p, ok = byID[p.ParentSpanID] {
			sawRetrieve = sawRetrieve || p.Name == "retrieve"
			if p.Name == "turn" && p.ParentSpanID == "" {
				return sawRetrieve
			}
		}
		return false
	}
	var okAttempt, failedAttempt bool
	flags := map[string][]string{}
	feature := map[string]string{}
	retrieveErr := map[string]string{}
	for _, e := range spans {
		if e.Name == "turn" && e.ParentSpanID == "" {
			flags[e.TraceID], feature[e.TraceID] = e.Resource.CapabilityFlagsActive, e.Attribution.Feature
		}
	}
	indexCost := 0.0
	for _, e := range spans {
		switch {
		case e.Name == "retrieve":
			retrieveErr[e.TraceID] = e.Outcome.ErrorCode
		case e.Name == "model_attempt" && feature[e.TraceID] == "catalog-index":
			indexCost += e.Resource.CostUSD
		case e.Name == "model_attempt" && e.Artifact.ModelID == titanID:
			if !under(e) {
				t.Errorf("embedding attempt %s is not under its turn's retrieve span", e.SpanID)
			}
			switch e.TraceID {
			case ja.TraceID:
				okAttempt = e.Outcome.Status == events.StatusOK && e.Resource.TokensIn > 0 && e.Resource.CostUSD > 0
			case en.TraceID:
				failedAttempt = failedAttempt || e.Outcome.Status == events.StatusFailed
			}
		}
	}
	if !okAttempt {
		t.Errorf("ja turn: no successful titan-embed model_attempt with tokens and cost")
	}
	if indexCost <= 0 {
		t.Errorf("the catalog's embedding at start cost $%v in the events; want its calls counted under catalog-index", indexCost)
	}
	if !failedAttempt {
		t.Errorf("en turn: no failed titan-embed model_attempt")
	}
	for _, a := range []answer{ja, en, late} {
		if retrieveErr[a.TraceID] != "" || !slices.Contains(flags[a.TraceID], "catalog") {
			t.Errorf("turn %s: retrieve error %q, flags %v; want none and the catalog flag", a.TraceID, retrieveErr[a.TraceID], flags[a.TraceID])
		}
	}
}

// TestCatalogHybridBuildFails: a gateway whose embedding tier is down when it
// starts still starts, its search full text alone, and answers from the
// catalog without asking for the question's vector.
func TestCatalogHybridBuildFails(t *testing.T) {
	cfg := withCatalog(quickConfig())
	st := cfg.Sim.Models["titan-embed"]
	st.Outage = true
	cfg.Sim.Models["titan-embed"] = st
	es := newEmbedScenario(t, cfg)
	if v := es.s.catalogSvc.Vectors(); v != nil {
		t.Fatalf("catalog vectors %+v with the embedding tier down at start; want none", v)
	}
	built := es.embeds["titan-embed"].calls.Load()
	if built == 0 {
		t.Fatal("the items were never sent to titan-embed")
	}
	a := es.chat("reader", "What is the latest One Piece volume?", "en")
	if a.Status != 200 || !strings.Contains(a.Text, "Vol. 110") || a.Degraded {
		t.Fatalf("answer %+v: want the catalog's Vol. 110 from full text, not degraded", a)
	}
	if n := es.embeds["titan-embed"].calls.Load() - built; n != 0 {
		t.Errorf("titan-embed got %d calls for the turn; want none without the catalog's vectors", n)
	}
}
