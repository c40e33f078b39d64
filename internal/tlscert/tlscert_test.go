package tlscert

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/tlscert/tlstest"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// serve starts an HTTPS server on f with r's certificates, as fmgate
// serve does, and returns its URL.
func serve(t *testing.T, f Files, r *Reloader, h http.Handler) string {
	t.Helper()
	tc, err := ServerConfig(f, r)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	hs := &http.Server{Handler: h, TLSConfig: tc, Protocols: &p, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = hs.Close() })
	return "https://" + ln.Addr().String()
}

func clientFor(ca *tlstest.Authority, cert *tls.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tc := &tls.Config{RootCAs: pool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
}

// serialOf connects afresh and returns the serial of the certificate the
// server presented and the protocol spoken.
func serialOf(t *testing.T, c *http.Client, url string) (int64, string) {
	t.Helper()
	c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64(), resp.Proto
}

// A renewed certificate is served from the next connection, a pair that
// does not load keeps the one in force, and a connection opened before the
// renewal goes on.
func TestReloaderServesTheRenewedCertificate(t *testing.T) {
	ca := tlstest.NewAuthority(t)
	dir := t.TempDir()
	f := Files{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	c1, k1 := ca.Issue(t, 101, false)
	write(t, f.CertFile, c1)
	write(t, f.KeyFile, k1)
	r, err := New(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	r.now = func() time.Time { return clock }

	release := make(chan struct{})
	srv := serve(t, f, r, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/slow" {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-release
			_, _ = io.WriteString(w, "the rest")
		}
	}))
	c := clientFor(ca, nil)
	if serial, proto := serialOf(t, c, srv); serial != 101 || proto != "HTTP/2.0" {
		t.Fatalf("served certificate %d over %s, want 101 over HTTP/2", serial, proto)
	}

	// A request in flight over its own connection.
	slow := clientFor(ca, nil)
	resp, err := slow.Get(srv + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	c2, k2 := ca.Issue(t, 102, false)
	write(t, f.CertFile, c2)
	write(t, f.KeyFile, k2)
	if serial, _ := serialOf(t, c, srv); serial != 101 {
		t.Errorf("renewed within CheckEvery: served %d, want 101 until the files are looked at again", serial)
	}
	clock = clock.Add(CheckEvery)
	if serial, _ := serialOf(t, c, srv); serial != 102 {
		t.Errorf("after the renewal: served %d, want 102", serial)
	}
	close(release)
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "the rest" {
		t.Errorf("the request in flight across the renewal read %q, %v", b, err)
	}

	// A half-written renewal: the key does not match the certificate.
	c3, _ := ca.Issue(t, 103, false)
	write(t, f.CertFile, c3)
	clock = clock.Add(CheckEvery)
	if serial, _ := serialOf(t, c, srv); serial != 102 {
		t.Errorf("with a pair that does not load: served %d, want 102 kept", serial)
	}
	_, k3 := ca.Issue(t, 104, false)
	c4, k4 := ca.Issue(t, 104, false)
	_ = k3
	write(t, f.CertFile, c4)
	write(t, f.KeyFile, k4)
	clock = clock.Add(CheckEvery)
	if serial, _ := serialOf(t, c, srv); serial != 104 {
		t.Errorf("once the pair is whole again: served %d, want 104", serial)
	}
}

func TestNewNamesTheFiles(t *testing.T) {
	dir := t.TempDir()
	f := Files{CertFile: filepath.Join(dir, "missing.crt"), KeyFile: filepath.Join(dir, "missing.key")}
	if _, err := New(f, nil); err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Fatalf("New with no files: %v, want an error naming missing.crt", err)
	}
	write(t, f.CertFile, []byte("not a certificate"))
	write(t, f.KeyFile, []byte("not a key"))
	if _, err := New(f, nil); err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Fatalf("New with garbage: %v, want an error naming the pair", err)
	}
}

// TLS 1.1 and older are refused.
func TestServerConfigRefusesOldTLS(t *testing.T) {
	ca := tlstest.NewAuthority(t)
	dir := t.TempDir()
	f := Files{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	c, k := ca.Issue(t, 7, false)
	write(t, f.CertFile, c)
	write(t, f.KeyFile, k)
	r, err := New(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, f, r, http.NotFoundHandler())
	old := clientFor(ca, nil)
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := old.Get(srv); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
}

// With a client CA, /admin/ and /dashboard need a client certificate it
// signed; other paths do not.
func TestRequireClientCert(t *testing.T) {
	ca, other := tlstest.NewAuthority(t), tlstest.NewAuthority(t)
	dir := t.TempDir()
	f := Files{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "clients.pem")}
	c, k := ca.Issue(t, 1, false)
	write(t, f.CertFile, c)
	write(t, f.KeyFile, k)
	write(t, f.ClientCAFile, ca.PEM)
	r, err := New(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	srv := serve(t, f, r, RequireClientCert(ok, "/admin/", "/dashboard"))

	certPEM, keyPEM := ca.Issue(t, 2, true)
	good, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	strangerPEM, strangerKey := other.Issue(t, 3, true)
	stranger, _ := tls.X509KeyPair(strangerPEM, strangerKey)

	status := func(c *http.Client, path string) int {
		t.Helper()
		resp, err := c.Get(srv + path)
		if err != nil {
			return -1 // the handshake refused the certificate
		}
		defer resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		name   string
		client *http.Client
		path   string
		want   int
	}{
		{"admin without a certificate", clientFor(ca, nil), "/admin/cost", http.StatusForbidden},
		{"dashboard without a certificate", clientFor(ca, nil), "/dashboard", http.StatusForbidden},
		{"chat without a certificate", clientFor(ca, nil), "/v1/chat", http.StatusOK},
		{"admin with the CA's certificate", clientFor(ca, &good), "/admin/cost", http.StatusOK},
		{"admin with another CA's certificate", clientFor(ca, &stranger), "/admin/cost", -1},
	}
	for _, tt := range tests {
		if got := status(tt.client, tt.path); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}
