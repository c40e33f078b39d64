package vision

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

func TestRemote(t *testing.T) {
	tests := []struct {
		name  string
		hosts Hosts
		url   string
		want  string // the pending URL, or a piece of the error
		isErr bool
	}{
		{name: "no hosts allowed", url: "https://img.example.com/a.png", want: "server.images.allowedHosts", isErr: true},
		{name: "exact host", hosts: Hosts{"img.example.com"}, url: "https://img.example.com/a.png#frag", want: "https://img.example.com/a.png"},
		{name: "case and trailing dot", hosts: Hosts{"img.example.com"}, url: "https://IMG.Example.com./a.png", want: "https://IMG.Example.com./a.png"},
		{name: "wildcard", hosts: Hosts{"*.example.com"}, url: "https://cdn.img.example.com:8443/a.png?x=1", want: "https://cdn.img.example.com:8443/a.png?x=1"},
		{name: "wildcard leaves out the apex", hosts: Hosts{"*.example.com"}, url: "https://example.com/a.png", want: "the host example.com is not one fmgate fetches images from", isErr: true},
		{name: "suffix is not a subdomain", hosts: Hosts{"*.example.com"}, url: "https://img.example.com.evil.test/a.png", want: "server.images.allowedHosts", isErr: true},
		{name: "another host", hosts: Hosts{"img.example.com"}, url: "https://evil.test/a.png", want: "the operator must list it in server.images.allowedHosts", isErr: true},
		{name: "plain http", hosts: Hosts{"img.example.com"}, url: "http://img.example.com/a.png", want: "https only", isErr: true},
		{name: "plain http to loopback", hosts: Hosts{"127.0.0.1"}, url: "http://127.0.0.1:8080/a.png", want: "http://127.0.0.1:8080/a.png"},
		{name: "credentials", hosts: Hosts{"img.example.com"}, url: "https://u:p@img.example.com/a.png", want: "credentials", isErr: true},
		{name: "IP not matched by a wildcard", hosts: Hosts{"*.example.com"}, url: "https://10.0.0.1/a.png", want: "server.images.allowedHosts", isErr: true},
		{name: "IPv6", hosts: Hosts{"[2001:4860::1]"}, url: "https://[2001:4860:0::1]/a.png", want: "https://[2001:4860:0::1]/a.png"},
		{name: "too long", hosts: Hosts{"img.example.com"}, url: "https://img.example.com/" + strings.Repeat("a", MaxURLBytes), want: "the limit is 4096", isErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			im, err := NewReader(Limits{Hosts: tt.hosts}).URL(tt.url)
			if tt.isErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one saying %q", err, tt.want)
				}
				return
			}
			if err != nil || im.URL != tt.want || !im.Pending() || im.Data != nil {
				t.Fatalf("URL = %+v, %v; want the pending %s", im, err, tt.want)
			}
		})
	}
	if _, err := NewReader(Limits{}).Remote("https://x.test/a.png"); !errors.Is(err, ErrRemote) {
		t.Errorf("Remote with no hosts = %v, want ErrRemote", err)
	}
}

func TestRemoteImagesCountPerRequest(t *testing.T) {
	rd := NewReader(Limits{MaxPerRequest: 2, Hosts: Hosts{"img.example.com"}})
	if _, err := rd.Base64("image/png", visiontest.Base64(visiontest.PNG(2, 2))); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.URL("https://img.example.com/1.png"); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.URL("https://img.example.com/2.png"); err == nil || !strings.Contains(err.Error(), "at most 2 images") {
		t.Fatalf("third image = %v, want the per-request limit", err)
	}
}

func TestPublic(t *testing.T) {
	tests := []struct {
		give string
		want bool
	}{
		{"93.184.216.34", true},
		{"2606:2800:220:1:248:1893:25c8:1946", true},
		{"127.0.0.1", false},
		{"127.0.0.2", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"100.64.0.1", false},
		{"0.0.0.0", false},
		{"::1", false},
		{"fe80::1", false},
		{"fd00::1", false},
		{"::ffff:169.254.169.254", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"224.0.0.1", false},
	}
	for _, tt := range tests {
		if got := public(netip.MustParseAddr(tt.give)); got != tt.want {
			t.Errorf("public(%s) = %v, want %v", tt.give, got, tt.want)
		}
	}
}

// imageServer serves handler on a loopback httptest server, counting its
// requests.
type imageServer struct {
	*httptest.Server
	hits atomic.Int64
}

