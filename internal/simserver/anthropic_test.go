package simserver

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/frontdoor/anthropic"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// streamUsage streams preq from s over
// Anthropic's wire and returns the usage of its message_start and of its
// message_delta (zero when the stream had none).
func streamUsage(t *testing.T, s *sim.Sim, preq *provider.Request) (start, delta anthropic.Usage) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := anthropicAnswer{s: s, name: preq.Model, req: &anthropic.Request{Model: preq.Model, Stream: true}, preq: preq, id: "msg_test"}
		a.stream(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage anthropic.Usage `json:"usage"`
			} `json:"message"`
			Usage anthropic.Usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		switch ev.Type {
		case "message_start":
			start = ev.Message.Usage
		case "message_delta":
			delta = ev.Usage
		}
	}
	return start, delta // a dropped connection ends the scan early
}

func TestAnthropicStreamStartsWithInputClasses(t *testing.T) {
	system := strings.Repeat("You are MangaAssist, the store assistant of a Japanese manga shop. ", 40)
	preq := &provider.Request{Model: "sonnet", System: system,
		SystemCache: []provider.CacheMark{{At: len(system)}},
		Messages:    []provider.Message{{Role: provider.RoleUser, Content: "What is new this week?"}}}
	total := sim.InputTokens(preq)
	systemPrefix := sim.CountTokens(system) + sim.MessageOverheadTokens

	tests := []struct {
		name      string
		cut       int
		wantStart anthropic.Usage
		wantDelta bool
	}{
		{"first call writes", 0, anthropic.Usage{CacheCreationInputTokens: systemPrefix, InputTokens: total - systemPrefix,
			CacheCreation: &anthropic.CacheCreation{Ephemeral5m: systemPrefix}}, true},
		{"second call reads", 0, anthropic.Usage{CacheReadInputTokens: systemPrefix, InputTokens: total - systemPrefix}, true},
		{"cut mid-answer", 3, anthropic.Usage{CacheReadInputTokens: systemPrefix, InputTokens: total - systemPrefix}, false},
	}
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"sonnet": {}}}, sim.Options{Rand: rand.New(rand.NewPCG(1, 2))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.SetSettings("sonnet", sim.Settings{CutAfterTokens: tt.cut}); err != nil {
				t.Fatal(err)
			}
			start, delta := streamUsage(t, s, preq)
			if !reflect.DeepEqual(start, tt.wantStart) {
				t.Errorf("message_start usage %+v, want %+v", start, tt.wantStart)
			}
			if !tt.wantDelta {
				return
			}
			want := tt.wantStart
			want.OutputTokens = delta.OutputTokens
			if !reflect.DeepEqual(delta, want) || delta.OutputTokens == 0 {
				t.Errorf("message_delta usage %+v, want the input classes %+v and the output", delta, want)
			}
		})
	}
}

func TestAnthropicStreamRefusedStartsWithNoUsage(t *testing.T) {
	s, err := sim.New(sim.Config{Models: map[string]sim.Settings{"sonnet": {
		ErrorRate: map[provider.Kind]float64{provider.KindGuardrail: 1},
	}}}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	system := strings.Repeat("You are MangaAssist. ", 40)
	preq := &provider.Request{Model: "sonnet", System: system, SystemCache: []provider.CacheMark{{At: len(system)}},
		Messages: []provider.Message{{Role: provider.RoleUser, Content: "hello"}}}
	if start, delta := streamUsage(t, s, preq); start != (anthropic.Usage{}) || delta != (anthropic.Usage{}) {
		t.Errorf("a refusal billed message_start %+v, message_delta %+v; want nothing", start, delta)
	}
}
