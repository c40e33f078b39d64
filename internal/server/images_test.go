package server

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	anth "github.com/anthropics/anthropic-sdk-go"
	anthoption "github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaioption "github.com/openai/openai-go/v3/option"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// coverPNG is the picture the image tests send: 800×600, 640 tokens.
var coverPNG = visiontest.PNG(800, 600)

const coverSeen = "(I looked at 1 image: 800×600 png.)"

// imageAnswer is an answer as a test reads it off either door.
type imageAnswer struct {
	text  string
	model string
	input int // every input token, cached or not
}

// askImage asks question through door ("openai" or "anthropic", JSON or
// streamed, with the door's Go SDK), with the cover when image is set.
func askImage(t *testing.T, url, door string, stream bool, question string, image bool) imageAnswer {
	t.Helper()
	if door == "openai" {
		return askImageOpenAI(t, url, stream, question, image)
	}
	return askImageAnthropic(t, url, stream, question, image)
}

func askImageOpenAI(t *testing.T, url string, stream bool, question string, image bool) imageAnswer {
	t.Helper()
	c := oai.NewClient(oaioption.WithBaseURL(url+"/v1/"), oaioption.WithAPIKey("sk-any"),
		oaioption.WithHeader("X-User-Id", imageUser()), oaioption.WithMaxRetries(0))
	parts := []oai.ChatCompletionContentPartUnionParam{oai.TextContentPart(question)}
	if image {
		parts = append([]oai.ChatCompletionContentPartUnionParam{oai.ImageContentPart(oai.ChatCompletionContentPartImageImageURLParam{
			URL: visiontest.DataURL("image/png", coverPNG), Detail: "high"})}, parts...)
	}
	p := oai.ChatCompletionNewParams{Model: "sonnet", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(parts)},
		MaxCompletionTokens: oai.Int(1000)}
	if !stream {
		res, err := c.Chat.Completions.New(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return imageAnswer{text: res.Choices[0].Message.Content, model: res.Model, input: int(res.Usage.PromptTokens)}
	}
	p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	s := c.Chat.Completions.NewStreaming(context.Background(), p)
	acc := oai.ChatCompletionAccumulator{}
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return imageAnswer{text: acc.Choices[0].Message.Content, model: acc.Model, input: int(acc.Usage.PromptTokens)}
}

func askImageAnthropic(t *testing.T, url string, stream bool, question string, image bool) imageAnswer {
	t.Helper()
	c := anth.NewClient(anthoption.WithBaseURL(url), anthoption.WithAPIKey("sk-any"),
		anthoption.WithHeader("X-User-Id", imageUser()), anthoption.WithMaxRetries(0))
	blocks := []anth.ContentBlockParamUnion{anth.NewTextBlock(question)}
	if image {
		blocks = append([]anth.ContentBlockParamUnion{anth.NewImageBlockBase64("image/png", visiontest.Base64(coverPNG))}, blocks...)
	}
	p := anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1000, Messages: []anth.MessageParam{anth.NewUserMessage(blocks...)}}
	var msg anth.Message
	if stream {
		s := c.Messages.NewStreaming(context.Background(), p)
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	} else {
		res, err := c.Messages.New(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		msg = *res
	}
	var text strings.Builder
	for _, b := range msg.Content {
		text.WriteString(b.Text)
	}
	u := msg.Usage
	return imageAnswer{text: text.String(), model: string(msg.Model), input: int(u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens)}
}

var imageUsers, imageQuestions atomic.Int64

// imageUser is a user of its own for each question, under the per-user
// rate limit.
func imageUser() string { return fmt.Sprintf("image-user-%d", imageUsers.Add(1)) }

// imageQuestion is a question no other test asks, so that the answer
// cache cannot serve its text-only twin.
func imageQuestion() string {
	return fmt.Sprintf("Which manga is on this cover? It is number %d of my list.", imageQuestions.Add(1))
}

