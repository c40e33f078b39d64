package budget

import (
	"math"
	"sync"
	"sync/atomic"
)

// ScriptCounts is the feature vector the estimator prices: characters by
// script, Latin words, and the number of messages (each carries a fixed
// framing overhead in the provider's chat template).
type ScriptCounts struct {
	Hiragana int
	Katakana int // including halfwidth katakana and the prolonged sound mark
	Kanji    int // CJK ideographs and 々
	Latin    int // Latin letters
	Words    int // runs of Latin letters: BPE tokens follow words, not letters
	Digits   int // ASCII digits
	Spaces   int // ASCII whitespace
	Punct    int // ASCII, CJK and fullwidth punctuation and symbols
	Other    int // everything else: emoji, fullwidth letters, Hangul, …
	Messages int
}

const numFeatures = 10

func (c ScriptCounts) vector() [numFeatures]float64 {
	return [numFeatures]float64{
		float64(c.Hiragana), float64(c.Katakana), float64(c.Kanji), float64(c.Latin),
		float64(c.Words), float64(c.Digits), float64(c.Spaces), float64(c.Punct),
		float64(c.Other), float64(c.Messages),
	}
}

// Add returns the sum of two counts.
func (c ScriptCounts) Add(o ScriptCounts) ScriptCounts {
	return ScriptCounts{
		Hiragana: c.Hiragana + o.Hiragana, Katakana: c.Katakana + o.Katakana,
		Kanji: c.Kanji + o.Kanji, Latin: c.Latin + o.Latin, Words: c.Words + o.Words,
		Digits: c.Digits + o.Digits, Spaces: c.Spaces + o.Spaces, Punct: c.Punct + o.Punct,
		Other: c.Other + o.Other, Messages: c.Messages + o.Messages,
	}
}

// Language classifies the counts as "ja", "en" or "mixed" by the share of
// Japanese characters among letters (ja above 60 %, en below 10 %).
func (c ScriptCounts) Language() string {
	jp := c.Hiragana + c.Katakana + c.Kanji
	if jp+c.Latin == 0 {
		return "en"
	}
	share := float64(jp) / float64(jp+c.Latin)
	switch {
	case share > 0.6:
		return "ja"
	case share < 0.1:
		return "en"
	}
	return "mixed"
}

// Count splits text by script. Messages is left at zero.
func Count(text string) ScriptCounts {
	var c ScriptCounts
	inWord := false
	for _, r := range text {
		latin := false
		switch {
		case r < 0x80:
			switch {
			case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z':
				c.Latin++
				latin = true
			case r >= '0' && r <= '9':
				c.Digits++
			case r == ' ' || r == '\n' || r == '\t' || r == '\r':
				c.Spaces++
			default:
				c.Punct++
			}
		case r >= 0x3040 && r <= 0x309F:
			c.Hiragana++
		case r >= 0x30A0 && r <= 0x30FF, r >= 0x31F0 && r <= 0x31FF, r >= 0xFF66 && r <= 0xFF9F:
			c.Katakana++
		case r >= 0x4E00 && r <= 0x9FFF, r >= 0x3400 && r <= 0x4DBF, r >= 0xF900 && r <= 0xFAFF,
			r >= 0x20000 && r <= 0x2FFFF, r == 0x3005:
			c.Kanji++
		case r >= 0xC0 && r <= 0x24F && r != 0xD7 && r != 0xF7:
			c.Latin++
			latin = true
		case r >= 0x3000 && r <= 0x303F, r >= 0xFF01 && r <= 0xFF0F, r >= 0xFF1A && r <= 0xFF20,
			r >= 0xFF3B && r <= 0xFF40, r >= 0xFF5B && r <= 0xFF65, r >= 0x2000 && r <= 0x206F,
			r >= 0xA0 && r <= 0xBF:
			c.Punct++
		default:
			c.Other++
		}
		if latin && !inWord {
			c.Words++
		}
		inWord = latin
	}
	return c
}

// priorWeights are the tokens per unit before any calibration, after the
// usual rules of thumb: ~4 Latin characters per token, 0.7 tokens per kana,
// 1.0 per kanji, and a few tokens of framing per message.
var priorWeights = [numFeatures]float64{
	0.7,  // hiragana
	0.7,  // katakana
	1.0,  // kanji
	0.25, // latin letters
	0,    // words
	0.5,  // digits
	0,    // spaces
	0.5,  // punctuation
	1.5,  // other
	3,    // per message
}

// Bounds keep one odd observation from driving a ratio somewhere absurd.
var (
	minWeights = [numFeatures]float64{0, 0, 0, 0, -1, 0, -0.5, 0, 0, 0}
	maxWeights = [numFeatures]float64{4, 4, 4, 2, 3, 2, 2, 3, 6, 40}
)

// Calibration constants. Observations are weighted by 1/actual², so the fit
// minimises relative error (what budgets care about) rather than letting the
// longest requests dominate. The forgetting factor keeps roughly the last
// thousand observations relevant, so a provider changing its tokenizer is
// followed.
const (
	rlsLambda   = 0.999
	rlsInitialP = 1.0
)

