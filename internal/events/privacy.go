package events

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Hasher turns user ids into user_id_hash: HMAC-SHA256 under a secret key,
// hex, first 32 characters (128 bits). Keyed so that the hash of a guessable
// id (an e-mail, a member number) cannot be reversed by hashing candidates.
// Safe for concurrent use.
type Hasher struct {
	// ipad and opad are the key, padded to SHA-256's block, XORed with
	// HMAC's inner and outer pads (RFC 2104).
	ipad, opad [sha256.BlockSize]byte
}

// hashHexLen is the length of user_id_hash.
const hashHexLen = 32

// NewHasher returns a Hasher keyed by secret. An empty secret draws a random
// key, valid for this process only.
func NewHasher(secret []byte) *Hasher {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret) // crypto/rand.Read never fails on Linux
	}
	var key [sha256.BlockSize]byte
	if len(secret) > sha256.BlockSize {
		sum := sha256.Sum256(secret)
		copy(key[:], sum[:])
	} else {
		copy(key[:], secret)
	}
	h := &Hasher{}
	for i, k := range key {
		h.ipad[i], h.opad[i] = k^0x36, k^0x5c
	}
	return h
}

// Hash returns the hex prefix of HMAC-SHA256(secret, userID); "" for "".
func (h *Hasher) Hash(userID string) string {
	if userID == "" {
		return ""
	}
	return h.hash("", userID)
}

// Session returns the keyed hash Span.SetSession stores as the session id
// of session id; "" for "". A reader looking a session's spans up by its
// id asks for this.
func (h *Hasher) Session(id string) string {
	if id == "" {
		return ""
	}
	return h.hash("session\x00", id)
}

// hash is Hash of prefix+id, computed without building the string: two
// SHA-256 sums over buffers on the stack (ids up to a few hundred bytes),
// so that the result is the only allocation.
func (h *Hasher) hash(prefix, id string) string {
	var small [sha256.BlockSize + 256]byte
	n := sha256.BlockSize + len(prefix) + len(id)
	in := small[:0]
	if n > len(small) {
		in = make([]byte, 0, n)
	}
	in = append(in, h.ipad[:]...)
	in = append(in, prefix...)
	in = append(in, id...)
	inner := sha256.Sum256(in)
	var out [sha256.BlockSize + sha256.Size]byte
	copy(out[:], h.opad[:])
	copy(out[sha256.BlockSize:], inner[:])
	sum := sha256.Sum256(out[:])
	var hexed [hashHexLen]byte
	hex.Encode(hexed[:], sum[:hashHexLen/2])
	return string(hexed[:])
}

// Placeholders that Redact substitutes.
const (
	RedactedEmail = "[EMAIL]"
	RedactedPhone = "[PHONE]"
	RedactedCard  = "[CARD]"
)

// Digits and separators include the full-width forms Japanese input methods
// produce (０-９, －), so "０９０－１２３４－５６７８" is caught too.
const (
	dig = `[0-9０-９]`
	sep = `[ \-－.]`
)

