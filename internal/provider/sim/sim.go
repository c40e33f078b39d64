// Package sim is fmgate's built-in model simulator: a provider.Provider that
// answers like the MangaAssist store assistant (Japanese or English, topic
// aware), at a realistic time to first token and tokens per second, billing
// usage counted with the cl100k_base tokenizer in the classes of a prompt
// cache kept as Anthropic keeps it (see Stream). It lets new users run the
// gateway with no credentials, and lets load and scenario tests inject
// faults per model at run time: outages, error rates by kind, latency,
// stalls, dropped connections and tokens-per-minute ceilings (see Settings
// and the admin Handler).
package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// Tunables of the simulation that are not per-model settings.
const (
	// throttleRetryAfter is the hint an injected throttle carries, about
	// what Bedrock suggests for a ThrottlingException.
	throttleRetryAfter = time.Second
	// faultTimeoutWait is how long an injected timeout hangs when the
	// caller's context has no earlier deadline.
	faultTimeoutWait = 3 * time.Second
	// ttftJitter and paceJitter are the per-call spread around TTFTMs and
	// TokensPerSecond: ±20% and ±1/3 (60 tok/s becomes 40–80).
	ttftJitter = 0.2
	paceJitter = 1.0 / 3
)

// Stop reasons reported in Response.StopReason, as Anthropic names them.
const (
	StopEndTurn      = "end_turn"
	StopMaxTokens    = "max_tokens"
	StopStopSequence = "stop_sequence"
)

// ErrUnknownModel is returned by SetSettings for a model the simulator was
// not configured with.
var ErrUnknownModel = errors.New("sim: unknown model")

// Options are the simulator's clock, sleeper and randomness. Every nil field
// means the real default, so tests can run without real sleeps.
type Options struct {
	// Now defaults to time.Now.
	Now func() time.Time
	// Sleep waits for d or until ctx ends, returning ctx.Err() in that case.
	// The default uses a timer. A fake may advance a fake clock and return
	// at once.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand drives fault draws, jitter and answer wording. The simulator
	// guards it with a mutex. Defaults to a randomly seeded PCG.
	Rand *rand.Rand
}

// Sim is the simulator. It is safe for concurrent use; settings changed
// with SetSettings or the admin API apply from the next call.
type Sim struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	rngMu sync.Mutex
	rng   *rand.Rand

	mu     sync.Mutex
	models map[string]*model

	// lineTokens caches the token count of answer lines. Lines come from
	// templates filled from the fixed catalogue, never from user text, so
	// the cache stays bounded (a few hundred entries).
	lineTokens sync.Map // string -> int
}

// model is the mutable state of one simulated model.
type model struct {
	settings Settings
	usage    provider.Usage
	tpm      tpmLedger
	cache    promptCache
}

var _ provider.Provider = (*Sim)(nil)

// New returns a simulator for cfg's models, or cfg's validation errors.
func New(cfg Config, opts Options) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	s := &Sim{
		now:    opts.Now,
		sleep:  opts.Sleep,
		rng:    opts.Rand,
		models: make(map[string]*model, len(cfg.Models)),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.sleep == nil {
		s.sleep = sleepCtx
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	for name, st := range cfg.Models {
		s.models[name] = &model{settings: st.clone()}
	}
	return s, nil
}

// sleepCtx waits for d or until ctx ends, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Models returns the simulated model names, sorted.
func (s *Sim) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.models))
}

// Settings returns a copy of model's current settings.
func (s *Sim) Settings(name string) (Settings, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.models[name]
	if !ok {
		return Settings{}, false
	}
	return m.settings.clone(), true
}

// SetSettings replaces model's settings from the next call on. It returns
// the validation errors of st, or an error wrapping ErrUnknownModel.
func (s *Sim) SetSettings(name string, st Settings) error {
	if err := st.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.models[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownModel, name)
	}
	m.settings = st.clone()
	return nil
}

// AddModel simulates model name with st from the next call on; a model
// the simulator has already keeps its settings and state, and AddModel
// reports false.
func (s *Sim) AddModel(name string, st Settings) (bool, error) {
	if err := st.Validate(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.models[name]; ok {
		return false, nil
	}
	s.models[name] = &model{settings: st.clone()}
	return true, nil
}

// Usage returns the tokens the simulator has billed for model since it was
// created, including the input and partial output of calls that were cut,
// stalled or cancelled once admitted. Calls refused before admission (outage,
// injected errors, TPM ceiling) bill nothing, as on Bedrock, and leave the
// prompt cache as it was.
func (s *Sim) Usage(name string) provider.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.models[name]; ok {
		return m.usage
	}
	return provider.Usage{}
}

