package server

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/stream"
)

// sseFrames posts a streaming chat and returns its frames in order.
func sseFrames(t *testing.T, base, user, message, locale string) []stream.Frame {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat",
		strings.NewReader(`{"sessionId":"s-`+user+`","message":"`+message+`","locale":"`+locale+`","stream":true}`))
	req.Header.Set("X-User-Id", user)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/chat (stream): status %d", resp.StatusCode)
	}
	var frames []stream.Frame
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		f, err := stream.DecodeFrame([]byte(data))
		if err != nil {
			t.Fatalf("frame %s: %v", data, err)
		}
		frames = append(frames, f)
	}
	return frames
}

// TestStatusFramesDuringThrottleStorm: while the primary throttles, the SSE
// client hears why it waits — retrying (with the attempt and the wait) and
// then falling back — in its language, all before the first chunk, and the
// answer still comes.
func TestStatusFramesDuringThrottleStorm(t *testing.T) {
	sc := newScenario(t, quickConfig())
	adminPut(t, sc.srv, "/admin/sim/sonnet", `{"errorRate":{"throttled":1}}`)

	frames := sseFrames(t, sc.srv.URL, "storm-ja", "おすすめの漫画は？", "ja")
	var states []string
	firstChunk := -1
	for i, f := range frames {
		switch f.Type {
		case stream.TypeStatus:
			if firstChunk >= 0 {
				t.Fatalf("status frame %d after the first chunk: %+v", i, f.Status)
			}
			states = append(states, f.Status.State)
			if !hasJapanese(f.Status.Message) {
				t.Errorf("status message %q is not in the user's language", f.Status.Message)
			}
			if f.Status.State == stream.StateRetrying && (f.Status.Attempt < 2 || f.Status.Of < f.Status.Attempt || f.Status.RetryInSeconds < 1) {
				t.Errorf("retrying frame %+v: want attempt >= 2 of N and a wait", f.Status)
			}
		case stream.TypeChunk:
			if firstChunk < 0 {
				firstChunk = i
			}
		}
	}
	last := frames[len(frames)-1]
	if last.Type != stream.TypeDone || last.Done.Tier != "haiku" {
		t.Fatalf("last frame %+v: want done from haiku", last)
	}
	if len(states) < 2 || states[0] != stream.StateRetrying || states[len(states)-1] != stream.StateFallingBack {
		t.Fatalf("status states %v: want retrying first and falling_back before the answer", states)
	}
}

// TestStatusFrameWhileQueued: a P1 caller whose model's quota is saturated
// hears that it is queued, then gets its answer once quota frees up.
func TestStatusFrameWhileQueued(t *testing.T) {
	cfg := quickConfig()
	cfg.Auth.Keys = map[string]config.Caller{"sk-p1": {UserID: "u-p1", Priority: "P1", Tenant: "acme"}}
	sc := newScenario(t, cfg)
	adminPut(t, sc.srv, "/admin/quota/sonnet", `{"tpm":1,"rpm":1000}`)
	sc.chat("u-p0", "What do you recommend?", "en") // a chat turn uses up the minute's quota

	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/chat",
		strings.NewReader(`{"sessionId":"s-q","message":"What do you recommend?","locale":"en","stream":true}`))
	req.Header.Set("Authorization", "Bearer sk-p1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var queued bool
	var last stream.Frame
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		data, ok := strings.CutPrefix(lines.Text(), "data: ")
		if !ok {
			continue
		}
		f, err := stream.DecodeFrame([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == stream.TypeStatus && f.Status.State == stream.StateQueued && !queued {
			queued = true
			if f.Status.Message == "" {
				t.Error("queued status without a message")
			}
			adminPut(t, sc.srv, "/admin/quota/sonnet", `{}`) // quota frees up
		}
		last = f
	}
	if !queued || last.Type != stream.TypeDone {
		t.Fatalf("queued status seen %v, last frame %+v: want a queued status, then the answer", queued, last)
	}
}