// TestImageQuestionThroughEveryDoorAndProvider: an image question through
// the OpenAI and Anthropic doors (their Go SDKs, JSON and streamed),
// served by the simulator, or by the openai, anthropic and bedrock
// providers against the simulator on their vendors' wires. The model says
// it saw the 800×600 PNG; the answer's input tokens are the same
// question's without the image plus the image's 640; asked again, the
// question is answered by the model, never from the answer cache.
func TestImageQuestionThroughEveryDoorAndProvider(t *testing.T) {
	upstreams := map[string]func(t *testing.T, cfg *config.Config){
		"sim":       func(*testing.T, *config.Config) {},
		"openai":    func(t *testing.T, cfg *config.Config) { openaiUpstream(t, cfg) },
		"anthropic": func(t *testing.T, cfg *config.Config) { onAnthropic(t, cfg, "sonnet") },
		"bedrock": func(t *testing.T, cfg *config.Config) {
			_, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
			*cfg = onBedrock(*cfg, endpoint)
		},
	}
	imageTokens := provider.ImageTokens(800, 600)
	for _, up := range []string{"sim", "openai", "anthropic", "bedrock"} {
		t.Run(up, func(t *testing.T) {
			cfg := quickConfig()
			upstreams[up](t, &cfg)
			sc := newScenario(t, cfg)
			for _, door := range []string{"openai", "anthropic"} {
				for _, stream := range []bool{false, true} {
					t.Run(door+map[bool]string{false: "/json", true: "/stream"}[stream], func(t *testing.T) {
						q := imageQuestion()
						seen := askImage(t, sc.srv.URL, door, stream, q, true)
						if !strings.HasSuffix(seen.text, coverSeen) || !strings.Contains(seen.model, "sonnet") {
							t.Fatalf("answer %q from %q: want Sonnet saying %q", seen.text, seen.model, coverSeen)
						}
						plain := askImage(t, sc.srv.URL, door, stream, q, false)
						if strings.Contains(plain.text, "I looked at") || plain.input == 0 {
							t.Fatalf("text-only answer %+v: want a model's answer that saw no image", plain)
						}
						if seen.input != plain.input+imageTokens {
							t.Errorf("input tokens %d with the image, %d without; want the image's %d more", seen.input, plain.input, imageTokens)
						}
						again := askImage(t, sc.srv.URL, door, stream, q, true)
						if !strings.HasSuffix(again.text, coverSeen) || again.model == "cache" {
							t.Errorf("the same image question again: %q from %q; want the model, not the answer cache", again.text, again.model)
						}
					})
				}
			}
		})
	}
}

// TestImageTurnSkipsATierThatCannotSee: Sonnet lists [text, tools], no
// vision; an image question asked of it is answered by Haiku, and its
// model attempt's span counts the image; a text question still gets
// Sonnet.
func TestImageTurnSkipsATierThatCannotSee(t *testing.T) {
	cfg := quickConfig()
	cfg.Models[0].Capabilities = []string{config.CapabilityText, config.CapabilityTools}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false // every span reaches the log
	sc := newScenario(t, cfg)
	for _, door := range []string{"openai", "anthropic"} {
		got := askImage(t, sc.srv.URL, door, false, imageQuestion(), true)
		if !strings.Contains(got.model, "haiku") || !strings.HasSuffix(got.text, coverSeen) {
			t.Fatalf("%s door: answer %q from %q; want Haiku, which can see, saying %q", door, got.text, got.model, coverSeen)
		}
		if got := askImage(t, sc.srv.URL, door, false, imageQuestion(), false); !strings.Contains(got.model, "sonnet") {
			t.Fatalf("%s door: text question answered by %q, want Sonnet", door, got.model)
		}
	}
	sc.s.Close() // flush the emitter
	attempts := map[string]int{}
	for _, e := range readSpans(t, path) {
		if e.Name == "model_attempt" && e.Resource.Images > 0 {
			if e.Resource.Images != 1 {
				t.Fatalf("model_attempt resource %+v: want 1 image", e.Resource)
			}
			attempts[e.Node.NodeID]++
		}
	}
	if attempts["haiku"] != 2 || attempts["sonnet"] != 0 {
		t.Fatalf("model attempts with an image by tier: %v; want haiku's two alone", attempts)
	}
}

// TestImageTokensArePricedByTheAnsweringVendor: a model attempt's span
// gives its images' tokens by its vendor's formula, priced at its model's
// input price — OpenAI's tiles for Sonnet on the openai provider (765 for
// the 800×600 cover), Claude's 640 for Haiku on the simulator.
func TestImageTokensArePricedByTheAnsweringVendor(t *testing.T) {
	cfg := quickConfig()
	openaiUpstream(t, &cfg)
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	cfg.Events.Sampling.Enabled = false // every span reaches the log
	sc := newScenario(t, cfg)
	for _, model := range []string{"sonnet", "haiku"} {
		r, err := (&openAIConversation{url: sc.srv.URL, user: imageUser(), model: model}).send(t, ask{text: imageQuestion(), image: true})
		if err != nil || r.tier != model {
			t.Fatalf("image question to %s: %+v (%v)", model, r, err)
		}
	}
	sc.s.Close() // flush the emitter
	want := map[string]int{"sonnet": 765, "haiku": 640}
	price := map[string]float64{"sonnet": cfg.Models[0].InputPerMTok, "haiku": cfg.Models[1].InputPerMTok}
	seen := 0
	for _, e := range readSpans(t, path) {
		if e.Name != "model_attempt" || e.Resource.Images == 0 {
			continue
		}
		seen++
		tier := e.Node.NodeID
		if e.Resource.ImageTokens != want[tier] || math.Abs(e.Resource.ImageCostUSD-float64(want[tier])*price[tier]/1e6) > 1e-12 {
			t.Fatalf("%s's attempt: image tokens %d costing %g; want %d at its input price", tier, e.Resource.ImageTokens, e.Resource.ImageCostUSD, want[tier])
		}
	}
	if seen != 2 {
		t.Fatalf("%d model attempts with an image, want 2", seen)
	}
}
