package budget

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
	"gopkg.in/yaml.v3"
)

var sonnet = Price{InputPerMTok: 3, OutputPerMTok: 15}

func newEnforcer(t *testing.T, cfg Config, clk *fakeClock, c Counters) *Enforcer {
	t.Helper()
	if c == nil {
		c = NewMemoryCounters(cfg.SessionTTL, clk.Now)
	}
	e, err := New(cfg, NewEstimator(), c, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func noon() *fakeClock { return &fakeClock{t: time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)} }

// words returns about n prior-estimated tokens of English.
func words(n int) string { return strings.Repeat("abc ", n*4/3) }

func TestCheckTruncatesOldestHistoryFirst(t *testing.T) {
	e := newEnforcer(t, DefaultConfig(), noon(), nil)
	var hist []Message
	for i := range 10 {
		role := provider.RoleUser
		if i%2 == 1 {
			role = provider.RoleAssistant
		}
		hist = append(hist, Message{Role: role, Content: words(600)})
	}
	req := Request{UserID: "u", SessionID: "s", Model: "sonnet", Parts: Parts{System: "You are MangaAssist.", History: hist, User: "おすすめは？"}}
	plan, err := e.Check(context.Background(), req, sonnet)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Truncated || plan.Dropped != 4 || len(plan.History) != 6 {
		t.Fatalf("truncated=%v dropped=%d kept=%d, want the 4 oldest dropped", plan.Truncated, plan.Dropped, len(plan.History))
	}
	if &plan.History[5] != &hist[9] || plan.History[0].Role != provider.RoleUser {
		t.Fatal("did not keep the newest messages, opening with the user")
	}
	if plan.InputTokens > 4000 || plan.InputTokens != plan.Estimate.Total || plan.Estimate.User == 0 {
		t.Fatalf("plan input %d, estimate %+v", plan.InputTokens, plan.Estimate)
	}
	if len(hist) != 10 {
		t.Fatal("caller's history modified")
	}
}

// One answer longer than the request's input budget must not block its
// session: the next turn sends it shortened, with a mark, and the question
// it answered; a question as long goes with its answer.
func TestCheckShortensAnExchangeOverTheBudget(t *testing.T) {
	e := newEnforcer(t, DefaultConfig(), noon(), nil)
	long := words(6000)
	tests := []struct {
		name      string
		history   []Message
		wantShort bool // the answer kept, shortened; otherwise no history
	}{
		{"a long answer is shortened", []Message{{Role: provider.RoleUser, Content: "tell me everything about One Piece"}, {Role: provider.RoleAssistant, Content: long}}, true},
		{"a long question and answer go", []Message{{Role: provider.RoleUser, Content: long}, {Role: provider.RoleAssistant, Content: long}}, false},
		{"older exchanges go first", []Message{
			{Role: provider.RoleUser, Content: "hi"}, {Role: provider.RoleAssistant, Content: "hello"},
			{Role: provider.RoleUser, Content: "tell me everything"}, {Role: provider.RoleAssistant, Content: long}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := Request{UserID: "u", SessionID: "s", Model: "sonnet", Parts: Parts{System: "You are MangaAssist.", History: tt.history, User: "and the next volume?"}}
			plan, err := e.Check(context.Background(), req, sonnet)
			if err != nil {
				t.Fatalf("the next turn was refused: %v", err)
			}
			if !plan.Truncated || plan.InputTokens > DefaultConfig().RequestInput {
				t.Fatalf("plan: truncated %v, %d input tokens", plan.Truncated, plan.InputTokens)
			}
			if !tt.wantShort {
				if len(plan.History) != 0 || plan.Dropped != len(tt.history) {
					t.Fatalf("kept %d messages, dropped %d; want the whole history dropped", len(plan.History), plan.Dropped)
				}
				return
			}
			if len(plan.History) != 2 || plan.History[0].Role != provider.RoleUser {
				t.Fatalf("kept %v; want the latest exchange", plan.History)
			}
			a := plan.History[1].Content
			if !strings.HasSuffix(a, ShortenedMark) || len(a) >= len(long) || len(a) < len(long)/4 || !strings.HasPrefix(long, strings.TrimSuffix(a, ShortenedMark)) {
				t.Fatalf("answer kept as %d of %d bytes (%q…); want its beginning, most of the budget, and the mark", len(a), len(long), a[:min(40, len(a))])
			}
			if tt.history[len(tt.history)-1].Content != long {
				t.Fatal("caller's history modified")
			}
		})
	}
}

func TestCheckRefusals(t *testing.T) {
	big := words(5000)
	tests := []struct {
		name    string
		cfg     func(*Config)
		history []Message
		user    string
		before  func(*Enforcer)
		want    string
		wantMax int
	}{
		{name: "message alone over the request limit", user: big, want: BudgetRequestInput},
		{
			name: "an answer over the limit in the history does not refuse the next turn",
			history: []Message{
				{Role: provider.RoleUser, Content: "q"},
				{Role: provider.RoleAssistant, Content: big},
			},
			user: "and?", wantMax: 1024,
		},
		{
			name: "context window",
			cfg:  func(c *Config) { c.ContextWindow = 3000; c.RequestInput = 10000 },
			user: words(2000), want: BudgetContextWindow,
		},
		{
			name:   "session input",
			before: func(e *Enforcer) { _ = e.Record(context.Background(), "u", "s", nil, Hold{}, 49_990, 0, 0) },
			user:   words(100), want: BudgetSessionInput,
		},
		{
			name:   "session output spent",
			before: func(e *Enforcer) { _ = e.Record(context.Background(), "u", "s", nil, Hold{}, 0, 25_000, 0) },
			user:   "hi", want: BudgetSessionOutput,
		},
		{
			name:   "session output nearly spent shrinks max output",
			before: func(e *Enforcer) { _ = e.Record(context.Background(), "u", "s", nil, Hold{}, 0, 24_900, 0) },
			user:   "hi", wantMax: 100,
		},
		{
			name:   "daily cost",
			before: func(e *Enforcer) { _ = e.Record(context.Background(), "u", "other", nil, Hold{}, 0, 0, 4.99) },
			user:   words(500), want: BudgetDailyCost,
		},
		{name: "within every budget", user: "hi", wantMax: 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			e := newEnforcer(t, cfg, noon(), nil)
			if tt.before != nil {
				tt.before(e)
			}
			req := Request{UserID: "u", SessionID: "s", Model: "sonnet", Parts: Parts{History: tt.history, User: tt.user}}
			plan, err := e.Check(context.Background(), req, sonnet)
			if tt.want == "" {
				if err != nil || plan.MaxOutput != tt.wantMax {
					t.Fatalf("plan %+v, err %v; want max output %d", plan.MaxOutput, err, tt.wantMax)
				}
				return
			}
			var ee *ExceededError
			if !errors.As(err, &ee) || !errors.Is(err, ErrExceeded) || ee.Budget != tt.want {
				t.Fatalf("err = %v, want %s", err, tt.want)
			}
			if (tt.want == BudgetDailyCost) == ee.ResetAt.IsZero() {
				t.Fatalf("ResetAt = %v", ee.ResetAt)
			}
		})
	}
}

