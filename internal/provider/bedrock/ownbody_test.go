package bedrock

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// closingBody reads as io.EOF once closed, as the SDK's request body does.
type closingBody struct {
	mu     sync.Mutex
	r      io.Reader
	closed bool
}

func (b *closingBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

func (b *closingBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// TestOwnBodyOutlivesTheSDKsClose: the transport reads the whole body,
// and can read it again, even after the SDK closed its own body.
func TestOwnBodyOutlivesTheSDKsClose(t *testing.T) {
	const payload = `{"messages":[{"role":"user","content":[{"text":"hi"}]}]}`
	sdkBody := &closingBody{r: strings.NewReader(payload)}
	var sent *http.Request
	c := ownBody{doFunc(func(r *http.Request) (*http.Response, error) {
		sent = r
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})}
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/model/m/converse-stream", nil)
	req.Body, req.ContentLength = sdkBody, int64(len(payload))
	if _, err := c.Do(req); err != nil {
		t.Fatal(err)
	}
	sdkBody.Close() // what the SDK does once the response's headers are in
	got, err := io.ReadAll(sent.Body)
	if err != nil || string(got) != payload {
		t.Fatalf("the transport read %q, %v; want the whole body", got, err)
	}
	again, _ := sent.GetBody()
	if got, _ := io.ReadAll(again); string(got) != payload {
		t.Fatalf("GetBody gave %q; want the whole body again", got)
	}
	if sent.ContentLength != int64(len(payload)) {
		t.Errorf("ContentLength %d, want %d", sent.ContentLength, len(payload))
	}
}