func newImageServer(t *testing.T, tls bool, handler http.HandlerFunc) *imageServer {
	t.Helper()
	s := &imageServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		handler(w, r)
	})
	if tls {
		s.Server = httptest.NewTLSServer(h)
	} else {
		s.Server = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

// fetchOne fetches url with f, as the gateway does.
func fetchOne(f *Fetcher, url string) (provider.Image, error) {
	images := []provider.Image{{URL: url, Detail: "high"}}
	err := f.Fetch(context.Background(), images)
	return images[0], err
}

func TestFetch(t *testing.T) {
	pngData := visiontest.PNG(800, 600)
	serve := func(contentType string, body []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if contentType != "" {
				w.Header().Set("Content-Type", contentType)
			}
			_, _ = w.Write(body)
		}
	}
	tests := []struct {
		name    string
		lim     Limits
		handler http.HandlerFunc
		want    string // the image's String, or a piece of the error
		isErr   bool
	}{
		{name: "png", handler: serve("image/png", pngData), want: "800×600 png"},
		{name: "jpeg with parameters", handler: serve("image/jpeg; charset=binary", visiontest.JPEG(64, 48)), want: "64×48 jpeg"},
		{name: "octet-stream is sniffed", handler: serve("application/octet-stream", visiontest.GIF(3, 2)), want: "3×2 gif"},
		{name: "html", handler: serve("text/html", []byte("<html>hello</html>")), want: `not an image fmgate takes (Content-Type "text/html"`, isErr: true},
		{name: "octet-stream that is no image", handler: serve("application/octet-stream", []byte("MZ\x90\x00 an executable")), want: "not an image fmgate takes", isErr: true},
		{name: "declared png, is jpeg", handler: serve("image/png", visiontest.JPEG(8, 8)), want: "a jpeg image, not image/png as declared", isErr: true},
		{name: "status", handler: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, want: "its server answered 404 Not Found", isErr: true},
		{name: "too large by its length", lim: Limits{MaxBytes: 1000}, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(pngData)))
			serve("image/png", pngData)(w, r)
		}, want: "the image is " + strconv.Itoa(len(pngData)) + " bytes; the limit is 1000 bytes (server.images.maxBytes)", isErr: true},
		{name: "too large as it streams", lim: Limits{MaxBytes: 1000}, handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "image/png")
			for i := 0; i < len(pngData); i += 512 {
				_, _ = w.Write(pngData[i:min(i+512, len(pngData))])
				w.(http.Flusher).Flush() // no Content-Length: chunked
			}
		}, want: "larger than the limit of 1000 bytes", isErr: true},
		{name: "too many pixels", lim: Limits{MaxSide: 500}, handler: serve("image/png", pngData), want: "800×600 pixels; the limit is 500", isErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newImageServer(t, false, tt.handler)
			tt.lim.Hosts = Hosts{"127.0.0.1"}
			im, err := fetchOne(NewFetcher(tt.lim, FetchOptions{}), srv.URL+"/cover.png")
			if tt.isErr {
				var fe *FetchError
				if !errors.As(err, &fe) || fe.Host != "127.0.0.1" || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want a FetchError from 127.0.0.1 saying %q", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if im.String() != tt.want || im.Pending() || len(im.Data) == 0 || im.Detail != "high" {
				t.Fatalf("image = %+v, want %s with its bytes, no URL, detail kept", im, tt.want)
			}
		})
	}
}

func TestFetchTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := newImageServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		select { // never answers within the fetch timeout
		case <-r.Context().Done():
		case <-release:
		}
	})
	f := NewFetcher(Limits{Hosts: Hosts{"127.0.0.1"}}, FetchOptions{Timeout: 50 * time.Millisecond})
	start := time.Now()
	_, err := fetchOne(f, srv.URL+"/slow.png")
	if err == nil || !strings.Contains(err.Error(), "did not arrive within 50ms (server.images.fetchTimeout)") {
		t.Fatalf("err = %v, want the fetch timeout", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the fetch took %v; the timeout is 50ms", took)
	}
}