func TestCheckMaxOutput(t *testing.T) {
	tests := []struct{ give, want int }{{0, 1024}, {5000, 1024}, {200, 200}}
	e := newEnforcer(t, DefaultConfig(), noon(), nil)
	for _, tt := range tests {
		plan, err := e.Check(context.Background(), Request{UserID: "u", SessionID: "s", Parts: Parts{User: "hi"}, MaxOutput: tt.give}, sonnet)
		if err != nil || plan.MaxOutput != tt.want {
			t.Errorf("MaxOutput %d → %d (%v), want %d", tt.give, plan.MaxOutput, err, tt.want)
		}
	}
}

func TestDailyBudgetResetsAtLocalMidnight(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Timezone = "Asia/Tokyo"
	clk := noon() // 21:00 in Tokyo
	e := newEnforcer(t, cfg, clk, nil)
	if err := e.Record(ctx, "u", "s", nil, Hold{}, 1000, 1000, 5.00); err != nil {
		t.Fatal(err)
	}
	req := Request{UserID: "u", SessionID: "s2", Parts: Parts{User: "hi"}}
	_, err := e.Check(ctx, req, sonnet)
	var ee *ExceededError
	if !errors.As(err, &ee) || ee.Budget != BudgetDailyCost {
		t.Fatalf("err = %v", err)
	}
	if want := time.Date(2026, 3, 11, 0, 0, 0, 0, e.limits.Load().loc); !ee.ResetAt.Equal(want) {
		t.Fatalf("ResetAt = %v, want %v", ee.ResetAt, want)
	}
	if m := ee.Message("ja"); !strings.Contains(m, "本日のご利用上限") || !strings.Contains(m, "2026-03-11 00:00 JST") {
		t.Fatalf("ja message %q", m)
	}
	if m := ee.Message("en-US"); !strings.Contains(m, "$5.00") || !strings.Contains(m, "2026-03-11 00:00 JST") {
		t.Fatalf("en message %q", m)
	}
	clk.Advance(3 * time.Hour) // past midnight in Tokyo, still the 10th in UTC
	if _, err := e.Check(ctx, req, sonnet); err != nil {
		t.Fatalf("new day still refused: %v", err)
	}
}

