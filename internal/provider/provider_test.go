package provider

import (
	"slices"
	"strings"
	"testing"
)

func TestSegments(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		marks []CacheMark
		want  []string // each piece, "|" after one ending at a mark
	}{
		{"no mark", "abc", nil, []string{"abc"}},
		{"one inside", "system\n\nclient", []CacheMark{{At: 6}}, []string{"system|", "\n\nclient"}},
		{"one at the end", "abc", []CacheMark{{At: 3}}, []string{"abc|"}},
		{"two", "aabbcc", []CacheMark{{At: 2}, {At: 4}}, []string{"aa|", "bb|", "cc"}},
		{"out of range or repeated, left out", "abc", []CacheMark{{At: 0}, {At: 2}, {At: 2}, {At: 9}}, []string{"ab|", "c"}},
		{"inside a character, left out", "送料", []CacheMark{{At: 1}, {At: 3}}, []string{"送|", "料"}},
	}
	for _, tt := range tests {
		var got []string
		joined := ""
		for _, s := range Segments(tt.text, tt.marks) {
			joined += s.Text
			if s.Mark != nil {
				got = append(got, s.Text+"|")
			} else {
				got = append(got, s.Text)
			}
		}
		if !slices.Equal(got, tt.want) || joined != tt.text {
			t.Errorf("%s: Segments(%q) = %q (joined %q), want %q", tt.name, tt.text, got, joined, tt.want)
		}
	}
}

// TestToolID: an id a vendor would make passes unchanged; another vendor's
// (an OpenAI-compatible server's "functions.get_weather:0", a long UUID)
// becomes one the tier's vendor takes, the same every time, and two ids
// never become one.
func TestToolID(t *testing.T) {
	for _, id := range []string{"toolu_01A09q90qw90lq917835lq9", "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "call_abc123"} {
		if got := ToolID(id, MaxToolIDOpenAI); got != id {
			t.Errorf("ToolID(%q) = %q, want it unchanged", id, got)
		}
	}
	seen := map[string]string{}
	for _, id := range []string{"functions.get_weather:0", "functions.get_weather:1", "call_" + strings.Repeat("0123456789", 5), "ツール", "a b"} {
		for _, max := range []int{MaxToolIDOpenAI, MaxToolIDClaude} {
			got := ToolID(id, max)
			if len(got) > max || got != ToolID(id, max) || strings.Trim(got, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
				t.Errorf("ToolID(%q, %d) = %q: want at most %d of [A-Za-z0-9_-], the same each time", id, max, got, max)
			}
			if other, dup := seen[got]; dup && other != id {
				t.Errorf("%q and %q both became %q", id, other, got)
			}
			seen[got] = id
		}
	}
}
