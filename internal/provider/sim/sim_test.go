package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
)

// fakeClock is a clock whose Sleep advances time at once, so paced streams
// run instantly while their timings stay observable.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 4, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// instant is a model that answers at once and never fails.
var instant = Settings{ModelID: "sim-instant"}

// newSim returns a seeded simulator on a fake clock with the given models.
func newSim(t testing.TB, seed uint64, models map[string]Settings) (*Sim, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	s, err := New(Config{Models: models}, Options{
		Now:   clock.Now,
		Sleep: clock.Sleep,
		Rand:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, clock
}

func userRequest(model, msg string) *provider.Request {
	return &provider.Request{
		Model:    model,
		System:   "You are MangaAssist, the store assistant of a Japanese manga shop.",
		Messages: []provider.Message{{Role: provider.RoleUser, Content: msg}},
	}
}

// collect streams req and returns the deltas it emitted.
func collect(ctx context.Context, s *Sim, req *provider.Request) ([]string, *provider.Response, error) {
	var deltas []string
	resp, err := s.Stream(ctx, req, func(d string) error {
		deltas = append(deltas, d)
		return nil
	})
	return deltas, resp, err
}

func TestStreamUsageMatchesTokenizer(t *testing.T) {
	tests := []struct {
		name string
		msg  string
	}{
		{"japanese", "おすすめの漫画を教えてください。葬送のフリーレンが好きです。"},
		{"english", "Can you recommend something like Chainsaw Man?"},
		{"mixed", "SPY×FAMILYの最新刊はいつ発売されますか？"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 7, map[string]Settings{"sonnet": DefaultConfig().Models["sonnet"]})
			req := userRequest("sonnet", tt.msg)
			req.Messages = append([]provider.Message{
				{Role: provider.RoleUser, Content: "こんにちは"},
				{Role: provider.RoleAssistant, Content: "こんにちは！MangaAssistです。"},
			}, req.Messages...)
			deltas, resp, err := collect(context.Background(), s, req)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range deltas {
				if !utf8.ValidString(d) || d == "" {
					t.Fatalf("delta %d = %q, want non-empty valid UTF-8", i, d)
				}
			}
			if got := strings.Join(deltas, ""); got != resp.Text {
				t.Errorf("deltas joined = %q, Response.Text = %q", got, resp.Text)
			}
			wantIn := CountTokens(req.System) + 4
			for _, m := range req.Messages {
				wantIn += CountTokens(m.Content) + 4
			}
			want := provider.Usage{InputTokens: wantIn, OutputTokens: CountTokens(resp.Text)}
			if resp.Usage != want {
				t.Errorf("Response.Usage = %+v, want %+v", resp.Usage, want)
			}
			if got := s.Usage("sonnet"); got != want {
				t.Errorf("Sim.Usage = %+v, want %+v", got, want)
			}
			if resp.StopReason != StopEndTurn {
				t.Errorf("StopReason = %q, want %q", resp.StopReason, StopEndTurn)
			}
			if resp.ModelID != "anthropic.claude-3-sonnet-20240229-v1:0" {
				t.Errorf("ModelID = %q", resp.ModelID)
			}
		})
	}
}

func TestUsageAccumulatesAcrossCalls(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"haiku": instant})
	var want provider.Usage
	for _, msg := range []string{"hello", "返品できますか", "How long does shipping take?"} {
		resp, err := s.Complete(context.Background(), userRequest("haiku", msg))
		if err != nil {
			t.Fatal(err)
		}
		want = want.Add(resp.Usage)
	}
	if got := s.Usage("haiku"); got != want {
		t.Errorf("Usage = %+v, want the sum of the calls %+v", got, want)
	}
}

func TestMaxTokensCutsTheAnswer(t *testing.T) {
	s, _ := newSim(t, 3, map[string]Settings{"sonnet": instant})
	req := userRequest("sonnet", "おすすめの漫画は？")
	req.MaxTokens = 12
	resp, err := s.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.OutputTokens != 12 || resp.StopReason != StopMaxTokens {
		t.Errorf("got %d tokens, stop %q; want 12, %q", resp.Usage.OutputTokens, resp.StopReason, StopMaxTokens)
	}
	if !utf8.ValidString(resp.Text) {
		t.Errorf("truncated text %q is not valid UTF-8", resp.Text)
	}
}

