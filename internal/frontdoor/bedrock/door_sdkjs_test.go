package bedrock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/ratelimit"
)

// jsUsage and jsAnswer are what converse.cjs prints of an answer.
type jsUsage struct {
	InputTokens           int `json:"inputTokens"`
	OutputTokens          int `json:"outputTokens"`
	TotalTokens           int `json:"totalTokens"`
	CacheReadInputTokens  int `json:"cacheReadInputTokens"`
	CacheWriteInputTokens int `json:"cacheWriteInputTokens"`
}

type jsAnswer struct {
	Text       string   `json:"text"`
	StopReason string   `json:"stopReason"`
	Usage      *jsUsage `json:"usage"`
	Tier       string   `json:"tier"`
	Degraded   string   `json:"degraded"`
	TraceID    string   `json:"traceId"`
	Deltas     int      `json:"deltas"`
	Events     []string `json:"events"`
}

type jsError struct {
	Name             string `json:"name"`
	Status           int    `json:"status"`
	ThrottlingClass  bool   `json:"throttlingClass"`
	ServiceException bool   `json:"serviceException"`
	Message          string `json:"message"`
}

// runJS runs testdata/converse.cjs's scenario against url with the official
// JavaScript client and decodes what it printed into v.
func runJS(t *testing.T, url, scenario string, v any) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed; scripts/test installs it")
	}
	modules, err := filepath.Abs("../testdata/sdk/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "@aws-sdk", "client-bedrock-runtime")); err != nil {
		t.Fatalf("the Bedrock JavaScript client is not installed (run scripts/test, or npm ci in internal/frontdoor/testdata/sdk): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/converse.cjs", scenario)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "FMGATE_URL="+url, "FMGATE_KEY_ID="+testKeyID, "FMGATE_SECRET="+testSecret)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node converse.cjs %s: %v\n%s", scenario, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		t.Fatalf("node converse.cjs %s printed %q: %v", scenario, stdout.String(), err)
	}
}

func checkAnswer(t *testing.T, what string, a jsAnswer, wantJA bool, wantTier string) {
	t.Helper()
	if a.Text == "" || hasJapanese(a.Text) != wantJA {
		t.Errorf("%s: answer %q, Japanese = %v, want %v", what, a.Text, hasJapanese(a.Text), wantJA)
	}
	if a.Usage == nil || a.Usage.InputTokens == 0 || a.Usage.OutputTokens == 0 || a.Usage.TotalTokens != a.Usage.InputTokens+a.Usage.OutputTokens+a.Usage.CacheReadInputTokens+a.Usage.CacheWriteInputTokens {
		t.Errorf("%s: usage %+v", what, a.Usage)
	}
	if a.StopReason != "end_turn" {
		t.Errorf("%s: stop reason %q", what, a.StopReason)
	}
	if a.Tier != wantTier || a.Degraded != map[bool]string{true: "true", false: "false"}[wantTier != "sonnet"] || a.TraceID == "" {
		t.Errorf("%s: served by %q degraded %q trace %q; want %s", what, a.Tier, a.Degraded, a.TraceID, wantTier)
	}
}

