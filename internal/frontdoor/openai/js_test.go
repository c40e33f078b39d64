package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/ratelimit"
)

// seen is what the openai npm client reported (testdata/client.cjs).
type seen struct {
	Text     string `json:"text"`
	Model    string `json:"model"`
	Finish   string `json:"finish"`
	Chunks   int    `json:"chunks"`
	Tier     string `json:"tier"`
	Degraded string `json:"degraded"`
	TraceID  string `json:"traceId"`
	Usage    *struct {
		Prompt     int `json:"prompt_tokens"`
		Completion int `json:"completion_tokens"`
		Total      int `json:"total_tokens"`
	} `json:"usage"`
	Failed         bool   `json:"failed"`
	Class          string `json:"class"`
	Status         int    `json:"status"`
	Code           string `json:"code"`
	Message        string `json:"message"`
	RateLimit      bool   `json:"rateLimit"`
	Authentication bool   `json:"authentication"`
	APIError       bool   `json:"apiError"`
	RetryAfter     string `json:"retryAfter"`
}

// runJS runs the npm client against g with key; the SDK comes from
// internal/frontdoor/testdata/sdk (scripts/test installs it from its lock
// file).
func runJS(t *testing.T, g *gateway, key, kase, model, question string) seen {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: scripts/test installs it (apt-get install nodejs)")
	}
	modules, err := filepath.Abs("../testdata/sdk/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "openai", "package.json")); err != nil {
		t.Fatalf("the openai npm client is not installed in %s: run scripts/test (npm ci there)", modules)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/client.cjs", kase, model, question)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "FMGATE_URL="+g.srv.URL, "FMGATE_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.cjs %s: %v\n%s", kase, err, stderr.String())
	}
	var s seen
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	return s
}

func TestJSClientAnswers(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	tests := []struct {
		kase, question string
		wantJA         bool
	}{
		{"json", "Recommend a fantasy manga series", false},
		{"json", "おすすめのファンタジー漫画を教えて", true},
		{"stream", "Recommend a fantasy manga series", false},
		{"stream", "おすすめのファンタジー漫画を教えて", true},
	}
	for _, tt := range tests {
		t.Run(tt.kase+"/"+map[bool]string{true: "ja", false: "en"}[tt.wantJA], func(t *testing.T) {
			s := runJS(t, g, testKey, tt.kase, "sonnet", tt.question)
			if s.Failed {
				t.Fatalf("%s: %s", s.Class, s.Message)
			}
			if s.Text == "" || hasJapanese(s.Text) != tt.wantJA {
				t.Fatalf("answer %q", s.Text)
			}
			if s.Usage == nil || s.Usage.Prompt == 0 || s.Usage.Completion == 0 || s.Usage.Total != s.Usage.Prompt+s.Usage.Completion {
				t.Errorf("usage %+v", s.Usage)
			}
			if s.Finish != "stop" || s.Model != modelIDOf(t, g, "sonnet") || s.Tier != "sonnet" || s.Degraded != "false" || s.TraceID == "" {
				t.Errorf("finish %q model %q tier %q degraded %q trace %q", s.Finish, s.Model, s.Tier, s.Degraded, s.TraceID)
			}
			if tt.kase == "stream" && s.Chunks < 3 {
				t.Errorf("%d chunks", s.Chunks)
			}
		})
	}
}

func TestJSClientDegradedAnswerParses(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	g.sim("sonnet", `{"outage":true}`)
	for _, kase := range []string{"json", "stream"} {
		s := runJS(t, g, testKey, kase, "sonnet", "Recommend a manga")
		if s.Failed || s.Text == "" {
			t.Fatalf("%s under a Sonnet outage: %+v", kase, s)
		}
		if s.Tier != "haiku" || s.Degraded != "true" || s.Model != modelIDOf(t, g, "haiku") {
			t.Errorf("%s: tier %q degraded %q model %q; want haiku's degraded answer", kase, s.Tier, s.Degraded, s.Model)
		}
	}
}

func TestJSClientErrorClasses(t *testing.T) {
	cfg := quickConfig(t)
	cfg.RateLimit.Routes = map[string]ratelimit.Rule{"chat": {Limit: ratelimit.Limit{Rate: 1, Per: time.Hour, Burst: 1}}}
	g := startGateway(t, cfg)

	if s := runJS(t, g, "sk-wrong", "json", "sonnet", "hi"); !s.Authentication || s.Status != 401 {
		t.Errorf("wrong key: %+v; want an AuthenticationError", s)
	}
	if s := runJS(t, g, testKey, "json", "sonnet", "hi"); s.Failed {
		t.Fatalf("first call: %+v", s)
	}
	s := runJS(t, g, testKey, "stream", "sonnet", "hi")
	if !s.RateLimit || s.Status != 429 || s.RetryAfter == "" || s.Code != "rate_limited" {
		t.Errorf("over the limit: %+v; want a RateLimitError with retry-after", s)
	}
}

func TestJSClientMidStreamFailure(t *testing.T) {
	g := startGateway(t, quickConfig(t))
	g.sim("sonnet", `{"cutAfterTokens":20}`)
	s := runJS(t, g, testKey, "stream", "sonnet", "Recommend a long fantasy manga series and explain why")
	if !s.Failed || !s.APIError || s.Text == "" || s.Finish != "" {
		t.Fatalf("cut stream: %+v; want an APIError after some text, no finish", s)
	}
	if s.Code != "upstream_failed" {
		t.Errorf("code %q", s.Code)
	}
}
