package sim

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// storeRules is a system prompt of at least n tokens, the store policy a
// real assistant sends at the head of every turn.
func storeRules(n int) string {
	var b strings.Builder
	b.WriteString("You are MangaAssist, the store assistant of a Japanese manga shop.\n")
	for i := 1; CountTokens(b.String()) < n; i++ {
		fmt.Fprintf(&b, "Rule %d: quote prices in yen with tax included, name the volume, and say whether volume %d is in stock, on order or sold out; 在庫がない場合は予約をご案内します。\n", i, i)
	}
	return b.String()
}

// cachingModel answers at once and caches prefixes from minTokens.
func cachingModel(minTokens int) Settings {
	st := instant
	st.CacheMinTokens = minTokens
	return st
}

// turn is a call of a conversation: the system prompt marked at its end,
// then the history and the new question, the question marked at its end.
func turn(model, system string, ttl time.Duration, history ...string) *provider.Request {
	req := &provider.Request{Model: model, System: system,
		SystemCache: []provider.CacheMark{{At: len(system), TTL: ttl}}}
	for i, text := range history {
		role := provider.RoleUser
		if i%2 == 1 {
			role = provider.RoleAssistant
		}
		req.Messages = append(req.Messages, provider.Message{Role: role, Content: text})
	}
	last := &req.Messages[len(req.Messages)-1]
	last.Cache = []provider.CacheMark{{At: len(last.Content), TTL: ttl}}
	return req
}

// unmarked is req without its marks: what the simulator billed before it
// had a prompt cache.
func unmarked(req *provider.Request) *provider.Request {
	out := *req
	out.SystemCache = nil
	out.Messages = make([]provider.Message, len(req.Messages))
	for i, m := range req.Messages {
		m.Cache = nil
		out.Messages[i] = m
	}
	return &out
}

// callers are the two ways to call the simulator, which bill alike.
var callers = []struct {
	name string
	call func(s *Sim, req *provider.Request) (*provider.Response, error)
}{
	{"Complete", func(s *Sim, req *provider.Request) (*provider.Response, error) {
		return s.Complete(context.Background(), req)
	}},
	{"Stream", func(s *Sim, req *provider.Request) (*provider.Response, error) {
		_, resp, err := collect(context.Background(), s, req)
		return resp, err
	}},
}

func inputOf(u provider.Usage) provider.Usage {
	u.OutputTokens = 0
	return u
}

func TestPromptCacheConversation(t *testing.T) {
	system := storeRules(1500)
	systemPrefix := CountTokens(system) + MessageOverheadTokens
	for _, c := range callers {
		t.Run(c.name, func(t *testing.T) {
			s, clock := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024)})
			var billed provider.Usage
			history := []string{"葬送のフリーレンの最新刊はありますか？"}
			call := func(req *provider.Request) provider.Usage {
				t.Helper()
				resp, err := c.call(s, req)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := resp.Usage.Input(), InputTokens(unmarked(req)); got != want {
					t.Errorf("classes %+v sum to %d, want the unmarked input %d", resp.Usage, got, want)
				}
				billed = billed.Add(resp.Usage)
				history = append(history, resp.Text)
				return inputOf(resp.Usage)
			}

			// The first turn writes everything up to its last mark.
			first := turn("sonnet", system, 0, history...)
			if got, want := call(first), (provider.Usage{CacheWriteTokens: InputTokens(first)}); got != want {
				t.Errorf("first turn: usage %+v, want %+v", got, want)
			}

			// A minute later the next turn reads the system prompt and
			// writes the turns since.
			clock.Advance(time.Minute)
			history = append(history, "Chainsaw Manの予約はできますか？")
			second := turn("sonnet", system, 0, history...)
			want := provider.Usage{CachedInputTokens: systemPrefix, CacheWriteTokens: InputTokens(second) - systemPrefix}
			if got := call(second); got != want {
				t.Errorf("second turn within the TTL: usage %+v, want %+v", got, want)
			}

			// A turn that keeps the mark of the turn before reads the
			// longest prefix held: everything up to that mark.
			clock.Advance(time.Minute)
			history = append(history, "ありがとう。送料はいくらですか？")
			third := turn("sonnet", system, 0, history...)
			third.Messages[2].Cache = []provider.CacheMark{{At: len(third.Messages[2].Content)}}
			read := InputTokens(&provider.Request{System: system, Messages: third.Messages[:3]})
			want = provider.Usage{CachedInputTokens: read, CacheWriteTokens: InputTokens(third) - read}
			if got := call(third); got != want {
				t.Errorf("third turn keeping the second's mark: usage %+v, want %+v", got, want)
			}

			// Past the five-minute TTL nothing is held: all is written again.
			clock.Advance(provider.CacheTTL)
			history = append(history, "もう一度お願いします。")
			fourth := turn("sonnet", system, 0, history...)
			if got, want := call(fourth), (provider.Usage{CacheWriteTokens: InputTokens(fourth)}); got != want {
				t.Errorf("turn after the TTL: usage %+v, want %+v", got, want)
			}

			if got := s.Usage("sonnet"); got != billed {
				t.Errorf("model billed %+v, want the calls' sum %+v", got, billed)
			}
		})
	}
}