func TestPacingFollowsSettings(t *testing.T) {
	tests := []struct {
		name   string
		model  string
		ttft   [2]time.Duration // accepted range of Response.TTFT
		tokSec [2]float64       // accepted range of the output pace
	}{
		{"sonnet", "sonnet", [2]time.Duration{480 * time.Millisecond, 720 * time.Millisecond}, [2]float64{40, 80}},
		{"haiku", "haiku", [2]time.Duration{200 * time.Millisecond, 300 * time.Millisecond}, [2]float64{80, 160}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, clock := newSim(t, 11, DefaultConfig().Models)
			ttfts := map[time.Duration]bool{}
			for i := range 5 {
				start := clock.Now()
				resp, err := s.Complete(context.Background(), userRequest(tt.model, "What do you recommend?"))
				if err != nil {
					t.Fatal(err)
				}
				if resp.TTFT < tt.ttft[0] || resp.TTFT > tt.ttft[1] {
					t.Errorf("call %d: TTFT = %v, want within %v", i, resp.TTFT, tt.ttft)
				}
				ttfts[resp.TTFT] = true
				gen := clock.Now().Sub(start) - resp.TTFT
				pace := float64(resp.Usage.OutputTokens-1) / gen.Seconds()
				if pace < tt.tokSec[0] || pace > tt.tokSec[1] {
					t.Errorf("call %d: %.1f tok/s, want within %v", i, pace, tt.tokSec)
				}
			}
			if len(ttfts) < 2 {
				t.Errorf("TTFT was the same on every call (%v), want per-call jitter", ttfts)
			}
		})
	}
}

func TestLatencyDelaysFirstToken(t *testing.T) {
	st := instant
	st.LatencyMs = 250
	s, _ := newSim(t, 1, map[string]Settings{"m": st})
	resp, err := s.Complete(context.Background(), userRequest("m", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTFT != 250*time.Millisecond {
		t.Errorf("TTFT = %v, want the 250ms latency", resp.TTFT)
	}
}

func TestFaults(t *testing.T) {
	tests := []struct {
		name       string
		settings   Settings
		wantKind   provider.Kind
		wantRetry  time.Duration
		wantStatus int
	}{
		{"outage", Settings{Outage: true}, provider.KindUnavailable, 0, 503},
		{"throttled", Settings{ErrorRate: map[provider.Kind]float64{provider.KindThrottled: 1}}, provider.KindThrottled, time.Second, 429},
		{"unavailable", Settings{ErrorRate: map[provider.Kind]float64{provider.KindUnavailable: 1}}, provider.KindUnavailable, 0, 503},
		{"not ready", Settings{ErrorRate: map[provider.Kind]float64{provider.KindNotReady: 1}}, provider.KindNotReady, 0, 503},
		{"guardrail", Settings{ErrorRate: map[provider.Kind]float64{provider.KindGuardrail: 1}}, provider.KindGuardrail, 0, 400},
		{"timeout", Settings{ErrorRate: map[provider.Kind]float64{provider.KindTimeout: 1}}, provider.KindTimeout, 0, 408},
		{"outage beats error rate", Settings{Outage: true, ErrorRate: map[provider.Kind]float64{provider.KindThrottled: 1}}, provider.KindUnavailable, 0, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := newSim(t, 5, map[string]Settings{"sonnet": tt.settings})
			deltas, resp, err := collect(context.Background(), s, userRequest("sonnet", "hello"))
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *provider.Error", err)
			}
			if pe.Kind != tt.wantKind || pe.Model != "sonnet" || pe.RetryAfter != tt.wantRetry || pe.Status != tt.wantStatus {
				t.Errorf("got kind %q model %q retryAfter %v status %d, want %q %q %v %d",
					pe.Kind, pe.Model, pe.RetryAfter, pe.Status, tt.wantKind, "sonnet", tt.wantRetry, tt.wantStatus)
			}
			if resp == nil {
				t.Fatal("Response is nil on error")
			}
			if len(deltas) != 0 || resp.Usage != (provider.Usage{}) || s.Usage("sonnet") != (provider.Usage{}) {
				t.Errorf("a call refused before the first token emitted %d deltas and billed %+v / %+v, want nothing",
					len(deltas), resp.Usage, s.Usage("sonnet"))
			}
		})
	}
}