func TestJavaScriptSDK(t *testing.T) {
	s, srv := startGateway(t, gatewayConfig(t))

	t.Run("converse", func(t *testing.T) {
		var got struct {
			Handler string
			JA, EN  jsAnswer
		}
		runJS(t, srv.URL, "converse", &got)
		if got.Handler != "NodeHttp2Handler" {
			t.Errorf("the client used %s, want its default NodeHttp2Handler", got.Handler)
		}
		checkAnswer(t, "ja", got.JA, true, "sonnet")
		checkAnswer(t, "en", got.EN, false, "sonnet")
	})
	t.Run("stream", func(t *testing.T) {
		var got struct{ JA, EN jsAnswer }
		runJS(t, srv.URL, "stream", &got)
		for name, a := range map[string]jsAnswer{"ja": got.JA, "en": got.EN} {
			checkAnswer(t, name, a, name == "ja", "sonnet")
			want := []string{"messageStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
			if len(a.Events) != len(want) || a.Deltas < 2 {
				t.Errorf("%s: events %v with %d deltas; want %v with several deltas", name, a.Events, a.Deltas, want)
			}
			for i := range min(len(want), len(a.Events)) {
				if a.Events[i] != want[i] {
					t.Errorf("%s: events %v, want %v", name, a.Events, want)
					break
				}
			}
		}
	})
	t.Run("stream with tools", func(t *testing.T) {
		type jsTools struct {
			Text       string
			StopReason string
			Calls      []struct {
				ToolUseID string
				Name      string
				Input     map[string]string
			}
			Fragments []string
			Events    []string
		}
		var got struct{ First, Second jsTools }
		runJS(t, srv.URL, "tools", &got)
		f := got.First
		if len(f.Calls) != 2 || f.Calls[0].Name != "get_weather" || f.Calls[1].Name != "get_time" || f.Calls[0].ToolUseID == "" || f.StopReason != "tool_use" {
			t.Fatalf("first answer: calls %+v stop %q; want get_weather and get_time, tool_use", f.Calls, f.StopReason)
		}
		for _, c := range f.Calls {
			if c.Input["city"] != "大阪の weather と time を教えてください" {
				t.Errorf("%s: input %v", c.Name, c.Input)
			}
		}
		want := "messageStart contentBlockStart contentBlockDelta contentBlockStop contentBlockStart contentBlockDelta contentBlockStop messageStop metadata"
		if strings.Join(f.Events, " ") != want || len(f.Fragments) < 4 {
			t.Errorf("first answer: events %v in %d fragments; want %s in several", f.Events, len(f.Fragments), want)
		}
		s := got.Second
		if wantText := "get_weatherの結果: {\"answer\":\"get_weather ok\"}\nget_timeの結果: {\"answer\":\"get_time ok\"}"; s.Text != wantText || s.StopReason != "end_turn" || len(s.Calls) != 0 {
			t.Errorf("second answer %q stop %q calls %+v; want %q", s.Text, s.StopReason, s.Calls, wantText)
		}
	})
	t.Run("json schema", func(t *testing.T) {
		type manga struct {
			Title   string
			Volumes int
		}
		var got struct {
			Converse, Stream manga
			StopReason       string
		}
		runJS(t, srv.URL, "json", &got)
		for name, m := range map[string]manga{"converse": got.Converse, "stream": got.Stream} {
			if m.Title == "" || m.Volumes < 1 {
				t.Errorf("%s: %+v; want the schema's object, parsed by the app", name, m)
			}
		}
		if got.StopReason != "end_turn" {
			t.Errorf("stop reason %q, want end_turn", got.StopReason)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		var got struct{ Error *jsError }
		runJS(t, srv.URL, "wrongSecret", &got)
		if e := got.Error; e == nil || e.Name != "InvalidSignatureException" || e.Status != 403 || !e.ServiceException {
			t.Fatalf("error %+v; want the SDK's InvalidSignatureException, 403", got.Error)
		}
	})
	t.Run("degraded under a sonnet outage", func(t *testing.T) {
		st, _ := s.Sim.Settings("sonnet")
		st.Outage = true
		if err := s.Sim.SetSettings("sonnet", st); err != nil {
			t.Fatal(err)
		}
		var got struct{ Converse, Stream jsAnswer }
		runJS(t, srv.URL, "degraded", &got)
		checkAnswer(t, "converse", got.Converse, false, "haiku")
		checkAnswer(t, "stream", got.Stream, true, "haiku")
	})
	t.Run("rate limited", func(t *testing.T) {
		cfg := gatewayConfig(t)
		cfg.Policies.RateLimit.Routes["chat"] = ratelimit.Rule{Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}
		_, limited := startGateway(t, cfg)
		var got struct {
			Error      *jsError
			RetryAfter string
		}
		runJS(t, limited.URL, "throttled", &got)
		if e := got.Error; e == nil || e.Name != "ThrottlingException" || !e.ThrottlingClass || e.Status != 429 {
			t.Fatalf("error %+v; want the SDK's ThrottlingException class, 429", got.Error)
		}
		if got.RetryAfter == "" {
			t.Error("the client saw no retry-after")
		}
	})
}

// The JavaScript client's InvokeModel, InvokeModelWithResponseStream (its
// chunks' bytes decoded as Anthropic's stream events, the last with
// Bedrock's invocation metrics) and CountTokens.
func TestJavaScriptSDKInvokeModel(t *testing.T) {
	_, srv := startGateway(t, gatewayConfig(t))
	var got struct {
		Invoke struct {
			Type, Text, StopReason string
			Input, Output          int
		}
		Stream struct {
			Events  []string
			Text    string
			Metrics map[string]any
		}
		Count int
	}
	runJS(t, srv.URL, "invoke", &got)
	if got.Invoke.Type != "message" || !hasJapanese(got.Invoke.Text) || got.Invoke.StopReason != "end_turn" || got.Invoke.Input == 0 || got.Invoke.Output == 0 {
		t.Errorf("InvokeModel: %+v", got.Invoke)
	}
	ev := got.Stream.Events
	if len(ev) < 5 || ev[0] != "message_start" || ev[len(ev)-1] != "message_stop" || !hasJapanese(got.Stream.Text) || got.Stream.Metrics["inputTokenCount"] == nil {
		t.Errorf("InvokeModelWithResponseStream: events %v, text %q, metrics %v", ev, got.Stream.Text, got.Stream.Metrics)
	}
	if got.Count <= 0 {
		t.Errorf("CountTokens: %d", got.Count)
	}
}