// Complete answers req in one piece. It takes as long as the stream would.
func (s *Sim) Complete(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	return s.Stream(ctx, req, nil)
}

// plan is everything a call draws from the shared random source, drawn in
// one go and in a fixed order so that a seeded simulator is reproducible
// whatever the settings.
type plan struct {
	fault    provider.Kind // "" when the call is not to fail
	ttft     time.Duration
	interval time.Duration // between output tokens; 0 is as fast as possible
	words    *rand.Rand    // the call's own source for composing the answer
}

func (s *Sim) draw(st Settings) plan {
	s.rngMu.Lock()
	u, ttftU, paceU := s.rng.Float64(), s.rng.Float64(), s.rng.Float64()
	seed1, seed2 := s.rng.Uint64(), s.rng.Uint64()
	s.rngMu.Unlock()

	p := plan{words: rand.New(rand.NewPCG(seed1, seed2))}
	cum := 0.0
	for _, k := range faultKinds {
		cum += st.ErrorRate[k]
		if u < cum {
			p.fault = k
			break
		}
	}
	ttft := float64(st.TTFTMs) * float64(time.Millisecond)
	p.ttft = time.Duration(ttft * (1 - ttftJitter + 2*ttftJitter*ttftU))
	if st.TokensPerSecond > 0 {
		tps := st.TokensPerSecond * (1 - paceJitter + 2*paceJitter*paceU)
		p.interval = time.Duration(float64(time.Second) / tps)
	}
	return p
}

// CountTokens implements provider.TokenCounter: the simulator's own count
// of req's input, the one it bills. A model in an outage counts nothing.
func (s *Sim) CountTokens(ctx context.Context, req *provider.Request) (int, error) {
	st, ok := s.Settings(req.Model)
	switch {
	case !ok:
		return 0, &provider.Error{Kind: provider.KindNotFound, Model: req.Model, Err: fmt.Errorf("sim: no model %q", req.Model)}
	case st.Outage:
		return 0, &provider.Error{Kind: provider.KindUnavailable, Model: req.Model, Status: 503, Err: errors.New("simulated outage")}
	}
	return InputTokens(req), ctx.Err()
}

// Stream answers req token by token at the model's pace. Each delta is
// valid UTF-8 (a character split across two tokens is sent whole). Every
// failure is a *provider.Error with Kind and Model set, except an error
// returned by emit, which is returned as is; the Response is never nil and
// carries the text and usage produced so far. A nil emit discards deltas.
//
// The input is billed in the classes of the model's prompt cache, as
// Anthropic bills it. Each cache mark of req ends a prefix, the prompt up
// to it, that is cached when it holds at least the model's CacheMinTokens:
// the longest such prefix still held is read (CachedInputTokens), the
// tokens from there to the last mark are written (CacheWriteTokens), and
// the rest is InputTokens; the three add up to InputTokens(req). Every
// such prefix is then held for its mark's TTL. A request without marks
// bills all its input as InputTokens.
func (s *Sim) Stream(ctx context.Context, req *provider.Request, emit func(text string) error) (*provider.Response, error) {
	return s.StreamAdmitted(ctx, req, nil, emit)
}

// StreamAdmitted is Stream, calling admitted, when not nil, once the call
// is admitted and before its first delta, with the input usage it is billed
// (OutputTokens 0). A call refused before admission never calls it. It lets
// a wire server open its answer with the usage a vendor sends first
// (Anthropic's message_start), so that a client cut off mid-answer still
// knows what the input cost.
func (s *Sim) StreamAdmitted(ctx context.Context, req *provider.Request, admitted func(provider.Usage), emit func(text string) error) (*provider.Response, error) {
	start := s.now()
	if emit == nil {
		emit = func(string) error { return nil }
	}
	st, ok := s.Settings(req.Model)
	if !ok {
		return &provider.Response{ModelID: req.Model}, &provider.Error{
			Kind: provider.KindNotFound, Model: req.Model, Status: 404,
			Err: fmt.Errorf("no simulated model %q", req.Model),
		}
	}
	resp := &provider.Response{ModelID: st.ModelID}
	if resp.ModelID == "" {
		resp.ModelID = req.Model
	}
	p := s.draw(st)
	if req.Seed != nil { // the same seed, the same words
		p.words = rand.New(rand.NewPCG(uint64(*req.Seed), uint64(*req.Seed)))
	}
	if err := checkRequest(req); err != nil {
		return resp, &provider.Error{Kind: provider.KindValidation, Model: req.Model, Status: 400, Err: err}
	}
	if err := s.inject(ctx, req.Model, st, p); err != nil {
		return resp, err
	}

	auto := automaticCaching(ctx)
	if auto {
		req = autoMarked(req)
	}
	prefixes, input := promptPrefixes(req, st.CacheMinTokens)
	usage, retryAfter, ok := s.admit(req.Model, st.TPMCeiling, prefixes, input, auto)
	if !ok {
		return resp, tpmThrottled(req.Model, st.TPMCeiling, retryAfter)
	}
	resp.Usage = usage
	if admitted != nil {
		admitted(usage)
	}
	err := s.generate(ctx, req, st, p, start, resp, emit)
	s.bill(req.Model, resp.Usage.OutputTokens)
	return resp, err
}

