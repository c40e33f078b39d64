package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// fakeFetcher fills each pending image with an 8×8 PNG, or fails.
type fakeFetcher struct {
	fail  error
	mu    sync.Mutex
	calls [][]string // the URLs of each call
}

func (f *fakeFetcher) Fetch(_ context.Context, images []provider.Image) error {
	var urls []string
	for _, im := range images {
		urls = append(urls, im.URL)
	}
	f.mu.Lock()
	f.calls = append(f.calls, urls)
	f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	for i := range images {
		if images[i].Pending() {
			images[i] = provider.Image{MediaType: provider.ImagePNG, Data: []byte("png"), Width: 8, Height: 8, Detail: images[i].Detail}
		}
	}
	return nil
}

// seeingProvider answers with the images it was sent, by their size.
type seeingProvider struct {
	mu   sync.Mutex
	seen []provider.Image
}

func (p *seeingProvider) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return p.Stream(ctx, req, func(string) error { return nil })
}

func (p *seeingProvider) Stream(_ context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	p.mu.Lock()
	for _, m := range req.Messages {
		p.seen = append(p.seen, m.Images...)
	}
	p.mu.Unlock()
	return &provider.Response{Text: "seen", ModelID: req.Model, Usage: provider.Usage{InputTokens: 1, OutputTokens: 1}}, emit("seen")
}

func imageTurn() *Turn {
	return &Turn{RequestID: "r1", SessionID: "s1", Message: "What is this?", Stateless: true, UserID: "u1",
		History: []provider.Message{{Role: provider.RoleUser, Images: []provider.Image{{URL: "https://img.example.com/a.png"}}},
			{Role: provider.RoleAssistant, Content: "A cat."}},
		Images: []provider.Image{{URL: "https://img.example.com/b.png", Detail: "low"}, {MediaType: provider.ImagePNG, Data: []byte("inline"), Width: 4, Height: 4}}}
}

func newImageGateway(t *testing.T, fetcher ImageFetcher) (*Gateway, *seeingProvider) {
	t.Helper()
	p := &seeingProvider{}
	g, err := New(config.Default(), Deps{Providers: both(p), Images: fetcher})
	if err != nil {
		t.Fatal(err)
	}
	return g, p
}

// TestRemoteImagesAreFetchedBeforeTheModel: the pipeline hands every
// pending image of the conversation to the fetcher in one call, and the
// model is sent the fetched images, never a URL.
func TestRemoteImagesAreFetchedBeforeTheModel(t *testing.T) {
	f := &fakeFetcher{}
	g, p := newImageGateway(t, f)
	if _, err := g.Run(context.Background(), imageTurn(), &collector{}); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 1 || strings.Join(f.calls[0], " ") != "https://img.example.com/a.png https://img.example.com/b.png" {
		t.Fatalf("fetch calls %v; want one with both URLs", f.calls)
	}
	if len(p.seen) != 3 {
		t.Fatalf("the model saw %d images, want 3", len(p.seen))
	}
	for _, im := range p.seen {
		if im.Pending() || len(im.Data) == 0 {
			t.Fatalf("the model was sent %+v; want fetched images only", im)
		}
	}
	if p.seen[1].Detail != "low" {
		t.Fatalf("the fetched image's detail is %q, want the client's low", p.seen[1].Detail)
	}
}

// TestRemoteImagesRefused: without a fetcher, or when the fetch fails, the
// turn is a 400 saying why, and no model is called.
func TestRemoteImagesRefused(t *testing.T) {
	tests := []struct {
		name    string
		fetcher ImageFetcher
		want    string
	}{
		{"no fetcher", nil, "fetches no remote images"},
		{"fetch failed", &fakeFetcher{fail: errors.New("the image at img.example.com could not be fetched: its server answered 404 Not Found")},
			"the image at img.example.com could not be fetched: its server answered 404 Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, p := newImageGateway(t, tt.fetcher)
			_, err := g.Run(context.Background(), imageTurn(), &collector{})
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != CodeInvalidRequest || !strings.Contains(e.Message, tt.want) {
				t.Fatalf("err = %v; want a 400 saying %q", err, tt.want)
			}
			if len(p.seen) != 0 {
				t.Fatalf("the model was called with %d images", len(p.seen))
			}
		})
	}
}
