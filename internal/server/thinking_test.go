package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	anth "github.com/anthropics/anthropic-sdk-go"
	anthoption "github.com/anthropics/anthropic-sdk-go/option"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// thinkingConfig is quickConfig with room for reasoning: the default
// profile grants 1024 output tokens, which leaves none after the smallest
// thinking budget.
func thinkingConfig() config.Config {
	cfg := quickConfig()
	cfg.Budget.RequestOutput = 4096
	for i := range cfg.Models {
		cfg.Models[i].MaxOutputTokens = 4096
	}
	return cfg
}

var thinkingQuestions atomic.Int64

// thinkingQuestion is a question no other test asks.
func thinkingQuestion() string {
	return fmt.Sprintf("Which shonen manga should I start with? I have read %d volumes this year.", thinkingQuestions.Add(1))
}

// askThinking sends msgs through the Anthropic door with the Go SDK, with
// thinking on a budget of 1024, JSON or streamed.
func askThinking(t *testing.T, url string, stream bool, msgs []anth.MessageParam) (*anth.Message, http.Header, error) {
	t.Helper()
	c := anth.NewClient(anthoption.WithBaseURL(url), anthoption.WithAPIKey("sk-any"),
		anthoption.WithHeader("X-User-Id", imageUser()), anthoption.WithMaxRetries(0))
	p := anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 2000, Messages: msgs,
		Thinking: anth.ThinkingConfigParamOfEnabled(1024)}
	var h http.Response
	if !stream {
		var hr *http.Response
		msg, err := c.Messages.New(context.Background(), p, anthoption.WithResponseInto(&hr))
		if hr != nil {
			h = *hr
		}
		return msg, h.Header, err
	}
	var hr *http.Response
	s := c.Messages.NewStreaming(context.Background(), p, anthoption.WithResponseInto(&hr))
	var msg anth.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			return nil, nil, err
		}
	}
	if hr != nil {
		h = *hr
	}
	return &msg, h.Header, s.Err()
}

// wantThinking checks that msg opens with the simulator's reasoning about
// question, signed, then its answer.
func wantThinking(t *testing.T, msg *anth.Message, question string, redacted bool) {
	t.Helper()
	want := sim.Thinking(&provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Content: question}}})
	if len(msg.Content) != len(want)+1 {
		t.Fatalf("content %+v: want %d thinking blocks, then the text", msg.Content, len(want))
	}
	for i, w := range want {
		b := msg.Content[i]
		switch {
		case w.Redacted != "":
			if b.Type != "redacted_thinking" || b.Data != w.Redacted {
				t.Fatalf("block %d: %s %q; want redacted_thinking %q", i, b.Type, b.Data, w.Redacted)
			}
		case b.Type != "thinking" || b.Thinking != w.Text || b.Signature != w.Signature:
			t.Fatalf("block %d: %s %q signed %q; want thinking %q signed %q", i, b.Type, b.Thinking, b.Signature, w.Text, w.Signature)
		}
	}
	if redacted != (want[0].Redacted != "") {
		t.Fatalf("the simulator's reasoning %+v: redacted %v expected", want, redacted)
	}
	if last := msg.Content[len(want)]; last.Type != "text" || last.Text == "" {
		t.Fatalf("last block %+v: want the answer's text", last)
	}
	if msg.Usage.OutputTokens == 0 {
		t.Fatal("no output tokens billed")
	}
}

// TestThinkingThroughTheAnthropicDoorAndProviders: a question with
// thinking on, through the Anthropic door (JSON and streamed), served by
// the simulator, or by the anthropic and bedrock providers against the
// simulator on their vendors' wires: the answer opens with the model's
// signed reasoning (and a redacted block for Anthropic's test string),
// then its text. The next turn sends those blocks back in the
// conversation, and the upstream, which checks every signature, answers
// it: the blocks reached it unchanged. A block whose signature or data
// was changed is refused upstream, and no model answers it.
func TestThinkingThroughTheAnthropicDoorAndProviders(t *testing.T) {
	upstreams := map[string]func(t *testing.T, cfg *config.Config){
		"sim":       func(*testing.T, *config.Config) {},
		"anthropic": func(t *testing.T, cfg *config.Config) { onAnthropic(t, cfg, "sonnet") },
		"bedrock": func(t *testing.T, cfg *config.Config) {
			_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
			*cfg = onBedrock(*cfg, endpoint)
		},
	}
	for _, up := range []string{"sim", "anthropic", "bedrock"} {
		t.Run(up, func(t *testing.T) {
			cfg := thinkingConfig()
			upstreams[up](t, &cfg)
			// Claude 3 model ids, which do not think by default: the tiers say they do.
			cfg.Models[0].Capabilities = []string{config.CapabilityTools, config.CapabilityVision, config.CapabilityThinking}
			sc := newScenario(t, cfg)
			for _, stream := range []bool{false, true} {
				for _, redacted := range []bool{false, true} {
					name := map[bool]string{false: "json", true: "stream"}[stream] + map[bool]string{false: "", true: "/redacted"}[redacted]
					t.Run(name, func(t *testing.T) {
						q := thinkingQuestion()
						if redacted {
							q += " " + sim.RedactedThinkingTrigger
						}
						msgs := []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock(q))}
						msg, h, err := askThinking(t, sc.srv.URL, stream, msgs)
						if err != nil {
							t.Fatal(err)
						}
						if h.Get("x-fmgate-tier") != "sonnet" {
							t.Fatalf("answered by %q, want sonnet", h.Get("x-fmgate-tier"))
						}
						wantThinking(t, msg, q, redacted)

						follow := "And after that one?"
						msgs = append(msgs, msg.ToParam(), anth.NewUserMessage(anth.NewTextBlock(follow)))
						next, h, err := askThinking(t, sc.srv.URL, stream, msgs)
						if err != nil {
							t.Fatal(err)
						}
						if h.Get("x-fmgate-tier") != "sonnet" || h.Get("x-fmgate-degraded") != "false" {
							t.Fatalf("the next turn, with the reasoning sent back: tier %q degraded %q; want sonnet, as the upstream took the signatures",
								h.Get("x-fmgate-tier"), h.Get("x-fmgate-degraded"))
						}
						wantThinking(t, next, follow, false)

						changed := msg.ToParam()
						if redacted {
							changed.Content[0].OfRedactedThinking.Data = "c2ltdWxhdGVkIGJ1dCBub3QgYnkgdGhpcyBtb2RlbA=="
						} else {
							changed.Content[0].OfThinking.Signature = sim.ThinkingSignature("another text")
						}
						msgs[1] = changed
						_, h, err = askThinking(t, sc.srv.URL, stream, msgs)
						if err != nil {
							t.Fatal(err)
						}
						if h.Get("x-fmgate-tier") == "sonnet" || h.Get("x-fmgate-tier") == "haiku" {
							t.Fatalf("a changed signature was answered by %q; want the upstream to refuse it", h.Get("x-fmgate-tier"))
						}
					})
				}
			}
		})
	}
}

