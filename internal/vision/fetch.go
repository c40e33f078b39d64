package vision

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fmgate/fmgate/internal/provider"
)

// Bounds of a fetch.
const (
	// DefaultFetchTimeout bounds the fetch of one request's images.
	DefaultFetchTimeout = 5 * time.Second
	// MaxRedirects is the redirects one image's fetch follows.
	MaxRedirects = 3
	// FetchConcurrency is the images of one request fetched at once.
	FetchConcurrency = 4
)

// FetchOptions tune a Fetcher; zero values are the defaults.
type FetchOptions struct {
	// Timeout bounds the fetch of one request's images, all of them, from
	// the first connection to the last byte. Default DefaultFetchTimeout.
	Timeout time.Duration
	// LookupIP resolves a host name to the addresses dialed; nil is
	// net.DefaultResolver.LookupNetIP.
	LookupIP func(ctx context.Context, network, host string) ([]netip.Addr, error)
	// TLSConfig verifies the image servers; nil trusts the system's roots.
	TLSConfig *tls.Config
}

// Fetcher fetches the remote images a Reader left pending, under the
// Limits it was made with: only from Limits.Hosts, over https (http from a
// loopback host), through at most MaxRedirects redirects to allowed hosts,
// never from a private, loopback or link-local address unless a pattern
// names the host exactly — the address is checked as it is dialed, so a
// DNS name cannot point the fetch at the cloud metadata service. Each
// image is read up to Limits.MaxBytes and checked as an inline one is;
// FetchConcurrency images are fetched at once, and a request holds at
// most MaxPerRequest×MaxBytes of them in memory. No proxy is used. A
// Fetcher is safe for concurrent use.
type Fetcher struct {
	lim     Limits
	timeout time.Duration
	lookup  func(ctx context.Context, network, host string) ([]netip.Addr, error)
	dialer  net.Dialer
	client  *http.Client
}

// NewFetcher is a Fetcher of the images lim allows.
func NewFetcher(lim Limits, opts FetchOptions) *Fetcher {
	f := &Fetcher{lim: lim.withDefaults(), timeout: opts.Timeout, lookup: opts.LookupIP}
	if f.timeout <= 0 {
		f.timeout = DefaultFetchTimeout
	}
	if f.lookup == nil {
		f.lookup = net.DefaultResolver.LookupNetIP
	}
	tr := &http.Transport{
		Proxy:                  nil, // the dial check must see the image server's own address
		DialContext:            f.dial,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    f.timeout,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    FetchConcurrency,
		IdleConnTimeout:        30 * time.Second,
	}
	if opts.TLSConfig != nil {
		tr.TLSClientConfig = opts.TLSConfig.Clone()
	}
	f.client = &http.Client{Transport: tr, CheckRedirect: f.redirect}
	return f
}

// FetchError is a remote image that could not be fetched, in words safe
// for the client: the URL's host and why.
type FetchError struct {
	Host   string
	Reason string
	Err    error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("the image at %s could not be fetched: %s", trim(e.Host), e.Reason)
}

func (e *FetchError) Unwrap() error { return e.Err }

// refusal is a reason a fetch gives up, already in the client's words.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

var errFetchTimeout = errors.New("image fetch timeout")