func TestExceededMessages(t *testing.T) {
	tests := []struct {
		budget   string
		locale   string
		contains string
	}{
		{BudgetRequestInput, "en", "4,000 tokens"},
		{BudgetRequestInput, "ja", "4,000トークン"},
		{BudgetSessionInput, "en", "start a new conversation"},
		{BudgetSessionOutput, "ja-JP", "新しい会話"},
		{BudgetContextWindow, "en", "longer than the model"},
	}
	for _, tt := range tests {
		e := &ExceededError{Budget: tt.budget, Limit: 4000}
		if m := e.Message(tt.locale); !strings.Contains(m, tt.contains) {
			t.Errorf("%s/%s: %q lacks %q", tt.budget, tt.locale, m, tt.contains)
		}
	}
}

type brokenCounters struct{ hang bool }

func (b brokenCounters) Load(ctx context.Context, _, _, _ string) (Totals, error) {
	if b.hang {
		<-ctx.Done()
		return Totals{}, ctx.Err()
	}
	return Totals{}, errors.New("connection refused")
}

func (b brokenCounters) Add(ctx context.Context, _, _, _ string, _ []Meter, _, _ int, _ float64) error {
	_, err := b.Load(ctx, "", "", "")
	return err
}

func (b brokenCounters) Hold(ctx context.Context, _ string, _ int64, _ []Meter, _ time.Duration) (int, int64, error) {
	_, err := b.Load(ctx, "", "", "")
	return 0, 0, err
}

func (b brokenCounters) Spent(ctx context.Context, m []Meter) ([]int64, error) {
	_, err := b.Load(ctx, "", "", "")
	return nil, err
}

func (b brokenCounters) Release(ctx context.Context, _ string, _ []Meter) error {
	_, err := b.Load(ctx, "", "", "")
	return err
}

func TestStoreFailureAdmitsAndReports(t *testing.T) {
	for _, hang := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.StoreTimeout = 20 * time.Millisecond
		e := newEnforcer(t, cfg, noon(), brokenCounters{hang: hang})
		start := time.Now()
		plan, err := e.Check(context.Background(), Request{UserID: "u", SessionID: "s", Parts: Parts{User: "hi"}}, sonnet)
		if err != nil || plan.CountersErr == nil || plan.MaxOutput != 1024 {
			t.Fatalf("hang=%v: plan %+v, err %v; want admitted with CountersErr", hang, plan, err)
		}
		if err := e.Record(context.Background(), "u", "s", nil, Hold{}, 1, 1, 0); err == nil {
			t.Fatalf("hang=%v: Record hid the store error", hang)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("hang=%v: took %s", hang, d)
		}
	}
}

