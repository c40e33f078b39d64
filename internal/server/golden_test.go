package server

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/events"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestGoldenFallbackTurn scripts one turn whose primary model is down and
// compares its span tree, field by field, with testdata/fallback_turn.golden.
// Times, ids and exact token counts vary between runs and are reduced to
// what must hold (a cost is positive, tokens were counted); everything else
// is compared exactly. Run with -update after an intended change.
func TestGoldenFallbackTurn(t *testing.T) {
	cfg := quickConfig()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	sc := newScenario(t, cfg)
	// The outage answers after 5 ms, so that no two sibling spans share
	// their millisecond start and end: children sort by time alone.
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true,"latencyMs":5}`)

	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat",
		strings.NewReader(`{"sessionId":"s-golden","message":"Recommend a manga like Frieren","locale":"en"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "golden-user")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc.s.Close() // flush the emitter

	got := spanTree(t, readSpans(t, path))
	golden := filepath.Join(testdata, "fallback_turn.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("span tree differs from %s\n--- got\n%s--- want\n%s", golden, got, want)
	}
}

func readSpans(t *testing.T, path string) []events.Event {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var spans []events.Event
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		e, err := events.Decode(sc.Bytes())
		if err != nil {
			t.Fatalf("event %s: %v", sc.Bytes(), err)
		}
		spans = append(spans, e)
	}
	return spans
}

// spanTree renders spans as an indented tree, children in start order, with
// the fields that must not vary between runs.
func spanTree(t *testing.T, spans []events.Event) string {
	t.Helper()
	children := map[string][]events.Event{}
	ids := map[string]bool{}
	for _, e := range spans {
		ids[e.SpanID] = true
	}
	var roots []events.Event
	for _, e := range spans {
		if ids[e.ParentSpanID] {
			children[e.ParentSpanID] = append(children[e.ParentSpanID], e)
		} else {
			roots = append(roots, e)
		}
	}
	if len(roots) != 1 {
		t.Fatalf("%d root spans, want one turn", len(roots))
	}
	var b strings.Builder
	var walk func(e events.Event, depth int)
	walk = func(e events.Event, depth int) {
		if e.TraceID != roots[0].TraceID {
			t.Fatalf("span %s is in trace %s, not the turn's", e.Name, e.TraceID)
		}
		fmt.Fprintf(&b, "%s%s\n", strings.Repeat("  ", depth), describe(e))

		kids := children[e.SpanID]
		sort.SliceStable(kids, func(i, j int) bool {
			if !kids[i].TSStart.Equal(kids[j].TSStart) {
				return kids[i].TSStart.Before(kids[j].TSStart)
			}
			return kids[i].TSEnd.Before(kids[j].TSEnd)
		})
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	walk(roots[0], 0)
	return b.String()
}

func describe(e events.Event) string {
	positive := func(v float64) string {
		if v > 0 {
			return ">0"
		}
		return "0"
	}
	prompt := e.Artifact.PromptVersion
	if i := strings.IndexByte(prompt, '@'); i >= 0 && len(prompt)-i-1 == 12 {
		prompt = prompt[:i] + "@sha12"
	}
	a := e.Attribution
	return fmt.Sprintf("%s node=%s kind=%s mode=%s status=%s error=%q fallback=%q model=%q cache=%q persist=%v tokens=%s/%s cost=%s prompt=%q graph=%q attr=%s/%s/%s/%s/%s user=%v",
		e.Name, e.Node.NodeID, e.Artifact.ArtifactKind, e.Node.InvocationMode, e.Outcome.Status, e.Outcome.ErrorCode,
		e.Outcome.FallbackUsed, e.Artifact.ModelID, e.Resource.CacheHit, e.MustPersist,
		positive(float64(e.Resource.TokensIn)), positive(float64(e.Resource.TokensOut)), positive(e.Resource.CostUSD),
		prompt, e.Node.GraphVersion, a.Feature, a.Surface, a.Locale, a.UserTier, a.Priority, len(e.UserIDHash) == 32)
}