func TestPromptCacheTTL(t *testing.T) {
	system := storeRules(1200)
	systemPrefix := CountTokens(system) + MessageOverheadTokens
	tests := []struct {
		name     string
		ttl      time.Duration
		after    time.Duration
		wantRead bool
	}{
		{"default within 5m", 0, 4*time.Minute + 59*time.Second, true},
		{"default at 5m", 0, provider.CacheTTL, false},
		{"5m at 30m", provider.CacheTTL, 30 * time.Minute, false},
		{"1h at 30m", provider.CacheTTLLong, 30 * time.Minute, true},
		{"1h within 1h", provider.CacheTTLLong, 59 * time.Minute, true},
		{"1h at 1h", provider.CacheTTLLong, time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024)})
			if _, err := s.Complete(context.Background(), turn("sonnet", system, tt.ttl, "hello")); err != nil {
				t.Fatal(err)
			}
			clock.Advance(tt.after)
			req := turn("sonnet", system, tt.ttl, "what is new this week?")
			resp, err := s.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want := provider.Usage{CacheWriteTokens: InputTokens(req)}
			if tt.wantRead {
				want = provider.Usage{CachedInputTokens: systemPrefix, CacheWriteTokens: InputTokens(req) - systemPrefix}
			}
			if tt.ttl >= provider.CacheTTLLong {
				want.CacheWrite1hTokens = want.CacheWriteTokens // written up to marks held for an hour
			}
			if got := inputOf(resp.Usage); got != want {
				t.Errorf("after %v: usage %+v, want %+v", tt.after, got, want)
			}
		})
	}
}

// A prefix held for an hour and then marked for five minutes is still held
// for the hour: a shorter mark never shortens what the cache keeps.
func TestPromptCacheShorterMarkKeepsLongerTTL(t *testing.T) {
	system := storeRules(1200)
	s, clock := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024)})
	for _, ttl := range []time.Duration{provider.CacheTTLLong, provider.CacheTTL} {
		if _, err := s.Complete(context.Background(), turn("sonnet", system, ttl, "hello")); err != nil {
			t.Fatal(err)
		}
		clock.Advance(10 * time.Minute)
	}
	resp, err := s.Complete(context.Background(), turn("sonnet", system, 0, "again"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.CachedInputTokens == 0 {
		t.Errorf("20 minutes after a 1h write and a 5m refresh nothing was read: %+v", resp.Usage)
	}
}

// A read refreshes the prefix: a system prompt used every four minutes stays
// cached long past its first five.
func TestPromptCacheReadRefreshes(t *testing.T) {
	system := storeRules(1200)
	s, clock := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024)})
	for i := range 5 {
		req := turn("sonnet", system, 0, fmt.Sprintf("question %d", i))
		resp, err := s.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && resp.Usage.CachedInputTokens == 0 {
			t.Fatalf("call %d, %v after the first: nothing read", i, time.Duration(i)*4*time.Minute)
		}
		clock.Advance(4 * time.Minute)
	}
}

