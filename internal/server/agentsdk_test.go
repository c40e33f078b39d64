package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
)

// runAgent runs one of the agent apps in ../frontdoor/testdata/agents
// against sc with key, and decodes what it printed. The vendors' npm
// clients come from ../frontdoor/testdata/sdk (scripts/test installs
// them from its lock file).
func runAgent(t *testing.T, sc *scenario, key, script string, out any) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: scripts/test installs it (apt-get install nodejs)")
	}
	_, here, _, _ := runtime.Caller(0) // the tests run in a directory of their own
	testdata := filepath.Join(filepath.Dir(here), "..", "frontdoor", "testdata")
	modules := filepath.Join(testdata, "sdk", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		t.Fatalf("the vendors' npm clients are not installed in %s: run scripts/test (npm ci there)", modules)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(testdata, "agents", script))
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "FMGATE_URL="+sc.srv.URL, "FMGATE_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("%s printed %q: %v", script, stdout.String(), err)
	}
}

// agentRun is one tool loop as an agent app saw it.
type agentRun struct {
	Text  string `json:"text"`
	Calls []struct {
		Name string         `json:"name"`
		Args map[string]any `json:"args"`
	} `json:"calls"`
	Stop string `json:"stop"`
}

func (r agentRun) check(t *testing.T, how string) {
	t.Helper()
	if len(r.Calls) != 2 || r.Calls[0].Name != "get_weather" || r.Calls[1].Name != "get_time" {
		t.Fatalf("%s: calls %+v; want the SDK's runner to run get_weather and get_time", how, r.Calls)
	}
	if city, _ := r.Calls[0].Args["city"].(string); !strings.Contains(city, "東京") || r.Calls[1].Args["zone"] != "Asia/Tokyo" {
		t.Fatalf("%s: arguments %+v; want the city from the message and the enum's zone", how, r.Calls)
	}
	if !strings.Contains(r.Text, "晴れ、最高気温18度") || !strings.Contains(r.Text, "14:05") {
		t.Fatalf("%s: final answer %q; want both tools' results in it", how, r.Text)
	}
}

// TestAgentAppsOnTheVendorsJavaScriptSDKs: unmodified agent apps on the
// openai and @anthropic-ai/sdk npm clients run their SDK's own tool
// runner through fmgate, JSON and streamed: the SDK parses the tool calls
// fmgate sends, runs both tools, and the final answer is built from their
// results. Each app also parses a JSON-schema answer with its SDK's parse
// helper (response_format, output_config.format). Sonnet is on the
// anthropic provider, so the OpenAI app's tools cross vendors.
func TestAgentAppsOnTheVendorsJavaScriptSDKs(t *testing.T) {
	cfg := quickConfig()
	onAnthropic(t, &cfg, "sonnet")
	const key = "sk-agent-app"
	cfg.Auth.Keys = map[string]config.Caller{key: {UserID: "agent-app", Tier: "premium", Priority: "P0"}}
	cfg.Auth.TrustUserHeader = false
	sc := newScenario(t, cfg)

	var oai struct {
		JSON, Stream agentRun
		Parsed       struct {
			Title   string `json:"title"`
			Volumes int    `json:"volumes"`
		} `json:"parsed"`
	}
	runAgent(t, sc, key, "openai_agent.cjs", &oai)
	oai.JSON.check(t, "openai runTools")
	oai.Stream.check(t, "openai runTools, streamed")
	if oai.Parsed.Title == "" || oai.Parsed.Volumes < 1 {
		t.Fatalf("openai parse: %+v; want the schema's object", oai.Parsed)
	}

	var anth struct {
		JSON, Stream agentRun
		Parsed       *struct {
			Title   string `json:"title"`
			Volumes int    `json:"volumes"`
		} `json:"parsed"`
	}
	runAgent(t, sc, key, "anthropic_agent.cjs", &anth)
	anth.JSON.check(t, "anthropic toolRunner")
	anth.Stream.check(t, "anthropic toolRunner, streamed")
	if anth.JSON.Stop != "end_turn" {
		t.Fatalf("anthropic toolRunner: final stop_reason %q, want end_turn", anth.JSON.Stop)
	}
	if anth.Parsed == nil || anth.Parsed.Title == "" || anth.Parsed.Volumes < 1 {
		t.Fatalf("anthropic messages.parse: %+v; want the schema's object", anth.Parsed)
	}
}