// inject waits the model's latency, then fails the call as its settings
// say: an outage, or the fault p drew. nil lets the call through.
func (s *Sim) inject(ctx context.Context, model string, st Settings, p plan) error {
	fail := func(kind provider.Kind, status int, msg string) *provider.Error {
		return &provider.Error{Kind: kind, Model: model, Status: status, Err: errors.New(msg)}
	}
	if err := s.wait(ctx, time.Duration(st.LatencyMs)*time.Millisecond); err != nil {
		return ctxError(model, err)
	}
	if st.Outage {
		return fail(provider.KindUnavailable, 503, "simulated outage")
	}
	switch p.fault {
	case provider.KindThrottled:
		err := fail(provider.KindThrottled, 429, "simulated throttling")
		err.RetryAfter = throttleRetryAfter
		return err
	case provider.KindUnavailable:
		return fail(provider.KindUnavailable, 503, "simulated service unavailable")
	case provider.KindNotReady:
		return fail(provider.KindNotReady, 503, "simulated model not ready")
	case provider.KindGuardrail:
		return fail(provider.KindGuardrail, 400, "simulated guardrail intervention")
	case provider.KindTimeout:
		if err := s.sleep(ctx, faultTimeoutWait); err != nil {
			return ctxError(model, err)
		}
		return fail(provider.KindTimeout, 408, "simulated model timeout")
	}
	return nil
}

// tpmThrottled is the refusal of a call over the model's TPM ceiling.
func tpmThrottled(model string, ceiling int, retryAfter time.Duration) *provider.Error {
	return &provider.Error{Kind: provider.KindThrottled, Model: model, Status: 429, RetryAfter: retryAfter,
		Err: fmt.Errorf("simulated tokens-per-minute ceiling of %d reached", ceiling)}
}

// generate produces the answer into resp, keeping resp.Text and
// resp.Usage.OutputTokens current so that a failure leaves the partial
// result in place.
func (s *Sim) generate(ctx context.Context, req *provider.Request, st Settings, p plan, start time.Time, resp *provider.Response, emit func(string) error) error {
	if req.Thinking != nil {
		// The reasoning comes first, after the first-token wait; the answer
		// follows at the model's pace, in what is left of max_tokens.
		if err := s.wait(ctx, p.ttft); err != nil {
			return ctxError(req.Model, err)
		}
		n, err := s.think(ctx, req, p, resp)
		resp.Usage.OutputTokens += n
		if err != nil {
			return err
		}
		p.ttft = p.interval
		if req.MaxTokens > 0 {
			rest := *req
			rest.MaxTokens = max(req.MaxTokens-n, 1)
			req = &rest
		}
	}
	if calls := toolCalls(req); len(calls) > 0 {
		return s.callTools(ctx, req, st, p, resp, calls)
	}
	answer, seq := cutAtStop(formatAnswer(req, withImages(req, composeAnswer(req, p.words, s.countLine))), req.StopSequences)
	pieces := tokenPieces(answer)
	stop := StopEndTurn
	if seq != "" {
		stop = StopStopSequence
	}
	if req.MaxTokens > 0 && len(pieces) > req.MaxTokens {
		pieces, stop, seq = pieces[:req.MaxTokens], StopMaxTokens, ""
	}
	if err := s.wait(ctx, p.ttft); err != nil {
		return ctxError(req.Model, err)
	}
	var text strings.Builder
	defer func() { resp.Text = text.String() }()
	var joiner utf8Joiner
	for i, piece := range pieces {
		if st.StallAfterTokens > 0 && i == st.StallAfterTokens {
			<-ctx.Done()
			return ctxError(req.Model, ctx.Err())
		}
		if st.CutAfterTokens > 0 && i == st.CutAfterTokens {
			return &provider.Error{
				Kind: provider.KindUnavailable, Model: req.Model,
				Err: fmt.Errorf("simulated connection dropped after %d output tokens", i),
			}
		}
		if i > 0 {
			if err := s.wait(ctx, p.interval); err != nil {
				return ctxError(req.Model, err)
			}
		}
		resp.Usage.OutputTokens++
		delta := joiner.add(piece)
		if delta == "" {
			continue
		}
		if text.Len() == 0 {
			resp.TTFT = s.now().Sub(start)
		}
		text.WriteString(delta)
		if err := emit(delta); err != nil {
			return err
		}
	}
	resp.StopReason, resp.StopSequence = stop, seq
	return nil
}

