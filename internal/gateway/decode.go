package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
)

// clientFrame is a WebSocket message from a client.
type clientFrame struct {
	Action    string `json:"action"`
	RequestID string `json:"requestId"`
	SessionID string `json:"sessionId"`
	Message   string `json:"message"`
	Locale    string `json:"locale"`
	UserID    string `json:"userId"`
}

// chatBody is the body of POST /v1/chat.
type chatBody struct {
	RequestID string `json:"requestId"`
	SessionID string `json:"sessionId"`
	Message   string `json:"message"`
	Locale    string `json:"locale"`
	Stream    bool   `json:"stream"`
	UserID    string `json:"userId"`
}

// Client actions on the WebSocket.
const (
	actionSend   = "sendMessage"
	actionCancel = "cancel"
)

// decodeClientFrame parses one WebSocket text frame. Errors are *Error with
// code invalid_request and a message saying what to fix.
func decodeClientFrame(data []byte) (clientFrame, error) {
	var f clientFrame
	if err := decodeStrict(data, &f); err != nil {
		return f, err
	}
	switch f.Action {
	case actionSend:
		if f.RequestID == "" {
			return f, invalid("requestId is required")
		}
		if len(f.RequestID) > 128 {
			return f, invalid("requestId must be at most 128 bytes")
		}
	case actionCancel:
		if f.RequestID == "" {
			return f, invalid("requestId is required to cancel")
		}
	case "":
		return f, invalid(`action is required (use "sendMessage")`)
	default:
		return f, invalid(`unknown action %q (use "sendMessage" or "cancel")`, truncate(f.Action, 40))
	}
	return f, nil
}

// decodeChatBody parses the body of POST /v1/chat.
func decodeChatBody(r io.Reader, limit int64) (chatBody, error) {
	var b chatBody
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return b, invalid("could not read the request body: %v", err)
	}
	if int64(len(data)) > limit {
		return b, &Error{Status: 413, Code: CodeTooLarge, Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	if err := decodeStrict(data, &b); err != nil {
		return b, err
	}
	if len(b.RequestID) > 128 {
		return b, invalid("requestId must be at most 128 bytes")
	}
	return b, nil
}

// readLimited reads a request body of at most limit bytes.
func readLimited(r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, invalid("could not read the request body: %v", err)
	}
	if int64(len(data)) > limit {
		return nil, &Error{Status: 413, Code: CodeTooLarge, Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	return data, nil
}

// decodeStrict decodes one JSON object, refusing invalid UTF-8, unknown
// fields, wrong types and trailing data, with messages a client can act on.
func decodeStrict(data []byte, v any) error {
	if !utf8.Valid(data) {
		return invalid("body must be valid UTF-8 JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF):
			return invalid("body is empty; send a JSON object")
		case errors.As(err, &syn):
			return invalid("malformed JSON at byte %d: %s", syn.Offset, syn.Error())
		case errors.As(err, &typ):
			return invalid("field %q must be a %s", typ.Field, typ.Type.String())
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return invalid("%s", strings.TrimPrefix(err.Error(), "json: "))
		default:
			return invalid("malformed JSON: %s", err.Error())
		}
	}
	if dec.More() {
		return invalid("body must hold exactly one JSON object")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("body must hold exactly one JSON object")
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
