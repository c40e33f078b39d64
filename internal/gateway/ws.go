package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// maxInFlightPerConn bounds concurrent turns on one WebSocket.
const maxInFlightPerConn = 4

// RouteConnect is the route of a WebSocket being opened: its rate limit
// (rateLimit.routes.connect) is the connection rate, checked alone.
const RouteConnect = "connect"

// Keep-alive of a chat WebSocket: an idle connection is pinged every
// wsPingInterval, and one whose peer does not answer within wsPongWait is
// closed, so a dead peer is noticed and its turns stop.
const (
	wsPingInterval = 30 * time.Second
	wsPongWait     = 10 * time.Second
)

// serveWS is GET /ws: the chat WebSocket of DESIGN.md's contract.
func (g *Gateway) serveWS(w http.ResponseWriter, r *http.Request) {
	if !g.Ready() {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown,
			Message: "The assistant is restarting. Please reconnect in a few seconds.", RetryAfter: 5 * time.Second})
		return
	}
	// The connection rate (rateLimit.routes.connect) is checked before the
	// upgrade: a refusal is a plain 429 with Retry-After.
	connect := &Turn{RequestID: "connect", Route: RouteConnect, Surface: "ws", Locale: g.Config().Locales[0]}
	if g.Config().RateLimit.IP.Enabled() {
		connect.ClientIP = g.stateHash.Hash(g.clientIP(r))
	}
	if err := g.admit.Admit(r.Context(), connect); err != nil {
		writeError(w, err)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: g.Config().Server.OriginPatterns,
		Subprotocols: []string{WSProtocol}})
	if err != nil {
		return // Accept has answered the client
	}
	// Bad input, an oversize frame included, gets an error frame and the
	// connection stays open: the library's limit (which would close with
	// 1009) is off, and readMessage keeps at most frameLimit bytes of a frame.
	c.SetReadLimit(-1)
	frameLimit := int64(max(64<<10, 4*g.Config().Server.MaxMessageBytes))
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	conn := &wsConn{c: c, g: g, r: r, key: wsKey(r), turns: make(map[string]context.CancelFunc),
		ctx: ctx, writeLimit: g.streamCfg.WriteLimit()}
	stopPings := conn.keepAlive(g.wsPing)
	defer func() {
		stopPings()
		cancel()
		conn.wg.Wait()
		c.CloseNow()
	}()
	g.trackConn(conn)
	defer g.untrackConn(conn)

	for {
		typ, data, err := readMessage(ctx, c, frameLimit)
		if errors.Is(err, errFrameTooLarge) {
			conn.refuse(ctx, clientFrame{}, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge,
				Message: fmt.Sprintf("frame is larger than %d bytes; it was dropped", frameLimit)})
			continue
		}
		if err != nil {
			return // client gone: cancel() stops every turn of this connection
		}
		if typ != websocket.MessageText {
			conn.refuse(ctx, clientFrame{}, invalid("binary frames are not supported; send JSON text frames"))
			continue
		}
		f, err := decodeClientFrame(data)
		if err != nil {
			conn.refuse(ctx, clientFrame{RequestID: peekRequestID(data)}, err)
			continue
		}
		switch f.Action {
		case actionCancel:
			conn.cancelTurn(f.RequestID)
		case actionSend:
			conn.startTurn(ctx, f)
		}
	}
}

var errFrameTooLarge = errors.New("frame too large")

// A browser cannot set an Authorization header on a WebSocket, so a page
// sends its API key as a subprotocol: KeyProtocolPrefix followed by the key
// in unpadded base64url, offered beside WSProtocol, which the server
// selects. (The bundled chat page does, once its user entered a key.)
const (
	WSProtocol        = "fmgate.v1"
	KeyProtocolPrefix = "fmgate.bearer."
)

// wsKey is the API key of a WebSocket upgrade: its Authorization: Bearer
// header, else the key a page offered as a subprotocol.
func wsKey(r *http.Request) string {
	if key, ok := bearer(r); ok {
		return key
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			if enc, ok := strings.CutPrefix(strings.TrimSpace(p), KeyProtocolPrefix); ok {
				if key, err := base64.RawURLEncoding.DecodeString(enc); err == nil {
					return string(key)
				}
			}
		}
	}
	return ""
}

// readMessage reads one message, keeping at most limit bytes: a longer one is
// read to its end and dropped (errFrameTooLarge), so memory stays bounded and
// the connection usable.
func readMessage(ctx context.Context, c *websocket.Conn, limit int64) (websocket.MessageType, []byte, error) {
	typ, r, err := c.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return 0, nil, err
	}
	if int64(len(data)) > limit {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return 0, nil, err
		}
		return typ, nil, errFrameTooLarge
	}
	return typ, data, nil
}

// wsConn is one chat WebSocket.
type wsConn struct {
	c   *websocket.Conn
	g   *Gateway
	r   *http.Request
	key string // the API key of the upgrade: Authorization: Bearer, or a page's subprotocol
	// ctx ends with the connection; writeLimit bounds one write
	// (stream.Config.WriteLimit).
	ctx        context.Context
	writeLimit time.Duration

	mu    sync.Mutex
	turns map[string]context.CancelFunc
	wg    sync.WaitGroup
}

