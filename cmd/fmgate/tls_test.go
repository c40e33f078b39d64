package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/tlscert/tlstest"
)

// TestServeOverTLS: with server.tls, fmgate serve answers HTTPS over HTTP/2
// with the configured certificate, says so in its banner, serves a turn,
// and with a client CA refuses /admin/ to a client without a certificate.
func TestServeOverTLS(t *testing.T) {
	ca := tlstest.NewAuthority(t)
	dir := t.TempDir()
	certPEM, keyPEM := ca.Issue(t, 4242, false)
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "clients.pem": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgPath := filepath.Join(dir, "fmgate.yaml")
	cfg := fmt.Sprintf(`server:
  tls: {certFile: %q, keyFile: %q, clientCAFile: %q}
eventStore: {path: %q}
events: {wal: {dir: %q}}
catalog: {enabled: false}
judge: {sampleRate: 0}
`, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "clients.pem"),
		filepath.Join(dir, "events.db"), filepath.Join(dir, "wal"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-config", cfgPath, "-addr", "127.0.0.1:0", "-log-level", "warn"}, w, io.Discard)
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(40 * time.Second):
			t.Error("serve did not stop")
		}
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("no banner: %v", <-done)
	}
	banner := lines.Text()
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "mode: embedded") {
		t.Fatalf("the banner's second line %q does not say the mode", lines.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	i := strings.Index(banner, "https://")
	if i < 0 {
		t.Fatalf("banner %q does not say https://", banner)
	}
	base := strings.Fields(banner[i:])[0]

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	resp, err := c.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/2.0" || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 4242 {
		t.Fatalf("GET /healthz: %d over %s with certificate %v; want 200 over HTTP/2 with serial 4242",
			resp.StatusCode, resp.Proto, resp.TLS.PeerCertificates[0].SerialNumber)
	}

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat", strings.NewReader(`{"sessionId":"tls","message":"おすすめの漫画は？","locale":"ja"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", "tls-user")
	req.Host = "localhost"
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"tier":"sonnet"`) {
		t.Fatalf("POST /v1/chat over TLS: %d %s", resp.StatusCode, body)
	}

	resp, err = c.Get(base + "/admin/cost")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "client_certificate_required") {
		t.Fatalf("GET /admin/cost without a client certificate: %d %s, want 403 client_certificate_required", resp.StatusCode, body)
	}
}
