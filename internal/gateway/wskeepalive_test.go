package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fmgate/fmgate/internal/config"
)

// pingCounter counts the bytes 0x89 (a ping frame's first byte) a client
// reads: while no message is under way, only pings arrive.
type pingCounter struct {
	net.Conn
	pings *atomic.Int64
}

func (c pingCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.pings.Add(int64(bytes.Count(p[:n], []byte{0x89})))
	return n, err
}

// keepAliveServer is a gateway whose WebSockets are pinged every 50 ms and
// closed when a ping is left unanswered for 200 ms.
func keepAliveServer(t *testing.T) *httptest.Server {
	t.Helper()
	g, err := New(config.Default(), Deps{Providers: both(&scriptProvider{answer: "今週のおすすめです"})})
	if err != nil {
		t.Fatal(err)
	}
	g.wsPing = wsKeepAlive{every: 50 * time.Millisecond, pongWait: 200 * time.Millisecond}
	srv := httptest.NewServer(g.Handler("admin-secret", nil))
	t.Cleanup(srv.Close)
	return srv
}

func dialCounting(t *testing.T, srv *httptest.Server, pings *atomic.Int64) *websocket.Conn {
	t.Helper()
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return pingCounter{c, pings}, nil
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// TestWebSocketKeepAlive: an idle connection whose peer answers is pinged
// at the interval and stays usable; one whose peer leaves the pings
// unanswered is closed after the pong wait.
func TestWebSocketKeepAlive(t *testing.T) {
	srv := keepAliveServer(t)

	t.Run("answering peer", func(t *testing.T) {
		var pings atomic.Int64
		c := dialCounting(t, srv, &pings)
		// A reader answers the pings (the library does, while it reads).
		frames := make(chan frame, 64)
		go func() {
			defer close(frames)
			for {
				_, data, err := c.Read(context.Background())
				if err != nil {
					return
				}
				var f frame
				if json.Unmarshal(data, &f) == nil && f.Type != "heartbeat" {
					frames <- f
				}
			}
		}()
		time.Sleep(600 * time.Millisecond)
		if n := pings.Load(); n < 4 {
			t.Fatalf("%d pings in 600 ms at a 50 ms interval", n)
		}
		send(t, c, map[string]string{"action": "sendMessage", "requestId": "r1", "sessionId": "s1", "message": "おすすめは？", "locale": "ja"})
		timeout := time.After(10 * time.Second)
		for {
			select {
			case f, ok := <-frames:
				if !ok {
					t.Fatal("the connection closed while its peer answered every ping")
				}
				if f.Type == "error" {
					t.Fatalf("error frame %+v", f)
				}
				if f.Type == "done" {
					return
				}
			case <-timeout:
				t.Fatal("no answer after the idle pings")
			}
		}
	})

	t.Run("silent peer", func(t *testing.T) {
		var pings atomic.Int64
		c := dialCounting(t, srv, &pings)
		// Not reading, the client answers no ping; the gateway closes the
		// connection after the first ping's wait, and a read then finds
		// the pings followed by the end.
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, _, err := c.Read(ctx)
		if err == nil {
			t.Fatal("read a message from a connection the gateway should have closed")
		}
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Fatalf("the connection is still open %v after its pings went unanswered: %v", time.Second, err)
		}
		if pings.Load() == 0 {
			t.Fatalf("closed without a ping: %v", err)
		}
	})
}
