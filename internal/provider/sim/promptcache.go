package sim

import (
	"cmp"
	"container/list"
	"context"
	"crypto/sha256"
	"slices"
	"time"

	"github.com/fmgate/fmgate/internal/provider"
)

// promptCacheEntries bounds the prefixes one model keeps, so that a load run
// of ever new prompts cannot grow the simulator without end; past it, the
// prefix stored or refreshed longest ago goes.
const promptCacheEntries = 10_000

// prefix is one marked prompt prefix of a call.
type prefix struct {
	// key identifies the prefix: a hash of the model name, the system
	// prompt and the messages' roles and texts up to the mark.
	key [sha256.Size]byte
	// tokens are the input tokens up to the mark, counted as InputTokens
	// counts the whole prompt.
	tokens int
	ttl    time.Duration
}

// promptPrefixes returns the input tokens of req, exactly InputTokens(req),
// and its marked prefixes of at least minTokens tokens (and at least one),
// from the shortest to the longest. A prefix ending inside a text holds the
// tokens of that text that end at or before the mark, so that the prefixes'
// counts never exceed the whole and the classes a call bills add up to it.
// Marks outside their text are clamped to it; a mark with no TTL keeps the
// prefix for provider.CacheTTL.
func promptPrefixes(req *provider.Request, minTokens int) ([]prefix, int) {
	if req.CacheMarks() == 0 {
		return nil, InputTokens(req)
	}
	type text struct {
		role    string
		content string
		marks   []provider.CacheMark
		counted bool // InputTokens counts it: a message, or a system prompt that is not empty
	}
	texts := make([]text, 0, len(req.Messages)+1)
	texts = append(texts, text{role: "system", content: req.System, marks: req.SystemCache, counted: req.System != ""})
	for _, m := range req.Messages {
		texts = append(texts, text{role: string(m.Role), content: m.Content, marks: m.Cache, counted: true})
	}

	h := sha256.New()
	h.Write([]byte(req.Model))
	var out []prefix
	input := 0
	for _, t := range texts {
		// 0xff never occurs in UTF-8, so a header cannot be mistaken for
		// the end of the text before it.
		h.Write([]byte("\xff" + t.role + "\xff"))
		whole := 0
		if t.counted {
			whole = CountTokens(t.content)
		}
		marks := slices.SortedFunc(slices.Values(t.marks), func(a, b provider.CacheMark) int { return cmp.Compare(a.At, b.At) })
		var ends []int // the byte offsets at which the text's tokens end
		written := 0
		for _, mk := range marks {
			at := min(max(mk.At, 0), len(t.content))
			h.Write([]byte(t.content[written:at]))
			written = at
			n := input
			if t.counted {
				n += MessageOverheadTokens
				switch {
				case at == len(t.content):
					n += whole
				case at > 0:
					if ends == nil {
						ends = tokenEnds(t.content)
					}
					n += countEndingBy(ends, at)
				}
			}
			if n < max(minTokens, 1) {
				continue
			}
			ttl := mk.TTL
			if ttl <= 0 {
				ttl = provider.CacheTTL
			}
			p := prefix{tokens: n, ttl: ttl}
			h.Sum(p.key[:0])
			out = append(out, p)
		}
		h.Write([]byte(t.content[written:]))
		if t.counted {
			input += whole + MessageOverheadTokens
		}
	}
	// Tools, tool blocks and images are billed, never cached.
	images := 0
	for i := range req.Messages {
		images += req.Messages[i].ImageTokens()
	}
	return out, input + toolTokens(req) + images
}

// tokenEnds returns the byte offset at which each token of text ends.
func tokenEnds(text string) []int {
	pieces := tokenPieces(text)
	ends := make([]int, len(pieces))
	end := 0
	for i, p := range pieces {
		end += len(p)
		ends[i] = end
	}
	return ends
}

// countEndingBy counts the tokens that end at or before byte at; a token
// the mark splits belongs to the rest of the text.
func countEndingBy(ends []int, at int) int {
	n, _ := slices.BinarySearch(ends, at+1)
	return n
}

