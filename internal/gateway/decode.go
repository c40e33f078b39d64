package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
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
	data, err := readAll(r, limit)
	if err != nil {
		return b, err
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
func readLimited(r *http.Request, limit int64) ([]byte, error) { return readAll(r.Body, limit) }

// readAll reads at most limit bytes: 413 above it, 408 when the client was
// too slow to send them (the server's body deadline).
func readAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &Error{Status: http.StatusRequestTimeout, Code: CodeRequestTimeout,
				Message: "The request body arrived too slowly and was cut off; send it again.", Err: err,
				Header: http.Header{"Connection": {"close"}}}
		}
		return nil, invalid("could not read the request body: %v", err)
	}
	if int64(len(data)) > limit {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
	}
	return data, nil
}

// decodeStrict decodes one JSON object, refusing invalid UTF-8, unknown
// fields, wrong types and trailing data, with messages a client can act on.
func decodeStrict(data []byte, v any) error {
	if !utf8.Valid(data) {
		return invalid("body must be valid UTF-8 JSON")
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return invalid("body is null; send a JSON object such as {\"sessionId\":\"s1\",\"message\":\"…\"}")
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
		case errors.As(err, &typ) && typ.Field == "":
			return invalid("body must be a JSON object, not %s", jsonValueName(typ.Value))
		case errors.As(err, &typ):
			return invalid("field %q must be %s, not %s", typ.Field, jsonTypeName(typ.Type), jsonValueName(typ.Value))
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

// jsonTypeName names what a Go type holds in JSON's words, so error
// messages never show the server's type names.
func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonTypeName(t.Elem())
	}
	return "an object"
}

// jsonValueName is the JSON kind json.UnmarshalTypeError.Value reports.
func jsonValueName(v string) string {
	switch {
	case v == "":
		return "something else"
	case strings.HasPrefix(v, "number"):
		return "a number"
	case v == "bool":
		return "true or false"
	case v == "object", v == "array":
		return "an " + v
	}
	return "a " + v
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