func TestPromptCacheMinimum(t *testing.T) {
	system := storeRules(1500) // between Sonnet's 1024 and Haiku's 2048
	short := "You are MangaAssist."
	tests := []struct {
		name      string
		model     string
		req       func(model string) *provider.Request
		wantRead  func(req *provider.Request) int // on the second call
		wantWrite func(req *provider.Request) int
	}{
		{
			name: "sonnet caches 1500 tokens", model: "sonnet",
			req:       func(m string) *provider.Request { return turn(m, system, 0, "hello") },
			wantRead:  func(req *provider.Request) int { return InputTokens(req) },
			wantWrite: func(*provider.Request) int { return 0 },
		},
		{
			name: "haiku does not", model: "haiku",
			req:       func(m string) *provider.Request { return turn(m, system, 0, "hello") },
			wantRead:  func(*provider.Request) int { return 0 },
			wantWrite: func(*provider.Request) int { return 0 },
		},
		{
			// The short system prompt is below the minimum, the whole
			// prompt above it: only the whole is cached.
			name: "short prefix ignored, long one cached", model: "sonnet",
			req: func(m string) *provider.Request {
				req := turn(m, short, 0, system)
				return req
			},
			wantRead:  func(req *provider.Request) int { return InputTokens(req) },
			wantWrite: func(*provider.Request) int { return 0 },
		},
		{
			name: "nothing above the minimum", model: "sonnet",
			req:       func(m string) *provider.Request { return turn(m, short, 0, "hello") },
			wantRead:  func(*provider.Request) int { return 0 },
			wantWrite: func(*provider.Request) int { return 0 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024), "haiku": cachingModel(2048)})
			req := tt.req(tt.model)
			if _, err := s.Complete(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			resp, err := s.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			read, write := tt.wantRead(req), tt.wantWrite(req)
			want := provider.Usage{InputTokens: InputTokens(req) - read - write, CachedInputTokens: read, CacheWriteTokens: write}
			if got := inputOf(resp.Usage); got != want {
				t.Errorf("second call: usage %+v, want %+v", got, want)
			}
		})
	}
}

func TestDefaultMinimums(t *testing.T) {
	models := DefaultConfig().Models
	if models["sonnet"].CacheMinTokens != 1024 || models["haiku"].CacheMinTokens != 2048 {
		t.Errorf("CacheMinTokens: sonnet %d, haiku %d, want Anthropic's 1024 and 2048",
			models["sonnet"].CacheMinTokens, models["haiku"].CacheMinTokens)
	}
}

