package openai

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner reads the few fields fmgate uses out of a JSON document in one
// pass, skipping (and checking the shape of) everything else. Strings
// without escapes are returned as substrings of the document, so reading
// a chunk allocates nothing.
type scanner struct {
	s     string
	i     int
	depth int
}

// maxDepth bounds the nesting of the values skipped.
const maxDepth = 64

var errSyntax = errors.New("malformed JSON")

func (p *scanner) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (p *scanner) peek() byte {
	p.ws()
	if p.i >= len(p.s) {
		return 0
	}
	return p.s[p.i]
}

func (p *scanner) expect(c byte) error {
	if p.peek() != c {
		return errSyntax
	}
	p.i++
	return nil
}

// end checks that nothing but spaces follows the document.
func (p *scanner) end() error {
	if p.peek() != 0 {
		return errSyntax
	}
	return nil
}

// object calls member for each member of the object at the cursor;
// member must read (or skip) the value.
func (p *scanner) object(member func(key string) error) error {
	if err := p.expect('{'); err != nil {
		return err
	}
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		if p.peek() != '"' {
			return errSyntax
		}
		key, err := p.str()
		if err != nil {
			return err
		}
		if err := p.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// array calls elem for each element of the array at the cursor; elem must
// read (or skip) the element.
func (p *scanner) array(elem func() error) error {
	if err := p.expect('['); err != nil {
		return err
	}
	if p.peek() == ']' {
		p.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return errSyntax
		}
	}
}

// null consumes a null and reports whether there was one.
func (p *scanner) null() bool {
	if p.peek() == 'n' && strings.HasPrefix(p.s[p.i:], "null") {
		p.i += 4
		return true
	}
	return false
}

// text reads a string, or null as "". Any other value is read as its
// JSON text (a number given for a code, say).
func (p *scanner) text() (string, error) {
	switch p.peek() {
	case '"':
		return p.str()
	case 'n':
		if p.null() {
			return "", nil
		}
	}
	start := p.i
	if err := p.skip(); err != nil {
		return "", err
	}
	return p.s[start:p.i], nil
}

// int reads a number as an integer (a fraction is cut), or null as 0.
func (p *scanner) int() (int64, error) {
	if p.null() {
		return 0, nil
	}
	start := p.i
	if err := p.number(); err != nil {
		return 0, err
	}
	tok := p.s[start:p.i]
	if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return 0, errSyntax
	}
	return int64(f), nil
}

func (p *scanner) number() error {
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			p.i++
			continue
		}
		break
	}
	if p.i == start || p.s[p.i-1] < '0' || p.s[p.i-1] > '9' {
		return errSyntax
	}
	return nil
}

// skip consumes any value.
func (p *scanner) skip() error {
	switch c := p.peek(); {
	case c == '"':
		_, err := p.str()
		return err
	case c == '{' || c == '[':
		if p.depth++; p.depth > maxDepth {
			return errSyntax
		}
		var err error
		if c == '{' {
			err = p.object(func(string) error { return p.skip() })
		} else {
			err = p.array(p.skip)
		}
		p.depth--
		return err
	case c == 't' && strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
	case c == 'f' && strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
	case c == 'n' && p.null():
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		return errSyntax
	}
	return nil
}

// str reads the string at the cursor, unescaped.
func (p *scanner) str() (string, error) {
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
			return "", errSyntax
		default:
			p.i++
		}
	}
	return "", errSyntax
}

// unescape finishes reading a string that has escapes, from start (just
// after its opening quote).
func (p *scanner) unescape(start int) (string, error) {
	b := make([]byte, 0, p.i-start+16)
	b = append(b, p.s[start:p.i]...)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c < 0x20:
			return "", errSyntax
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", errSyntax
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
				return "", errSyntax
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
						return "", errSyntax
					}
				}
				r = r2
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", errSyntax
		}
	}
	return "", errSyntax
}

func (p *scanner) hex4() (rune, bool) {
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