// callTools answers with tool calls, after the first-token wait and the
// time the model takes to write them.
func (s *Sim) callTools(ctx context.Context, req *provider.Request, st Settings, p plan, resp *provider.Response, calls []provider.ToolCall) error {
	n := callTokens(calls)
	if err := s.wait(ctx, p.ttft); err != nil {
		return ctxError(req.Model, err)
	}
	if st.CutAfterTokens > 0 && st.CutAfterTokens < n {
		resp.Usage.OutputTokens += st.CutAfterTokens
		return &provider.Error{Kind: provider.KindUnavailable, Model: req.Model,
			Err: fmt.Errorf("simulated connection dropped after %d output tokens", st.CutAfterTokens)}
	}
	if req.MaxTokens > 0 && n > req.MaxTokens {
		// Cut mid-call: vendors then return no usable call.
		resp.Usage.OutputTokens, resp.StopReason = resp.Usage.OutputTokens+req.MaxTokens, StopMaxTokens
		return nil
	}
	if err := s.wait(ctx, time.Duration(n)*p.interval); err != nil {
		return ctxError(req.Model, err)
	}
	resp.Usage.OutputTokens += n
	resp.ToolCalls, resp.StopReason = calls, provider.StopToolUse
	return nil
}

// cutAtStop ends answer before the earliest of stops it holds, as a model
// stops generating when it produces one, and says which one; the answer
// whole and "" when it holds none.
func cutAtStop(answer string, stops []string) (string, string) {
	at, which := -1, ""
	for _, s := range stops {
		if i := strings.Index(answer, s); s != "" && i >= 0 && (at < 0 || i < at) {
			at, which = i, s
		}
	}
	if at < 0 {
		return answer, ""
	}
	return answer[:at], which
}

func (s *Sim) countLine(line string) int {
	if n, ok := s.lineTokens.Load(line); ok {
		return n.(int)
	}
	n := CountTokens(line)
	s.lineTokens.Store(line, n)
	return n
}

// wait sleeps for d, or only checks ctx when there is nothing to wait for,
// so a zero-latency stream still stops when its caller goes away.
func (s *Sim) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	return s.sleep(ctx, d)
}

// admit bills the call's input in the classes of the model's prompt cache
// and checks the TPM ceiling (0 = none), which, as Anthropic's and
// Bedrock's, counts every input token but those read from the cache. When
// the call fits, it records the counted input and holds the call's marked
// prefixes in the cache. With auto (WithAutomaticCaching) the call is
// billed as OpenAI bills: the ceiling counts every input token, and the
// tokens written to the cache are plain input.
func (s *Sim) admit(name string, ceiling int, prefixes []prefix, input int, auto bool) (usage provider.Usage, retryAfter time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[name] // models are never removed, so m is set
	now := s.now()
	usage = m.cache.bill(now, prefixes, input)
	counted := input - usage.CachedInputTokens
	if auto {
		counted = input
		usage.InputTokens += usage.CacheWriteTokens
		usage.CacheWriteTokens, usage.CacheWrite1hTokens = 0, 0
	}
	if ceiling > 0 {
		if ok, retryAfter := m.tpm.admit(now, counted, ceiling); !ok {
			return provider.Usage{}, retryAfter, false
		}
	}
	m.tpm.record(now, counted)
	m.cache.hold(now, prefixes)
	m.usage = m.usage.Add(usage)
	return usage, 0, true
}

// bill records output tokens produced by an admitted call.
func (s *Sim) bill(name string, output int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[name]
	m.tpm.record(s.now(), output)
	m.usage.OutputTokens += output
}

// ctxError normalises the end of the caller's context: an expired deadline
// is a timeout, anything else a cancellation. The context error stays
// wrapped for errors.Is.
func ctxError(model string, err error) error {
	kind := provider.KindCanceled
	if errors.Is(err, context.DeadlineExceeded) {
		kind = provider.KindTimeout
	}
	return &provider.Error{Kind: kind, Model: model, Err: err}
}