// Marks anywhere — inside Japanese text, splitting a token, at 0, past the
// end, several in one text, out of order — split the input into classes
// that add up to the unmarked count, on the first call and the next.
func TestPromptCacheClassesSumToInput(t *testing.T) {
	system := storeRules(300)
	question := "SPY×FAMILYの最新刊はいつ発売されますか？ Also, is the box set of One Piece in stock?"
	tests := []struct {
		name    string
		system  []provider.CacheMark
		message []provider.CacheMark
	}{
		{"end of system", []provider.CacheMark{{At: len(system)}}, nil},
		{"end of message", nil, []provider.CacheMark{{At: len(question)}}},
		{"inside a Japanese character", nil, []provider.CacheMark{{At: 4}}},
		{"mid system and mid message", []provider.CacheMark{{At: len(system) / 2}}, []provider.CacheMark{{At: len(question) / 2}}},
		{"at zero", []provider.CacheMark{{At: 0}}, []provider.CacheMark{{At: 0}}},
		{"past the end and negative", []provider.CacheMark{{At: -5}}, []provider.CacheMark{{At: len(question) + 100}}},
		{"out of order", []provider.CacheMark{{At: len(system)}, {At: 10}}, []provider.CacheMark{{At: len(question)}, {At: 7}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock := newSim(t, 1, map[string]Settings{"m": cachingModel(0)})
			req := &provider.Request{Model: "m", System: system, SystemCache: tt.system,
				Messages: []provider.Message{{Role: provider.RoleUser, Content: question, Cache: tt.message}}}
			want := InputTokens(unmarked(req))
			for i := range 2 {
				resp, err := s.Complete(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				u := resp.Usage
				if u.Input() != want || u.InputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 {
					t.Errorf("call %d: classes %+v, want non-negative and summing to %d", i, u, want)
				}
				if i == 0 && u.CacheWriteTokens == 0 {
					t.Errorf("first call wrote nothing: %+v", u)
				}
				if i == 1 && (u.CachedInputTokens == 0 || u.CacheWriteTokens != 0) {
					t.Errorf("same request again: %+v, want all it wrote read", u)
				}
				clock.Advance(time.Second)
			}
		})
	}
}

func TestPromptCacheMidTextMark(t *testing.T) {
	system := storeRules(200)
	tests := []struct {
		name string
		at   int
		want func(t *testing.T) int // the tokens written
	}{
		{
			// A line starts a new token: the prefix is exactly the lines before.
			name: "at a line", at: strings.Index(system, "Rule 3:"),
			want: func(t *testing.T) int {
				head, tail := system[:strings.Index(system, "Rule 3:")], system[strings.Index(system, "Rule 3:"):]
				if CountTokens(head)+CountTokens(tail) != CountTokens(system) {
					t.Fatal("the lines do not tokenize apart; pick another boundary")
				}
				return CountTokens(head) + MessageOverheadTokens
			},
		},
		{
			// "Rule" is one token: a mark inside it leaves it to the rest.
			name: "inside a token", at: strings.Index(system, "Rule 3:") + 2,
			want: func(t *testing.T) int {
				return CountTokens(system[:strings.Index(system, "Rule 3:")]) + MessageOverheadTokens
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 1, map[string]Settings{"m": cachingModel(0)})
			req := &provider.Request{Model: "m", System: system, SystemCache: []provider.CacheMark{{At: tt.at}},
				Messages: []provider.Message{{Role: provider.RoleUser, Content: "hello"}}}
			resp, err := s.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want(t)
			if got := inputOf(resp.Usage); got != (provider.Usage{CacheWriteTokens: want, InputTokens: InputTokens(req) - want}) {
				t.Errorf("a mark at byte %d wrote %+v, want %d tokens written", tt.at, got, want)
			}
			// The same text before the mark, and another after it, reads it.
			other := *req
			other.System = system[:tt.at] + "Be brief."
			resp, err = s.Complete(context.Background(), &other)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Usage.CachedInputTokens == 0 {
				t.Errorf("the same prefix before the mark was not read: %+v", resp.Usage)
			}
		})
	}
}

// A prefix is the model, the system prompt and the messages' roles and
// texts up to the mark: a change to any of them before the mark misses.
func TestPromptCachePrefixIdentity(t *testing.T) {
	system := storeRules(200)
	base := func() *provider.Request {
		return turn("a", system, 0, "hello", "Hi! How can I help?", "Any new manga?")
	}
	tests := []struct {
		name     string
		change   func(req *provider.Request)
		wantRead bool
	}{
		{"same prompt", func(*provider.Request) {}, true},
		{"text after the last mark", func(req *provider.Request) {
			req.Messages = append(req.Messages, provider.Message{Role: provider.RoleAssistant, Content: "Yes!"})
		}, true},
		{"another model", func(req *provider.Request) { req.Model = "b" }, false},
		{"another system prompt", func(req *provider.Request) { req.System = "Rule 0: be kind.\n" + system }, false},
		{"another role", func(req *provider.Request) { req.Messages[1].Role = provider.RoleUser }, false},
		{"text moved between messages", func(req *provider.Request) {
			req.Messages[0].Content, req.Messages[1].Content = "helloHi!", " How can I help?"
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 1, map[string]Settings{"a": cachingModel(0), "b": cachingModel(0)})
			if _, err := s.Complete(context.Background(), base()); err != nil {
				t.Fatal(err)
			}
			req := base()
			req.SystemCache = nil // only the last message's mark
			tt.change(req)
			resp, err := s.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Usage.CachedInputTokens > 0; got != tt.wantRead {
				t.Errorf("read %v (%+v), want %v", got, resp.Usage, tt.wantRead)
			}
		})
	}
}