func TestPriceCost(t *testing.T) {
	tests := []struct {
		name  string
		price Price
		usage provider.Usage
		want  float64
	}{
		{"sonnet", sonnet, provider.Usage{InputTokens: 1_000_000, OutputTokens: 100_000}, 3 + 1.5},
		{"haiku", Price{InputPerMTok: 0.25, OutputPerMTok: 1.25}, provider.Usage{InputTokens: 4000, OutputTokens: 1000}, 0.001 + 0.00125},
		{"cached at own rate", Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.3}, provider.Usage{InputTokens: 1000, CachedInputTokens: 10_000}, 0.003 + 0.003},
		{"cached as input when unpriced", sonnet, provider.Usage{CachedInputTokens: 10_000}, 0.03},
		{"cache writes at their own rate", Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75},
			provider.Usage{InputTokens: 100, CachedInputTokens: 1000, CacheWriteTokens: 2000, OutputTokens: 10}, (100*3 + 1000*0.3 + 2000*3.75 + 10*15) / 1e6},
		{"one-hour writes at their own rate", Price{InputPerMTok: 3, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75, CacheWrite1hPerMTok: 6},
			provider.Usage{CacheWriteTokens: 2000, CacheWrite1hTokens: 500}, (1500*3.75 + 500*6) / 1e6},
		{"one-hour writes as five-minute ones when unpriced", Price{InputPerMTok: 3, CacheWritePerMTok: 3.75},
			provider.Usage{CacheWriteTokens: 2000, CacheWrite1hTokens: 500}, 2000 * 3.75 / 1e6},
	}
	for _, tt := range tests {
		if got := tt.price.Cost(tt.usage); got < tt.want-1e-12 || got > tt.want+1e-12 {
			t.Errorf("%s: Cost = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCacheSaving(t *testing.T) {
	p := Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75, CacheWrite1hPerMTok: 6}
	tests := []struct {
		name  string
		usage provider.Usage
		want  float64
	}{
		{"no cache", provider.Usage{InputTokens: 1000, OutputTokens: 100}, 0},
		{"reads save nine tenths", provider.Usage{InputTokens: 100, CachedInputTokens: 10_000, OutputTokens: 50}, 10_000 * (3 - 0.3) / 1e6},
		{"writes cost a quarter more", provider.Usage{CacheWriteTokens: 2000}, -2000 * 0.75 / 1e6},
		{"one-hour writes cost double", provider.Usage{CacheWriteTokens: 2000, CacheWrite1hTokens: 2000}, -2000 * 3.0 / 1e6},
	}
	for _, tt := range tests {
		if got := p.CacheSaving(tt.usage); got < tt.want-1e-12 || got > tt.want+1e-12 {
			t.Errorf("%s: CacheSaving = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestConfig(t *testing.T) {
	cfg := DefaultConfig()
	if err := yaml.Unmarshal([]byte("requestInput: 8000\ntimezone: Asia/Tokyo\nstoreTimeout: 50ms\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil || cfg.RequestInput != 8000 || cfg.StoreTimeout != 50*time.Millisecond {
		t.Fatalf("cfg %+v, %v", cfg, err)
	}
	bad := DefaultConfig()
	bad.RequestOutput = 0
	bad.Timezone = "Mars/Olympus"
	bad.DailyCostUSD = -1
	err := bad.Validate()
	for _, want := range []string{"requestOutput: must be > 0", `timezone: unknown zone "Mars/Olympus"`, "dailyCostUsd: must be >= 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want %q", err, want)
		}
	}
}

// TestContextRoom: retrieved context only gets what the request budget
// leaves once the history fits, so it is cut before any history is.
func TestContextRoom(t *testing.T) {
	cfg := DefaultConfig()
	enf, err := New(cfg, NewEstimator(), NewMemoryCounters(time.Hour, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		input int
		want  int
	}{
		{"room left", 1000, cfg.RequestInput - 1000},
		{"history fills the budget", cfg.RequestInput, 0},
		{"over budget", cfg.RequestInput + 50, 0},
	}
	for _, tt := range tests {
		if got := enf.ContextRoom(tt.input, 0); got != tt.want {
			t.Errorf("%s: ContextRoom(%d) = %d, want %d", tt.name, tt.input, got, tt.want)
		}
	}
}

// Check holds a turn's estimate against the daily budget: a second turn in
// flight that would pass it is refused as held (to retry soon), and what
// Record settles or Release ends frees the room again.
func TestCheckHoldsTheDailyBudget(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	e := newEnforcer(t, cfg, noon(), nil)
	req := Request{UserID: "u", SessionID: "s", MaxOutput: 1024, Parts: Parts{User: "hi"}}
	one, err := e.Check(ctx, req, sonnet)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DailyCostUSD = one.CostUSD * 1.5 // room for one turn's estimate, not two
	e = newEnforcer(t, cfg, noon(), nil)

	req.Hold = true
	first, err := e.Check(ctx, req, sonnet)
	if err != nil || first.Hold.ID == "" || first.Hold.Day == "" {
		t.Fatalf("first turn: plan hold %+v, err %v; want it held", first.Hold, err)
	}
	_, err = e.Check(ctx, req, sonnet)
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.Budget != BudgetDailyCost || !ex.Held || !strings.Contains(ex.Message("en"), "in progress") {
		t.Fatalf("second turn while the first is in flight: %v; want daily_cost refused as held", err)
	}
	// The first turn spent a tenth of its estimate: the second fits now.
	if err := e.Record(ctx, "u", "s", nil, first.Hold, 10, 10, one.CostUSD/10); err != nil {
		t.Fatal(err)
	}
	second, err := e.Check(ctx, req, sonnet)
	if err != nil || second.Hold.ID == "" || second.Hold.ID == first.Hold.ID {
		t.Fatalf("after the first settled: hold %+v, err %v", second.Hold, err)
	}
	if _, err := e.Check(ctx, req, sonnet); !errors.As(err, &ex) || !ex.Held {
		t.Fatalf("third turn while the second is in flight: %v; want refused as held", err)
	}
	if err := e.Release(ctx, second.Hold); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Check(ctx, req, sonnet); err != nil {
		t.Fatalf("after the second was released: %v", err)
	}
}

// SetConfig applies new budgets from the next check, over what the
// counters already hold.
func TestSetConfigKeepsTheCounters(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	e := newEnforcer(t, cfg, noon(), nil)
	if err := e.Record(ctx, "u", "s", nil, Hold{}, 1000, 1000, 2.00); err != nil {
		t.Fatal(err)
	}
	req := Request{UserID: "u", SessionID: "s", Parts: Parts{User: "hi"}}
	if _, err := e.Check(ctx, req, sonnet); err != nil {
		t.Fatalf("$2 spent of $5: %v", err)
	}
	cfg.DailyCostUSD = 1
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	var ee *ExceededError
	if _, err := e.Check(ctx, req, sonnet); !errors.As(err, &ee) || ee.Budget != BudgetDailyCost || ee.Limit != 1 {
		t.Fatalf("$2 spent of a new $1: err = %v, want the daily budget of $1 exceeded", err)
	}
	bad := cfg
	bad.RequestInput = 0
	if err := e.SetConfig(bad); err == nil {
		t.Fatal("SetConfig took requestInput 0")
	}
	if _, err := e.Check(ctx, req, sonnet); !errors.As(err, &ee) || ee.Limit != 1 {
		t.Fatalf("after a refused SetConfig: err = %v, want the $1 budget still in force", err)
	}
}

// TestEstimateCountsImages: a message's images count at their fixed
// tokens, the user's in User and History's in their messages, and they
// are left out of the counts that calibrate the text estimate.
func TestEstimateCountsImages(t *testing.T) {
	e := NewEstimator()
	plain := e.Estimate("sonnet", Parts{System: "Be brief.", User: "What is this?",
		History: []Message{{Role: provider.RoleUser, Content: "And this?"}}})
	img := provider.Image{MediaType: provider.ImagePNG, Width: 800, Height: 600}
	seen := e.Estimate("sonnet", Parts{System: "Be brief.", User: "What is this?", ImageTokens: 640,
		History: []Message{{Role: provider.RoleUser, Content: "And this?", Images: []provider.Image{img, img}}}})
	if seen.Total != plain.Total+3*640 || seen.User != plain.User+640 || seen.HistoryEach[0] != plain.HistoryEach[0]+2*640 || seen.Images != 3*640 {
		t.Fatalf("estimate %+v, without images %+v: want 640 tokens more per image", seen, plain)
	}
	if seen.Counts != plain.Counts {
		t.Fatalf("counts %+v differ from the text's %+v", seen.Counts, plain.Counts)
	}
}

// An account's budgets (a key's, a team's, a feature's) are held and
// charged with the user's: a turn over any of them is refused by name,
// held spend is told apart from spent, and a month resets on the first
// of the next month in the configured zone.
func TestAccountBudgets(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.DailyCostUSD = 0
	cfg.Timezone = "Asia/Tokyo"
	clk := noon() // 2026-03-10 21:00 in Tokyo
	e := newEnforcer(t, cfg, clk, nil)
	key := Account{Scope: ScopeKey, ID: "k1", Limits: Limits{MonthlyCostUSD: 0.05}}
	req := Request{UserID: "u", SessionID: "s", MaxOutput: 1024, Parts: Parts{User: "hi"}, Hold: true, Accounts: []Account{key}}

	first, err := e.Check(ctx, req, sonnet)
	if err != nil || first.Hold.ID == "" {
		t.Fatalf("first turn: %+v, %v", first.Hold, err)
	}
	// With the first in flight, the rest of the month is held.
	held := 0
	for range 10 {
		if _, err := e.Check(ctx, req, sonnet); err != nil {
			var ex *ExceededError
			if !errors.As(err, &ex) || ex.Budget != BudgetKeyMonthly || !ex.Held || !strings.Contains(ex.Message("en"), "in progress") {
				t.Fatalf("turn over the key's month while others are in flight: %v", err)
			}
			held++
		}
	}
	if held == 0 {
		t.Fatal("no turn was held back by the key's monthly budget")
	}
	// Spend the month: the refusal is no longer "held", and it names when
	// it resets.
	if err := e.Record(ctx, "u", "s", []Account{key}, first.Hold, 100, 100, 0.05); err != nil {
		t.Fatal(err)
	}
	other := req
	other.UserID = "someone-else" // the key's budget is the key's, whoever uses it
	_, err = e.Check(ctx, other, sonnet)
	var ex *ExceededError
	if !errors.As(err, &ex) || ex.Budget != BudgetKeyMonthly || ex.Held {
		t.Fatalf("after the month was spent: %v", err)
	}
	if want := time.Date(2026, 4, 1, 0, 0, 0, 0, e.limits.Load().loc); !ex.ResetAt.Equal(want) {
		t.Fatalf("ResetAt %v, want %v", ex.ResetAt, want)
	}
	if m := ex.Message("ja"); !strings.Contains(m, "APIキーの今月の予算") || !strings.Contains(m, "2026-04-01 00:00 JST") {
		t.Fatalf("ja message %q", m)
	}
	// Another key is not held back, and accounts without a hold are refused
	// outright: they are enforced only by holding.
	free := req
	free.Accounts = []Account{{Scope: ScopeKey, ID: "k2", Limits: Limits{MonthlyCostUSD: 0.05}}}
	if _, err := e.Check(ctx, free, sonnet); err != nil {
		t.Fatalf("another key: %v", err)
	}
	free.Hold = false
	if _, err := e.Check(ctx, free, sonnet); err == nil || errors.As(err, &ex) {
		t.Fatalf("accounts without a hold: %v; want a plain error", err)
	}
	// The next month starts afresh.
	clk.Advance(21*24*time.Hour + 3*time.Hour) // 2026-04-01 00:00 in Tokyo
	if _, err := e.Check(ctx, other, sonnet); err != nil {
		t.Fatalf("a new month: %v", err)
	}
}

// downCounters are shared counters that cannot be reached.
type downCounters struct{}

var errDown = errors.New("counters unreachable")

func (downCounters) Load(context.Context, string, string, string) (Totals, error) {
	return Totals{}, errDown
}
func (downCounters) Hold(context.Context, string, int64, []Meter, time.Duration) (int, int64, error) {
	return 0, 0, errDown
}
func (downCounters) Add(context.Context, string, string, string, []Meter, int, int, float64) error {
	return errDown
}
func (downCounters) Release(context.Context, string, []Meter) error  { return errDown }
func (downCounters) Spent(context.Context, []Meter) ([]int64, error) { return nil, errDown }

// While the shared counters cannot be reached, spending is held in this
// process: the turns are still admitted (and say why), but no more than
// the budget allows is in flight or spent here.
func TestHoldsFallBackToThisProcess(t *testing.T) {
	ctx := context.Background()
	cfg := DefaultConfig()
	probe := newEnforcer(t, cfg, noon(), nil)
	req := Request{UserID: "u", SessionID: "s", MaxOutput: 1024, Parts: Parts{User: "hi"}, Hold: true}
	one, err := probe.Check(ctx, req, sonnet)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DailyCostUSD = one.CostUSD * 2.5 // two turns' estimates, not three
	e := newEnforcer(t, cfg, noon(), downCounters{})
	var held []Hold
	for i := range 2 {
		p, err := e.Check(ctx, req, sonnet)
		if err != nil || p.Hold.ID == "" || p.CountersErr == nil {
			t.Fatalf("turn %d with the counters down: hold %+v, counters error %v, err %v; want held here, and said", i, p.Hold, p.CountersErr, err)
		}
		held = append(held, p.Hold)
	}
	var ex *ExceededError
	if _, err := e.Check(ctx, req, sonnet); !errors.As(err, &ex) || !ex.Held {
		t.Fatalf("a third turn in flight: %v; want refused as held", err)
	}
	// The first settles at its whole estimate (the shared record fails and
	// says so); the second is released: one turn's room is left.
	if err := e.Record(ctx, "u", "s", nil, held[0], 10, 10, one.CostUSD); err == nil {
		t.Error("Record with the counters down reported no error")
	}
	if err := e.Release(ctx, held[1]); err != nil {
		t.Fatalf("releasing a local hold: %v", err)
	}
	if _, err := e.Check(ctx, req, sonnet); err != nil {
		t.Fatalf("after one settled and one released: %v; want room for one more", err)
	}
	if _, err := e.Check(ctx, req, sonnet); !errors.As(err, &ex) {
		t.Fatalf("over the budget with the counters down: %v; want refused", err)
	}
}