func TestErrorRateIsAProbability(t *testing.T) {
	st := instant
	st.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: 0.3, provider.KindUnavailable: 0.2}
	s, _ := newSim(t, 42, map[string]Settings{"m": st})
	counts := map[provider.Kind]int{}
	const n = 400
	for range n {
		_, err := s.Complete(context.Background(), userRequest("m", "hi"))
		counts[provider.KindOf(err)]++
	}
	check := func(k provider.Kind, want float64) {
		got := float64(counts[k]) / n
		if got < want-0.08 || got > want+0.08 {
			t.Errorf("%q in %.2f of calls, want about %.2f", k, got, want)
		}
	}
	check(provider.KindThrottled, 0.3)
	check(provider.KindUnavailable, 0.2)
	check("", 0.5)
}

func TestTimeoutFaultEndsAtTheCallersDeadline(t *testing.T) {
	s, err := New(Config{Models: map[string]Settings{"m": {ErrorRate: map[provider.Kind]float64{provider.KindTimeout: 1}}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	resp, err := s.Complete(ctx, userRequest("m", "hello"))
	elapsed := time.Since(start)
	if provider.KindOf(err) != provider.KindTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want kind timeout wrapping the deadline", err)
	}
	if elapsed > time.Second {
		t.Errorf("returned after %v, want at the 50ms deadline, well before the %v the fault waits without one", elapsed, faultTimeoutWait)
	}
	if resp == nil {
		t.Error("Response is nil on error")
	}
}

// fullAnswer returns the text an undisturbed model gives with seed, to
// compare partial streams against.
func fullAnswer(t *testing.T, seed uint64, msg string) string {
	t.Helper()
	s, _ := newSim(t, seed, map[string]Settings{"m": instant})
	resp, err := s.Complete(context.Background(), userRequest("m", msg))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Text
}

func TestStallAndCutBillPartialUsage(t *testing.T) {
	tests := []struct {
		name     string
		settings Settings
		timeout  time.Duration
		wantKind provider.Kind
	}{
		{"stall until deadline", Settings{StallAfterTokens: 9}, 30 * time.Millisecond, provider.KindTimeout},
		{"cut", Settings{CutAfterTokens: 9}, time.Minute, provider.KindUnavailable},
	}
	for _, tt := range tests {
		for _, msg := range []string{"What do you recommend?", "おすすめの漫画を教えて"} {
			t.Run(tt.name+"/"+msg, func(t *testing.T) {
				const seed = 99
				full := fullAnswer(t, seed, msg)
				s, _ := newSim(t, seed, map[string]Settings{"m": tt.settings})
				ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
				defer cancel()
				req := userRequest("m", msg)
				deltas, resp, err := collect(ctx, s, req)
				if provider.KindOf(err) != tt.wantKind {
					t.Fatalf("err = %v, want kind %q", err, tt.wantKind)
				}
				if resp == nil {
					t.Fatal("Response is nil on error")
				}
				want := provider.Usage{InputTokens: InputTokens(req), OutputTokens: 9}
				if resp.Usage != want || s.Usage("m") != want {
					t.Errorf("usage = %+v (billed %+v), want %+v", resp.Usage, s.Usage("m"), want)
				}
				if resp.Text == "" || !strings.HasPrefix(full, resp.Text) || strings.Join(deltas, "") != resp.Text {
					t.Errorf("partial text %q is not what was emitted or not a prefix of the full answer %q", resp.Text, full)
				}
				if resp.StopReason != "" {
					t.Errorf("StopReason = %q on a failed stream, want empty", resp.StopReason)
				}
			})
		}
	}
}

func TestStallBeyondAnswerLengthCompletes(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": {StallAfterTokens: 10000, CutAfterTokens: 10000}})
	if _, err := s.Complete(context.Background(), userRequest("m", "hello")); err != nil {
		t.Errorf("err = %v, want the answer to finish before the stall point", err)
	}
}

func TestTPMCeilingThrottlesAndRecovers(t *testing.T) {
	s, clock := newSim(t, 3, map[string]Settings{"m": {TPMCeiling: 400}})
	req := userRequest("m", "What do you recommend?")
	var (
		used      int
		throttled error
		calls     int
	)
	for calls = 0; calls < 20; calls++ {
		resp, err := s.Complete(context.Background(), req)
		if err != nil {
			throttled = err
			break
		}
		used += resp.Usage.InputTokens + resp.Usage.OutputTokens
		clock.Advance(10 * time.Second)
	}
	if provider.KindOf(throttled) != provider.KindThrottled {
		t.Fatalf("after %d calls (%d tokens) err = %v, want throttled", calls, used, throttled)
	}
	if used+InputTokens(req) <= 400 {
		t.Errorf("throttled at %d tokens used, below the 400 ceiling", used)
	}
	billed := s.Usage("m")
	retry := provider.RetryAfterOf(throttled)
	if retry <= 0 || retry > time.Minute {
		t.Fatalf("RetryAfter = %v, want within (0, 1m]", retry)
	}

	clock.Advance(retry - time.Millisecond)
	if _, err := s.Complete(context.Background(), req); provider.KindOf(err) != provider.KindThrottled {
		t.Errorf("1ms before RetryAfter: err = %v, want still throttled", err)
	}
	if s.Usage("m") != billed {
		t.Errorf("a throttled call billed tokens: %+v -> %+v", billed, s.Usage("m"))
	}
	clock.Advance(time.Millisecond)
	if _, err := s.Complete(context.Background(), req); err != nil {
		t.Errorf("at RetryAfter: err = %v, want the call admitted", err)
	}
}

func TestTPMCeilingBelowOneCall(t *testing.T) {
	s, _ := newSim(t, 3, map[string]Settings{"m": {TPMCeiling: 5}})
	_, err := s.Complete(context.Background(), userRequest("m", "a question longer than five tokens, surely"))
	if provider.KindOf(err) != provider.KindThrottled || provider.RetryAfterOf(err) != time.Minute {
		t.Errorf("err = %v (retry %v), want throttled with a one-minute hint", err, provider.RetryAfterOf(err))
	}
}

func TestCancellationIsPrompt(t *testing.T) {
	tests := []struct {
		name       string
		settings   Settings
		cancelOn   string // "first-delta" or "timer"
		wantOutput bool
	}{
		{"mid stream", Settings{TokensPerSecond: 1}, "first-delta", true},
		{"before first token", Settings{TTFTMs: 10_000}, "timer", false},
		{"during latency", Settings{LatencyMs: 10_000}, "timer", false},
		{"during stall", Settings{StallAfterTokens: 3}, "timer", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Models: map[string]Settings{"m": tt.settings}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var canceledAt time.Time
			var once sync.Once
			stop := func() { once.Do(func() { canceledAt = time.Now(); cancel() }) }
			if tt.cancelOn == "timer" {
				time.AfterFunc(20*time.Millisecond, stop)
			}
			resp, err := s.Stream(ctx, userRequest("m", "hello"), func(string) error {
				if tt.cancelOn == "first-delta" {
					stop()
				}
				return nil
			})
			lag := time.Since(canceledAt)
			if provider.KindOf(err) != provider.KindCanceled || !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want kind canceled wrapping context.Canceled", err)
			}
			// Generous for -race on a loaded machine; the next token is 1s
			// away and the pending waits are 10s.
			if lag > 500*time.Millisecond {
				t.Errorf("Stream returned %v after cancellation", lag)
			}
			if resp == nil {
				t.Fatal("Response is nil on error")
			}
			if got := resp.Usage.OutputTokens > 0; got != tt.wantOutput {
				t.Errorf("output tokens = %d, want some: %v", resp.Usage.OutputTokens, tt.wantOutput)
			}
			if s.Usage("m") != resp.Usage {
				t.Errorf("billed %+v, want the partial usage %+v", s.Usage("m"), resp.Usage)
			}
		})
	}
}

