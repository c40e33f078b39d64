package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	anth "github.com/anthropics/anthropic-sdk-go"
	anthoption "github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// imageHost is a web server on loopback that the image URL tests name,
// counting the requests it gets.
type imageHost struct {
	*httptest.Server
	hits atomic.Int64
}

func newImageHost(t *testing.T) *imageHost {
	t.Helper()
	h := &imageHost{}
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/cover.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(coverPNG)
	})
	mux.HandleFunc("/cover", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream") // sniffed
		_, _ = w.Write(coverPNG)
	})
	mux.HandleFunc("/huge.png", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(append(coverPNG[:len(coverPNG):len(coverPNG)], make([]byte, imageURLMaxBytes)...))
	})
	mux.HandleFunc("/slow.png", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	mux.HandleFunc("/page.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>not a picture</body></html>")
	})
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	_, port, _ := net.SplitHostPort(h.Listener.Addr().String())
	mux.HandleFunc("/away.png", func(w http.ResponseWriter, r *http.Request) {
		// The same server by a name server.images.allowedHosts leaves out.
		http.Redirect(w, r, "http://localhost:"+port+"/cover.png", http.StatusFound)
	})
	t.Cleanup(func() { close(release); h.Close() })
	return h
}

const (
	imageURLMaxBytes = 256 << 10
	imageURLTimeout  = 300 * time.Millisecond
)

// imageURLConfig fetches images from 127.0.0.1, the image host.
func imageURLConfig() config.Config {
	cfg := quickConfig()
	cfg.Server.Images.AllowedHosts = []string{"127.0.0.1"}
	cfg.Server.Images.FetchTimeout = imageURLTimeout
	cfg.Server.Images.MaxBytes = imageURLMaxBytes
	return cfg
}

// modelCalls counts the calls that reached any model tier.
func (sc *scenario) modelCalls() int64 {
	var n int64
	for _, c := range sc.upstream {
		n += c.calls.Load()
	}
	return n
}

// TestImageURLThroughEveryDoor: an image given by its URL on an allowed
// host, through the OpenAI door (Chat Completions and Responses, with the
// Go SDK) and the Anthropic door (its Go SDK's url source), is fetched
// once per question and seen by the simulator like an inline image,
// billed at its tokens; the fetch's span counts the image and its bytes.
func TestImageURLThroughEveryDoor(t *testing.T) {
	cfg := imageURLConfig()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false
	sc := newScenario(t, cfg)
	host := newImageHost(t)
	asks := map[string]func(t *testing.T, question, url string) imageAnswer{
		"openai":           func(t *testing.T, q, url string) imageAnswer { return askImageURLOpenAI(t, sc.srv.URL, q, url) },
		"openai.responses": func(t *testing.T, q, url string) imageAnswer { return askImageURLResponses(t, sc.srv.URL, q, url) },
		"anthropic":        func(t *testing.T, q, url string) imageAnswer { return askImageURLAnthropic(t, sc.srv.URL, q, url) },
	}
	imageTokens := provider.ImageTokens(800, 600)
	for _, door := range []string{"openai", "openai.responses", "anthropic"} {
		t.Run(door, func(t *testing.T) {
			for _, file := range []string{"/cover.png", "/cover"} {
				before := host.hits.Load()
				q := imageQuestion()
				seen := asks[door](t, q, host.URL+file)
				if !strings.HasSuffix(seen.text, coverSeen) || !strings.Contains(seen.model, "sonnet") {
					t.Fatalf("%s: answer %q from %q; want Sonnet saying %q", file, seen.text, seen.model, coverSeen)
				}
				if got := host.hits.Load() - before; got != 1 {
					t.Fatalf("%s: the image host got %d requests, want 1", file, got)
				}
				plain := askImage(t, sc.srv.URL, strings.TrimSuffix(door, ".responses"), false, q, false)
				if door != "openai.responses" && seen.input != plain.input+imageTokens {
					t.Errorf("%s: input tokens %d with the image, %d without; want the image's %d more", file, seen.input, plain.input, imageTokens)
				}
			}
		})
	}
	sc.s.Close() // flush the emitter
	fetches := 0
	for _, e := range readSpans(t, path) {
		if e.Name != "fetch_images" {
			continue
		}
		fetches++
		if e.Resource.Images != 1 || e.Resource.ImageBytes != len(coverPNG) || e.Outcome.Status != "ok" {
			t.Fatalf("fetch_images span %+v %+v: want 1 image of %d bytes", e.Resource, e.Outcome, len(coverPNG))
		}
	}
	if fetches != 6 {
		t.Fatalf("%d fetch_images spans, want 6", fetches)
	}
}