// Fetch fills in the pending images of images (URL set, no data), in
// place, FetchConcurrency at a time, within the fetch timeout and ctx. It
// fails with the first image that could not be fetched, a *FetchError,
// or with ctx's error once ctx is done.
func (f *Fetcher) Fetch(ctx context.Context, images []provider.Image) error {
	tctx, cancel := context.WithTimeoutCause(ctx, f.timeout, errFetchTimeout)
	defer cancel()
	g, gctx := errgroup.WithContext(tctx)
	g.SetLimit(FetchConcurrency)
	for i := range images {
		if images[i].URL == "" {
			continue
		}
		g.Go(func() error {
			im, err := f.fetch(gctx, images[i].URL)
			if err != nil {
				return err
			}
			im.Detail = images[i].Detail
			images[i] = im
			return nil
		})
	}
	err := g.Wait()
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// fetch gets one image.
func (f *Fetcher) fetch(ctx context.Context, raw string) (provider.Image, error) {
	u, err := f.lim.Hosts.check(raw)
	if err != nil {
		return provider.Image{}, &FetchError{Host: hostOf(raw), Reason: err.Error(), Err: err}
	}
	fail := func(reason string, err error) (provider.Image, error) {
		return provider.Image{}, &FetchError{Host: u.Hostname(), Reason: reason, Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fail("the URL cannot be requested", err)
	}
	req.Header.Set("Accept", strings.Join(provider.ImageMediaTypes, ", "))
	req.Header.Set("User-Agent", "fmgate-image-fetch")
	resp, err := f.client.Do(req)
	if err != nil {
		return fail(f.why(ctx, err), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Sprintf("its server answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode)), nil)
	}
	if resp.ContentLength > int64(f.lim.MaxBytes) {
		return fail(f.lim.tooLarge(int(min(resp.ContentLength, 1<<40))).Error(), nil)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(f.lim.MaxBytes)+1))
	if err != nil {
		return fail(f.why(ctx, err), err)
	}
	if len(data) > f.lim.MaxBytes {
		return fail(fmt.Sprintf("the image is larger than the limit of %d bytes (server.images.maxBytes)", f.lim.MaxBytes), nil)
	}
	mediaType, ok := mediaTypeOf(resp.Header.Get("Content-Type"), data)
	if !ok {
		return fail(fmt.Sprintf("it is not an image fmgate takes (Content-Type %q; want one of %s)",
			trim(resp.Header.Get("Content-Type")), strings.Join(provider.ImageMediaTypes, ", ")), nil)
	}
	im, err := f.lim.check(mediaType, data)
	if err != nil {
		return fail(err.Error(), err)
	}
	return im, nil
}

// why says in the client's words why a request or a read failed.
func (f *Fetcher) why(ctx context.Context, err error) string {
	var r *refusal
	switch {
	case errors.As(err, &r):
		return r.reason
	case errors.Is(context.Cause(ctx), errFetchTimeout):
		return fmt.Sprintf("it did not arrive within %s (server.images.fetchTimeout)", f.timeout)
	case ctx.Err() != nil:
		return "the fetch was stopped"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "its host name does not resolve"
	}
	return "the connection failed"
}

// mediaTypeOf is the image type of a response: its Content-Type, or the
// bytes' own when the header says nothing more specific than binary data.
func mediaTypeOf(header string, data []byte) (string, bool) {
	mt, _, err := mime.ParseMediaType(header)
	mt = strings.ToLower(mt)
	switch {
	case err == nil && slices.Contains(provider.ImageMediaTypes, mt):
		return mt, true
	case mt == "image/jpg", mt == "image/pjpeg":
		return provider.ImageJPEG, true
	case header == "", mt == "application/octet-stream", mt == "binary/octet-stream", mt == "application/binary":
		sniffed := http.DetectContentType(data)
		return sniffed, slices.Contains(provider.ImageMediaTypes, sniffed)
	}
	return "", false
}

// redirect follows at most MaxRedirects redirects, each to a URL the
// Hosts allow.
func (f *Fetcher) redirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return &refusal{fmt.Sprintf("it redirects more than %d times", MaxRedirects)}
	}
	if _, err := f.lim.Hosts.check(req.URL.String()); err != nil {
		return &refusal{fmt.Sprintf("it redirects to %s, which is refused: %v", trim(req.URL.Hostname()), err)}
	}
	return nil
}

// dial connects to addr's host at an address the rules allow: a host of
// Hosts, resolved here and checked as dialed, so that a public name cannot
// lead to a private address (169.254.169.254, 127.0.0.1, 10.0.0.0/8 …)
// unless a pattern names the host exactly.
func (f *Fetcher) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, err
	}
	allowed, exact := f.lim.Hosts.match(host)
	if !allowed {
		return nil, &refusal{fmt.Sprintf("the host %s is not in server.images.allowedHosts", trim(host))}
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else if addrs, err = f.lookup(ctx, "ip", host); err != nil {
		return nil, err
	}
	var last error = &refusal{fmt.Sprintf("the host %s has no address", trim(host))}
	for _, a := range addrs {
		a = a.Unmap()
		if !exact && !public(a) {
			last = &refusal{fmt.Sprintf("the host %s resolves to %s, a private, loopback or link-local address; fmgate fetches from one only for a host server.images.allowedHosts names exactly", trim(host), a)}
			continue
		}
		c, err := f.dialer.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// hostOf is raw's host, for an error about a URL that did not parse.
func hostOf(raw string) string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "an invalid URL"
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:] // never repeat credentials
	}
	return rest
}
