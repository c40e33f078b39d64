package stream

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFrameWireForm(t *testing.T) {
	tests := []struct {
		name string
		give Frame
		want string
	}{
		{
			name: "chunk keeps japanese and html as is",
			give: Frame{Type: TypeChunk, Chunk: Chunk{RequestID: "r1", Index: 0, Text: "漫画 <b>&</b> 😀"}},
			want: `{"type":"chunk","requestId":"r1","index":0,"text":"漫画 <b>&</b> 😀"}`,
		},
		{
			name: "chunk escapes quotes, controls, invalid bytes and line separators",
			give: Frame{Type: TypeChunk, Chunk: Chunk{RequestID: "r1", Index: 3, Text: "\"a\\\n\t\x01\xff\u2028"}},
			want: `{"type":"chunk","requestId":"r1","index":3,"text":"\"a\\\n\t\u0001\ufffd\u2028"}`,
		},
		{
			name: "split chunk piece carries subIndex",
			give: Frame{Type: TypeChunk, Chunk: Chunk{RequestID: "r1", Index: 2, Split: true, SubIndex: 1, Text: "x"}},
			want: `{"type":"chunk","requestId":"r1","index":2,"subIndex":1,"text":"x"}`,
		},
		{
			name: "done",
			give: Frame{Type: TypeDone, Done: Done{
				RequestID: "r1", Tier: "sonnet", Confidence: 1, Tokens: Tokens{Input: 120, Output: 30},
				CostUSD: 0.0012, Metrics: DoneMetrics{TTFTms: 250, TotalMs: 2000, TPS: 20.5, Chunks: 7}, TraceID: "t<1>",
			}},
			want: `{"type":"done","requestId":"r1","tier":"sonnet","degraded":false,"confidence":1,"tokens":{"input":120,"output":30},"costUsd":0.0012,"metrics":{"ttft_ms":250,"total_ms":2000,"tps":20.5,"chunks":7},"traceId":"t<1>"}`,
		},
		{
			name: "done from cache",
			give: Frame{Type: TypeDone, Done: Done{RequestID: "r1", Tier: "cache", Degraded: true, Confidence: 0.6, CacheHit: true}},
			want: `{"type":"done","requestId":"r1","tier":"cache","degraded":true,"confidence":0.6,"tokens":{"input":0,"output":0},"costUsd":0,"metrics":{"ttft_ms":0,"total_ms":0,"tps":0,"chunks":0},"traceId":"","cacheHit":true}`,
		},
		{
			name: "error with retry hint",
			give: Frame{Type: TypeError, Error: ErrorFrame{RequestID: "r1", Code: "rate_limited", Message: "しばらくお待ちください", RetryAfterSeconds: 2}},
			want: `{"type":"error","requestId":"r1","code":"rate_limited","message":"しばらくお待ちください","retryAfterSeconds":2}`,
		},
		{
			name: "error without retry hint",
			give: Frame{Type: TypeError, Error: ErrorFrame{RequestID: "r1", Code: "unavailable", Message: "m"}},
			want: `{"type":"error","requestId":"r1","code":"unavailable","message":"m"}`,
		},
		{name: "heartbeat", give: Frame{Type: TypeHeartbeat}, want: `{"type":"heartbeat"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.give.AppendJSON(nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Fatal("not valid JSON")
			}
		})
	}
}

func TestDecodeFrame(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    Frame
		wantErr string
	}{
		{name: "chunk", give: `{"type":"chunk","requestId":"r1","index":4,"text":"巻"}`, want: Frame{Type: TypeChunk, Chunk: Chunk{RequestID: "r1", Index: 4, Text: "巻"}}},
		{name: "split piece", give: `{"type":"chunk","requestId":"r1","index":4,"subIndex":0,"text":""}`, want: Frame{Type: TypeChunk, Chunk: Chunk{RequestID: "r1", Index: 4, Split: true, Text: ""}}},
		{name: "error", give: `{"type":"error","requestId":"r1","code":"queue_full","message":"m","retryAfterSeconds":3}`, want: Frame{Type: TypeError, Error: ErrorFrame{RequestID: "r1", Code: "queue_full", Message: "m", RetryAfterSeconds: 3}}},
		{name: "heartbeat ignores extras", give: `{"type":"heartbeat","x":1}`, want: Frame{Type: TypeHeartbeat}},
		{name: "done", give: `{"type":"done","requestId":"r1","tier":"haiku","tokens":{"input":1,"output":2},"metrics":{"chunks":3}}`, want: Frame{Type: TypeDone, Done: Done{RequestID: "r1", Tier: "haiku", Tokens: Tokens{Input: 1, Output: 2}, Metrics: DoneMetrics{Chunks: 3}}}},
		{name: "not json", give: `{"type":`, wantErr: "decode frame"},
		{name: "unknown type", give: `{"type":"chunky"}`, wantErr: "unknown type"},
		{name: "no type", give: `null`, wantErr: "unknown type"},
		{name: "chunk without text", give: `{"type":"chunk","index":0}`, wantErr: "needs index and text"},
		{name: "chunk without index", give: `{"type":"chunk","text":"a"}`, wantErr: "needs index and text"},
		{name: "negative index", give: `{"type":"chunk","index":-1,"text":"a"}`, wantErr: "negative"},
		{name: "error without code", give: `{"type":"error","message":"m"}`, wantErr: "needs a code"},
		{name: "fractional index", give: `{"type":"chunk","index":1.5,"text":"a"}`, wantErr: "decode frame"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeFrame([]byte(tt.give))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeFrame checks that decoding never panics and that a decoded frame
// encodes to bytes that decode to the same frame.
func FuzzDecodeFrame(f *testing.F) {
	for _, s := range []string{
		`{"type":"chunk","requestId":"r1","index":0,"text":"漫画"}`,
		`{"type":"chunk","requestId":"r1","index":1,"subIndex":2,"text":"\u2028\ud83d\ude00"}`,
		`{"type":"done","requestId":"r1","tier":"sonnet","degraded":false,"confidence":1.0,"tokens":{"input":5,"output":6},"costUsd":0.0012,"metrics":{"ttft_ms":1,"total_ms":2,"tps":3.5,"chunks":4},"traceId":"t","cacheHit":true}`,
		`{"type":"error","requestId":"r1","code":"rate_limited","message":"…","retryAfterSeconds":2}`,
		`{"type":"heartbeat"}`,
		`{"type":"done","requestId":"r1","tier":"haiku","degraded":true,"confidence":0.7,"tokens":{"input":5,"output":6},"costUsd":0.001,"metrics":{"ttft_ms":1,"total_ms":2,"tps":3.5,"chunks":4},"traceId":"t","continued":true,"parts":[{"tier":"","chars":1},{"tier":"sonnet","chars":12},{"tier":"haiku","chars":30},{"tier":"x","chars":1}]}`,
		`{"type":"status","requestId":"r1","state":"retrying","attempt":2,"of":4,"retryInSeconds":2,"message":"もう一度試します"}`,
		`{"type":"chunk","index":1e3,"text":"\xff"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			return
		}
		enc, err := fr.AppendJSON(nil)
		if err != nil {
			t.Fatalf("encode %+v: %v", fr, err)
		}
		if !utf8.Valid(enc) || !json.Valid(enc) {
			t.Fatalf("encoded frame is not valid UTF-8 JSON: %q", enc)
		}
		again, err := DecodeFrame(enc)
		if err != nil {
			t.Fatalf("decode %s: %v", enc, err)
		}
		if again != fr {
			t.Fatalf("round trip changed the frame:\n%+v\n%+v", fr, again)
		}
	})
}

// FuzzChunkRoundTrip checks that any text, valid UTF-8 or not, survives a
// chunk frame as a JSON decoder would read it.
func FuzzChunkRoundTrip(f *testing.F) {
	f.Add("r1", 0, "ワンピース 😀")
	f.Add("r\"1", 7, "a\x00\xe6\xbc\u2029<>&")
	f.Fuzz(func(t *testing.T, id string, index int, text string) {
		if index < 0 {
			index = -(index + 1)
		}
		c := Chunk{RequestID: id, Index: index, Text: text}
		enc := c.AppendJSON(nil)
		var std struct {
			RequestID string `json:"requestId"`
			Text      string `json:"text"`
		}
		if err := json.Unmarshal(enc, &std); err != nil {
			t.Fatalf("encoding/json rejects %q: %v", enc, err)
		}
		fr, err := DecodeFrame(enc)
		if err != nil {
			t.Fatal(err)
		}
		want := Chunk{RequestID: string(sanitize([]byte(id))), Index: index, Text: string(sanitize([]byte(text)))}
		if fr.Chunk != want || std.Text != want.Text {
			t.Fatalf("got %+v, want %+v", fr.Chunk, want)
		}
		if got := len(appendJSONString(nil, text)); got != quotedLen([]byte(text)) {
			t.Fatalf("escapedLen disagrees with the encoder: %d vs %d", quotedLen([]byte(text)), got)
		}
	})
}

func quotedLen(b []byte) int {
	n := 2
	for len(b) > 0 {
		out, size := escapedLen(b)
		n += out
		b = b[size:]
	}
	return n
}

// FuzzAppendMarshaledString: the hand-written quoting is byte for byte
// what encoding/json writes, with HTML escaping (json.Marshal) and without
// (an Encoder with SetEscapeHTML(false)).
func FuzzAppendMarshaledString(f *testing.F) {
	f.Add("「進撃の巨人」 \"q\" \\ \n\t\b\f\x01\x7f <b>&amp;</b> \u2028\u2029 🍣 \xff\xe6\xbc")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		marshaled, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendMarshaledString(nil, []byte(s), true); !bytes.Equal(got, marshaled) {
			t.Fatalf("html: got %s, json.Marshal %s", got, marshaled)
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := AppendMarshaledString(nil, s, false); !bytes.Equal(got, bytes.TrimSuffix(b.Bytes(), []byte("\n"))) {
			t.Fatalf("no html: got %s, Encoder %s", got, b.Bytes())
		}
	})
}