func askImageURLOpenAI(t *testing.T, base, question, url string) imageAnswer {
	t.Helper()
	c := oai.NewClient(oaioption.WithBaseURL(base+"/v1/"), oaioption.WithAPIKey("sk-any"),
		oaioption.WithHeader("X-User-Id", imageUser()), oaioption.WithMaxRetries(0))
	res, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "sonnet", MaxCompletionTokens: oai.Int(1000),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage([]oai.ChatCompletionContentPartUnionParam{
			oai.ImageContentPart(oai.ChatCompletionContentPartImageImageURLParam{URL: url, Detail: "low"}),
			oai.TextContentPart(question),
		})}})
	if err != nil {
		t.Fatal(err)
	}
	return imageAnswer{text: res.Choices[0].Message.Content, model: res.Model, input: int(res.Usage.PromptTokens)}
}

func askImageURLResponses(t *testing.T, base, question, url string) imageAnswer {
	t.Helper()
	c := responsesClient(base, imageUser())
	content := responses.ResponseInputMessageContentListParam{
		{OfInputImage: &responses.ResponseInputImageParam{ImageURL: oai.String(url), Detail: responses.ResponseInputImageDetailAuto}},
		{OfInputText: &responses.ResponseInputTextParam{Text: question}},
	}
	r, err := c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "sonnet", MaxOutputTokens: oai.Int(1000),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(content, responses.EasyInputMessageRoleUser)}}})
	if err != nil {
		t.Fatal(err)
	}
	return imageAnswer{text: r.OutputText(), model: r.Model, input: int(r.Usage.InputTokens)}
}

func askImageURLAnthropic(t *testing.T, base, question, url string) imageAnswer {
	t.Helper()
	c := anth.NewClient(anthoption.WithBaseURL(base), anthoption.WithAPIKey("sk-any"),
		anthoption.WithHeader("X-User-Id", imageUser()), anthoption.WithMaxRetries(0))
	msg, err := c.Messages.New(context.Background(), anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1000,
		Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewImageBlock(anth.URLImageSourceParam{URL: url}), anth.NewTextBlock(question))}})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, b := range msg.Content {
		text.WriteString(b.Text)
	}
	u := msg.Usage
	return imageAnswer{text: text.String(), model: string(msg.Model), input: int(u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens)}
}

// postImageJSON posts body to the gateway at url+path as user (the demo
// profile's trusted header), or with key as its bearer key, and returns
// the status and the decoded answer.
func postImageJSON(t *testing.T, url, path, user, key, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	if user != "" {
		req.Header.Set("X-User-Id", user)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s answered %d %q: %v", path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
}

func openaiImageURLBody(url string) string {
	return fmt.Sprintf(`{"model":"sonnet","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":%q}},{"type":"text","text":%q}]}]}`,
		url, imageQuestion())
}

func anthropicImageURLBody(url string) string {
	return fmt.Sprintf(`{"model":"sonnet","max_tokens":100,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":%q}},{"type":"text","text":%q}]}]}`,
		url, imageQuestion())
}

// errorOf is the error an OpenAI- or Anthropic-shaped answer carries.
func errorOf(out map[string]any) (typ, message, param string) {
	e, _ := out["error"].(map[string]any)
	typ, _ = e["type"].(string)
	message, _ = e["message"].(string)
	param, _ = e["param"].(string)
	return typ, message, param
}

// TestImageURLRefusals: an image URL that cannot be fetched — a host not
// allowed, too large, too slow, not an image, redirected to a host not
// allowed — is a 400 in the door's error shape naming the host and why,
// and no model is called; a fetch that times out answers within the
// fetch timeout's bound.
func TestImageURLRefusals(t *testing.T) {
	sc := newScenario(t, imageURLConfig())
	host := newImageHost(t)
	tests := []struct {
		name      string
		door      string // "openai" or "anthropic"
		url       string
		wantIn    []string
		wantParam string
		wantHits  int64
	}{
		{name: "host not allowed", door: "openai", url: "https://images.example.com/cover.png",
			wantIn:    []string{"the host images.example.com is not one fmgate fetches images from", "server.images.allowedHosts"},
			wantParam: "messages[0].content[0].image_url.url"},
		{name: "host not allowed, anthropic", door: "anthropic", url: "https://images.example.com/cover.png",
			wantIn: []string{"messages.0.content.0.source.url", "server.images.allowedHosts"}},
		{name: "plain http", door: "openai", url: "http://images.example.com/cover.png", wantIn: []string{"https only"},
			wantParam: "messages[0].content[0].image_url.url"},
		{name: "too large", door: "openai", url: host.URL + "/huge.png", wantHits: 1,
			wantIn: []string{"the image at 127.0.0.1 could not be fetched", fmt.Sprintf("limit of %d bytes (server.images.maxBytes)", imageURLMaxBytes)}},
		{name: "too slow", door: "anthropic", url: host.URL + "/slow.png", wantHits: 1,
			wantIn: []string{"the image at 127.0.0.1 could not be fetched", "did not arrive within 300ms (server.images.fetchTimeout)"}},
		{name: "not an image", door: "openai", url: host.URL + "/page.html", wantHits: 1,
			wantIn: []string{"the image at 127.0.0.1 could not be fetched", `Content-Type "text/html"`}},
		{name: "missing", door: "anthropic", url: host.URL + "/nothing.png", wantHits: 1,
			wantIn: []string{"the image at 127.0.0.1 could not be fetched", "404 Not Found"}},
		{name: "redirect to a host not allowed", door: "openai", url: host.URL + "/away.png", wantHits: 1,
			wantIn: []string{"the image at 127.0.0.1 could not be fetched", "it redirects to localhost, which is refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hits, calls := host.hits.Load(), sc.modelCalls()
			path, body, wantType := "/v1/chat/completions", openaiImageURLBody(tt.url), "invalid_request_error"
			if tt.door == "anthropic" {
				path, body = "/v1/messages", anthropicImageURLBody(tt.url)
			}
			start := time.Now()
			status, out := postImageJSON(t, sc.srv.URL, path, imageUser(), "", body)
			took := time.Since(start)
			typ, msg, param := errorOf(out)
			if status != http.StatusBadRequest || typ != wantType || param != tt.wantParam {
				t.Fatalf("%d %v; want 400 %s with param %q", status, out, wantType, tt.wantParam)
			}
			for _, w := range tt.wantIn {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q, want it to say %q", msg, w)
				}
			}
			if got := host.hits.Load() - hits; got != tt.wantHits {
				t.Errorf("the image host got %d requests, want %d", got, tt.wantHits)
			}
			if got := sc.modelCalls() - calls; got != 0 {
				t.Errorf("%d model calls for a refused image, want none", got)
			}
			if took > imageURLTimeout+3*time.Second {
				t.Errorf("the refusal took %v; the fetch timeout is %v", took, imageURLTimeout)
			}
		})
	}
}

