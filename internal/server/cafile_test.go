package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider/sim"
	"github.com/fmgate/fmgate/internal/simserver"
	"github.com/fmgate/fmgate/internal/tlscert/tlstest"
)

// TestCAFileTrustsAPrivateEndpoint: a tier whose endpoint is served over
// TLS by a private CA answers when models[].caFile holds that CA, on each
// provider; without it, the endpoint's certificate is refused and Haiku
// answers instead.
func TestCAFileTrustsAPrivateEndpoint(t *testing.T) {
	ca := tlstest.NewAuthority(t)
	certPEM, keyPEM := ca.Issue(t, 1, false)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "private-ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	bedrockUpstream(t, sim.Settings{}) // the AWS credentials and settings the Bedrock provider reads
	t.Setenv(anthropicKeyEnv, "sk-sim")
	t.Setenv("FMGATE_TEST_OPENAI_KEY", "sk-sim")

	for _, vendor := range []string{"openai", "anthropic", "bedrock"} {
		for _, trusted := range []bool{true, false} {
			name := vendor + "/untrusted"
			if trusted {
				name = vendor + "/caFile"
			}
			t.Run(name, func(t *testing.T) {
				cfg := quickConfig()
				cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
				up, err := sim.New(cfg.SimConfig(), sim.Options{})
				if err != nil {
					t.Fatal(err)
				}
				endpoint := serveTLS(t, simserver.Handler(up), pair)
				m := cfg.Models[0]
				m.Provider, m.Endpoint = vendor, endpoint
				switch vendor {
				case "openai":
					m.Endpoint, m.APIKeyEnv = endpoint+"/v1", "FMGATE_TEST_OPENAI_KEY"
				case "anthropic":
					m.APIKeyEnv = anthropicKeyEnv
				case "bedrock":
					m.ModelID, m.Region = cfg.Models[0].ModelID, "us-east-1"
				}
				if trusted {
					m.CAFile = caFile
				}
				cfg.Models[0] = m
				sc := newScenario(t, cfg)
				a := sc.chat("ca-user", "Recommend a fantasy manga", "en")
				want := "sonnet"
				if !trusted {
					want = "haiku" // the private endpoint's certificate is refused
				}
				if a.Status != http.StatusOK || a.Tier != want {
					t.Fatalf("answer %d from %q, want 200 from %s", a.Status, a.Tier, want)
				}
			})
		}
	}
}

// serveTLS serves h over TLS with pair and returns its https URL.
func serveTLS(t *testing.T, h http.Handler, pair tls.Certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p, TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}
