// Package guardrail checks a user's message before any model sees it, and
// the model's answer before the user sees it (Stream, piece by piece as it
// streams): it finds personal data (e-mail addresses, phone numbers, payment card
// numbers that pass the Luhn check, マイナンバー with a valid check digit,
// Japanese postal codes) and denied terms, and for each kind does what the
// operator chose — block the message, redact the finding with a typed
// placeholder, or only log it.
//
// Full-width digits and separators (０９０－１２３４－５６７８) are read as
// their ASCII forms, as Japanese input often carries them.
package guardrail

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Actions.
const (
	Block  = "block"
	Redact = "redact"
	Log    = "log"
)

// Kinds of finding.
const (
	KindEmail      = "email"
	KindPhone      = "phone"
	KindCard       = "card"
	KindMyNumber   = "my_number"
	KindPostalCode = "postal_code"
	KindDenied     = "denied_term"
	KindNonText    = "non_text"
)

// Config is one set of checks: an action per kind (an empty action turns
// the kind off), and the remote check. Policy chooses the set a turn gets.
type Config struct {
	// Email, Phone, Card, MyNumber and PostalCode are each "block",
	// "redact", "log" or "" (not checked).
	Email      string `yaml:"email"`
	Phone      string `yaml:"phone"`
	Card       string `yaml:"card"`
	MyNumber   string `yaml:"myNumber"`
	PostalCode string `yaml:"postalCode"`
	// DenyTerms are words or phrases (case-insensitive) acted on with
	// DenyAction ("block" by default).
	DenyTerms  []string `yaml:"denyTerms"`
	DenyAction string   `yaml:"denyAction"`
	// MaxNonText is the largest share (above 0, below 1) of a user's
	// message, in characters other than spaces, that may be other than
	// text: symbols and emoji, control, format and private-use
	// characters, combining marks stacked on a mark, and runs of 64 or
	// more base64 characters (an encoded payload). A message of at least
	// 16 such characters above it is acted on with NonTextAction, "block"
	// (the default) or "log": a guard against encoded instructions and
	// character floods. Answers are not held to it. Default 0: not
	// checked.
	MaxNonText    float64 `yaml:"maxNonText"`
	NonTextAction string  `yaml:"nonTextAction"`
	// Answers applies the same checks to the models' answers, each streamed
	// piece before it is sent: a redacted finding reaches neither the
	// client nor the session, and a blocked one ends the answer (before its
	// first byte, the turn gets the redirect answer instead). Default true
	// (a profile's too).
	Answers *bool `yaml:"answers"`
	// Bedrock is a guardrail of Amazon Bedrock Guardrails the user's
	// message is checked against after the checks above, before any model
	// sees it. Its guardrailId, guardrailVersion, region, endpoint and
	// source take effect on a restart, the rest on a reload too. Default:
	// none.
	Bedrock BedrockConfig `yaml:"bedrock"`
}

// DefaultConfig redacts payment card numbers and マイナンバー: no model
// needs them to answer, and a transcript must not keep them.
func DefaultConfig() Config {
	answers := true
	return Config{Card: Redact, MyNumber: Redact, Answers: &answers}
}

// ChecksAnswers reports whether c checks the models' answers too
// (Answers, default true) — with any built-in check on to apply.
func (c Config) ChecksAnswers() bool {
	return (c.Answers == nil || *c.Answers) && c.Enabled()
}

