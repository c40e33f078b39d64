package openai

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/fmgate/fmgate/internal/vision"
	"github.com/fmgate/fmgate/internal/vision/visiontest"
)

// TestPooledBodyKeepsNoBytes: what the door decodes from a body read into
// a pooled buffer is unchanged once the buffer is reused for another body,
// so returning it to the pool right after decoding is safe.
func TestPooledBodyKeepsNoBytes(t *testing.T) {
	jpeg := visiontest.DataURL("image/jpeg", visiontest.JPEG(8, 8))
	schema := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	chat := `{"model":"sonnet","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"stop":["END","。"],` +
		`"user":"u1","prompt_cache_key":"k1","response_format":{"type":"json_schema","json_schema":{"name":"w","schema":` + schema + `}},` +
		`"messages":[{"role":"system","content":"Answer briefly."},{"role":"user","content":"Weather in 大阪?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"大阪\"}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"晴れ"},` +
		`{"role":"user","content":[{"type":"text","text":"And this?"},{"type":"image_url","image_url":{"url":"` + jpeg + `"}}]}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":` + schema + `}}],"tool_choice":"auto"}`
	responses := `{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"Weather in Tokyo and 大阪?"},` +
		`{"type":"function_call","id":"fc_1","call_id":"c1","name":"get_weather","arguments":"{\"city\":\"Tokyo\"}","status":"completed"},` +
		`{"type":"function_call_output","call_id":"c1","output":"晴れ"},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"What is "},{"type":"input_image","image_url":"` + jpeg + `"}]}],` +
		`"tools":[{"type":"function","name":"get_weather","description":"Weather","parameters":` + schema + `}],` +
		`"text":{"format":{"type":"json_schema","name":"w","schema":` + schema + `}},"metadata":{"app":"store"},"previous_response_id":"resp_1"}`
	request := func(body string) *http.Request {
		return httptest.NewRequest(http.MethodPost, "/v1/x", strings.NewReader(body))
	}
	scribble := func(buf *[]byte) {
		b := (*buf)[:cap(*buf)]
		for i := range b {
			b[i] = '"'
		}
	}

	buf := new([]byte)
	got, e := readChat(request(chat), 0, vision.Limits{}, buf)
	if e != nil {
		t.Fatal(e)
	}
	if cap(*buf) < len(chat) {
		t.Fatalf("the body was not read into the buffer (cap %d)", cap(*buf))
	}
	scribble(buf)
	want, e := DecodeChat([]byte(chat), vision.Limits{})
	if e != nil {
		t.Fatal(e)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a chat request decoded from a reused buffer changed:\n got %+v\nwant %+v", got, want)
	}

	gotQ, e := readResponses(request(responses), 0, vision.Limits{}, buf)
	if e != nil {
		t.Fatal(e)
	}
	scribble(buf)
	wantQ, e := DecodeResponses([]byte(responses), vision.Limits{})
	if e != nil {
		t.Fatal(e)
	}
	if !reflect.DeepEqual(gotQ, wantQ) {
		t.Errorf("a Responses request decoded from a reused buffer changed:\n got %+v\nwant %+v", gotQ, wantQ)
	}
}

// TestReadBodyIntoABuffer: a body is read whole into the buffer, sized
// from Content-Length or grown without it, and one over the limit is a 413
// that still leaves the grown buffer for its pool.
func TestReadBodyIntoABuffer(t *testing.T) {
	body := strings.Repeat("漫画", 5000) // 30,000 bytes
	tests := []struct {
		name          string
		contentLength bool
		limit         int64
		wantStatus    int
	}{
		{name: "sized from content-length", contentLength: true, limit: 1 << 20},
		{name: "grown without content-length", limit: 1 << 20},
		{name: "over the limit", contentLength: true, limit: 1000, wantStatus: http.StatusRequestEntityTooLarge},
		{name: "over the limit, no content-length", limit: 1000, wantStatus: http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/x", strings.NewReader(body))
			if !tt.contentLength {
				r.ContentLength = -1
			}
			buf := new([]byte)
			*buf = append(*buf, "left from the last request"...)
			got, e := readBody(r, tt.limit, buf)
			if tt.wantStatus != 0 {
				if e == nil || e.Status != tt.wantStatus {
					t.Fatalf("error %v, want status %d", e, tt.wantStatus)
				}
				if cap(*buf) == 0 {
					t.Fatal("the grown buffer was not left for its pool")
				}
				return
			}
			if e != nil {
				t.Fatal(e)
			}
			if !bytes.Equal(got, []byte(body)) || !bytes.Equal(*buf, got) {
				t.Fatalf("read %d bytes (buffer %d), want the %d-byte body", len(got), len(*buf), len(body))
			}
		})
	}
}

// TestBufPoolDropsLargeBuffers: a buffer grown past maxPooledBytes is not
// kept, whatever the pool returns next.
func TestBufPoolDropsLargeBuffers(t *testing.T) {
	var bp bufPool
	for range 20 {
		big := make([]byte, 0, maxPooledBytes+1)
		bp.put(&big)
		if b := bp.get(); cap(*b) > maxPooledBytes {
			t.Fatalf("the pool returned a %d-byte buffer", cap(*b))
		}
	}
	small := make([]byte, 10, 4096)
	bp.put(&small)
	if len(small) != 0 {
		t.Fatal("a buffer went back to the pool holding bytes")
	}
}
