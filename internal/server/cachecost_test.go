package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/config"
	"github.com/fmgate/fmgate/internal/events"
	"github.com/fmgate/fmgate/internal/gateway"
	"github.com/fmgate/fmgate/internal/provider"
	"github.com/fmgate/fmgate/internal/provider/sim"
)

// conversationTurn is one turn of the conversation the cache tests hold.
type conversationTurn struct {
	message, locale string
	// how: "json", "stream", "leave" (the client goes after two frames)
	// or "cut" (Sonnet's stream drops after a few tokens and Haiku
	// finishes the answer).
	how string
}

var mangaConversation = []conversationTurn{
	{"ワンピースの最新刊はいつ出ますか？", "ja", "json"},
	{"それはいくらですか？", "ja", "stream"},
	{"送料はいくら？", "ja", "json"},
	{"Recommend a long fantasy manga series and explain why", "en", "leave"},
	{"What about something shorter, a finished series?", "en", "json"},
	{"Which volume should I start with?", "en", "cut"},
	{"返品はできますか？", "ja", "stream"},
	{"支払い方法を教えてください", "ja", "json"},
	{"Is the first volume in stock?", "en", "stream"},
	{"ありがとう、それを注文します", "ja", "json"},
}

// TestCachedConversationReconciles holds a MangaAssist conversation of ten
// turns on each wire fmgate calls models over — the in-process simulator,
// OpenAI, Anthropic and Bedrock Converse — with JSON and streamed answers,
// a stream the client leaves, and an answer whose Sonnet stream drops and
// Haiku finishes. From the second turn on, every Sonnet answer reads
// fmgate's system prompt from the vendor's prompt cache. Every attempt the
// vendor reported is priced exactly as the upstream simulator billed it
// (0.1%); the attempts a vendor's wire reports nothing for (a stream cut
// before its usage) are flagged usage_estimated, their input classes still
// exact where the wire reported them first (Anthropic's message_start).
func TestCachedConversationReconciles(t *testing.T) {
	for _, wire := range []string{"sim", "openai", "anthropic", "bedrock"} {
		t.Run(wire, func(t *testing.T) { holdCachedConversation(t, wire) })
	}
}

