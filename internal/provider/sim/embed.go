package sim

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"

	"github.com/fmgate/fmgate/internal/provider"
)

// MaxEmbedDimensions is the longest vector the simulator gives.
const MaxEmbedDimensions = 8192

// DefaultEmbedDimensions is the length of the vectors the simulator's wire
// servers give a request that names none: Titan Text Embeddings v2's and
// Cohere Embed v3's 1024. (In process, a request always names its length.)
const DefaultEmbedDimensions = 1024

var _ provider.Embedder = (*Sim)(nil)

// Embed implements provider.Embedder: one vector per input, of
// req.Dimensions, L2-normalised. The vectors are deterministic, so the
// same text always gets the same vector, and texts that share words get
// near vectors: each text's words and their character trigrams (and, in
// Japanese and Chinese, its character bigrams) are hashed into the vector's
// dimensions, the hash keyed by the model's id, so two simulated models
// place the same text differently, as two real ones do. Input is billed
// with the cl100k_base tokenizer.
//
// The model's settings apply as to a chat call: latencyMs, outage,
// errorRate and tpmCeiling; the pacing of output tokens does not.
func (s *Sim) Embed(ctx context.Context, req *provider.EmbedRequest) (*provider.EmbedResponse, error) {
	st, ok := s.Settings(req.Model)
	if !ok {
		return &provider.EmbedResponse{ModelID: req.Model}, &provider.Error{Kind: provider.KindNotFound, Model: req.Model, Status: 404,
			Err: fmt.Errorf("no simulated model %q", req.Model)}
	}
	resp := &provider.EmbedResponse{ModelID: st.ModelID}
	if resp.ModelID == "" {
		resp.ModelID = req.Model
	}
	if req.Dimensions < 1 || req.Dimensions > MaxEmbedDimensions {
		return resp, &provider.Error{Kind: provider.KindValidation, Model: req.Model, Status: 400,
			Err: fmt.Errorf("dimensions must be within 1..%d, got %d", MaxEmbedDimensions, req.Dimensions)}
	}
	if err := s.inject(ctx, req.Model, st, s.draw(st)); err != nil {
		return resp, err
	}
	tokens := 0
	for _, in := range req.Inputs {
		tokens += CountTokens(in)
	}
	if ok, retryAfter := s.admitInput(req.Model, st.TPMCeiling, tokens); !ok {
		return resp, tpmThrottled(req.Model, st.TPMCeiling, retryAfter)
	}
	resp.InputTokens = tokens
	resp.Vectors = make([][]float32, len(req.Inputs))
	for i, in := range req.Inputs {
		resp.Vectors[i] = EmbedText(resp.ModelID, in, req.Dimensions)
	}
	return resp, nil
}

// admitInput checks an input-only call against the TPM ceiling (0 = none)
// and, when it fits, bills it.
func (s *Sim) admitInput(name string, ceiling, tokens int) (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.models[name] // models are never removed
	now := s.now()
	if ceiling > 0 {
		if ok, retryAfter := m.tpm.admit(now, tokens, ceiling); !ok {
			return false, retryAfter
		}
	}
	m.tpm.record(now, tokens)
	m.usage.InputTokens += tokens
	return true, 0
}

// Weights of a text's features in its simulated embedding: its words
// weigh most, so that texts sharing words are near; their character
// trigrams let inflections and typos stay close.
const (
	wordWeight    = 1.0
	trigramWeight = 0.4
	bigramWeight  = 0.8 // character bigrams of unspaced (CJK) scripts
)

// EmbedText is the simulator's vector of text for the model whose id is
// key: deterministic, of length dims, L2-normalised (see Sim.Embed).
func EmbedText(key, text string, dims int) []float32 {
	acc := make([]float64, dims)
	base := fnv1a(fnvOffset, key)
	add := func(feature string, w float64) {
		v := mix(fnv1a(base, feature))
		if v>>63 == 1 {
			w = -w
		}
		acc[v%uint64(dims)] += w
	}
	for _, word := range words(strings.ToLower(text)) {
		if unspaced(word) {
			rs := []rune(word)
			for i, r := range rs {
				add("c:"+string(r), trigramWeight)
				if i+1 < len(rs) {
					add("b:"+string(rs[i:i+2]), bigramWeight)
				}
			}
			continue
		}
		add("w:"+word, wordWeight)
		rs := []rune("^" + word + "$")
		for i := 0; i+3 <= len(rs); i++ {
			add("t:"+string(rs[i:i+3]), trigramWeight)
		}
	}
	norm := 0.0
	for _, x := range acc {
		norm += x * x
	}
	if norm == 0 { // nothing but spaces and punctuation: the text itself
		add("x:"+text, 1)
		norm = 1
	}
	norm = math.Sqrt(norm)
	out := make([]float32, dims)
	for i, x := range acc {
		out[i] = float32(x / norm)
	}
	return out
}

// FNV-1a, 64 bits, continued from h: the features' hash, keyed by the
// model's id.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv1a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// mix spreads the hash's bits (MurmurHash3's finaliser), so that its low
// bits pick the dimension and its top bit the sign independently.
func mix(v uint64) uint64 {
	v ^= v >> 33
	v *= 0xff51afd7ed558ccd
	v ^= v >> 33
	v *= 0xc4ceb9fe1a85ec53
	v ^= v >> 33
	return v
}

// words splits text into runs of letters and digits.
func words(text string) []string {
	return strings.FieldsFunc(text, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsNumber(r) })
}

// unspaced reports whether word is written without spaces between words
// (Japanese, Chinese): its characters, not the run, carry the meaning.
func unspaced(word string) bool {
	for _, r := range word {
		if unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana) {
			return true
		}
	}
	return false
}
