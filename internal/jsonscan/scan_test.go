package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNumber(t *testing.T) {
	for _, tt := range []struct {
		in string
		ok bool
	}{
		{"0", true}, {"-0", true}, {"12", true}, {"1.5", true}, {"-1.5e10", true}, {"1E+2", true}, {"1e-2", true},
		{"01", false}, {"-", false}, {"1.", false}, {".5", false}, {"1e", false}, {"1e+", false}, {"+1", false},
		{"1..2", false}, {"1-2", false}, {"--1", false}, {"1.2.3", false},
	} {
		p := New(tt.in)
		err := p.Number()
		if ok := err == nil && p.End() == nil; ok != tt.ok {
			t.Errorf("%q: accepted %v, want %v", tt.in, ok, tt.ok)
		}
	}
}

// FuzzSkip checks that a skipped value and encoding/json agree on what is
// JSON: every document within MaxDepth that one accepts, the other does.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,2.5,-3e2,true,false,null,{}]}`, `"\u3042\ud83d\ude00\n"`, `[01]`, `{"a":1,}`, `-0.0e+0`, `"\x"`,
		`{"a" 1}`, `[1 2]`, `nul`, ` {} `, `{}x`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		if strings.Count(data, "[")+strings.Count(data, "{") > MaxDepth {
			return
		}
		p := New(data)
		ok := p.Skip() == nil && p.End() == nil
		if want := json.Valid([]byte(data)); ok != want {
			t.Fatalf("%q: scanner accepts %v, encoding/json %v", data, ok, want)
		}
	})
}

// TestStr: escapes decode as encoding/json decodes them, lone surrogates
// included.
func TestStr(t *testing.T) {
	for _, in := range []string{`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u3042\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\udc00x"`} {
		p := New(in)
		got, err := p.Str()
		var want string
		if jerr := json.Unmarshal([]byte(in), &want); err != nil || jerr != nil || got != want {
			t.Errorf("%s: got %q (%v), encoding/json %q (%v)", in, got, err, want, jerr)
		}
	}
}

// FuzzStr holds Str to encoding/json on every valid UTF-8 JSON string.
func FuzzStr(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u3042\ud83d\ude00"`, `"\ud800"`, `"\ud800\u0041"`, `"\udc00x"`, `"\ud83d\ud83d\ude00"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		var want string
		if !utf8.ValidString(data) || json.Unmarshal([]byte(data), &want) != nil {
			return
		}
		p := New(data)
		got, err := p.Str()
		if err != nil || p.End() != nil || got != want {
			t.Fatalf("%q: got %q (%v), encoding/json %q", data, got, err, want)
		}
	})
}