func (cn *wsConn) startTurn(ctx context.Context, f clientFrame) {
	cn.mu.Lock()
	if _, dup := cn.turns[f.RequestID]; dup {
		cn.mu.Unlock()
		cn.refuse(ctx, f, duplicate(f.RequestID))
		return
	}
	if len(cn.turns) >= maxInFlightPerConn {
		cn.mu.Unlock()
		cn.g.throttle("connection")
		cn.refuse(ctx, f, &Error{Status: http.StatusTooManyRequests, Code: CodeRateLimited,
			Message: "Too many messages in flight on this connection; wait for an answer first.", RetryAfter: time.Second})
		return
	}
	tctx, cancel := context.WithCancel(ctx)
	cn.turns[f.RequestID] = cancel
	cn.wg.Add(1)
	cn.mu.Unlock()

	go func() {
		defer cn.wg.Done()
		defer func() {
			cn.mu.Lock()
			delete(cn.turns, f.RequestID)
			cn.mu.Unlock()
			cancel()
		}()
		t := &Turn{
			RequestID:   f.RequestID,
			SessionID:   f.SessionID,
			Message:     f.Message,
			Locale:      f.Locale,
			Route:       "sendMessage",
			Surface:     "ws",
			TraceParent: cn.r.Header.Get("traceparent"),
		}
		if err := cn.g.Authenticate(cn.r, cn.key, f.UserID, t); err != nil {
			cn.sendError(tctx, f.RequestID, cn.g.Refuse(tctx, t, err))
			return
		}
		out := cn.g.NewStreamOutput(tctx, cn, f.RequestID)
		out.EnableStatus()
		defer out.Close()
		if _, err := cn.g.Run(tctx, t, out); err != nil && !out.Settled() {
			cn.sendError(tctx, f.RequestID, err)
		}
	}()
}

func (cn *wsConn) cancelTurn(id string) {
	cn.mu.Lock()
	cancel := cn.turns[id]
	cn.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Send implements stream.Sender. The library closes the connection when a
// write's context ends, so the send's own deadline (stream.sendTimeout)
// would cut a client at its first slow send, where the stream means to
// pause and carry on: a send that has begun is bounded by the stream's
// whole allowance for a slow client instead, and the stream, timing it,
// counts it slow.
func (cn *wsConn) Send(ctx context.Context, frame []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(cn.ctx, cn.writeLimit)
	defer cancel()
	return cn.c.Write(wctx, websocket.MessageText, frame)
}

// refuse counts a frame refused before it became a turn (Refuse), with
// what was read of it, and answers it with an error frame.
func (cn *wsConn) refuse(ctx context.Context, f clientFrame, err error) {
	t := &Turn{RequestID: f.RequestID, Message: f.Message, Locale: f.Locale, Route: "sendMessage", Surface: "ws"}
	_ = cn.g.Authenticate(cn.r, "", "", t) // the caller, when the connection names one
	cn.sendError(ctx, f.RequestID, cn.g.Refuse(ctx, t, err))
}

// sendError writes an error frame outside a stream (refusals, bad frames).
func (cn *wsConn) sendError(ctx context.Context, requestID string, err error) {
	e := asEdgeError(err)
	if e.Code == CodeCanceled {
		return
	}
	b, _ := json.Marshal(errorFrame{Type: "error", RequestID: requestID, Code: e.Code, Message: e.Message, RetryAfterSeconds: e.RetryAfterSeconds()})
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = cn.Send(wctx, b)
}

// keepAlive pings the peer every ka.every until the connection ends, and
// closes a connection whose peer leaves a ping unanswered for ka.pongWait.
// It runs on a timer rather than a goroutine of its own: an idle connection
// then holds one goroutine (its reader), not two, and a goroutine's stack
// is most of an idle connection's memory. The ping runs on the timer's
// goroutine only while it is under way. It returns the pings' stop.
func (cn *wsConn) keepAlive(ka wsKeepAlive) (stop func()) {
	var (
		mu      sync.Mutex
		t       *time.Timer
		stopped bool
	)
	ping := func() {
		if cn.ctx.Err() != nil {
			return
		}
		pctx, cancel := context.WithTimeout(cn.ctx, ka.pongWait)
		err := cn.c.Ping(pctx)
		cancel()
		if err != nil {
			if cn.ctx.Err() == nil {
				cn.c.CloseNow() // unanswered: the reader's error ends the connection
			}
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(ka.every)
		}
		mu.Unlock()
	}
	mu.Lock()
	t = time.AfterFunc(ka.every, ping)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// wsKeepAlive is how a chat WebSocket is kept alive (wsPingInterval,
// wsPongWait; tests shorten them).
type wsKeepAlive struct{ every, pongWait time.Duration }

// closeGoingAway tells the client the server is restarting.
func (cn *wsConn) closeGoingAway() {
	_ = cn.c.Close(websocket.StatusGoingAway, "server restarting")
}

type errorFrame struct {
	Type              string `json:"type"`
	RequestID         string `json:"requestId,omitempty"`
	Code              string `json:"code"`
	Message           string `json:"message"`
	RetryAfterSeconds int    `json:"retryAfterSeconds,omitempty"`
}

// peekRequestID finds a requestId in a frame that failed to decode, so the
// error frame can still name it.
func peekRequestID(data []byte) string {
	var v struct {
		RequestID string `json:"requestId"`
	}
	if json.Unmarshal(data, &v) == nil && len(v.RequestID) <= 128 {
		return v.RequestID
	}
	return ""
}

// trackConn and untrackConn keep the open connections, to close them when
// the drain ends.
func (g *Gateway) trackConn(c *wsConn) {
	g.connsMu.Lock()
	if g.conns == nil {
		g.conns = make(map[*wsConn]struct{})
	}
	g.conns[c] = struct{}{}
	g.connsMu.Unlock()
}

func (g *Gateway) untrackConn(c *wsConn) {
	g.connsMu.Lock()
	delete(g.conns, c)
	g.connsMu.Unlock()
}

// CloseConnections closes every WebSocket with "going away"; call it after
// Drain so clients reconnect to another instance.
func (g *Gateway) CloseConnections() {
	g.connsMu.Lock()
	defer g.connsMu.Unlock()
	for c := range g.conns {
		c.closeGoingAway()
	}
}
