package events

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func packed(n int) []byte {
	var b []byte
	for i := range n {
		e := event(i, i%3 == 0)
		b = AppendPacked(b, Encode(&e))
	}
	return b
}

func TestPackedRoundTrip(t *testing.T) {
	var b []byte
	want := make([]Event, 0, 300)
	for i := range 300 {
		e := event(i, i%3 == 0)
		e.PromptExcerpt = string(bytes.Repeat([]byte("x"), i)) // records of one- and two-byte lengths
		want = append(want, e)
		before := len(b)
		b = AppendPacked(b, Encode(&e))
		if got := len(b) - before; got != PackedSize(len(Encode(&e))) {
			t.Fatalf("record %d is %d bytes, PackedSize says %d", i, got, PackedSize(len(Encode(&e))))
		}
	}
	prefix := []Event{event(999, false)}
	got, err := DecodePacked(prefix, b, len(want))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1+len(want) || got[0].SpanID != prefix[0].SpanID {
		t.Fatalf("decoded %d spans after the one given, want %d", len(got)-1, len(want))
	}
	for i := range want {
		if !bytes.Equal(Encode(&got[1+i]), Encode(&want[i])) {
			t.Fatalf("span %d decodes to %s, want %s", i, Encode(&got[1+i]), Encode(&want[i]))
		}
	}
}

func TestDecodePackedRejectsMalformed(t *testing.T) {
	good := packed(3)
	badJSON := binary.AppendUvarint(append([]byte(nil), packed(2)...), 5)
	badJSON = append(badJSON, "{nope"...)
	tests := []struct {
		name string
		give []byte
		n    int
	}{
		{name: "count higher than the records", give: good, n: 4},
		{name: "count lower than the records", give: good, n: 2},
		{name: "count zero", give: good, n: 0},
		{name: "count negative", give: good, n: -1},
		{name: "truncated record", give: good[:len(good)-1], n: 3},
		{name: "length past the end", give: binary.AppendUvarint(nil, 1<<40), n: 1},
		{name: "overlong varint", give: bytes.Repeat([]byte{0xff}, 11), n: 1},
		{name: "empty", give: nil, n: 1},
		{name: "a record that is not a span", give: badJSON, n: 3},
		{name: "a plain encoded span", give: Encode(new(event(1, false))), n: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := make([]Event, 1, 8)
			got, err := DecodePacked(dst, tt.give, tt.n)
			if !errors.Is(err, ErrPacked) {
				t.Fatalf("err = %v, want ErrPacked", err)
			}
			if len(got) != 1 {
				t.Fatalf("a failed decode left %d spans appended", len(got)-1)
			}
		})
	}
}

func FuzzDecodePacked(f *testing.F) {
	f.Add(packed(2), 2)
	f.Add(packed(1)[:10], 1)
	f.Add([]byte{0}, 1)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		got, err := DecodePacked(nil, b, n)
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("failed decode returned %d spans", len(got))
			}
			return
		}
		if len(got) != n {
			t.Fatalf("decoded %d spans, header said %d", len(got), n)
		}
		// What decoded re-packs into records that decode the same.
		var re []byte
		for i := range got {
			re = AppendPacked(re, Encode(&got[i]))
		}
		again, err := DecodePacked(nil, re, n)
		if err != nil || len(again) != n {
			t.Fatalf("re-packed batch does not decode: %v", err)
		}
	})
}