// TestImageURLOffByDefault: with server.images.allowedHosts empty, an
// image URL is refused by name, saying where the operator allows hosts.
func TestImageURLOffByDefault(t *testing.T) {
	sc := newScenario(t, quickConfig())
	host := newImageHost(t)
	status, out := postImageJSON(t, sc.srv.URL, "/v1/chat/completions", imageUser(), "", openaiImageURLBody(host.URL+"/cover.png"))
	_, msg, param := errorOf(out)
	if status != http.StatusBadRequest || param != "messages[0].content[0].image_url.url" ||
		!strings.Contains(msg, "remote image URLs are off") || !strings.Contains(msg, "server.images.allowedHosts") {
		t.Fatalf("%d %v; want a 400 naming the field and server.images.allowedHosts", status, out)
	}
	if host.hits.Load() != 0 {
		t.Fatalf("the image host got %d requests, want none", host.hits.Load())
	}
}

// TestImageURLOnlyForAnAdmittedCaller: with auth.keys, a request without
// a valid key, one refused by its key's rate limit, and a count_tokens
// request make the gateway fetch nothing; the admitted request fetches
// its image once.
func TestImageURLOnlyForAnAdmittedCaller(t *testing.T) {
	cfg := imageURLConfig()
	cfg.Auth.TrustUserHeader = false
	cfg.Auth.Keys = map[string]config.Caller{"sk-img": {UserID: "img-app", Tier: "standard", RequestsPerMinute: 1}}
	sc := newScenario(t, cfg)
	host := newImageHost(t)
	url := host.URL + "/cover.png"
	for _, key := range []string{"", "sk-wrong"} {
		if status, out := postImageJSON(t, sc.srv.URL, "/v1/chat/completions", "", key, openaiImageURLBody(url)); status != http.StatusUnauthorized {
			t.Fatalf("key %q: %d %v, want 401", key, status, out)
		}
		if status, out := postImageJSON(t, sc.srv.URL, "/v1/messages", "", key, anthropicImageURLBody(url)); status != http.StatusUnauthorized {
			t.Fatalf("key %q: %d %v, want 401", key, status, out)
		}
	}
	count := fmt.Sprintf(`{"model":"sonnet","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":%q}}]}]}`, url)
	if status, out := postImageJSON(t, sc.srv.URL, "/v1/messages/count_tokens", "", "sk-img", count); status != http.StatusBadRequest {
		t.Fatalf("count_tokens of an image URL: %d %v, want 400", status, out)
	}
	if host.hits.Load() != 0 {
		t.Fatalf("the image host got %d requests before any caller was admitted, want none", host.hits.Load())
	}
	status, out := postImageJSON(t, sc.srv.URL, "/v1/chat/completions", "", "sk-img", openaiImageURLBody(url))
	if status != http.StatusOK || !strings.Contains(fmt.Sprint(out["choices"]), coverSeen) {
		t.Fatalf("the admitted request: %d %v; want the model to see the cover", status, out)
	}
	if status, out := postImageJSON(t, sc.srv.URL, "/v1/chat/completions", "", "sk-img", openaiImageURLBody(url)); status != http.StatusTooManyRequests {
		t.Fatalf("over the key's rate limit: %d %v, want 429", status, out)
	}
	if host.hits.Load() != 1 {
		t.Fatalf("the image host got %d requests, want the admitted request's one", host.hits.Load())
	}
}