// promptCache is one model's prompt cache: which prefixes it holds, until
// when. It is not safe for concurrent use; the simulator guards it with its
// mutex.
type promptCache struct {
	// limit bounds the entries; 0 means promptCacheEntries.
	limit   int
	entries map[[sha256.Size]byte]*list.Element // of *cacheEntry
	order   list.List                           // least recently stored first
}

type cacheEntry struct {
	key     [sha256.Size]byte
	expires time.Time
}

// use bills a call's marked prefixes and then holds them: bill, then hold.
func (c *promptCache) use(now time.Time, prefixes []prefix, input int) provider.Usage {
	u := c.bill(now, prefixes, input)
	c.hold(now, prefixes)
	return u
}

// bill bills a call's marked prefixes, from the shortest to the longest, as
// Anthropic does: the longest one held unexpired is read, the tokens from
// there to the last mark are written, and the call's input minus both is
// neither; the stretches written up to a mark with a one-hour TTL are
// CacheWrite1hTokens.
func (c *promptCache) bill(now time.Time, prefixes []prefix, input int) provider.Usage {
	u := provider.Usage{InputTokens: input}
	if len(prefixes) == 0 {
		return u
	}
	read := 0
	for _, p := range prefixes {
		if e, ok := c.entries[p.key]; ok && now.Before(e.Value.(*cacheEntry).expires) {
			read = max(read, p.tokens)
		}
	}
	last := prefixes[len(prefixes)-1].tokens
	u.CachedInputTokens = read
	u.CacheWriteTokens = max(last-read, 0)
	u.InputTokens = input - u.CachedInputTokens - u.CacheWriteTokens
	// Each written stretch ends at a mark and is held for that mark's TTL.
	prev := read
	for _, p := range prefixes {
		if p.tokens <= prev {
			continue
		}
		if p.ttl >= provider.CacheTTLLong {
			u.CacheWrite1hTokens += p.tokens - prev
		}
		prev = p.tokens
	}
	return u
}

// hold keeps every prefix for its TTL from now, or longer if it already
// was.
func (c *promptCache) hold(now time.Time, prefixes []prefix) {
	for _, p := range prefixes {
		c.store(p.key, now.Add(p.ttl))
	}
}

func (c *promptCache) store(key [sha256.Size]byte, expires time.Time) {
	if c.entries == nil {
		c.entries = make(map[[sha256.Size]byte]*list.Element)
	}
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*cacheEntry)
		if expires.After(e.expires) {
			e.expires = expires
		}
		c.order.MoveToBack(el)
		return
	}
	c.entries[key] = c.order.PushBack(&cacheEntry{key: key, expires: expires})
	limit := c.limit
	if limit <= 0 {
		limit = promptCacheEntries
	}
	for c.order.Len() > limit {
		oldest := c.order.Front()
		delete(c.entries, oldest.Value.(*cacheEntry).key)
		c.order.Remove(oldest)
	}
}

// size is the number of prefixes held, expired or not.
func (c *promptCache) size() int { return c.order.Len() }

type automaticCachingKey struct{}

// WithAutomaticCaching returns ctx marking the calls made with it to be
// cached and billed as OpenAI does, whatever marks they carry: every prefix
// that ends where a message ends (the system prompt, and each message but
// the last) is looked up and held, so that the next turn of a conversation
// reads what this one sent; OpenAI bills no cache writes, so the tokens
// written are plain input; and its tokens-per-minute limit counts the
// tokens read. The simulator's OpenAI wire calls with it.
func WithAutomaticCaching(ctx context.Context) context.Context {
	return context.WithValue(ctx, automaticCachingKey{}, true)
}

func automaticCaching(ctx context.Context) bool {
	on, _ := ctx.Value(automaticCachingKey{}).(bool)
	return on
}

// autoMarked is a copy of req marked as WithAutomaticCaching says.
func autoMarked(req *provider.Request) *provider.Request {
	out := *req
	out.SystemCache = nil
	if req.System != "" {
		out.SystemCache = []provider.CacheMark{{At: len(req.System)}}
	}
	out.Messages = make([]provider.Message, len(req.Messages))
	for i, m := range req.Messages {
		m.Cache = nil
		if i < len(req.Messages)-1 && m.Content != "" {
			m.Cache = []provider.CacheMark{{At: len(m.Content)}}
		}
		out.Messages[i] = m
	}
	return &out
}