func holdCachedConversation(t *testing.T, wire string) {
	cfg := quickConfig()
	for name, st := range cfg.Sim.Models {
		st.TTFTMs = 20
		st.TokensPerSecond = 300 // slow enough to leave mid-stream
		cfg.Sim.Models[name] = st
	}
	// Outcomes, not timing: deadlines a wire hop under the race detector
	// on a busy machine never reaches.
	cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
	cfg.Stream.Continuation = true    // Haiku finishes the answer Sonnet's dropped stream began
	upstream := map[string]*sim.Sim{} // the simulator billing each model; absent: the gateway's own
	switch wire {
	case "openai":
		up, _, _ := openaiUpstreamStreams(t, &cfg)
		upstream["sonnet"] = up
	case "anthropic":
		// Haiku, which finishes the cut answer, stays in process: the
		// simulator's Anthropic wire refuses an assistant message last.
		upstream["sonnet"] = onAnthropic(t, &cfg, "sonnet")
	case "bedrock":
		up, endpoint := bedrockUpstream(t, cfg.Sim.Models["sonnet"])
		cfg = onBedrock(cfg, endpoint)
		upstream["sonnet"] = up
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg.Events.Sinks.JSONL.Path = path
	sc := newScenario(t, cfg)
	simOf := func(model string) *sim.Sim {
		if s, ok := upstream[model]; ok {
			return s
		}
		return sc.s.Sim
	}

	// Each turn runs alone and settles before the next: what the
	// simulators billed in between is that turn's bill.
	type window struct {
		from, to time.Time
		billed   map[string]provider.Usage
		how      string
	}
	var turns []window
	billedNow := func() map[string]provider.Usage {
		m := map[string]provider.Usage{}
		for _, model := range cfg.Models {
			m[model.Name] = simOf(model.Name).Usage(model.Name)
		}
		return m
	}
	for i, turn := range mangaConversation {
		before := billedNow()
		from := time.Now()
		switch turn.how {
		case "json":
			if a := sc.chatSession("reader", "conversation", turn.message, turn.locale); a.Status != http.StatusOK {
				t.Fatalf("turn %d: %d %s", i+1, a.Status, a.Error.Code)
			}
		case "stream":
			if got := streamIn(t, sc.srv.URL, "reader", "conversation", turn.message, turn.locale, 0); !strings.Contains(got, `"type":"done"`) {
				t.Fatalf("turn %d: stream without a done frame: %q", i+1, got)
			}
		case "leave":
			streamIn(t, sc.srv.URL, "reader", "conversation", turn.message, turn.locale, 2)
		case "cut":
			setUpstream(t, simOf("sonnet"), "sonnet", func(st *sim.Settings) { st.CutAfterTokens = 8 })
			got := streamIn(t, sc.srv.URL, "reader", "conversation", turn.message, turn.locale, 0)
			setUpstream(t, simOf("sonnet"), "sonnet", func(st *sim.Settings) { st.CutAfterTokens = 0 })
			if !strings.Contains(got, `"continued":true`) {
				t.Fatalf("turn %d: the cut answer was not finished by the next tier: %q", i+1, got)
			}
		}
		after := settledBilling(t, billedNow)
		w := window{from: from, to: time.Now(), billed: map[string]provider.Usage{}, how: turn.how}
		for model, u := range after {
			w.billed[model] = minus(u, before[model])
		}
		turns = append(turns, w)
	}
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sc.s.Gateway.Drain(dctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	sc.s.Close()

	spans := readSpans(t, path)
	prices := map[string]config.Model{}
	for _, m := range cfg.Models {
		prices[m.Name] = m
	}
	var eventsCost, billedCost float64
	for i, w := range turns {
		// Spans carry their start to the millisecond: a turn's attempts
		// start from its first millisecond until the next turn's.
		from, to := w.from.Truncate(time.Millisecond), w.to
		if i+1 < len(turns) {
			to = turns[i+1].from.Truncate(time.Millisecond)
		}
		var attempts []events.Event
		for _, e := range spans {
			if e.Name == "model_attempt" && !e.TSStart.Before(from) && e.TSStart.Before(to) {
				attempts = append(attempts, e)
			}
		}
		got := map[string]provider.Usage{} // the events' classes, per model
		estimated := map[string]bool{}
		cost := map[string]float64{}
		for _, e := range attempts {
			model := e.Node.NodeID
			r := e.Resource
			got[model] = got[model].Add(provider.Usage{
				InputTokens:       r.TokensIn - r.TokensCacheRead - r.TokensCacheWrite,
				CachedInputTokens: r.TokensCacheRead, CacheWriteTokens: r.TokensCacheWrite, OutputTokens: r.TokensOut})
			cost[model] += r.CostUSD
			if slices.Contains(r.CapabilityFlagsActive, gateway.FlagUsageEstimated) {
				estimated[model] = true
			}
			if want := prices[model].Price().Cost(provider.Usage{
				InputTokens:       r.TokensIn - r.TokensCacheRead - r.TokensCacheWrite,
				CachedInputTokens: r.TokensCacheRead, CacheWriteTokens: r.TokensCacheWrite, OutputTokens: r.TokensOut,
			}) - r.CostUSD; r.TokensCacheWrite == 0 && math.Abs(want) > 1e-12 {
				t.Errorf("turn %d: %s attempt costs $%g, its classes price to $%g", i+1, model, r.CostUSD, r.CostUSD+want)
			}
		}
		if i > 0 && w.how == "json" && got["sonnet"].CachedInputTokens == 0 {
			t.Errorf("turn %d: Sonnet read nothing from the prompt cache (events %+v)", i+1, got["sonnet"])
		}
		for model, billed := range w.billed {
			if billed == (provider.Usage{}) && got[model] == (provider.Usage{}) {
				continue
			}
			b := prices[model].Price().Cost(billed)
			eventsCost += cost[model]
			billedCost += b
			g := got[model]
			g.CacheWrite1hTokens = billed.CacheWrite1hTokens // spans keep writes whole; the class is priced in CostUSD
			switch {
			case !estimated[model]:
				if g != withoutEstimate(billed) {
					t.Errorf("turn %d (%s): %s events %+v, the upstream billed %+v", i+1, w.how, model, g, billed)
				}
				if rel := math.Abs(cost[model]-b) / b; rel > 0.001 {
					t.Errorf("turn %d (%s): %s events $%.7f, the upstream billed $%.7f (%.3f%% apart)", i+1, w.how, model, cost[model], b, rel*100)
				}
			case w.how != "leave" && w.how != "cut":
				t.Errorf("turn %d (%s): %s usage estimated, though the vendor reported it", i+1, w.how, model)
			default:
				// The wire reported nothing for the cut stream, or only
				// its input (Anthropic's message_start): what it did
				// report is exact, the rest is the gateway's estimate.
				if wire == "anthropic" && (g.CachedInputTokens != billed.CachedInputTokens || g.CacheWriteTokens != billed.CacheWriteTokens || g.InputTokens != billed.InputTokens) {
					t.Errorf("turn %d (%s): %s input %+v, message_start reported %+v", i+1, w.how, model, g, billed)
				}
				t.Logf("turn %d (%s): %s estimated $%.7f, the upstream billed $%.7f", i+1, w.how, model, cost[model], b)
			}
		}
	}
	if billedCost == 0 {
		t.Fatal("the upstream billed nothing")
	}
	t.Logf("%s: events $%.6f, upstream $%.6f for the conversation", wire, eventsCost, billedCost)
	// In process every attempt is billed exactly, cut or not. Over a
	// vendor's wire, two turns' usage is partly the gateway's estimate,
	// and the vendor also bills the tokens in flight when the stream was
	// cut, which no client sees.
	limit := 0.001
	if wire != "sim" {
		limit = 0.03
	}
	if rel := math.Abs(eventsCost-billedCost) / billedCost; rel > limit {
		t.Errorf("the conversation: events $%.6f, the upstream billed $%.6f (%.2f%% apart; limit %.1f%%)", eventsCost, billedCost, rel*100, limit*100)
	}
}

// withoutEstimate is u as a span's classes carry it.
func withoutEstimate(u provider.Usage) provider.Usage {
	u.Estimated = false
	return u
}

// minus is what was billed between two readings of a simulator's usage.
func minus(after, before provider.Usage) provider.Usage {
	return provider.Usage{
		InputTokens: after.InputTokens - before.InputTokens, OutputTokens: after.OutputTokens - before.OutputTokens,
		CachedInputTokens: after.CachedInputTokens - before.CachedInputTokens, CacheWriteTokens: after.CacheWriteTokens - before.CacheWriteTokens,
		CacheWrite1hTokens: after.CacheWrite1hTokens - before.CacheWrite1hTokens,
	}
}

// settledBilling reads the simulators' usage once it has not changed for
// 300 ms (a call the gateway cancelled stops billing a moment after the
// client left), within 10 s.
func settledBilling(t *testing.T, read func() map[string]provider.Usage) map[string]provider.Usage {
	t.Helper()
	last, stable := read(), time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		now := read()
		if fmt.Sprint(now) != fmt.Sprint(last) {
			last, stable = now, time.Now()
			continue
		}
		if time.Since(stable) >= 300*time.Millisecond {
			return last
		}
	}
	t.Fatal("the simulators kept billing for 10 s after the turn")
	return nil
}

// streamIn asks for an SSE answer to message in session; with stopAfter >
// 0 it closes the connection after that many frames. It returns what it
// read.
func streamIn(t *testing.T, base, user, session, message, locale string, stopAfter int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]any{"sessionId": session, "message": message, "locale": locale, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Id", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if stopAfter == 0 {
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	var got strings.Builder
	r := bufio.NewReader(resp.Body)
	for frames := 0; frames < stopAfter; {
		line, err := r.ReadString('\n')
		got.WriteString(line)
		if err != nil {
			break
		}
		if line == "\n" {
			frames++
		}
	}
	return got.String()
}

// TestPromptCachingWorkedExample is the README's worked example: the ten
// turns of one MangaAssist conversation (catalog search on, every answer
// Sonnet's) with models[].promptCaching auto and off, priced from the cost
// view (/admin/cost?by=model). With caching, the system prompt is written
// on the first turn and read on each later one; the bill with caching plus
// what the cost view says the cache saved is the bill without it. Run it
// with -v to print the table.
func TestPromptCachingWorkedExample(t *testing.T) {
	type bill struct {
		cost, saved           float64
		in, out, read, writes int64
	}
	run := func(caching string) bill {
		cfg := config.Default()
		for name, st := range cfg.Sim.Models {
			st.TTFTMs, st.TokensPerSecond = 20, 3000 // the price does not depend on the pace
			cfg.Sim.Models[name] = st
		}
		cfg.Deadline.FirstByte, cfg.Deadline.Attempt = 20*time.Second, 15*time.Second
		for i := range cfg.Models {
			cfg.Models[i].PromptCaching = caching
		}
		// One seed and no judge: both runs are the same conversation,
		// word for word, whatever else the machine is doing.
		cfg.Judge.SampleRate, cfg.Judge.SaturatedSampleRate = 0, 0
		// The model's cost alone: the gateway's own unit costs (compute by
		// the second, state writes) vary with the machine.
		cfg.UnitCosts = config.UnitCosts{}
		// Full-text retrieval only: whether the catalog's embedding at start
		// has finished must not change the context of a turn, and so the
		// two conversations.
		noHybrid := false
		cfg.Catalog.Hybrid = &noHybrid
		sc := newScenarioSim(t, cfg, sim.Options{Rand: rand.New(rand.NewPCG(27, 11))})
		for i, turn := range mangaConversation {
			a := sc.chatSession("reader", "worked-example", turn.message, turn.locale)
			if a.Status != http.StatusOK || a.Tier != "sonnet" {
				t.Fatalf("%s, turn %d: %d from %q (%s)", caching, i+1, a.Status, a.Tier, a.Error.Code)
			}
		}
		var rep struct {
			Rows []struct {
				Key              string  `json:"key"`
				Turns            int     `json:"turns"`
				CostUSD          float64 `json:"costUsd"`
				TokensIn         int64   `json:"tokensIn"`
				TokensOut        int64   `json:"tokensOut"`
				CacheReadTokens  int64   `json:"cacheReadTokens"`
				CacheWriteTokens int64   `json:"cacheWriteTokens"`
				CacheSavedUSD    float64 `json:"cacheSavedUsd"`
			} `json:"rows"`
		}
		sonnet := cfg.Models[0].ModelID
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			getJSON(t, sc.srv, "/admin/cost?by=model", &rep)
			for _, r := range rep.Rows {
				if r.Key == sonnet && r.Turns == len(mangaConversation) {
					return bill{cost: r.CostUSD, saved: r.CacheSavedUSD, in: r.TokensIn, out: r.TokensOut, read: r.CacheReadTokens, writes: r.CacheWriteTokens}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the cost view shows no Sonnet row with the %d turns: %+v", caching, len(mangaConversation), rep.Rows)
			}
		}
	}
	cfg0 := config.Default()
	on, off := run(config.PromptCachingAuto), run(config.PromptCachingOff)
	t.Logf("ten turns on Sonnet   | input tokens | read from cache | written | model cost | saved")
	t.Logf("promptCaching: auto   | %12d | %15d | %7d | $%.5f  | $%.5f", on.in, on.read, on.writes, on.cost, on.saved)
	t.Logf("promptCaching: off    | %12d | %15d | %7d | $%.5f  | $%.5f", off.in, off.read, off.writes, off.cost, off.saved)

	// The same conversation: its answers may differ by a few tokens.
	if rel := math.Abs(float64(on.in-off.in)) / float64(off.in); rel > 0.01 {
		t.Fatalf("the two conversations sent %d and %d input tokens; they must be the same conversation", on.in, off.in)
	}
	if off.read != 0 || off.writes != 0 || off.saved != 0 {
		t.Errorf("with promptCaching off the cache was used: %+v", off)
	}
	// The prefix ends at fmgate's mark after its prompt: the prompt's
	// tokens but one that runs on into the retrieved context.
	system := int64(sim.InputTokens(&provider.Request{System: config.Default().Prompt.System})) - 1
	if on.read < 9*system {
		t.Errorf("with caching, %d tokens read from the cache; want the %d-token system prompt on each of turns 2 to 10", on.read, system)
	}
	if on.cost >= off.cost {
		t.Fatalf("caching cost $%.5f, without $%.5f; want it cheaper", on.cost, off.cost)
	}
	// What the cache saved, added back, is the same tokens' bill without
	// it: every input token at the plain input price. (The two runs'
	// answers may differ by a few output tokens, so each is priced on its
	// own tokens.)
	price := cfg0.Models[0].Price()
	plain := func(b bill) float64 {
		return float64(b.in)*price.InputPerMTok/1e6 + float64(b.out)*price.OutputPerMTok/1e6
	}
	if rel := math.Abs(off.cost-plain(off)) / plain(off); rel > 0.001 {
		t.Errorf("without caching $%.5f; its %d input and %d output tokens at plain prices are $%.5f", off.cost, off.in, off.out, plain(off))
	}
	if rel := math.Abs(on.cost+on.saved-plain(on)) / plain(on); rel > 0.001 {
		t.Errorf("with caching $%.5f + $%.5f saved = $%.5f; its %d input and %d output tokens at plain prices are $%.5f (%.2f%% apart)",
			on.cost, on.saved, on.cost+on.saved, on.in, on.out, plain(on), rel*100)
	}
}
