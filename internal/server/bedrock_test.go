package server

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

const bedrockSonnetID = "anthropic.claude-3-5-sonnet-20240620-v1:0"

// bedrockUpstream serves a simulator on Bedrock's wire (h2c, as `fmgate sim`
// does) standing in for AWS, with static AWS credentials in the
// environment for the provider's default chain.
func bedrockUpstream(t *testing.T, st sim.Settings) (*sim.Sim, string) {
	t.Helper()
	home := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID": "AKIDSCENARIO", "AWS_SECRET_ACCESS_KEY": "scenario-secret", "AWS_SESSION_TOKEN": "",
		"AWS_PROFILE": "", "AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true",
	} {
		t.Setenv(k, v)
	}
	st.ModelID = bedrockSonnetID
	up, err := sim.New(sim.Config{Models: map[string]sim.Settings{"sonnet": st}}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(simserver.Handler(up))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &p
	srv.Start()
	t.Cleanup(srv.Close)
	return up, srv.URL
}

// onBedrock puts cfg's sonnet tier on the bedrock provider at endpoint;
// haiku stays on the in-process simulator.
func onBedrock(cfg config.Config, endpoint string) config.Config {
	cfg.Models[0].Provider = "bedrock"
	cfg.Models[0].ModelID = bedrockSonnetID
	cfg.Models[0].Region = "us-east-1"
	cfg.Models[0].Endpoint = endpoint
	return cfg
}

// TestScenarioSonnetOnBedrockDown: Sonnet on Bedrock (the real adapter
// through aws-sdk-go-v2 to the simulator on Bedrock's wire) has an outage;
// Haiku answers every turn, and no client sees a 5xx.
func TestScenarioSonnetOnBedrockDown(t *testing.T) {
	cfg := quickConfig()
	// The healthy phase must not fall back because the race detector made a
	// first call slow.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 10*time.Second, 8*time.Second
	up, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	sc := newScenario(t, onBedrock(cfg, endpoint))

	tiers, statuses := sc.run(6, 3, "Which manga should I read next?")
	if statuses[200] != 6 || tiers["sonnet"] != 6 {
		t.Fatalf("healthy: tiers %v statuses %v; want sonnet on bedrock answering all", tiers, statuses)
	}
	st, _ := up.Settings("sonnet")
	st.Outage = true
	if err := up.SetSettings("sonnet", st); err != nil {
		t.Fatal(err)
	}
	const n = 40
	tiers, statuses = sc.run(n, 4, "Which manga should I read next?")
	if statuses[200] != n {
		t.Fatalf("statuses %v: every turn must be a 200", statuses)
	}
	if tiers["haiku"] != n {
		t.Fatalf("tiers %v: with sonnet down every turn must be answered by haiku", tiers)
	}
	if got := sc.upstream["sonnet"].calls.Load(); got > n/2 {
		t.Fatalf("sonnet on bedrock was called %d times for %d turns; its breaker should have stopped the calls", got, n)
	}
}

// TestCostReconcilesBedrock: the events' cost of turns answered by Sonnet
// on Bedrock equals what the simulator behind Bedrock's wire billed.
func TestCostReconcilesBedrock(t *testing.T) {
	cfg := quickConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 20
		st.TokensPerSecond = 300
		cfg.Sim.Models[name] = st
	}
	// An attempt cut by its first-token deadline bills an estimate (the
	// wire reports no usage for it): deadlines a slow machine never hits.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	up, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
	reconcileCosts(t, onBedrock(cfg, endpoint), map[string]*sim.Sim{"sonnet": up}, false)
}

// TestScenarioBedrockThrottling: Sonnet on Bedrock answers every call with
// ThrottlingException; the gateway retries it, then falls back to Haiku,
// and every client gets a 200.
func TestScenarioBedrockThrottling(t *testing.T) {
	cfg := quickConfig()
	st := cfg.Sim.Models["sonnet"]
	st.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 1}
	_, endpoint := bedrockUpstream(t, st)
	sc := newScenario(t, onBedrock(cfg, endpoint))
	const n = 2
	tiers, statuses := sc.run(n, 1, "Which manga should I read next?")
	if statuses[200] != n || tiers["haiku"] != n {
		t.Fatalf("tiers %v statuses %v; want haiku answering every turn with a 200", tiers, statuses)
	}
	if got := sc.upstream["sonnet"].calls.Load(); got <= 1 {
		t.Fatalf("sonnet on bedrock was called %d times for %d turns; want the throttled call retried", got, n)
	}
	t.Logf("sonnet attempts %d for %d turns", sc.upstream["sonnet"].calls.Load(), n)
}

// TestScenarioBedrockCutMidStream: the connection to Bedrock drops after a
// few tokens; the client's stream ends with an error frame, never done.
func TestScenarioBedrockCutMidStream(t *testing.T) {
	cfg := quickConfig()
	st := cfg.Sim.Models["sonnet"]
	st.CutAfterTokens = 8
	_, endpoint := bedrockUpstream(t, st)
	sc := newScenario(t, onBedrock(cfg, endpoint))
	got := streamTurn(t, sc.srv.URL, "cut-user", 0)
	if !strings.Contains(got, `"type":"chunk"`) || !strings.Contains(got, `"type":"error"`) || strings.Contains(got, `"type":"done"`) {
		t.Fatalf("stream %q: want chunks, then an error frame and no done", got)
	}
}
