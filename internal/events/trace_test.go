package events

import "testing"

func TestParseTraceparent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name  string
		give  string
		want  bool
		flags byte
	}{
		{name: "valid sampled", give: good, want: true, flags: 1},
		{name: "valid not sampled", give: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", want: true},
		{name: "future version with extra field", give: "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what", want: true, flags: 1},
		{name: "future version exact", give: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", want: true, flags: 9},
		{name: "version 00 with trailing data", give: good + "-x"},
		{name: "future version trailing without dash", give: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"},
		{name: "version ff", give: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "uppercase hex", give: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"},
		{name: "zero trace id", give: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"},
		{name: "zero span id", give: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"},
		{name: "short", give: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"},
		{name: "wrong separators", give: "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"},
		{name: "non hex", give: "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"},
		{name: "empty", give: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc, ok := ParseTraceparent(tt.give)
			if ok != tt.want {
				t.Fatalf("ok = %v, want %v", ok, tt.want)
			}
			if !ok {
				return
			}
			if tc.Flags != tt.flags {
				t.Errorf("flags = %x, want %x", tc.Flags, tt.flags)
			}
			if tc.TraceHex() != tt.give[3:35] || tc.SpanHex() != tt.give[36:52] {
				t.Errorf("ids %s %s", tc.TraceHex(), tc.SpanHex())
			}
			if tt.give[:2] == "00" && FormatTraceparent(tc) != tt.give {
				t.Errorf("format = %s, want %s", FormatTraceparent(tc), tt.give)
			}
		})
	}
}

func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
	f.Add("")
	f.Fuzz(func(t *testing.T, h string) {
		tc, ok := ParseTraceparent(h)
		if !ok {
			return
		}
		if !tc.IsValid() {
			t.Fatalf("accepted invalid ids: %q", h)
		}
		out := FormatTraceparent(tc)
		back, ok := ParseTraceparent(out)
		if !ok || back != tc {
			t.Fatalf("round trip %q -> %q failed", h, out)
		}
	})
}
