package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
)

// callCounter answers through scriptProvider and counts which kind of call
// it got; with stall, a whole-answer call waits for its context instead.
type callCounter struct {
	scriptProvider
	stall           bool
	complete, strm  atomic.Int32
	completeExpired atomic.Bool
}

func (p *callCounter) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	p.complete.Add(1)
	if p.stall {
		<-ctx.Done()
		p.completeExpired.Store(true)
		return &provider.Response{Usage: provider.Usage{InputTokens: 10}}, ctx.Err()
	}
	return p.scriptProvider.Stream(ctx, req, func(string) error { return nil })
}

func (p *callCounter) Stream(ctx context.Context, req *provider.Request, emit func(string) error) (*provider.Response, error) {
	p.strm.Add(1)
	return p.scriptProvider.Stream(ctx, req, emit)
}

func postChat(t *testing.T, url, body string) chatAnswer {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got chatAnswer
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %+v", resp.StatusCode, got)
	}
	return got
}

func TestUpstreamFollowsTheClient(t *testing.T) {
	tests := []struct {
		name         string
		upstream     string
		stream       bool
		wantComplete int32
		wantStream   int32
	}{
		{name: "client tier, JSON client: one whole call", upstream: config.UpstreamClient, wantComplete: 1},
		{name: "client tier, SSE client: streamed", upstream: config.UpstreamClient, stream: true, wantStream: 1},
		{name: "default tier, JSON client: streamed", upstream: "", wantStream: 1},
		{name: "stream tier, JSON client: streamed", upstream: config.UpstreamStream, wantStream: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &callCounter{scriptProvider: scriptProvider{answer: "Try One Piece."}}
			_, srv := newTestGateway(t, both(p), func(c *config.Config) {
				for i := range c.Models {
					c.Models[i].Upstream = tt.upstream
				}
			})
			body := `{"sessionId":"s","message":"recommend something","locale":"en"}`
			if !tt.stream {
				got := postChat(t, srv.URL, body)
				if got.Text != "Try One Piece." || got.Tier != "sonnet" || got.Degraded {
					t.Fatalf("answer %+v", got)
				}
			} else {
				resp, err := http.Post(srv.URL+"/v1/chat", "application/json",
					strings.NewReader(strings.Replace(body, `"en"`, `"en","stream":true`, 1)))
				if err != nil {
					t.Fatal(err)
				}
				raw, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !strings.Contains(string(raw), `"type":"done"`) {
					t.Fatalf("no done frame in %q (%v)", raw, err)
				}
			}
			if c, s := p.complete.Load(), p.strm.Load(); c != tt.wantComplete || s != tt.wantStream {
				t.Fatalf("whole calls %d, streamed calls %d; want %d, %d", c, s, tt.wantComplete, tt.wantStream)
			}
		})
	}
}

// A stalled whole-answer call is cut at deadline.whole (not the 2 s
// first-token deadline, which does not apply to it) and the turn falls
// back to the next tier.
func TestWholeCallIsCutAtDeadlineWhole(t *testing.T) {
	sonnet := &callCounter{stall: true}
	haiku := &callCounter{scriptProvider: scriptProvider{answer: "Try Naruto."}}
	_, srv := newTestGateway(t, map[string]provider.Provider{"sonnet": sonnet, "haiku": haiku}, func(c *config.Config) {
		for i := range c.Models {
			c.Models[i].Upstream = config.UpstreamClient
		}
		c.Deadline.Whole = 150 * time.Millisecond
	})
	start := time.Now()
	got := postChat(t, srv.URL, `{"sessionId":"s","message":"recommend something","locale":"en"}`)
	took := time.Since(start)
	if got.Tier != "haiku" || got.Text != "Try Naruto." || !got.Degraded {
		t.Fatalf("answer %+v, want haiku's", got)
	}
	if !sonnet.completeExpired.Load() {
		t.Fatal("sonnet's whole call was not cancelled")
	}
	if sonnet.strm.Load() != 0 || haiku.complete.Load() != 1 {
		t.Fatalf("sonnet streamed %d, haiku whole calls %d", sonnet.strm.Load(), haiku.complete.Load())
	}
	// The first-token deadline (deadline.attempt, 2 s) would have waited
	// far longer; deadline.whole cut it.
	if took >= 2*time.Second {
		t.Fatalf("the turn took %v: the whole call was not cut at deadline.whole", took)
	}
}

func TestUpstreamIsValidated(t *testing.T) {
	cfg := config.Default()
	cfg.Models[0].Upstream = "sometimes"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "models[0].upstream") {
		t.Fatalf("got %v, want a problem naming models[0].upstream", err)
	}
	cfg = config.Default()
	cfg.Deadline.Whole = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "deadline.whole") {
		t.Fatalf("got %v, want a problem naming deadline.whole", err)
	}
}

func TestWholeCallByUpstreamMode(t *testing.T) {
	tests := []struct {
		name, mode, surface string
		whole               bool // the client takes its answer whole
		want                bool
	}{
		{"auto, a vendor API's JSON client", "", "openai", true, true},
		{"auto, the Responses API", config.UpstreamAuto, "openai.responses", true, true},
		{"auto, the Anthropic door", "", "anthropic", true, true},
		{"auto, the Bedrock door", "", "bedrock", true, true},
		{"auto, the assistant's JSON chat keeps its first-token deadline", "", "http", true, false},
		{"auto, batch", "", "batch", true, false},
		{"auto, a streaming client", "", "openai", false, false},
		{"client, the assistant's JSON chat", config.UpstreamClient, "http", true, true},
		{"stream, a vendor API's JSON client", config.UpstreamStream, "openai", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out Output = goneOutput{}
			if tt.whole {
				out = &wholeOutput{Output: goneOutput{}}
			}
			if got := wholeCall(tt.mode, &Turn{Surface: tt.surface}, out); got != tt.want {
				t.Fatalf("wholeCall = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWholeBoundFollowsTheOutputGranted(t *testing.T) {
	tests := []struct {
		max  int
		want time.Duration
	}{
		{0, 30 * time.Second},                        // no grant known: deadline.whole
		{130, 2*time.Second + 6500*time.Millisecond}, // a MangaAssist answer
		{4096, 30 * time.Second},                     // a long answer: capped by deadline.whole
	}
	for _, tt := range tests {
		if got := wholeBound(2*time.Second, 30*time.Second, tt.max); got != tt.want {
			t.Errorf("wholeBound(%d tokens) = %v, want %v", tt.max, got, tt.want)
		}
	}
}