func TestEmitErrorStopsTheStream(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": instant})
	errClient := errors.New("client went away")
	n := 0
	resp, err := s.Stream(context.Background(), userRequest("m", "hello"), func(string) error {
		n++
		if n == 3 {
			return errClient
		}
		return nil
	})
	if err != errClient {
		t.Errorf("err = %v, want emit's error as is", err)
	}
	if n != 3 || resp == nil || resp.Usage.OutputTokens < 3 || s.Usage("m").OutputTokens != resp.Usage.OutputTokens {
		t.Errorf("after emit failed: %d emits, resp %+v, billed %+v", n, resp, s.Usage("m"))
	}
}

func TestUnknownModel(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": instant})
	resp, err := s.Complete(context.Background(), userRequest("opus", "hello"))
	if provider.KindOf(err) != provider.KindNotFound || resp == nil {
		t.Errorf("got %v, %v; want kind not_found and a Response", resp, err)
	}
}

func TestSetSettingsAppliesToNextCall(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": instant})
	if _, err := s.Complete(context.Background(), userRequest("m", "hi")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSettings("m", Settings{Outage: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Complete(context.Background(), userRequest("m", "hi")); provider.KindOf(err) != provider.KindUnavailable {
		t.Errorf("after outage set: err = %v, want unavailable", err)
	}
	if err := s.SetSettings("m", Settings{LatencyMs: -1}); err == nil {
		t.Error("SetSettings accepted latencyMs -1")
	}
	if got, _ := s.Settings("m"); !got.Outage {
		t.Error("an invalid SetSettings changed the settings")
	}
	if err := s.SetSettings("nope", instant); !errors.Is(err, ErrUnknownModel) {
		t.Errorf("SetSettings(unknown) = %v, want ErrUnknownModel", err)
	}
}

func TestSettingsAreCopies(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"m": {ErrorRate: map[provider.Kind]float64{provider.KindThrottled: 0}}})
	st, _ := s.Settings("m")
	st.ErrorRate[provider.KindThrottled] = 1
	if _, err := s.Complete(context.Background(), userRequest("m", "hi")); err != nil {
		t.Errorf("mutating a returned Settings changed the simulator: %v", err)
	}
}

func TestSameSeedSameAnswers(t *testing.T) {
	a := fullAnswer(t, 123, "おすすめは？")
	b := fullAnswer(t, 123, "おすすめは？")
	if a != b {
		t.Errorf("same seed gave %q and %q", a, b)
	}
}

func TestConcurrentUseIsRaceFree(t *testing.T) {
	s, _ := newSim(t, 1, map[string]Settings{"sonnet": instant, "haiku": instant})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			model := []string{"sonnet", "haiku"}[i%2]
			for range 20 {
				req := userRequest(model, "おすすめは？")
				req.SystemCache = []provider.CacheMark{{At: len(req.System)}}
				_, _ = s.Complete(context.Background(), req)
			}
		})
	}
	for i := range 4 {
		wg.Go(func() {
			for j := range 50 {
				st := instant
				st.ErrorRate = map[provider.Kind]float64{provider.KindThrottled: float64(j%3) / 4}
				st.TPMCeiling = 100_000 * (i % 2)
				_ = s.SetSettings([]string{"sonnet", "haiku"}[j%2], st)
				_, _ = s.Settings("sonnet")
				_ = s.Usage("haiku")
				_ = s.Models()
			}
		})
	}
	wg.Wait()
	if s.Usage("sonnet").Input() == 0 || s.Usage("haiku").Input() == 0 {
		t.Error("no usage recorded under concurrency")
	}
}
