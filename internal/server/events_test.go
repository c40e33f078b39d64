package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/events"
)

// TestTurnEmitsSpanTree checks one turn with a fallback end to end: the
// incoming traceparent is continued, every step is a span of one tree, the
// answer quotes the trace id, and neither the raw user id nor the message
// reaches the event file.
func TestTurnEmitsSpanTree(t *testing.T) {
	cfg := quickConfig()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	sc := newScenario(t, cfg)
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"outage":true}`)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const probeUser = "probe-user-7f3a@example.com"
	const probeMessage = "My card is 4111 1111 1111 1111, call me at 090-1234-5678"
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat",
		strings.NewReader(`{"sessionId":"s1","message":"`+probeMessage+`","locale":"en"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", probeUser)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var a answer
	json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if a.Tier != "haiku" {
		t.Fatalf("answer %+v", a)
	}
	if a.TraceID != traceID {
		t.Fatalf("answer quotes trace %q, want %q", a.TraceID, traceID)
	}
	sc.s.Close() // flush the emitter

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), probeUser) || strings.Contains(string(raw), "4111") || strings.Contains(string(raw), "090-1234") {
		t.Fatal("raw user id or message text reached the event file")
	}
	var spans []events.Event
	sc2 := bufio.NewScanner(strings.NewReader(string(raw)))
	sc2.Buffer(make([]byte, 1<<20), 1<<20)
	for sc2.Scan() {
		e, err := events.Decode(sc2.Bytes())
		if err != nil {
			t.Fatalf("event %s: %v", sc2.Bytes(), err)
		}
		spans = append(spans, e)
	}
	byName := map[string][]events.Event{}
	var root events.Event
	for _, e := range spans {
		if e.TraceID != traceID {
			t.Fatalf("span %s has trace %s, want the incoming %s", e.Name, e.TraceID, traceID)
		}
		if e.SchemaVersion != 3 {
			t.Fatalf("schema version %d", e.SchemaVersion)
		}
		byName[e.Name] = append(byName[e.Name], e)
		if e.Name == "turn" {
			root = e
		}
	}
	if root.SpanID == "" || root.ParentSpanID != "00f067aa0ba902b7" {
		t.Fatalf("turn span %+v must be the child of the incoming parent span", root)
	}
	for _, name := range []string{"admit", "budget", "quota"} {
		if len(byName[name]) == 0 {
			t.Fatalf("no %s span; spans: %v", name, keys(byName))
		}
		for _, e := range byName[name] {
			if e.ParentSpanID != root.SpanID {
				t.Fatalf("%s span is not a child of the turn", name)
			}
		}
	}
	attempts := byName["model_attempt"]
	var failedSonnet, okHaiku bool
	for _, e := range attempts {
		if strings.Contains(e.Artifact.ModelID, "sonnet") && e.Outcome.Status == events.StatusFailed {
			failedSonnet = true
		}
		if strings.Contains(e.Artifact.ModelID, "haiku") && e.Outcome.Status == events.StatusOK {
			okHaiku = e.Resource.TokensOut > 0 && e.Resource.CostUSD > 0 && e.MustPersist
		}
	}
	if !failedSonnet || !okHaiku {
		t.Fatalf("model attempts %+v: want a failed sonnet attempt and a billed, must-persist haiku attempt", attempts)
	}
	if root.Outcome.Status != events.StatusFallback || root.Outcome.FallbackUsed != "haiku" {
		t.Fatalf("turn outcome %+v, want fallback to haiku", root.Outcome)
	}
	if root.UserIDHash == "" || root.Attribution.Locale != "en" || root.Attribution.Surface != "http" {
		t.Fatalf("turn identity %+v / %+v", root.UserIDHash, root.Attribution)
	}
	if !strings.HasPrefix(root.Artifact.PromptVersion, "mangaassist-system@") {
		t.Fatalf("prompt version %v", root.Artifact.PromptVersion)
	}
}

func keys(m map[string][]events.Event) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
