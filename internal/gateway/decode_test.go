package gateway

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeClientFrame(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		wantErr  string
		wantSend bool
	}{
		{name: "send", give: `{"action":"sendMessage","requestId":"r1","sessionId":"s1","message":"こんにちは","locale":"ja"}`, wantSend: true},
		{name: "malformed", give: `{"action":`, wantErr: "malformed JSON"},
		{name: "not an object", give: `[1,2]`, wantErr: "must be a"},
		{name: "unknown action", give: `{"action":"dance","requestId":"r1"}`, wantErr: `unknown action "dance"`},
		{name: "missing action", give: `{"requestId":"r1"}`, wantErr: "action is required"},
		{name: "missing request id", give: `{"action":"sendMessage","message":"hi"}`, wantErr: "requestId is required"},
		{name: "unknown field", give: `{"action":"sendMessage","requestId":"r","bogus":1}`, wantErr: `unknown field "bogus"`},
		{name: "wrong type", give: `{"action":"sendMessage","requestId":5}`, wantErr: `field "requestId" must be a string`},
		{name: "trailing data", give: `{"action":"sendMessage","requestId":"r"} {}`, wantErr: "exactly one JSON object"},
		{name: "invalid utf8", give: "{\"action\":\"sendMessage\",\"requestId\":\"r\",\"message\":\"\xff\"}", wantErr: "valid UTF-8"},
		{name: "empty", give: ``, wantErr: "body is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := decodeClientFrame([]byte(tt.give))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				if tt.wantSend && f.Action != actionSend {
					t.Fatalf("action %q", f.Action)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidRequest || e.Status != 400 {
				t.Fatalf("error %v, want invalid_request 400", err)
			}
			if !strings.Contains(e.Message, tt.wantErr) {
				t.Fatalf("message %q does not contain %q", e.Message, tt.wantErr)
			}
		})
	}
}

func TestDecodeChatBodyTooLarge(t *testing.T) {
	_, err := decodeChatBody(strings.NewReader(`{"message":"`+strings.Repeat("a", 100)+`"}`), 50)
	var e *Error
	if !errors.As(err, &e) || e.Status != 413 || e.Code != CodeTooLarge {
		t.Fatalf("got %v, want 413 too_large", err)
	}
}

func FuzzDecodeClientFrame(f *testing.F) {
	f.Add([]byte(`{"action":"sendMessage","requestId":"r1","sessionId":"s1","message":"hi","locale":"en"}`))
	f.Add([]byte(`{"action":"cancel","requestId":"r1"}`))
	f.Add([]byte(`{"action":"sendMessage","requestId":"\u0000"}`))
	f.Add([]byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := decodeClientFrame(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("decode error %v is not a 400 *Error", err)
			}
			return
		}
		if fr.Action != actionSend && fr.Action != actionCancel {
			t.Fatalf("accepted action %q", fr.Action)
		}
		if fr.RequestID == "" {
			t.Fatal("accepted a frame without requestId")
		}
	})
}

func FuzzDecodeChatBody(f *testing.F) {
	f.Add([]byte(`{"sessionId":"s1","message":"おすすめは？","locale":"ja","stream":true}`))
	f.Add([]byte(`{"message":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := decodeChatBody(strings.NewReader(string(data)), 1<<16)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || (e.Status != 400 && e.Status != 413) {
				t.Fatalf("decode error %v is not a 400/413 *Error", err)
			}
		}
	})
}
