package server

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
)

// privateHost is a model endpoint's host that resolves nowhere: only a
// proxy reaches it.
const privateHost = "models.fmgate.test"

// TestProvidersHonourTheProxyVariables: with HTTP_PROXY set, each
// provider (OpenAI-compatible, Anthropic, Bedrock) reaches a tier's
// endpoint through the proxy; with the host in NO_PROXY, it goes direct
// (and here fails, the host resolving nowhere). Go reads the variables
// once a process, so each case runs in a child test process.
func TestProvidersHonourTheProxyVariables(t *testing.T) {
	if os.Getenv("FMGATE_PROXY_CHILD") != "" {
		t.Skip("the parent's test")
	}
	up, err := sim.New(quickConfig().SimConfig(), sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{} // vendor paths the proxy forwarded
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != privateHost || !r.URL.IsAbs() {
			http.Error(w, "not a proxied request for "+privateHost, http.StatusBadGateway)
			return
		}
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		simserver.Handler(up).ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	for _, vendor := range []string{"openai", "anthropic", "bedrock"} {
		for _, bypass := range []bool{false, true} {
			name := vendor + "/proxied"
			if bypass {
				name = vendor + "/no_proxy"
			}
			t.Run(name, func(t *testing.T) {
				want := "sonnet"
				env := append(os.Environ(), "FMGATE_PROXY_CHILD="+vendor, "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
				if bypass {
					want = "haiku" // sonnet's endpoint is not reached without the proxy
					env = append(env, "NO_PROXY="+privateHost, "no_proxy="+privateHost)
				}
				cmd := exec.Command(os.Args[0], "-test.run=^TestProxyChild$", "-test.count=1", "-test.v")
				cmd.Env = append(env, "FMGATE_PROXY_WANT="+want)
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "--- PASS: TestProxyChild") {
					t.Fatalf("child (%s, want %s): %v\n%s", vendor, want, err, out)
				}
			})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for path, vendor := range map[string]string{"/v1/chat/completions": "openai", "/v1/messages": "anthropic"} {
		if seen[path] == 0 {
			t.Errorf("the proxy forwarded no %s request (%s); it saw %v", path, vendor, seen)
		}
	}
	bedrock := 0
	for path, n := range seen {
		if strings.HasPrefix(path, "/model/") {
			bedrock += n
		}
	}
	if bedrock == 0 {
		t.Errorf("the proxy forwarded no Bedrock request; it saw %v", seen)
	}
}

// TestProxyChild is one case of TestProvidersHonourTheProxyVariables, run
// in its own process: sonnet is a tier of FMGATE_PROXY_CHILD's vendor at
// privateHost, and the turn must be answered by FMGATE_PROXY_WANT.
func TestProxyChild(t *testing.T) {
	vendor := os.Getenv("FMGATE_PROXY_CHILD")
	if vendor == "" {
		t.Skip("run by TestProvidersHonourTheProxyVariables")
	}
	bedrockUpstream(t, sim.Settings{}) // the AWS credentials and settings the Bedrock provider reads
	t.Setenv(anthropicKeyEnv, "sk-sim")
	t.Setenv("FMGATE_TEST_OPENAI_KEY", "sk-sim")
	cfg := quickConfig()
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	m := cfg.Models[0]
	m.Provider, m.Endpoint = vendor, "http://"+privateHost
	switch vendor {
	case "openai":
		m.Endpoint, m.APIKeyEnv = m.Endpoint+"/v1", "FMGATE_TEST_OPENAI_KEY"
	case "anthropic":
		m.APIKeyEnv = anthropicKeyEnv
	case "bedrock":
		m.Region = "us-east-1"
	}
	cfg.Models[0] = m
	sc := newScenario(t, cfg)
	a := sc.chat("proxy-user", "Recommend a fantasy manga", "en")
	if want := os.Getenv("FMGATE_PROXY_WANT"); a.Status != http.StatusOK || a.Tier != want {
		t.Fatalf("answer %d from %q; want 200 from %s", a.Status, a.Tier, want)
	}
}
