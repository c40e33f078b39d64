package bedrock

import (
	"bytes"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// FuzzAppendMessage: the hand-written event-stream message is the one the
// AWS SDK's encoder writes, and its decoder reads it back.
func FuzzAppendMessage(f *testing.F) {
	f.Add("contentBlockDelta", "application/json", []byte(`{"contentBlockIndex":0,"delta":{"text":"こんにちは"}}`))
	f.Add("", "", []byte{})
	f.Fuzz(func(t *testing.T, eventType, contentType string, payload []byte) {
		if len(eventType) > 1000 || len(contentType) > 1000 {
			return // the door's headers are short constants
		}
		var m eventstream.Message
		m.Headers.Set(":message-type", eventstream.StringValue("event"))
		m.Headers.Set(":event-type", eventstream.StringValue(eventType))
		m.Headers.Set(":content-type", eventstream.StringValue(contentType))
		m.Payload = payload
		var want bytes.Buffer
		if err := eventstream.NewEncoder().Encode(&want, m); err != nil {
			t.Fatal(err)
		}
		prefix := []byte("kept")
		got := appendMessage(prefix, payload, ":message-type", "event", ":event-type", eventType, ":content-type", contentType)
		if !bytes.Equal(got[len(prefix):], want.Bytes()) || string(got[:len(prefix)]) != "kept" {
			t.Fatalf("appendMessage wrote %x, the SDK's encoder %x", got, want.Bytes())
		}
		back, err := eventstream.NewDecoder().Decode(bytes.NewReader(got[len(prefix):]), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(back.Payload, payload) || back.Headers.Get(":event-type").String() != eventType {
			t.Fatalf("decoded %+v", back)
		}
	})
}