// TestThinkingTurnSkipsATierThatCannotThink: Sonnet lists no thinking; a
// question with thinking on is answered by Haiku, with its reasoning, and
// one without by Sonnet.
func TestThinkingTurnSkipsATierThatCannotThink(t *testing.T) {
	cfg := thinkingConfig()
	cfg.Models[0].Capabilities = []string{config.CapabilityTools, config.CapabilityVision}
	sc := newScenario(t, cfg)
	for _, stream := range []bool{false, true} {
		q := thinkingQuestion()
		msg, h, err := askThinking(t, sc.srv.URL, stream, []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock(q))})
		if err != nil {
			t.Fatal(err)
		}
		if h.Get("x-fmgate-tier") != "haiku" || !strings.Contains(string(msg.Model), "haiku") {
			t.Fatalf("stream %v: answered by %q (%s); want Haiku, which can think", stream, h.Get("x-fmgate-tier"), msg.Model)
		}
		wantThinking(t, msg, q, false)
		plain := askImage(t, sc.srv.URL, "anthropic", stream, thinkingQuestion(), false)
		if !strings.Contains(plain.model, "sonnet") {
			t.Fatalf("stream %v: a question without thinking answered by %q, want Sonnet", stream, plain.model)
		}
	}
}

// TestThinkingBudgetBeyondTheOutputGranted: the default profile grants
// 1024 output tokens a request, which leaves no room for an answer after
// the smallest thinking budget: the request is refused, naming the field,
// rather than sent with a smaller budget or none.
func TestThinkingBudgetBeyondTheOutputGranted(t *testing.T) {
	sc := newScenario(t, quickConfig())
	_, _, err := askThinking(t, sc.srv.URL, false, []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock(thinkingQuestion()))})
	var ae *anth.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.Error(), "thinking.budget_tokens") {
		t.Fatalf("err %v; want a 400 naming thinking.budget_tokens", err)
	}
}

// TestThinkingStreamEvents: the streamed answer's events, as Anthropic
// sends them: message_start, the thinking block (its start, thinking_delta
// pieces, one signature_delta, its stop) at index 0, then the text block
// at index 1.
func TestThinkingStreamEvents(t *testing.T) {
	sc := newScenario(t, thinkingConfig())
	q := thinkingQuestion()
	body := fmt.Sprintf(`{"model":"sonnet","max_tokens":2000,"stream":true,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":%q}]}`, q)
	req, _ := http.NewRequest(http.MethodPost, sc.srv.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "sk-any")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("X-User-Id", imageUser())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var seq []string
	var thought, signature string
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
			Block struct {
				Type string `json:"type"`
			} `json:"content_block"`
			Delta struct {
				Type      string `json:"type"`
				Thinking  string `json:"thinking"`
				Signature string `json:"signature"`
			} `json:"delta"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		step := ev.Type
		switch ev.Type {
		case "content_block_start":
			step = fmt.Sprintf("start %d %s", ev.Index, ev.Block.Type)
		case "content_block_delta":
			step = fmt.Sprintf("%s %d", ev.Delta.Type, ev.Index)
			thought += ev.Delta.Thinking
			signature += ev.Delta.Signature
		case "content_block_stop":
			step = fmt.Sprintf("stop %d", ev.Index)
		case "ping":
			continue
		}
		if n := len(seq); n > 0 && seq[n-1] == step {
			continue // a block's deltas, one after another
		}
		seq = append(seq, step)
	}
	want := []string{"message_start", "start 0 thinking", "thinking_delta 0", "signature_delta 0", "stop 0",
		"start 1 text", "text_delta 1", "stop 1", "message_delta", "message_stop"}
	if strings.Join(seq, ", ") != strings.Join(want, ", ") {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(seq, ", "), strings.Join(want, ", "))
	}
	th := sim.Thinking(&provider.Request{Messages: []provider.Message{{Role: provider.RoleUser, Content: q}}})[0]
	if thought != th.Text || signature != th.Signature {
		t.Fatalf("thinking %q signed %q; want %q signed %q", thought, signature, th.Text, th.Signature)
	}
}
