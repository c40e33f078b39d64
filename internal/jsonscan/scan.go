// Package jsonscan reads JSON documents in one pass, without reflection:
// the caller walks the document it expects and skips (checking the shape
// of) everything else. It accepts exactly the documents RFC 8259 allows,
// up to MaxDepth levels of nesting in a skipped value. Strings without
// escapes are returned as substrings of the document, so reading one
// allocates nothing.
package jsonscan

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner is a cursor over one JSON document.
type Scanner struct {
	s     string
	i     int
	depth int
}

// New is a Scanner at the start of s.
func New(s string) Scanner { return Scanner{s: s} }

// MaxDepth bounds the nesting of the values skipped.
const MaxDepth = 64

// ErrSyntax is every error a Scanner returns.
var ErrSyntax = errors.New("malformed JSON")

func (p *Scanner) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// Peek returns the next non-space byte, 0 at the end.
func (p *Scanner) Peek() byte {
	p.ws()
	if p.i >= len(p.s) {
		return 0
	}
	return p.s[p.i]
}

func (p *Scanner) Expect(c byte) error {
	if p.Peek() != c {
		return ErrSyntax
	}
	p.i++
	return nil
}

// End checks that nothing but spaces follows the document.
func (p *Scanner) End() error {
	if p.ws(); p.i != len(p.s) {
		return ErrSyntax
	}
	return nil
}

// Object calls member for each member of the object at the cursor;
// member must read (or skip) the value.
func (p *Scanner) Object(member func(key string) error) error {
	if err := p.Expect('{'); err != nil {
		return err
	}
	if p.Peek() == '}' {
		p.i++
		return nil
	}
	for {
		if p.Peek() != '"' {
			return ErrSyntax
		}
		key, err := p.Str()
		if err != nil {
			return err
		}
		if err := p.Expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch p.Peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return ErrSyntax
		}
	}
}

// Array calls elem for each element of the array at the cursor; elem must
// read (or skip) the element.
func (p *Scanner) Array(elem func() error) error {
	if err := p.Expect('['); err != nil {
		return err
	}
	if p.Peek() == ']' {
		p.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch p.Peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return ErrSyntax
		}
	}
}

// Null consumes a null and reports whether there was one.
func (p *Scanner) Null() bool {
	if p.Peek() == 'n' && strings.HasPrefix(p.s[p.i:], "null") {
		p.i += 4
		return true
	}
	return false
}

// Text reads a string, or null as "". Any other value is read as its
// JSON text (a number given for a code, say).
func (p *Scanner) Text() (string, error) {
	switch p.Peek() {
	case '"':
		return p.Str()
	case 'n':
		if p.Null() {
			return "", nil
		}
	}
	start := p.i
	if err := p.Skip(); err != nil {
		return "", err
	}
	return p.s[start:p.i], nil
}

// Int reads a number as an integer (a fraction is cut), or null as 0.
func (p *Scanner) Int() (int64, error) {
	if p.Null() {
		return 0, nil
	}
	p.ws()
	start := p.i
	if err := p.Number(); err != nil {
		return 0, err
	}
	tok := p.s[start:p.i]
	if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return 0, ErrSyntax
	}
	return int64(f), nil
}

// Number consumes a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *Scanner) Number() error {
	p.ws()
	s, i := p.s, p.i
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i)
	default:
		return ErrSyntax
	}
	if i < len(s) && s[i] == '.' {
		if i = digits(s, i+1); s[i-1] == '.' {
			return ErrSyntax
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return ErrSyntax
		}
		i = j
	}
	p.i = i
	return nil
}

// digits is the index of the first byte at or after i in s that is not a
// decimal digit.
func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// Bool reads true or false.
func (p *Scanner) Bool() (bool, error) {
	switch p.Peek() {
	case 't':
		if strings.HasPrefix(p.s[p.i:], "true") {
			p.i += 4
			return true, nil
		}
	case 'f':
		if strings.HasPrefix(p.s[p.i:], "false") {
			p.i += 5
			return false, nil
		}
	}
	return false, ErrSyntax
}

// Raw consumes any value and returns its text, as in the document.
func (p *Scanner) Raw() (string, error) {
	p.ws()
	start := p.i
	if err := p.Skip(); err != nil {
		return "", err
	}
	return p.s[start:p.i], nil
}

// Skip consumes any value.
func (p *Scanner) Skip() error {
	switch c := p.Peek(); {
	case c == '"':
		_, err := p.Str()
		return err
	case c == '{' || c == '[':
		if p.depth++; p.depth > MaxDepth {
			return ErrSyntax
		}
		var err error
		if c == '{' {
			err = p.Object(func(string) error { return p.Skip() })
		} else {
			err = p.Array(p.Skip)
		}
		p.depth--
		return err
	case c == 't' && strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
	case c == 'f' && strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
	case c == 'n' && p.Null():
	case c == '-' || (c >= '0' && c <= '9'):
		return p.Number()
	default:
		return ErrSyntax
	}
	return nil
}

// Str reads the string at the cursor, unescaped.
func (p *Scanner) Str() (string, error) {
	if p.Peek() != '"' {
		return "", ErrSyntax
	}
	p.i++ // the opening quote
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return p.s[start : p.i-1], nil
		case c == '\\':
			return p.unescape(start)
		case c < 0x20:
			return "", ErrSyntax
		default:
			p.i++
		}
	}
	return "", ErrSyntax
}

// unescape finishes reading a string that has escapes, from start (just
// after its opening quote).
func (p *Scanner) unescape(start int) (string, error) {
	b := make([]byte, 0, p.i-start+16)
	b = append(b, p.s[start:p.i]...)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c < 0x20:
			return "", ErrSyntax
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", ErrSyntax
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", ErrSyntax
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if strings.HasPrefix(p.s[p.i:], `\u`) {
					save := p.i
					p.i += 2
					if lo, ok := p.hex4(); ok {
						if r2 = utf16.DecodeRune(r, lo); r2 == utf8.RuneError {
							p.i = save // not a pair: the next escape stands alone
						}
					} else {
						return "", ErrSyntax
					}
				}
				r = r2
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", ErrSyntax
		}
	}
	return "", ErrSyntax
}

func (p *Scanner) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(p.s[p.i : p.i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	p.i += 4
	return r, true
}
