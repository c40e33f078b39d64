// Package tlscert serves TLS from certificate and key files that may be
// replaced while the server runs: a renewed certificate (cert-manager, an
// ACME client, an operator's copy) is picked up by the next handshake,
// without a restart and without touching the connections already open.
package tlscert

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// CheckEvery is how often, at most, the files are looked at again: a
// handshake within it of the last look uses the certificate in memory.
const CheckEvery = time.Second

// Files are the PEM files a TLS listener serves from.
type Files struct {
	CertFile, KeyFile string
	// ClientCAFile, when set, holds the certificates that sign the client
	// certificates RequireClientCert accepts.
	ClientCAFile string
}

// Reloader hands out the certificate in CertFile and KeyFile, reading them
// again when either file changes (size or modification time). A pair that
// no longer loads (a half-written renewal) keeps the certificate in force
// and is logged; the next change is tried again.
type Reloader struct {
	files Files
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   string    // what the files looked like when cert was read
	checked time.Time // the last look at the files
	failed  string    // the stamp whose pair failed to load, logged once
}

// New loads the pair; an error names the file and what is wrong with it.
func New(f Files, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{files: f, log: log, now: time.Now}
	stamp, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cert, r.stamp, r.checked = cert, stamp, r.now()
	return r, nil
}

func (r *Reloader) stat() (string, error) {
	var b strings.Builder
	for _, name := range []string{r.files.CertFile, r.files.KeyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return "", fmt.Errorf("tls: %w", err)
		}
		fmt.Fprintf(&b, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

func (r *Reloader) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(r.files.CertFile, r.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	return &cert, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < CheckEvery {
		return r.cert, nil
	}
	r.checked = now
	stamp, err := r.stat()
	if err != nil || stamp == r.stamp || stamp == r.failed {
		return r.cert, nil // a file being replaced may be missing for a moment
	}
	cert, err := r.load()
	if err != nil {
		r.failed = stamp
		r.log.Warn("tls: the new certificate does not load; keeping the one in force", "err", err)
		return r.cert, nil
	}
	r.cert, r.stamp, r.failed = cert, stamp, ""
	attrs := []any{"file", r.files.CertFile}
	if cert.Leaf != nil {
		attrs = append(attrs, "notAfter", cert.Leaf.NotAfter)
	}
	r.log.Info("tls: certificate reloaded", attrs...)
	return r.cert, nil
}

// ServerConfig is the TLS configuration of a listener serving f: TLS 1.2
// at least, HTTP/2 and HTTP/1.1, the certificate from r, and with a
// ClientCAFile the client certificates it signs verified when a client
// offers one (RequireClientCert decides which paths need one).
func ServerConfig(f Files, r *Reloader) (*tls.Config, error) {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if f.ClientCAFile != "" {
		pem, err := os.ReadFile(f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client CA %s holds no PEM certificate", f.ClientCAFile)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return c, nil
}

// ErrNoClientCert is what RequireClientCert answers without a verified
// client certificate.
var ErrNoClientCert = errors.New("a client certificate signed by server.tls.clientCAFile is required here")

// RequireClientCert serves next only to requests under one of prefixes
// that came with a client certificate the listener verified (ServerConfig
// with a ClientCAFile), and to every request elsewhere; the others get 403
// with a JSON error saying what is missing.
func RequireClientCert(next http.Handler, prefixes ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range prefixes {
			if strings.HasPrefix(r.URL.Path, p) && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = fmt.Fprintf(w, `{"error":{"code":"client_certificate_required","message":%q}}`+"\n", ErrNoClientCert.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