func TestNoMarksBillAllInput(t *testing.T) {
	system := storeRules(1500)
	s, _ := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024)})
	req := unmarked(turn("sonnet", system, 0, "hello"))
	for i := range 2 {
		resp, err := s.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := inputOf(resp.Usage), (provider.Usage{InputTokens: InputTokens(req)}); got != want {
			t.Errorf("call %d without marks: usage %+v, want %+v", i, got, want)
		}
	}
}

// Calls refused before admission bill nothing and cache nothing: the next
// call writes what they would have.
func TestRefusedCallsCacheNothing(t *testing.T) {
	system := storeRules(1200)
	tests := []struct {
		name     string
		settings Settings
	}{
		{"outage", Settings{Outage: true}},
		{"throttled", Settings{ErrorRate: map[provider.Kind]float64{provider.KindThrottled: 1}}},
		{"unavailable", Settings{ErrorRate: map[provider.Kind]float64{provider.KindUnavailable: 1}}},
		{"guardrail", Settings{ErrorRate: map[provider.Kind]float64{provider.KindGuardrail: 1}}},
		{"tpm ceiling", Settings{TPMCeiling: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 1, map[string]Settings{"sonnet": tt.settings})
			req := turn("sonnet", system, 0, "hello")
			resp, err := s.Complete(context.Background(), req)
			if err == nil {
				t.Fatal("the call was not refused")
			}
			if resp.Usage != (provider.Usage{}) || s.Usage("sonnet") != (provider.Usage{}) {
				t.Errorf("refused call billed %+v (model %+v), want nothing", resp.Usage, s.Usage("sonnet"))
			}
			if err := s.SetSettings("sonnet", cachingModel(1024)); err != nil {
				t.Fatal(err)
			}
			resp, err = s.Complete(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := inputOf(resp.Usage), (provider.Usage{CacheWriteTokens: InputTokens(req)}); got != want {
				t.Errorf("call after the refused one: usage %+v, want %+v", got, want)
			}
		})
	}
}

// A stream cut or stalled mid-answer was admitted: it bills its input in
// its classes and has cached its prefixes.
func TestCutStreamKeepsInputClasses(t *testing.T) {
	system := storeRules(1200)
	tests := []struct {
		name     string
		settings Settings
		timeout  time.Duration
	}{
		{"cut", Settings{CutAfterTokens: 5, CacheMinTokens: 1024}, time.Minute},
		// The deadline ends the stall; it leaves the five tokens before it
		// time to come even on a loaded machine.
		{"stall", Settings{StallAfterTokens: 5, CacheMinTokens: 1024}, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 1, map[string]Settings{"sonnet": tt.settings})
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			req := turn("sonnet", system, 0, "hello")
			_, resp, err := collect(ctx, s, req)
			if err == nil {
				t.Fatal("the stream was not broken")
			}
			want := provider.Usage{CacheWriteTokens: InputTokens(req), OutputTokens: 5}
			if resp.Usage != want || s.Usage("sonnet") != want {
				t.Errorf("broken stream: usage %+v (model %+v), want %+v", resp.Usage, s.Usage("sonnet"), want)
			}
			next, cancelNext := context.WithTimeout(context.Background(), tt.timeout)
			defer cancelNext()
			_, resp, _ = collect(next, s, req)
			if resp.Usage.CachedInputTokens != InputTokens(req) {
				t.Errorf("the next call read %d tokens, want the %d the broken one wrote", resp.Usage.CachedInputTokens, InputTokens(req))
			}
		})
	}
}