func TestFetchStopsWithItsContext(t *testing.T) {
	srv := newImageServer(t, false, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	f := NewFetcher(Limits{Hosts: Hosts{"127.0.0.1"}}, FetchOptions{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for srv.hits.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err := f.Fetch(ctx, []provider.Image{{URL: srv.URL + "/a.png"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the context's", err)
	}
}

func TestFetchRedirects(t *testing.T) {
	pngData := visiontest.PNG(4, 4)
	other := newImageServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(pngData)
	})
	_, otherPort, _ := net.SplitHostPort(other.Listener.Addr().String())
	srv := newImageServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/img.png":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write(pngData)
		case "/moved":
			http.Redirect(w, r, "/img.png", http.StatusFound)
		case "/elsewhere": // the same server under a name the hosts do not list
			http.Redirect(w, r, "http://localhost:"+otherPort+"/img.png", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		}
	})
	f := NewFetcher(Limits{Hosts: Hosts{"127.0.0.1"}}, FetchOptions{})
	if im, err := fetchOne(f, srv.URL+"/moved"); err != nil || im.String() != "4×4 png" {
		t.Fatalf("a redirect on an allowed host: %v, %v; want the image", im, err)
	}
	if _, err := fetchOne(f, srv.URL+"/elsewhere"); err == nil || !strings.Contains(err.Error(), "it redirects to localhost, which is refused") {
		t.Fatalf("a redirect to another host = %v, want it refused", err)
	}
	if other.hits.Load() != 0 {
		t.Fatalf("the host not allowed got %d requests, want none", other.hits.Load())
	}
	if _, err := fetchOne(f, srv.URL+"/loop"); err == nil || !strings.Contains(err.Error(), "redirects more than 3 times") {
		t.Fatalf("a redirect loop = %v, want it refused", err)
	}
}

// TestFetchRefusesPrivateAddresses: a name the hosts allow by a wildcard
// that resolves to a loopback, private or link-local address is never
// dialed; the same name listed exactly is fetched.
func TestFetchRefusesPrivateAddresses(t *testing.T) {
	srv := newImageServer(t, true, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(visiontest.PNG(4, 4))
	})
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	resolve := map[string]string{ // httptest's certificate names example.com
		"example.com":          "127.0.0.1",
		"cdn.example.com":      "127.0.0.1",
		"private.example.com":  "10.0.0.8",
		"metadata.example.com": "169.254.169.254",
	}
	var lookups atomic.Int64
	lookup := func(_ context.Context, _, host string) ([]netip.Addr, error) {
		lookups.Add(1)
		if a, ok := resolve[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	opts := FetchOptions{LookupIP: lookup, TLSConfig: &tls.Config{RootCAs: roots}}
	wild := NewFetcher(Limits{Hosts: Hosts{"*.example.com"}}, opts)
	for _, host := range []string{"cdn.example.com", "private.example.com", "metadata.example.com"} {
		_, err := fetchOne(wild, "https://"+host+":"+port+"/a.png")
		if err == nil || !strings.Contains(err.Error(), "a private, loopback or link-local address") {
			t.Fatalf("%s through a wildcard = %v, want the address refused", host, err)
		}
	}
	if srv.hits.Load() != 0 || lookups.Load() != 3 {
		t.Fatalf("%d requests after %d lookups; want 3 lookups and no request", srv.hits.Load(), lookups.Load())
	}
	if _, err := fetchOne(wild, "https://nowhere.example.com:"+port+"/a.png"); err == nil || !strings.Contains(err.Error(), "does not resolve") {
		t.Fatalf("a name that does not resolve = %v", err)
	}
	exact := NewFetcher(Limits{Hosts: Hosts{"example.com"}}, opts)
	if im, err := fetchOne(exact, "https://example.com:"+port+"/a.png"); err != nil || im.String() != "4×4 png" {
		t.Fatalf("a loopback host listed exactly: %v, %v; want the image", im, err)
	}
}

// TestFetchIsBounded: a request's images are fetched FetchConcurrency at a
// time, and all of them arrive.
func TestFetchIsBounded(t *testing.T) {
	var mu sync.Mutex
	inflight, most := 0, 0
	srv := newImageServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		inflight--
		mu.Unlock()
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(visiontest.PNG(n, n))
	})
	images := make([]provider.Image, 12)
	for i := range images {
		images[i].URL = srv.URL + "/" + strconv.Itoa(i+1)
	}
	f := NewFetcher(Limits{Hosts: Hosts{"127.0.0.1"}}, FetchOptions{})
	if err := f.Fetch(context.Background(), images); err != nil {
		t.Fatal(err)
	}
	for i, im := range images {
		if im.Pending() || im.Width != i+1 {
			t.Fatalf("image %d = %+v, want %d×%d", i, im, i+1, i+1)
		}
	}
	if most > FetchConcurrency {
		t.Fatalf("%d fetches at once, want at most %d", most, FetchConcurrency)
	}
}

// FuzzRemote: whatever URL a client sends, one Remote accepts names an
// allowed host over https (http only on loopback) and carries no
// credentials.
func FuzzRemote(f *testing.F) {
	for _, s := range []string{"https://img.example.com/a.png", "http://127.0.0.1:1/a", "https://u@img.example.com/",
		"https://img.example.com.evil.test/", "HTTPS://[::1]/", "https://img.example.com\\@evil.test/", "https://%69mg.example.com/"} {
		f.Add(s)
	}
	hosts := Hosts{"*.example.com", "127.0.0.1"}
	f.Fuzz(func(t *testing.T, raw string) {
		im, err := NewReader(Limits{Hosts: hosts}).Remote(raw)
		if err != nil {
			return
		}
		u, err := url.Parse(im.URL)
		if err != nil {
			t.Fatalf("accepted %q as %q, which does not parse: %v", raw, im.URL, err)
		}
		if ok, _ := hosts.match(u.Hostname()); !ok || u.User != nil {
			t.Fatalf("accepted %q: host %q, user %v", raw, u.Hostname(), u.User)
		}
		if s := strings.ToLower(u.Scheme); s != "https" && !(s == "http" && loopbackHost(u.Hostname())) {
			t.Fatalf("accepted %q with scheme %q", raw, u.Scheme)
		}
	})
}
