package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "email", give: "mail me at taro.yamada+manga@example.co.jp please", want: "mail me at [EMAIL] please"},
		{name: "jp mobile dashed", give: "電話は090-1234-5678です", want: "電話は[PHONE]です"},
		{name: "jp mobile plain", give: "09012345678に", want: "[PHONE]に"},
		{name: "tokyo landline", give: "call 03-1234-5678", want: "call [PHONE]"},
		{name: "landline parens", give: "(03) 1234-5678", want: "[PHONE]"},
		{name: "toll free", give: "0120-123-456", want: "[PHONE]"},
		{name: "jp international", give: "+81 90-1234-5678", want: "[PHONE]"},
		{name: "jp international compact", give: "+819012345678", want: "[PHONE]"},
		{name: "us international", give: "reach +1 (415) 555-2671 now", want: "reach [PHONE] now"},
		{name: "uk international", give: "+44 20 7183 8750", want: "[PHONE]"},
		{name: "full width mobile", give: "０９０－１２３４－５６７８", want: "[PHONE]"},
		{name: "visa spaced", give: "card 4111 1111 1111 1111 ok", want: "card [CARD] ok"},
		{name: "visa dashed", give: "4111-1111-1111-1111", want: "[CARD]"},
		{name: "amex plain", give: "378282246310005", want: "[CARD]"},
		{name: "jcb", give: "3530111333300000", want: "[CARD]"},
		{name: "non-luhn 16 digits kept", give: "order 1234567812345678", want: "order 1234567812345678"},
		{name: "isbn kept", give: "ISBN 978-4-08-882500-4", want: "ISBN 978-4-08-882500-4"},
		{name: "volume and price kept", give: "ワンピース 107巻 ¥528", want: "ワンピース 107巻 ¥528"},
		{name: "date kept", give: "発売日 2026-04-29", want: "発売日 2026-04-29"},
		{name: "several", give: "a@b.io 090-1111-2222 4111111111111111", want: "[EMAIL] [PHONE] [CARD]"},
		{name: "no digits fast path", give: "こんにちは", want: "こんにちは"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.give); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.give, got, tt.want)
			}
		})
	}
}

var leakRe = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+\.[A-Za-z]{2,}|0[0-9]0-[0-9]{4}-[0-9]{4}`)

func FuzzRedact(f *testing.F) {
	f.Add("taro@example.jp 090-1234-5678 4111 1111 1111 1111")
	f.Add("＋８１ ９０ １２３４ ５６７８")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		got := Redact(s)
		if Redact(got) != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, got, Redact(got))
		}
		if m := leakRe.FindString(got); m != "" && !strings.Contains(s, "["+m) {
			// A surviving address or mobile number must have been glued
			// to surrounding digits or letters in the input.
			idx := strings.Index(got, m)
			before := idx > 0 && isGlue(got[idx-1])
			after := idx+len(m) < len(got) && isGlue(got[idx+len(m)])
			if !before && !after {
				t.Fatalf("leaked %q from %q: %q", m, s, got)
			}
		}
	})
}

func isGlue(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '-' || c == '_' || c == '+' || c == '%' || c >= 0x80
}

func TestExcerptTruncatesAfterRedaction(t *testing.T) {
	got := Excerpt("カード 4111 1111 1111 1111 で払います", 8)
	if got != "カード [CAR" {
		t.Errorf("got %q", got)
	}
	if strings.Contains(Excerpt("4111 1111 1111 1111", 9), "4111") {
		t.Error("truncation exposed card digits")
	}
}

func TestHasher(t *testing.T) {
	a := NewHasher([]byte("secret-one-0123456"))
	a2 := NewHasher([]byte("secret-one-0123456"))
	b := NewHasher([]byte("secret-two-0123456"))
	h := a.Hash("user-42")
	if len(h) != 32 || strings.Trim(h, "0123456789abcdef") != "" {
		t.Fatalf("hash %q is not 32 hex", h)
	}
	if a2.Hash("user-42") != h {
		t.Error("same key, different hash: not stable")
	}
	if a.Hash("user-43") == h {
		t.Error("different users, same hash")
	}
	if b.Hash("user-42") == h {
		t.Error("different keys, same hash: not keyed")
	}
	if a.Hash("") != "" {
		t.Error("empty id should hash to empty")
	}
	// Known answer: HMAC-SHA256("secret-one-0123456", "user-42"), first 16 bytes.
	if h != knownHash {
		t.Errorf("hash = %s, want %s", h, knownHash)
	}
}

const knownHash = "159378a13c2acfe21c20ebdf5d6d02cf"

// The hash is HMAC-SHA256 as crypto/hmac computes it, whatever the key's
// and the id's length: stored hashes must keep joining.
func TestHashIsHMACSHA256(t *testing.T) {
	for _, keyLen := range []int{1, 16, 63, 64, 65, 200} {
		key := bytes.Repeat([]byte{byte(keyLen)}, keyLen)
		h := NewHasher(key)
		for _, idLen := range []int{1, 10, 55, 56, 64, 200, 256, 257, 1000} {
			id := strings.Repeat("ü", idLen)[:idLen]
			m := hmac.New(sha256.New, key)
			m.Write([]byte("session\x00" + id))
			want := hex.EncodeToString(m.Sum(nil))[:32]
			if got := h.hash("session\x00", id); got != want {
				t.Fatalf("key %d bytes, id %d bytes: %s, want %s", keyLen, idLen, got, want)
			}
			m.Reset()
			m.Write([]byte(id))
			if got, want := h.Hash(id), hex.EncodeToString(m.Sum(nil))[:32]; got != want {
				t.Fatalf("Hash: key %d bytes, id %d bytes: %s, want %s", keyLen, idLen, got, want)
			}
		}
	}
}

func BenchmarkHash(b *testing.B) {
	h := NewHasher([]byte("a secret of at least sixteen bytes"))
	b.ReportAllocs()
	for b.Loop() {
		h.hash("session\x00", "chatcmpl-80bb40c5197bac3c251b9d92")
	}
}

// Session is the session id SetSession stores, so that a reader can look a
// session's spans up by its id.
func TestHasherSessionIsTheStoredSessionID(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracer(rec, false)
	_, span := tr.Start(context.Background(), "key_audit")
	span.SetSession("key_0123")
	span.End()
	h := NewHasher([]byte("0123456789abcdef-test"))
	if len(rec.evs) != 1 || rec.evs[0].SessionID != h.Session("key_0123") || h.Session("key_0123") == h.Hash("key_0123") {
		t.Fatalf("stored session %q, Session %q", rec.evs[0].SessionID, h.Session("key_0123"))
	}
	if h.Session("") != "" {
		t.Fatal("an empty session id hashes to something")
	}
}