// Validate names each action that is not one.
func (c Config) Validate() error {
	var errs []error
	for field, a := range map[string]string{"email": c.Email, "phone": c.Phone, "card": c.Card, "myNumber": c.MyNumber,
		"postalCode": c.PostalCode, "denyAction": c.DenyAction} {
		if a != "" && a != Block && a != Redact && a != Log {
			errs = append(errs, fmt.Errorf("%s: %q is not block, redact or log", field, a))
		}
	}
	for i, t := range c.DenyTerms {
		if strings.TrimSpace(t) == "" {
			errs = append(errs, fmt.Errorf("denyTerms[%d]: must not be empty", i))
		}
	}
	if c.MaxNonText < 0 || c.MaxNonText >= 1 || math.IsNaN(c.MaxNonText) {
		errs = append(errs, fmt.Errorf("maxNonText: %v must be above 0 and below 1 (a share of the message), or 0 (not checked)", c.MaxNonText))
	}
	if a := c.NonTextAction; a != "" && a != Block && a != Log {
		errs = append(errs, fmt.Errorf("nonTextAction: %q is not block or log (a message is not redacted for its share of non-text)", a))
	}
	if err := c.Bedrock.Validate(); err != nil {
		errs = append(errs, err)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// Enabled reports whether any built-in check is on (the remote one:
// Bedrock.Enabled).
func (c Config) Enabled() bool {
	return c.Email != "" || c.Phone != "" || c.Card != "" || c.MyNumber != "" || c.PostalCode != "" || len(c.DenyTerms) > 0 ||
		c.MaxNonText > 0
}

// Finding is one match in the text, by byte offsets.
type Finding struct {
	Kind       string
	Action     string
	Start, End int
}

// Verdict is the outcome of a check.
type Verdict struct {
	Findings []Finding
	// Blocked is set when a finding's action is block.
	Blocked bool
	// Text is the text with the redacted findings replaced by their
	// placeholders ([EMAIL], [PHONE], …); the text itself when none is.
	// A remote check's is the service's masked text.
	Text string
	// Remote is what a guardrail service said; nil for the built-in
	// checks.
	Remote *Remote
}

// Kinds lists the kinds found, once each, in order.
func (v Verdict) Kinds() []string {
	var out []string
	for _, f := range v.Findings {
		if !slices.Contains(out, f.Kind) {
			out = append(out, f.Kind)
		}
	}
	return out
}

var (
	emailRE = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}`)
	// Runs of digits with the separators numbers are written with.
	digitsRE = regexp.MustCompile(`\+?\d[\d\- ().]{7,22}\d`)
	postalRE = regexp.MustCompile(`(?:〒\s?)?\b\d{3}-\d{4}\b`)
)

// Check checks text under c.
func (c Config) Check(text string) Verdict {
	if c.MaxNonText > 0 && text != "" {
		if share, n := nonTextShare(text); n >= minNonTextRunes && share > c.MaxNonText {
			action := c.NonTextAction
			if action == "" {
				action = Block
			}
			f := Finding{Kind: KindNonText, Action: action, Start: 0, End: len(text)}
			if action == Block { // the whole message goes; nothing else matters
				return Verdict{Findings: []Finding{f}, Blocked: true, Text: text}
			}
			v := c.checkText(text)
			v.Findings = append([]Finding{f}, v.Findings...)
			return v
		}
	}
	return c.checkText(text)
}

// checkText is Check without the non-text share.
func (c Config) checkText(text string) Verdict {
	v := Verdict{Text: text}
	if !c.Enabled() || text == "" || len(c.DenyTerms) == 0 && !strings.ContainsFunc(text, maySpell) {
		return v
	}
	norm := normalize(text)
	add := func(kind, action string, start, end int) {
		if action == "" {
			return
		}
		for _, f := range v.Findings { // one finding per stretch of text
			if start < f.End && f.Start < end {
				return
			}
		}
		v.Findings = append(v.Findings, Finding{Kind: kind, Action: action, Start: start, End: end})
	}
	if c.Email != "" {
		for _, m := range emailRE.FindAllStringIndex(norm.s, -1) {
			add(KindEmail, c.Email, norm.at(m[0]), norm.at(m[1]))
		}
	}
	for _, m := range digitsRE.FindAllStringIndex(norm.s, -1) {
		run := norm.s[m[0]:m[1]]
		digits := onlyDigits(run)
		start, end := norm.at(m[0]), norm.at(m[1])
		switch {
		case len(digits) >= 13 && len(digits) <= 19 && luhn(digits):
			add(KindCard, c.Card, start, end)
		case len(digits) == 12 && !strings.ContainsAny(run, "+()") && myNumber(digits):
			add(KindMyNumber, c.MyNumber, start, end)
		case isPhone(run, digits):
			add(KindPhone, c.Phone, start, end)
		}
	}
	if c.PostalCode != "" {
		for _, m := range postalRE.FindAllStringIndex(norm.s, -1) {
			add(KindPostalCode, c.PostalCode, norm.at(m[0]), norm.at(m[1]))
		}
	}
	if len(c.DenyTerms) > 0 {
		action := c.DenyAction
		if action == "" {
			action = Block
		}
		lower := strings.ToLower(norm.s)
		for _, term := range c.DenyTerms {
			term = strings.ToLower(strings.TrimSpace(normalize(term).s))
			for from := 0; ; {
				i := strings.Index(lower[from:], term)
				if i < 0 {
					break
				}
				add(KindDenied, action, norm.at(from+i), norm.at(from+i+len(term)))
				from += i + len(term)
			}
		}
	}
	sort.Slice(v.Findings, func(i, j int) bool { return v.Findings[i].Start < v.Findings[j].Start })
	var b strings.Builder
	last := 0
	for _, f := range v.Findings {
		switch f.Action {
		case Block:
			v.Blocked = true
		case Redact:
			b.WriteString(text[last:f.Start])
			b.WriteString("[" + strings.ToUpper(f.Kind) + "]")
			last = f.End
		}
	}
	if last > 0 {
		b.WriteString(text[last:])
		v.Text = b.String()
	}
	return v
}

// Mask is text with every finding c blocks or redacts replaced by its
// placeholder, the findings c only logs left as they are: what a payload
// log may keep of a message, blocked or not.
func (c Config) Mask(text string) string {
	v := c.Check(text)
	if len(v.Findings) == 0 {
		return text
	}
	if f := v.Findings[0]; f.Kind == KindNonText && f.Action == Block {
		return "[" + strings.ToUpper(KindNonText) + "]"
	}
	var b strings.Builder
	last := 0
	for _, f := range v.Findings {
		if f.Action == Log {
			continue
		}
		b.WriteString(text[last:f.Start])
		b.WriteString("[" + strings.ToUpper(f.Kind) + "]")
		last = f.End
	}
	b.WriteString(text[last:])
	return b.String()
}

// isPhone reports whether a run of digits and separators reads as a phone
// number: a Japanese one (0 and 10 or 11 digits), or an international or
// North American one.
func isPhone(run, digits string) bool {
	switch {
	case strings.HasPrefix(run, "+"):
		return len(digits) >= 10 && len(digits) <= 15
	case strings.HasPrefix(digits, "0"):
		return len(digits) == 10 || len(digits) == 11
	case len(digits) == 10:
		return strings.ContainsAny(run, "-() .") // 555-123-4567, not a bare number
	}
	return false
}

// luhn reports whether digits pass the Luhn check of card numbers.
func luhn(digits string) bool {
	sum, double := 0, false
	for i := len(digits) - 1; i >= 0; i-- {
		d := int(digits[i] - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// myNumber reports whether twelve digits carry a valid マイナンバー check
// digit: 11 − (Σ Pn×Qn mod 11), 0 when that is 10 or 11, with Qn = n+1 for
// n ≤ 6 and n−5 beyond, counting the 11 digits from the right.
func myNumber(digits string) bool {
	sum := 0
	for n := 1; n <= 11; n++ {
		p := int(digits[11-n] - '0')
		q := n + 1
		if n > 6 {
			q = n - 5
		}
		sum += p * q
	}
	check := 11 - sum%11
	if check >= 10 {
		check = 0
	}
	return int(digits[11]-'0') == check
}

func onlyDigits(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// normalized is text with full-width digits, letters and separators read
// as ASCII, and the map from its byte offsets back to the text's.
type normalized struct {
	s    string
	back []int // back[i]: the offset in the original of byte i of s; len(s)+1 entries
}

func (n normalized) at(i int) int { return n.back[i] }

func normalize(text string) normalized {
	var b strings.Builder
	back := make([]int, 0, len(text)+1)
	for i, r := range text {
		switch {
		case r >= '０' && r <= '９':
			r = '0' + (r - '０')
		case r >= 'Ａ' && r <= 'Ｚ':
			r = 'A' + (r - 'Ａ')
		case r >= 'ａ' && r <= 'ｚ':
			r = 'a' + (r - 'ａ')
		case r == '－' || r == 'ー' || r == '‐' || r == '−':
			r = '-'
		case r == '＋':
			r = '+'
		case r == '＠':
			r = '@'
		case r == '．':
			r = '.'
		case r == '（':
			r = '('
		case r == '）':
			r = ')'
		case r == '　':
			r = ' '
		}
		n := utf8.RuneLen(r)
		for range n {
			back = append(back, i)
		}
		b.WriteRune(r)
	}
	back = append(back, len(text))
	return normalized{s: b.String(), back: back}
}

// maySpell reports whether r can be part of a finding other than a deny
// term: a digit or an at sign, in ASCII or full width. A text with none has
// no finding but a deny term.
func maySpell(r rune) bool {
	return r >= '0' && r <= '9' || r >= '０' && r <= '９' || r == '@' || r == '＠'
}

// maxHeld bounds the tail a Stream holds back: no finding is longer (an
// e-mail address is at most 254 bytes).
const maxHeld = 256

// Stream checks a text that arrives in pieces, a streamed answer: each
// piece is checked before it is let through, less a tail that may be the
// start of a finding the next piece completes, held back until then (at
// most maxHeld bytes, or the longest deny term). Not safe for concurrent
// use.
type Stream struct {
	c    Config
	held string
	// term is the length in bytes of the longest deny term, less one.
	term int
}

// NewStream starts checking a streamed text under c (less MaxNonText,
// which is for a whole message: a piece of an answer is no measure).
func (c Config) NewStream() *Stream {
	c.MaxNonText = 0
	s := &Stream{c: c}
	for _, t := range c.DenyTerms {
		s.term = max(s.term, len(strings.TrimSpace(t))*3-1) // a full-width form is up to three times as long
	}
	return s
}

// Write takes the next piece. It returns the text to let through, the
// findings' placeholders in place of what is redacted, and the verdict on
// it; when the verdict is Blocked nothing is let through.
func (s *Stream) Write(piece string) (string, Verdict) {
	text := s.held + piece
	whole := len(text) // up to an incomplete last rune, held whole
	if i := lastRuneStart(text); !utf8.FullRuneInString(text[i:]) {
		whole = i
	}
	cut := whole - s.tail(text[:whole])
	// A finding the cut would split is held whole.
	for _, f := range s.c.Check(text[:whole]).Findings {
		if f.Start < cut && cut < f.End {
			cut = f.Start
			break
		}
	}
	s.held = text[cut:]
	return s.check(text[:cut])
}

// lastRuneStart is the offset of the last rune's first byte in text.
func lastRuneStart(text string) int {
	i := len(text)
	for i > 0 && len(text)-i < utf8.UTFMax {
		i--
		if utf8.RuneStart(text[i]) {
			return i
		}
	}
	return i
}

// Flush checks and lets through what is held: the text has ended.
func (s *Stream) Flush() (string, Verdict) {
	text := s.held
	s.held = ""
	return s.check(text)
}

// Reset drops what is held, for a text that starts over.
func (s *Stream) Reset() { s.held = "" }

func (s *Stream) check(text string) (string, Verdict) {
	if text == "" {
		return "", Verdict{}
	}
	v := s.c.Check(text)
	if v.Blocked {
		return "", v
	}
	return v.Text, v
}

// tail is how many bytes at the end of text may begin a finding that text
// does not finish, of the kinds checked: the e-mail address it may end in,
// the number (a run of digits and separators from a digit, a plus sign or
// 〒), or the last bytes a deny term could begin in.
func (s *Stream) tail(text string) int {
	addr, num := 0, 0
	if s.c.Email != "" {
		addr = suffix(text, inAddress)
	}
	if s.c.Phone != "" || s.c.Card != "" || s.c.MyNumber != "" || s.c.PostalCode != "" {
		num = suffix(text, inNumber)
		if i := strings.IndexFunc(text[len(text)-num:], startsNumber); i >= 0 {
			num -= i
		} else {
			num = 0
		}
	}
	n := min(max(addr, num, s.term), len(text))
	for n > 0 && !utf8.RuneStart(text[len(text)-n]) {
		n--
	}
	return n
}

// suffix is the length in bytes of the longest end of text whose runes
// all satisfy in, at most maxHeld.
func suffix(text string, in func(rune) bool) int {
	start := len(text)
	for start > 0 {
		r, size := utf8.DecodeLastRuneInString(text[:start])
		if !in(r) || len(text)-(start-size) > maxHeld {
			break
		}
		start -= size
	}
	return len(text) - start
}

// inAddress reports whether r may be part of an e-mail address, in ASCII
// or full width.
func inAddress(r rune) bool {
	switch {
	case r < utf8.RuneSelf:
		return r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune("@.%+-_", r)
	case r >= '０' && r <= '９', r >= 'Ａ' && r <= 'Ｚ', r >= 'ａ' && r <= 'ｚ':
		return true
	}
	return strings.ContainsRune("＠．＋－", r)
}

// inNumber reports whether r may be part of a phone, card or マイナンバー
// number or a postal code, in ASCII or full width.
func inNumber(r rune) bool {
	switch {
	case r < utf8.RuneSelf:
		return r >= '0' && r <= '9' || strings.ContainsRune("+-() .", r)
	case r >= '０' && r <= '９':
		return true
	}
	return strings.ContainsRune("＋－ー‐−（）　．〒", r)
}

func startsNumber(r rune) bool {
	return r >= '0' && r <= '9' || r >= '０' && r <= '９' || r == '+' || r == '＋' || r == '〒'
}

// minNonTextRunes is the least count of characters (spaces aside) a
// message must have for its share of non-text to be judged: a short
// reaction ("👍👍") is not a flood.
const minNonTextRunes = 16

// base64Run is a run of characters long enough to be an encoded payload
// rather than a word.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{64,}={0,2}`)

// nonTextShare is the share of text's characters, spaces aside, that are
// not text (MaxNonText), and the count of those characters.
func nonTextShare(text string) (float64, int) {
	encoded := 0
	for _, m := range base64Run.FindAllStringIndex(text, -1) {
		encoded += m[1] - m[0] // ASCII: a byte a character
	}
	n, other := 0, 0
	mark := false
	for _, r := range text {
		if unicode.IsSpace(r) {
			mark = false
			continue
		}
		n++
		isMark := unicode.Is(unicode.M, r)
		switch {
		case unicode.IsSymbol(r), unicode.IsControl(r), unicode.Is(unicode.Cf, r), unicode.Is(unicode.Co, r),
			r == utf8.RuneError, isMark && mark:
			other++
		}
		mark = isMark
	}
	if n == 0 {
		return 0, 0
	}
	return float64(other+encoded) / float64(n), n
}
