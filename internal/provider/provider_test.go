package provider

import (
	"slices"
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