func TestStreamAdmittedReportsInputFirst(t *testing.T) {
	system := storeRules(1200)
	s, _ := newSim(t, 1, map[string]Settings{"sonnet": cachingModel(1024)})
	req := turn("sonnet", system, 0, "hello")
	var (
		admitted []provider.Usage
		deltas   int
	)
	resp, err := s.StreamAdmitted(context.Background(), req, func(u provider.Usage) {
		if deltas > 0 {
			t.Error("admitted called after a delta")
		}
		admitted = append(admitted, u)
	}, func(string) error { deltas++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(admitted) != 1 || admitted[0] != inputOf(resp.Usage) || admitted[0].CacheWriteTokens != InputTokens(req) {
		t.Errorf("admitted with %+v, want once with the input usage %+v", admitted, inputOf(resp.Usage))
	}

	if err := s.SetSettings("sonnet", Settings{Outage: true}); err != nil {
		t.Fatal(err)
	}
	called := false
	if _, err := s.StreamAdmitted(context.Background(), req, func(provider.Usage) { called = true }, nil); err == nil || called {
		t.Errorf("refused call: err %v, admitted called %v; want an error and no call", err, called)
	}
}

func TestPromptCacheIsBounded(t *testing.T) {
	var c promptCache
	key := func(i int) [sha256.Size]byte { return sha256.Sum256(fmt.Append(nil, i)) }
	now := time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)
	for i := range promptCacheEntries + 1 {
		c.use(now, []prefix{{key: key(i), tokens: 10, ttl: time.Hour}}, 10)
		if i == 0 {
			// Refreshed right away, key 0 is still the oldest.
			c.use(now, []prefix{{key: key(0), tokens: 10, ttl: time.Hour}}, 10)
		}
		if i == 1 {
			// Refreshed after key 1, key 0 is no longer the oldest.
			c.use(now, []prefix{{key: key(0), tokens: 10, ttl: time.Hour}}, 10)
		}
	}
	if c.size() != promptCacheEntries || len(c.entries) != promptCacheEntries {
		t.Fatalf("cache holds %d (%d indexed), want at most %d", c.size(), len(c.entries), promptCacheEntries)
	}
	held := func(i int) bool { _, ok := c.entries[key(i)]; return ok }
	if held(1) {
		t.Error("the prefix stored longest ago is still held")
	}
	for _, i := range []int{0, 2, promptCacheEntries} {
		if !held(i) {
			t.Errorf("prefix %d, stored or refreshed since, was evicted", i)
		}
	}
}

func TestSimPromptCacheEvictsOldest(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": cachingModel(0)})
	s.models["m"].cache.limit = 2
	ask := func(system string) provider.Usage {
		t.Helper()
		req := &provider.Request{Model: "m", System: system, SystemCache: []provider.CacheMark{{At: len(system)}},
			Messages: []provider.Message{{Role: provider.RoleUser, Content: "hello"}}}
		resp, err := s.Complete(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Usage
	}
	for _, system := range []string{"shop A", "shop B", "shop C"} {
		ask(system)
	}
	if u := ask("shop A"); u.CachedInputTokens != 0 {
		t.Errorf("the oldest of three prefixes in a store of two was read: %+v", u)
	}
	if u := ask("shop C"); u.CachedInputTokens == 0 {
		t.Errorf("the newest prefix was not read: %+v", u)
	}
}

// The simulated TPM ceiling, as Anthropic's and Bedrock's, does not count
// the input read from the prompt cache: a conversation whose long system
// prompt is cached goes on under a ceiling its whole prompt would break.
func TestTPMCeilingLeavesOutCacheReads(t *testing.T) {
	system := storeRules(1200)
	st := cachingModel(1024)
	first := turn("sonnet", system, 0, "hello")
	st.TPMCeiling = InputTokens(first) + 200 // the first call's whole input and a little more
	s, _ := newSim(t, 1, map[string]Settings{"sonnet": st})
	if _, err := s.Complete(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		resp, err := s.Complete(context.Background(), turn("sonnet", system, 0, "and then?"))
		if err != nil {
			t.Fatalf("call %d after the prompt was cached: %v", i+2, err)
		}
		if resp.Usage.CachedInputTokens == 0 {
			t.Fatalf("call %d read nothing from the cache", i+2)
		}
	}
}