var (
	emailRe = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}`)
	// Digit groups joined by single spaces or dashes; redactCards looks
	// inside for 13–19 digits that pass Luhn.
	digitRunRe = regexp.MustCompile(dig + `+(?:[ \-－]` + dig + `+)*`)
	phoneRes   = []*regexp.Regexp{
		// International: +81 90-1234-5678, +1 (415) 555-2671, +442071838750.
		regexp.MustCompile(`[+＋]` + dig + `{1,3}` + sep + `?(?:\(?` + dig + `{1,4}\)?` + sep + `?){1,4}` + dig + `{2,4}`),
		// Japanese domestic: 090-1234-5678, 03-1234-5678, 0120-123-456,
		// (03) 1234-5678.
		regexp.MustCompile(`\(?[0０]` + dig + `{1,4}\)?` + sep + `?` + dig + `{1,4}` + sep + dig + `{3,4}`),
		// Japanese mobile and landline without separators: 09012345678.
		regexp.MustCompile(`[0０]` + dig + `{9,10}`),
		// North American style: (415) 555-2671, 415-555-2671.
		regexp.MustCompile(`\(?` + dig + `{3}\)?` + sep + `?` + dig + `{3}` + sep + dig + `{4}`),
	}
)

// Redact replaces e-mail addresses, phone numbers (Japanese and
// international formats) and card numbers (13–19 digits, Luhn-valid) in text
// with RedactedEmail, RedactedPhone and RedactedCard. It errs towards
// redacting: a long digit run that is not a card but looks like a phone
// number is redacted as a phone.
func Redact(text string) string {
	if !strings.ContainsAny(text, "@0123456789０１２３４５６７８９") {
		return text
	}
	// A match rejected because it runs into more digits can hide a shorter
	// number at the same place; each pass removes digits, so repeating
	// until nothing changes finds those too, and usually stops at pass two.
	for range 8 {
		next := redactOnce(text)
		if next == text {
			break
		}
		text = next
	}
	return text
}

func redactOnce(text string) string {
	text = emailRe.ReplaceAllLiteralString(text, RedactedEmail)
	text = replaceBounded(text, digitRunRe, func(m string) (string, bool) {
		r := redactCards(m)
		return r, r != m
	})
	for _, re := range phoneRes {
		text = replaceBounded(text, re, func(string) (string, bool) { return RedactedPhone, true })
	}
	return text
}

// replaceBounded replaces matches of re for which f says so, but only where
// the match is not glued to further digits: Go's regexp has no lookaround
// and \b does not know full-width digits.
func replaceBounded(s string, re *regexp.Regexp, f func(string) (string, bool)) string {
	locs := re.FindAllStringIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, l := range locs {
		if isDigitBefore(s, l[0]) || isDigitAfter(s, l[1]) {
			continue
		}
		rep, ok := f(s[l[0]:l[1]])
		if !ok {
			continue
		}
		b.WriteString(s[last:l[0]])
		b.WriteString(rep)
		last = l[1]
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// redactCards replaces, within one run of digit groups, every stretch of
// whole groups holding 13–19 digits that passes Luhn. Looking at group
// boundaries finds a card written next to another number ("090-1111-2222
// 4111 1111 1111 1111"), which one leftmost regexp match would swallow.
func redactCards(run string) string {
	type group struct{ start, end, digits int }
	var gs []group
	for i := 0; i < len(run); {
		r, n := utf8.DecodeRuneInString(run[i:])
		if !isDigitRune(r) {
			i += n
			continue
		}
		g := group{start: i}
		for i < len(run) {
			r, n := utf8.DecodeRuneInString(run[i:])
			if !isDigitRune(r) {
				break
			}
			g.digits++
			i += n
		}
		g.end = i
		gs = append(gs, g)
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(gs); i++ {
		total := 0
		for j := i; j < len(gs); j++ {
			total += gs[j].digits
			if total > 19 {
				break
			}
			if total >= 13 && luhn(run[gs[i].start:gs[j].end]) {
				b.WriteString(run[last:gs[i].start])
				b.WriteString(RedactedCard)
				last = gs[j].end
				i = j
				break
			}
		}
	}
	if last == 0 {
		return run
	}
	b.WriteString(run[last:])
	return b.String()
}

func isDigitRune(r rune) bool { return (r >= '0' && r <= '9') || (r >= '０' && r <= '９') }

func isDigitBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isDigitRune(r)
}

func isDigitAfter(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isDigitRune(r)
}

// luhn reports whether the digits in s (ignoring separators) number 13–19
// and pass the Luhn check.
func luhn(s string) bool {
	var ds []int
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			ds = append(ds, int(r-'0'))
		case r >= '０' && r <= '９':
			ds = append(ds, int(r-'０'))
		}
	}
	if len(ds) < 13 || len(ds) > 19 {
		return false
	}
	sum := 0
	for i := range ds {
		d := ds[len(ds)-1-i]
		if i%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}

// Excerpt returns Redact(text) cut to at most maxChars characters (runes).
// Redaction runs first so that truncation cannot leave part of a number
// unrecognised.
func Excerpt(text string, maxChars int) string {
	x := Redact(text)
	if maxChars <= 0 || utf8.RuneCountInString(x) <= maxChars {
		return x
	}
	n := 0
	for i := range x {
		if n == maxChars {
			return x[:i]
		}
		n++
	}
	return x
}