// Estimator estimates tokens per request part from script counts and
// calibrates its per-script ratios, per model, from the usage providers
// report (recursive least squares on relative error, ratios clamped to
// bounds). It is safe for concurrent use. Calibration lives in the process:
// each gateway instance learns from its own traffic.
type Estimator struct {
	mu     sync.RWMutex
	models map[string]*calibration
	acc    map[string]*errorRing

	// system is the last system prompt counted, with its counts: every turn
	// under one prompt brings the same text, the longest part of a request.
	system atomic.Pointer[countedText]
}

type countedText struct {
	text   string
	counts ScriptCounts
}

// countSystem is Count(text) for a system prompt, counted once while the
// prompt stays the same.
func (e *Estimator) countSystem(text string) ScriptCounts {
	if c := e.system.Load(); c != nil && c.text == text {
		return c.counts
	}
	c := Count(text)
	e.system.Store(&countedText{text: text, counts: c})
	return c
}

type calibration struct {
	w [numFeatures]float64
	p [numFeatures][numFeatures]float64
	n int
}

func newCalibration() *calibration {
	c := &calibration{w: priorWeights}
	for i := range numFeatures {
		c.p[i][i] = rlsInitialP
	}
	return c
}

// NewEstimator returns an estimator starting from the prior ratios.
func NewEstimator() *Estimator {
	return &Estimator{models: map[string]*calibration{}, acc: map[string]*errorRing{}}
}

func dot(w, x *[numFeatures]float64) float64 {
	s := 0.0
	for i := range numFeatures {
		s += w[i] * x[i]
	}
	return s
}

func (e *Estimator) weights(model string) *[numFeatures]float64 {
	if c, ok := e.models[model]; ok {
		return &c.w
	}
	w := priorWeights
	return &w
}

// Tokens estimates the tokens of counts for model (at least 0).
func (e *Estimator) Tokens(model string, c ScriptCounts) float64 {
	x := c.vector()
	e.mu.RLock()
	defer e.mu.RUnlock()
	return max(dot(e.weights(model), &x), 0)
}

// Observe calibrates model with the input tokens the provider billed for a
// request whose counts were c (Plan.Counts), and records the error the
// estimate had before this observation. Non-positive actuals are ignored.
func (e *Estimator) Observe(model string, c ScriptCounts, actualTokens int) {
	if actualTokens <= 0 {
		return
	}
	x := c.vector()
	y := float64(actualTokens)
	e.mu.Lock()
	defer e.mu.Unlock()
	cal, ok := e.models[model]
	if !ok {
		cal = newCalibration()
		e.models[model] = cal
	}
	pred := max(dot(&cal.w, &x), 0)
	errPct := (pred - y) / y * 100
	for _, lang := range [...]string{c.Language(), "all"} {
		ring, ok := e.acc[lang]
		if !ok {
			ring = &errorRing{}
			e.acc[lang] = ring
		}
		ring.add(errPct)
	}

	// Relative least squares: scale the regression by 1/y.
	var z [numFeatures]float64
	for i := range numFeatures {
		z[i] = x[i] / y
	}
	var pz [numFeatures]float64
	for i := range numFeatures {
		for j := range numFeatures {
			pz[i] += cal.p[i][j] * z[j]
		}
	}
	den := rlsLambda + dot(&z, &pz)
	resid := 1 - dot(&cal.w, &z)
	for i := range numFeatures {
		k := pz[i] / den
		cal.w[i] = min(max(cal.w[i]+k*resid, minWeights[i]), maxWeights[i])
	}
	for i := range numFeatures {
		for j := range numFeatures {
			cal.p[i][j] = (cal.p[i][j] - pz[i]*pz[j]/den) / rlsLambda
		}
	}
	cal.n++
}

// Stats describes recent estimation error, in percent of the actual count
// (positive when the estimate was too high).
type Stats struct {
	Samples         int
	MeanErrorPct    float64
	MeanAbsErrorPct float64
}

// Accuracy returns error statistics over the last 500 observations per
// language ("ja", "en", "mixed") and overall ("all").
func (e *Estimator) Accuracy() map[string]Stats {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make(map[string]Stats, len(e.acc))
	for lang, r := range e.acc {
		out[lang] = r.stats()
	}
	return out
}

const ringSize = 500

type errorRing struct {
	v    [ringSize]float64
	n    int
	next int
}

func (r *errorRing) add(v float64) {
	r.v[r.next] = v
	r.next = (r.next + 1) % ringSize
	r.n = min(r.n+1, ringSize)
}

func (r *errorRing) stats() Stats {
	s := Stats{Samples: r.n}
	if r.n == 0 {
		return s
	}
	for _, v := range r.v[:r.n] {
		s.MeanErrorPct += v
		s.MeanAbsErrorPct += math.Abs(v)
	}
	s.MeanErrorPct /= float64(r.n)
	s.MeanAbsErrorPct /= float64(r.n)
	return s
}
