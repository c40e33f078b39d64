package gateway

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// smallBufListener gives each accepted connection a small send buffer, so
// that a client that stops reading makes the gateway's writes wait.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestWebSocketSlowReaderIsPausedNotCut: a client that stops reading for
// longer than one send may take (stream.sendTimeout, 500 ms) but less than
// the stream's allowance for a slow client gets its whole answer: the
// stream pauses and carries on. The WebSocket library closes a connection
// whose write's context ends, so a write bounded by the send's own
// deadline cut such a client at its first slow send.
func TestWebSocketSlowReaderIsPausedNotCut(t *testing.T) {
	word := strings.Repeat("あ", 300) + " " // 901 bytes
	p := &scriptProvider{answer: strings.Repeat(word, 150)}
	want := strings.TrimSuffix(p.answer, " ") // as the provider streams it
	g, _ := newTestGateway(t, both(p), nil)
	srv := httptest.NewUnstartedServer(g.Handler("admin-secret", nil))
	srv.Listener = smallBufListener{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		return c, err
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	send(t, c, map[string]string{"action": "sendMessage", "requestId": "r1", "sessionId": "s1", "message": "おすすめは？", "locale": "ja"})
	first := readFrame(t, c)
	if first.Type != "chunk" {
		t.Fatalf("first frame %+v", first)
	}
	time.Sleep(2 * time.Second) // the client stops reading
	// After the pause the stream's buffered text can exceed a frame: its
	// chunks are then split (one index, several frames).
	var text string
	var last frame
	for last.Type != "done" && last.Type != "error" {
		last = readFrame(t, c)
		if last.Type == "chunk" {
			text += last.Text
		}
	}
	if last.Type != "done" {
		t.Fatalf("after the pause the answer ended with %+v", last)
	}
	if got := first.Text + text; got != want {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("the answer was %d bytes (first frame %d), want %d; they differ from byte %d; done: %+v", len(got), len(first.Text), len(want), i, last)
	}
}
