package sim

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/fmgate/fmgate/internal/provider"
	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// MessageOverheadTokens is added to the input count once per message, and
// once for a non-empty system prompt, standing in for the role markers and
// separators a real chat template wraps around each turn. Claude's own
// template costs a few tokens per turn; 4 is the figure OpenAI documents for
// cl100k chat formats.
const MessageOverheadTokens = 4

// cl100kPattern is the pre-tokenisation pattern of cl100k_base, the same one
// tiktoken-go registers for that encoding.
const cl100kPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// cl100kRanksFile is only a name: the offline loader resolves its base name
// against ranks embedded in the binary and never opens a connection.
const cl100kRanksFile = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"

// tokenizer is cl100k_base, built once on first use. The encoding is built
// from the offline loader directly rather than through tiktoken.SetBpeLoader
// and GetEncoding: that setter writes a package variable of tiktoken-go
// without synchronisation, which races with any other package doing the same,
// and forgetting it anywhere would make GetEncoding download the ranks.
var tokenizer = sync.OnceValues(func() (*tiktoken.Tiktoken, error) {
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe(cl100kRanksFile)
	if err != nil {
		return nil, fmt.Errorf("sim: load cl100k_base ranks: %w", err)
	}
	special := map[string]int{
		tiktoken.ENDOFTEXT:   100257,
		tiktoken.FIM_PREFIX:  100258,
		tiktoken.FIM_MIDDLE:  100259,
		tiktoken.FIM_SUFFIX:  100260,
		tiktoken.ENDOFPROMPT: 100276,
	}
	bpe, err := tiktoken.NewCoreBPE(ranks, special, cl100kPattern)
	if err != nil {
		return nil, fmt.Errorf("sim: build cl100k_base: %w", err)
	}
	set := make(map[string]any, len(special))
	for k := range special {
		set[k] = true
	}
	enc := &tiktoken.Encoding{
		Name:           tiktoken.MODEL_CL100K_BASE,
		PatStr:         cl100kPattern,
		MergeableRanks: ranks,
		SpecialTokens:  special,
	}
	return tiktoken.NewTiktoken(bpe, enc, set), nil
})

// mustTokenizer returns the encoder. The ranks are embedded in the binary,
// so a failure means a broken build rather than a runtime condition a caller
// could handle.
func mustTokenizer() *tiktoken.Tiktoken {
	enc, err := tokenizer()
	if err != nil {
		panic(err)
	}
	return enc
}

// encode splits text into cl100k_base token ids. Special-token text such as
// "<|endoftext|>" is encoded as ordinary text, as a user could type it.
func encode(text string) []int {
	if text == "" {
		return nil
	}
	return mustTokenizer().EncodeOrdinary(text)
}

// CountTokens returns the number of cl100k_base tokens in text: the count the
// simulator bills. The tokenizer is loaded from embedded ranks on the first
// call (a few hundred milliseconds) and is safe for concurrent use.
func CountTokens(text string) int {
	return len(encode(text))
}

// InputTokens returns the input tokens the simulator bills for req: the
// system prompt and every message, each plus MessageOverheadTokens (the
// system prompt only when non-empty), and the tools offered and the tool
// calls and results the messages carry, and their images at
// provider.ImageTokens each (what fmgate's budgets estimate them at).
func InputTokens(req *provider.Request) int {
	n := toolTokens(req)
	if req.System != "" {
		n += CountTokens(req.System) + MessageOverheadTokens
	}
	for i, m := range req.Messages {
		n += CountTokens(m.Content) + MessageOverheadTokens + req.Messages[i].ImageTokens()
	}
	return n
}

// tokenPieces returns the bytes of each token of text. A piece may hold only
// part of a multi-byte character; utf8Joiner puts such pieces back together.
func tokenPieces(text string) []string {
	enc := mustTokenizer()
	ids := encode(text)
	pieces := make([]string, len(ids))
	one := make([]int, 1)
	for i, id := range ids {
		one[0] = id
		pieces[i] = enc.Decode(one)
	}
	return pieces
}

// utf8Joiner holds back the trailing bytes of an incomplete character so that
// every string it releases is valid UTF-8: one Japanese character can span
// two BPE tokens, and a client must never see half of it.
type utf8Joiner struct {
	pending []byte
}

// add appends a token's bytes and returns the longest prefix of what is held
// that ends on a character boundary ("" if none yet).
func (j *utf8Joiner) add(piece string) string {
	j.pending = append(j.pending, piece...)
	cut := completePrefix(j.pending)
	if cut == 0 {
		return ""
	}
	out := string(j.pending[:cut])
	j.pending = append(j.pending[:0], j.pending[cut:]...)
	return out
}

// completePrefix returns the length of the longest prefix of b that does not
// end inside a multi-byte character. Bytes that can never start a valid
// character are treated as complete, so invalid input cannot stall a stream.
func completePrefix(b []byte) int {
	// A UTF-8 sequence is at most 4 bytes: only the last 3 can be an
	// unfinished start.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if b[i] < utf8.RuneSelf || utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}
